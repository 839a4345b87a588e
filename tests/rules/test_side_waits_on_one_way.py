"""Side streams made to wait for the current stream in one arm of an if/else and not in the other
(side_waits_on_one_way.py): FSDP2's root pre-forward makes the all-gather streams wait for the optimizer step, on the
event it recorded in one arm and on the current stream in the other; the copy-in stream, left out of one arm, reads
the sharded parameters before the optimizer's writes are done."""

from __future__ import annotations

import pytest

from streamcheck.findings import ROLE_STREAM_CONTEXT, ROLE_SYNC

from static_helpers import findings_of, line_of

COLLECTIVES = """
import torch
import torch.distributed as dist


def foreach_all_gather(params, copy_in_stream, all_gather_stream, output):
    with torch.cuda.stream(copy_in_stream):
        flat = torch.cat([p.sharded for p in params])
    all_gather_stream.wait_stream(copy_in_stream)
    with torch.cuda.stream(all_gather_stream):
        dist.all_gather_into_tensor(output, flat)
        flat.record_stream(all_gather_stream)
"""

STATE = """
import torch


class State:
    def root_pre_forward(self):
        if (event := self.post_optim_event) is not None:
            {event_arm}
            self.post_optim_event = None
        else:
            current_stream = torch.cuda.current_stream()
            {current_arm}
"""

EVENT_WAITS = ("self.comm.copy_in_stream.wait_event(event)", "self.comm.all_gather_stream.wait_event(event)")
CURRENT_WAITS = ("self.comm.copy_in_stream.wait_stream(current_stream)",
                 "self.comm.all_gather_stream.wait_stream(current_stream)")


def _sources(event_arm: tuple[str, ...], current_arm: tuple[str, ...]) -> dict[str, str]:
    state = STATE.replace("{event_arm}", "\n            ".join(event_arm)).replace(
        "{current_arm}", "\n            ".join(current_arm))
    return {"pkg/__init__.py": "", "pkg/collectives.py": COLLECTIVES, "pkg/state.py": state}


@pytest.mark.parametrize("event_arm, current_arm, waiting, bare", [
    (EVENT_WAITS[1:], CURRENT_WAITS, CURRENT_WAITS[0], "self.post_optim_event = None"),  # the copy-in's wait_event
    (EVENT_WAITS, CURRENT_WAITS[1:], EVENT_WAITS[0], "current_stream = torch.cuda.current_stream()"),
])
def test_the_copy_in_stream_left_out_of_one_arm(event_arm, current_arm, waiting, bare):
    sources = _sources(event_arm, current_arm)
    state = sources["pkg/state.py"]
    [finding] = findings_of(sources)
    assert (finding.rule, finding.kind, finding.primary.path, finding.primary.line) == (
        "SC101", "RAW", "pkg/collectives.py", line_of(COLLECTIVES, "torch.cat"))
    assert (finding.symbol, finding.extra["reader_stream"]) == ("State.root_pre_forward", "copy_in_stream")
    bare_arm = line_of(state, bare) if bare.startswith("current") else line_of(state, event_arm[0])
    assert [(loc.role, loc.path, loc.line) for loc in finding.related] == [
        (ROLE_SYNC, "pkg/state.py", line_of(state, waiting)),
        (ROLE_SYNC, "pkg/state.py", bare_arm),
        (ROLE_STREAM_CONTEXT, "pkg/collectives.py", line_of(COLLECTIVES, "with torch.cuda.stream(copy_in_stream)")),
    ]


def test_waits_in_both_arms_and_a_stream_ordered_through_another_are_not_reported():
    assert findings_of(_sources(EVENT_WAITS, CURRENT_WAITS)) == []
    # the all-gather stream waits for the copy-in stream before each all-gather: the copy-in's wait covers it
    assert findings_of(_sources(EVENT_WAITS[:1], CURRENT_WAITS)) == []
    assert findings_of(_sources(EVENT_WAITS, CURRENT_WAITS[:1])) == []


def test_an_arm_that_makes_no_side_stream_wait_is_not_judged():
    # the other way makes no side stream wait at all: it may not use them (not this query's shape)
    sources = _sources(EVENT_WAITS, ("pass",))
    assert findings_of(sources) == []
