"""A side-stream write handed back to the current stream, waited for in one arm of an if/else and not in the other
(waits_on_one_way.py): FSDP1's `_pre_forward_unshard` waits for the unshard stream's all-gather through an event
in one arm and `wait_stream` in the other; either arm without its wait hands the flat parameter unordered to the
module's forward."""

from __future__ import annotations

from streamcheck.findings import ROLE_CALL, ROLE_STREAM_CONTEXT, ROLE_SYNC

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
import torch

def _unshard(state, handle, unshard_stream):
    unshard_stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(unshard_stream):
        handle.unshard()

def pre_forward(state, handle):
    _unshard(state, handle, state.unshard_stream)
    current = torch.cuda.current_stream()
    if state.unshard_event is not None:
        current.wait_event(state.unshard_event)
        state.unshard_event = None
    else:
        {else_arm}

def prefetch(state, handle):
    _unshard(state, handle, state.unshard_stream)
"""


def _sources(else_arm: str) -> dict[str, str]:
    return {"pkg/__init__.py": "", "pkg/handle.py": HANDLE, "pkg/runtime.py": RUNTIME.replace("{else_arm}", else_arm)}


def test_the_arm_without_the_wait_hands_the_all_gather_out_unordered():
    sources = _sources("pass")
    runtime = sources["pkg/runtime.py"]
    [finding] = findings_of(sources)
    # the write is the all-gather into `self.full`, seen at the call that hands it to `_gather` (a bound access)
    assert (finding.rule, finding.kind, finding.primary.path, finding.primary.line) == (
        "SC101", "RAW", "pkg/handle.py", line_of(HANDLE, "self._gather(self.full)"))
    assert (finding.symbol, finding.extra["path"], finding.extra["writer_stream"], finding.extra["reader_stream"]) \
        == ("pre_forward", "self.full", "state.unshard_stream", "")
    assert [(loc.role, loc.path, loc.line) for loc in finding.related] == [
        (ROLE_STREAM_CONTEXT, "pkg/runtime.py", line_of(runtime, "with torch.cuda.stream(unshard_stream)")),
        (ROLE_CALL, "pkg/runtime.py", line_of(runtime, "handle.unshard()")),
        (ROLE_CALL, "pkg/runtime.py", line_of(runtime, "def pre_forward") + 1),
        (ROLE_SYNC, "pkg/runtime.py", line_of(runtime, "current.wait_event")),
        (ROLE_SYNC, "pkg/runtime.py", line_of(runtime, "pass")),
    ]


def test_a_wait_on_every_way_out_and_a_function_that_waits_on_none_are_not_reported():
    # `prefetch` waits on no way out: it hands the write on to the next pre_forward, which waits for it
    assert findings_of(_sources("current.wait_stream(state.unshard_stream)")) == []
