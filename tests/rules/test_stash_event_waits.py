"""A tensor kept with an event and taken back out (issue 14, DeepSpeed 0.19.8 offload_activations.py:253): the wait
of the taken event, and of a name it is bound to again, is the wait of the container's events; a name bound to a new
event is not; a kept tensor its side stream read, taken out and written or returned with no wait for the event, is
SC106's write-after-read (kept_with_events.taken_without_event_waits)."""

from __future__ import annotations

from static_helpers import findings_of, line_of, program_of

from streamcheck.rules.orderings import EVENT, orderings_of

STASH = """
import torch


class Stash:
    def __init__(self):
        self.d2h = torch.cuda.Stream()
        self.h2d = torch.cuda.Stream()
        self.stash = {}

    def offload(self, tag, x):
        self.d2h.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(self.d2h):
            host = torch.empty(x.shape, dtype=x.dtype, device="cpu", pin_memory=True)
            host.copy_(x, non_blocking=True)  # the side stream's read
        x.record_stream(self.d2h)
        self.stash[tag] = (x, self.d2h.record_event())
        return host

    def restore(self, tag):
        x, event = self.stash.pop(tag)
        WAIT
        return x
"""


def _stash(wait: str) -> str:
    return STASH.replace("WAIT", wait)


def _war(source: str):
    return [f for f in findings_of({"stash.py": source}) if f.rule == "SC106"]


def test_returned_without_the_event_wait_is_a_war_at_the_take():
    source = _stash("pass")
    [finding] = _war(source)
    assert (finding.rule, finding.kind, finding.primary.path, finding.primary.line) == (
        "SC106", "WAR", "stash.py", line_of(source, "x, event = self.stash.pop(tag)"))
    assert [(r.role, r.line) for r in finding.related] == [
        ("read", line_of(source, "host.copy_(x, non_blocking=True)")),
        ("write", line_of(source, "self.stash[tag] = (x, self.d2h.record_event())"))]
    assert finding.extra["other_stream"] == "self.d2h"
    assert "wait_event(event)" in finding.fix


def test_written_without_the_event_wait_is_a_war_at_the_write():
    source = _stash("x.mul_(2)")
    [finding] = _war(source)
    assert (finding.kind, finding.primary.line) == ("WAR", line_of(source, "x.mul_(2)"))
    assert finding.related[0].line == line_of(source, "host.copy_(x, non_blocking=True)")


def test_the_event_wait_or_a_wait_through_another_name_gives_nothing():
    assert _war(_stash("torch.cuda.current_stream().wait_event(event)")) == []
    assert _war(_stash("ev = event\n        torch.cuda.current_stream().wait_event(ev)")) == []
    assert _war(_stash("event.synchronize()")) == []


def test_a_wait_of_the_name_bound_to_a_new_event_is_not_the_stash_wait():
    # `event` is the stash's up to its second binding; the wait after it waits the h2d stream's new event.
    source = _stash("with torch.cuda.stream(self.h2d):\n            y = x * 2\n"
                    "        event = self.h2d.record_event()\n"
                    "        torch.cuda.current_stream().wait_event(event)")
    [finding] = _war(source)
    assert (finding.kind, finding.primary.line) == ("WAR", line_of(source, "x, event = self.stash.pop(tag)"))


def test_the_event_identity_follows_the_binding_in_force():
    source = _stash("torch.cuda.current_stream().wait_event(event)\n"
                    "        event = self.h2d.record_event()\n"
                    "        torch.cuda.current_stream().wait_event(event)")
    program = program_of({"stash.py": source})
    [restore] = [f for f in program.functions.values() if f.facts.name == "restore"]
    targets = [o.target for o in orderings_of(program, restore) if o.kind == "wait_event"]
    assert targets == [EVENT + "self.stash@stash.py::Stash", EVENT + restore.id + "::event"]
