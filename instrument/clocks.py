"""Vector clocks over actors (actors.py): host threads, device streams, NCCL streams.

A clock is a plain dict {actor: time}. An access made by actor A is stamped with the epoch (A, clock[A][A]); it
happened before actor B's current point exactly when clock[B].get(A, 0) >= that time.

Why an actor ticks when its clock is *sent* (copied into an event, a work handle or another actor): everything A
does after the send must carry a time the receiver has not seen. Ticking on send (not on every access) keeps the
kernel path to one join.
"""

from __future__ import annotations

from .actors import device_of

Clock = dict  # {actor: time}

# Collectives whose work handle is never waited would otherwise be kept forever; the oldest are dropped past this.
MAX_PENDING_WORKS = 1 << 16


def join(into: Clock, other: Clock) -> None:
    """into ⊔= other (pointwise maximum)."""
    for actor, time in other.items():
        if into.get(actor, 0) < time:
            into[actor] = time


class Clocks:
    """The clocks of every actor, of every recorded event and of every collective's completion ("work")."""

    def __init__(self) -> None:
        self.of_actor: dict[str, Clock] = {}
        self.of_event: dict[int, Clock] = {}
        self.of_work: dict[int, Clock] = {}
        # How often each actor's clock took in another clock here (send / wait / wait_work). Between two equal
        # counts an actor's clock changed only in its own entry, which lets Detector.kernel skip a full join.
        self.received: dict[str, int] = {}
        self._streams_of_device: dict[int, list[str]] = {}

    def clock(self, actor: str) -> Clock:
        """The actor's clock, created on first sight: a new actor has seen nothing but itself."""
        vc = self.of_actor.get(actor)
        if vc is None:
            vc = self.of_actor[actor] = {actor: 1}
            device = device_of(actor)
            if device is not None:
                self._streams_of_device.setdefault(device, []).append(actor)
        return vc

    def send(self, source: str, target: str) -> Clock:
        """target ⊔= source, then source ticks. Returns the target's clock."""
        into = self.clock(target)
        sent = self.clock(source)
        join(into, sent)
        self.received[target] = self.received.get(target, 0) + 1
        sent[source] += 1
        return into

    def record(self, event: int, stream: str) -> None:
        """event.record(stream): the event remembers the stream's clock (a re-record overwrites)."""
        vc = self.clock(stream)
        self.of_event[event] = dict(vc)
        vc[stream] += 1

    def wait(self, actor: str, event: int) -> None:
        """stream.wait_event(e) / e.synchronize(): actor ⊔= e. A never-recorded or destroyed event orders nothing."""
        recorded = self.of_event.get(event)
        if recorded is not None:
            join(self.clock(actor), recorded)
            self.received[actor] = self.received.get(actor, 0) + 1

    def forget_event(self, event: int) -> None:
        self.of_event.pop(event, None)

    def finish_work(self, work: int, comm: str) -> None:
        """Remember the communication stream's clock at the end of a collective, for a later work.wait()."""
        vc = self.clock(comm)
        self.of_work[work] = dict(vc)
        vc[comm] += 1
        if len(self.of_work) > MAX_PENDING_WORKS:
            del self.of_work[next(iter(self.of_work))]

    def wait_work(self, actor: str, work: int) -> None:
        finished = self.of_work.get(work)
        if finished is not None:
            join(self.clock(actor), finished)
            self.received[actor] = self.received.get(actor, 0) + 1

    def streams_on(self, device: int) -> list[str]:
        return self._streams_of_device.get(device, [])
