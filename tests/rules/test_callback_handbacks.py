"""Side-stream writes of a backward hook that the end-of-backward callback hands back unordered
(callback_handbacks.py): FSDP1's post-backward hook reduce-scatters the gradient on the post-backward stream and,
for HSDP, all-reduces it on the all-reduce stream; the callback queued with `queue_callback` makes the current
stream wait for both before the optimizer step reads the sharded gradient. Either wait left out hands that
stream's write to the code after `backward()` unordered."""

from __future__ import annotations

import pytest

from streamcheck.findings import ROLE_CALL, ROLE_STREAM_CONTEXT, ROLE_SYNC

from static_helpers import findings_of, line_of

RUNTIME = """
import functools

import torch
import torch.distributed as dist
from torch.autograd import Variable


def _post_backward_hook(state, handle, *unused):
    state._post_backward_stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(state._post_backward_stream):
        _reduce_grad(state, handle)


def _reduce_grad(state, handle):
    dist.reduce_scatter_tensor(handle.flat_param._saved_grad_shard, handle.flat_param.grad)
    if state.hybrid:
        state._all_reduce_stream.wait_stream(state._post_backward_stream)
        with torch.cuda.stream(state._all_reduce_stream):
            dist.all_reduce(handle.flat_param._saved_grad_shard)


def _post_backward_final_callback(state, module):
    root_state = state
    current_stream = torch.cuda.current_stream()
    {waits}


def register(state, module, handle, acc_grad):
    acc_grad.register_hook(functools.partial(_post_backward_hook, state, handle))
    Variable._execution_engine.queue_callback(functools.partial(_post_backward_final_callback, state, module))
"""

BOTH = ("current_stream.wait_stream(root_state._post_backward_stream)\n"
        "    current_stream.wait_stream(root_state._all_reduce_stream)")


def _sources(waits: str) -> dict[str, str]:
    return {"pkg/__init__.py": "", "pkg/runtime.py": RUNTIME.replace("{waits}", waits)}


@pytest.mark.parametrize("kept, left_out, collective", [
    ("_all_reduce_stream", "_post_backward_stream", "dist.reduce_scatter_tensor("),
    ("_post_backward_stream", "_all_reduce_stream", "dist.all_reduce("),
])
def test_the_callback_that_waits_for_one_stream_of_the_hook_and_not_the_other(kept, left_out, collective):
    sources = _sources(f"current_stream.wait_stream(root_state.{kept})")
    runtime = sources["pkg/runtime.py"]
    [finding] = findings_of(sources)
    assert (finding.rule, finding.kind, finding.primary.path, finding.primary.line) == (
        "SC101", "RAW", "pkg/runtime.py", line_of(runtime, collective))
    assert (finding.symbol, finding.extra["path"], finding.extra["writer_stream"]) == (
        "_post_backward_final_callback", "handle.flat_param._saved_grad_shard", f"state.{left_out}")
    roles = [(loc.role, loc.line) for loc in finding.related]
    assert roles[0] == (ROLE_STREAM_CONTEXT, line_of(runtime, f"with torch.cuda.stream(state.{left_out})"))
    assert roles[-2:] == [(ROLE_SYNC, line_of(runtime, f"current_stream.wait_stream(root_state.{kept})")),
                          (ROLE_SYNC, line_of(runtime, "def _post_backward_final_callback"))]
    assert all(role in (ROLE_STREAM_CONTEXT, ROLE_CALL, ROLE_SYNC) for role, _ in roles)


def test_a_callback_waiting_for_every_stream_or_for_none_is_not_reported():
    assert findings_of(_sources(BOTH)) == []
    # waiting for none: the hook's work is handed back another way (not this query's to judge)
    assert findings_of(_sources("pass")) == []


def test_a_hook_that_waits_before_it_returns_needs_no_wait_in_the_callback():
    sources = _sources("current_stream.wait_stream(root_state._post_backward_stream)")
    sources["pkg/runtime.py"] = sources["pkg/runtime.py"].replace(
        "            dist.all_reduce(handle.flat_param._saved_grad_shard)\n",
        "            dist.all_reduce(handle.flat_param._saved_grad_shard)\n"
        "        torch.cuda.current_stream().wait_stream(state._all_reduce_stream)\n")
    assert findings_of(sources) == []
