"""A hook (a function the scan only hands over as a value) that unshards its own handle on a side stream and
returns without the current stream waiting (hook_handoffs.py): FSDP1's `_pre_backward_hook` without
`current_stream().wait_stream(state._unshard_stream)` after `_unshard(state, handle, state._unshard_stream)`."""

from __future__ import annotations

from streamcheck.findings import ROLE_CALL, ROLE_STREAM_CONTEXT

from static_helpers import findings_of, line_of

HANDLE = """
import torch.distributed as dist

class Handle:
    def unshard(self):
        self._gather(self.full)

    def _gather(self, out):
        dist.all_gather_into_tensor(out, self.shard)
"""

RUNTIME = """
import functools
import torch

def _unshard(state, handle, unshard_stream):
    unshard_stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(unshard_stream):
        handle.unshard()

def _pre_backward_hook(state, handle, grad):
    _unshard(state, handle, state.unshard_stream)
    {after}
    _prefetch(state, handle)
    return grad

def _prefetch(state, current):
    target = state.next_handle(current)
    _unshard(state, target, state.unshard_stream)

def register(state, handle, t):
    t.register_hook(functools.partial(_pre_backward_hook, state, handle))
"""


def _sources(after: str) -> dict[str, str]:
    return {"pkg/__init__.py": "", "pkg/handle.py": HANDLE, "pkg/runtime.py": RUNTIME.replace("{after}", after)}


def test_a_hook_returning_its_own_handle_unordered_is_reported_at_the_all_gather():
    sources = _sources("pass")
    runtime = sources["pkg/runtime.py"]
    [finding] = findings_of(sources)
    assert (finding.rule, finding.kind, finding.primary.path, finding.primary.line) == (
        "SC101", "RAW", "pkg/handle.py", line_of(HANDLE, "self._gather(self.full)"))
    assert (finding.symbol, finding.extra["path"], finding.extra["writer_stream"], finding.extra["reader_stream"]) \
        == ("_pre_backward_hook", "self.full", "state.unshard_stream", "")
    assert [(loc.role, loc.path, loc.line) for loc in finding.related] == [
        (ROLE_STREAM_CONTEXT, "pkg/runtime.py", line_of(runtime, "with torch.cuda.stream(unshard_stream)")),
        (ROLE_CALL, "pkg/runtime.py", line_of(runtime, "handle.unshard()")),
        (ROLE_CALL, "pkg/runtime.py", line_of(runtime, "def _pre_backward_hook") + 1),
    ]


def test_a_wait_after_the_call_orders_it_and_the_prefetch_of_another_handle_is_not_the_hooks_business():
    # `_prefetch` unshards a handle the hook was not handed: a later hook waits for it
    assert findings_of(_sources("torch.cuda.current_stream().wait_stream(state.unshard_stream)")) == []
