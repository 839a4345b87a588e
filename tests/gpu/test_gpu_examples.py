"""Scenarios 20-35 as real programs on GPUs, each run under `streamcheck run`: racy -> exactly its finding, fixed -> none.

Each racy example marks its two accesses with `# streamcheck: earlier` and `# streamcheck: race`; the finding must
point at exactly those lines (primary = the later access, first related = the earlier one).
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from streamcheck.instrument.offline.merge import merge

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
]

# example -> (rule, race kind, ranks)
ONE_GPU = {
    "views_offset": ("SC201", "WAW"),
    "free_without_record_stream": ("SC202", "FREE"),
    "host_read_after_d2h": ("SC203", "HOST"),
    "pinned_overwrite_h2d": ("SC203", "HOST"),
    "user_threads": ("SC201", "WAW"),
    "backward_hook_hpz": ("SC201", "RAW"),
    "hpz_race": ("SC201", "RAW"),
    "overwrite_while_read": ("SC201", "WAR"),
    "wrong_wait": ("SC201", "RAW"),
    "input_not_waited": ("SC201", "RAW"),
    "result_not_waited": ("SC201", "RAW"),
    "handle_travels": ("SC201", "RAW"),  # one-rank NCCL
    "handle_left_in_flight": ("SC201", "RAW"),  # one-rank NCCL
    "handoff_without_record_stream": ("SC202", "FREE"),
    "record_stream_names_itself": ("SC202", "FREE"),
    "hook_waits_default_stream": ("SC201", "RAW"),
    "offload_through_container": ("SC201", "RAW"),
    "compiled_write": ("SC201", "RAW"),
    "graph_replay": ("SC201", "RAW"),
    "free_then_reuse": ("SC202", "FREE"),
    "future_wait_side": ("SC201", "RAW"),
    "view_as_metadata": ("SC201", "RAW"),
    "pinned_queue_handoff": ("SC203", "HOST"),
    "host_read_after_return": ("SC203", "HOST"),
    "side_stream_overwrites_input": ("SC201", "WAR"),
    # The scanner's WAR (the block's earlier tenant) is seen at runtime as the missing order between the
    # allocation's own write on the current stream and the copy stream's write: the same missing wait, as a WAW
    # (device call of session 6: benchmarks/results/issue18-s6-device1-tests.txt).
    "fresh_block_on_side_stream": ("SC201", "WAW"),
    # Two backward passes under two streams: the hook's second call reduces, on a stream that waited only for the
    # second stream, the copy its first call made on the first one.
    "bucket_across_hook_calls": ("SC201", "RAW"),
    # The scale stream's write read after backward(): the end-of-backward callback waited for the reduce stream only.
    "callback_handback": ("SC201", "RAW"),
    # The caller frees the returned tensor; the next restore's allocation on the side stream takes its block.
    "returned_from_side_stream": ("SC202", "FREE"),
    # The caller's in-place write of the restored tensor against the offload stream's read of it (the scanner
    # reports the take that hands it back unwaited).
    "stash_without_event_wait": ("SC201", "WAR"),
    # The bucket's elements, written on the side stream by a helper, freed by the clear; the current stream's next
    # allocation takes a block
    "cleared_container_free": ("SC202", "FREE"),
    # The program's own @triton.jit kernel writes what its source stores through (launches.py reads the source)
    "triton_kernel_write": ("SC201", "RAW"),
    # A CUDA IPC export filled after torch recorded the export's event, handed to the consumer process by the queue
    # put (the scanner reports the return that hands the export out; the runtime sees the put it reaches)
    "ipc_export_handed_early": ("SC204", "PEER"),
}


def marker_line(path: Path, marker: str) -> int:
    lines = [n for n, text in enumerate(path.read_text().splitlines(), 1) if f"# streamcheck: {marker}" in text]
    assert len(lines) == 1, f"{path}: expected one '# streamcheck: {marker}' line, found {lines}"
    return lines[0]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def run_example(script: Path, out: Path, nproc: int = 1) -> tuple[int, list]:
    if nproc == 1:
        command = [sys.executable, str(script)]
    else:
        command = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", str(nproc),
                   "--master_port", str(free_port()), str(script)]
    done = subprocess.run([sys.executable, "-m", "streamcheck.cli", "run", "--out", str(out), "--format", "json",
                           "--", *command], capture_output=True, text=True, timeout=240, cwd=out.parent)
    print(done.stdout[-4000:], done.stderr[-4000:], sep="\n")
    merged = merge([out])
    assert not merged.errors, merged.errors
    assert sorted(merged.ranks) == list(range(nproc)), (merged.ranks, done.stderr[-2000:])
    return done.returncode, merged.findings


# Examples written for the static scanner carry no markers: their two lines, found by their text instead, and how
# often the race happens (hpz_race: 20 steps x 2 parameters whose secondary shards the all-gather reads).
LINES_BY_TEXT = {"hpz_race": {"earlier": "param.secondary_shard.copy_(param.view(-1))",
                              "race": "flat = torch.cat([p.secondary_shard for p in params])"},
                 "ipc_export_handed_early": {"race": "exports.put(produce(buf))"}}
COUNTS = {"hpz_race": 40, "free_then_reuse": 2,
          "cleared_container_free": 4}  # (the four elements the clear frees)


def expected_line(name: str, script: Path, marker: str) -> int:
    text = LINES_BY_TEXT.get(name, {}).get(marker)
    if text is None:
        return marker_line(script, marker)
    lines = [n for n, line in enumerate(script.read_text().splitlines(), 1) if text in line]
    assert len(lines) == 1, f"{script}: expected one line containing {text!r}, found {lines}"
    return lines[0]


def check_racy(name: str, rule: str, kind: str, tmp_path: Path, nproc: int = 1) -> None:
    script = EXAMPLES / name / "racy.py"
    if not script.exists():
        pytest.skip(f"{script} not written yet")
    returncode, findings = run_example(script, tmp_path / "racy", nproc)
    summary = json.dumps([f.to_dict() for f in findings], indent=1)[:3000]
    assert len(findings) == 1, summary
    finding = findings[0]
    assert (finding.rule, finding.kind) == (rule, kind), summary
    assert Path(finding.primary.path).resolve() == script.resolve(), summary
    earlier = finding.related[0]
    if kind == "FREE":  # reported at the pool stream's next work (the scanner's "race" line is the free itself)
        assert finding.primary.line == expected_line(name, script, "reuse"), summary
        assert (earlier.role, earlier.line) == ("free", expected_line(name, script, "race")), summary
        earlier = finding.related[1]
    else:
        assert finding.primary.line == expected_line(name, script, "race"), summary
    assert Path(earlier.path).resolve() == script.resolve(), summary
    assert earlier.line == expected_line(name, script, "earlier"), summary
    assert finding.extra["ranks"] == list(range(nproc)), summary
    assert finding.count == COUNTS.get(name, 1) * nproc, summary
    assert returncode == 1


def check_fixed(name: str, tmp_path: Path, nproc: int = 1) -> None:
    script = EXAMPLES / name / "fixed.py"
    if not script.exists():
        pytest.skip(f"{script} not written yet")
    returncode, findings = run_example(script, tmp_path / "fixed", nproc)
    assert findings == [], json.dumps([f.to_dict() for f in findings], indent=1)[:3000]
    assert returncode == 0


@pytest.mark.parametrize("name", sorted(ONE_GPU))
def test_racy_example_gives_exactly_its_finding(name: str, tmp_path: Path) -> None:
    rule, kind = ONE_GPU[name]
    check_racy(name, rule, kind, tmp_path)


@pytest.mark.parametrize("name", sorted(ONE_GPU))
def test_fixed_example_gives_no_finding(name: str, tmp_path: Path) -> None:
    check_fixed(name, tmp_path)


two_gpus = pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs two CUDA devices")


# example -> (rule, race kind), run on two ranks: one finding per rank
TWO_GPUS = {
    "async_collective": ("SC201", "RAW"),
    # Each rank's fill of its symmetric buffer, then a barrier over a gloo group: a PEER race on each rank.
    "symmetric_memory_barrier": ("SC204", "PEER"),
}


@pytest.mark.gpu2
@two_gpus
@pytest.mark.parametrize("name", sorted(TWO_GPUS))
def test_racy_example_on_two_ranks(name: str, tmp_path: Path) -> None:
    rule, kind = TWO_GPUS[name]
    check_racy(name, rule, kind, tmp_path, nproc=2)


@pytest.mark.gpu2
@two_gpus
@pytest.mark.parametrize("name", sorted(TWO_GPUS))
def test_fixed_example_on_two_ranks(name: str, tmp_path: Path) -> None:
    check_fixed(name, tmp_path, nproc=2)


def test_watch_keeps_the_program_running_and_counts_repeats(tmp_path: Path) -> None:
    """Report-and-continue in one process: each racy pair hit again and again is one finding with its count."""
    import streamcheck

    side = torch.cuda.Stream()
    buf = torch.zeros(1 << 16, device="cuda")
    torch.cuda.synchronize()
    with streamcheck.watch(tmp_path, echo=False) as w:
        for _ in range(5):
            buf.add_(1.0)  # RAW with the next line; WAR with it from the second round on
            with torch.cuda.stream(side):
                total = buf.sum()
        torch.cuda.synchronize()
    counts = {f.kind: f.count for f in w.results()}
    assert counts == {"RAW": 5, "WAR": 4}, w.results()
    assert total.numel() == 1 and bool((buf == 5.0).all())  # the program ran to the end, unchanged
    lines = [json.loads(line) for line in (tmp_path / "streamcheck-rank0.jsonl").read_text().splitlines()]
    assert lines[0]["e"] == "header"
    assert [(line["kind"], line["count"]) for line in lines[1:]] == [("RAW", 1), ("WAR", 1), ("RAW", 5), ("WAR", 4)]
