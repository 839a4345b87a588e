"""The examples/ pairs of the shapes the static engine added (issue 14), scanned from source: each racy script
gives exactly its finding (rule, kind, line, the other access as related), its fixed twin none of any rule. The
GPU tests run the same pairs under the runtime detector (tests/gpu/test_gpu_examples.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from streamcheck.rules.engine import analyze
from streamcheck.rules.facts import extract_facts
from streamcheck.rules.options import StaticOptions

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"

# folder -> (rule, kind, marker of the primary location, marker of the related access)
PAIRS = {
    "wrong_wait": ("SC101", "RAW", "earlier", "race"),  # SC101 points at the write, the read is related
    "overwrite_while_read": ("SC106", "WAR", "race", "earlier"),
    "user_threads": ("SC106", "WAW", "race", "earlier"),
    "views_offset": ("SC106", "WAW", "race", "earlier"),
    # An input made outside the function (the caller's `earlier` line is not in the finding: outside_producers.py)
    "input_not_waited": ("SC101", "RAW", "race", "switch"),
    # A result read outside the function (the caller's `race` line is not in the finding: outside_consumers.py)
    "result_not_waited": ("SC101", "RAW", "earlier", "switch"),
    # An async collective's handle stored beside its buffer, read elsewhere unwaited (travelling_handles.py)
    "handle_travels": ("SC105", "RAW", "race", "earlier"),
    # A wrapper returns with its caller's outputs still being gathered, the handles left behind (handles_at_exit.py)
    "handle_left_in_flight": ("SC105", "RAW", "earlier", "end"),
    # Made on a side stream, read on the current one after a wait, never recorded for it (free_after_handoff.py)
    "handoff_without_record_stream": ("SC104", "FREE", "earlier", "made"),
    # `record_stream(current_stream())` inside the region records the allocation stream (noop_record_stream.py)
    "record_stream_names_itself": ("SC104", "FREE", "record", "made"),
    # Inside a gradient hook `default_stream()` is not the current stream (hooks.py); the writer is autograd
    "hook_waits_default_stream": ("SC101", "RAW", "race", "switch"),
    # A pinned buffer written on a side stream, handed to another method through a dict (extract_bindings.py)
    "offload_through_container": ("SC101", "RAW", "earlier", "race"),
    # A non_blocking download returned by a helper and read on the host by its caller (host_read_after_escape.py)
    "host_read_after_return": ("SC102", "HOST", "race", "earlier"),
    # A side stream nothing makes wait overwrites the caller's tensor (unwaited_side_stream_writes.py)
    "side_stream_overwrites_input": ("SC106", "WAR", "race", "switch"),
    # A block the current stream just allocated, filled on a side stream first (fresh_block_on_side_stream.py)
    "fresh_block_on_side_stream": ("SC106", "WAR", "race", "earlier"),
    # A gradient hook's copy into a shared bucket, reduced by its next call, which waits only for its own current
    # stream (races.py `_earlier_hook_call`; DeepSpeed PR #8080)
    "bucket_across_hook_calls": ("SC101", "RAW", "earlier", "race"),
    # A post-backward hook's write on a side stream the end-of-backward callback does not wait for, while it waits
    # for the hook's other side stream (callback_handbacks.py; FSDP1's _post_backward_final_callback)
    "callback_handback": ("SC101", "RAW", "earlier", "switch"),
    # Made on a side stream, waited for and returned to the caller, never recorded for the current stream
    # (returned_from_a_side_stream.py; DeepSpeed's activation offload restore)
    "returned_from_side_stream": ("SC104", "FREE", "returned", "reuse"),
    # Read on a side stream, kept with that stream's event, taken out and returned with no wait for the event
    # (kept_with_events.taken_without_event_waits; DeepSpeed's forward stash); reported at the take
    "stash_without_event_wait": ("SC106", "WAR", "taken", "earlier"),
    # A Triton kernel of the file writes the arguments its body stores through (streamcheck/triton_kernels.py)
    "triton_kernel_write": ("SC101", "RAW", "earlier", "race"),
    # Symmetric memory filled on the device, then a host barrier lets the peers read it (cross_process.py); the
    # runtime detector sees one process and does not model this pair: it is not among the GPU examples
    "symmetric_memory_barrier": ("SC107", "RAW", "earlier", "race"),
    # A CUDA IPC export returned to the process that maps it while the fill is queued (cross_process.py)
    "ipc_export_handed_early": ("SC107", "RAW", "earlier", "race"),
}


def _findings(path: Path):
    options = StaticOptions()
    return analyze([extract_facts(path.read_text(), path.name, options)], options)


def _marked(path: Path, marker: str) -> int:
    [line] = [n for n, text in enumerate(path.read_text().splitlines(), 1) if f"# streamcheck: {marker}" in text]
    return line


@pytest.mark.parametrize("folder", sorted(PAIRS))
def test_racy_gives_exactly_its_finding(folder):
    rule, kind, primary, related = PAIRS[folder]
    racy = EXAMPLES / folder / "racy.py"
    [finding] = _findings(racy)
    assert (finding.rule, finding.kind, finding.primary.line) == (rule, kind, _marked(racy, primary))
    assert _marked(racy, related) == finding.related[0].line


@pytest.mark.parametrize("folder", sorted(PAIRS))
def test_fixed_twin_gives_nothing(folder):
    assert _findings(EXAMPLES / folder / "fixed.py") == []
