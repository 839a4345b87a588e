"""The runtime's events, typed once: the `Sink` protocol. Torch-free.

Every hook feeds a Sink; the online Detector, the trace writer (trace.py) and the networkx oracle (offline/hb.py)
are Sinks, and a recorded trace is one line per Sink call: {"e": <method>, <argument>: <value>, ...}. From the
protocol's signatures come EVENTS (each event's required and optional arguments: what the reader checks and what
`replay` passes on), the writer's methods, and `deliver`, which hands one read event to any Sink.

Sequence numbers: the n-th event after the trace header is event n (0-based), `Access.seq`. A live Detector counts
its own calls; `replay` sets `sink.seq` to each event's index before delivering it, so skipped lines keep theirs.
"""

from __future__ import annotations

import inspect
from typing import Any, Iterable, Protocol

Ranges = Iterable  # of (storage, start, end)


class Sink(Protocol):
    def stream_created(self, thread: str, stream: str) -> None: ...

    def kernel(self, thread: str, stream: str, reads: Ranges = (), writes: Ranges = (), site: int = -1,
               op: str = "") -> None: ...

    def host_access(self, thread: str, reads: Ranges = (), writes: Ranges = (), site: int = -1,
                    op: str = "") -> None: ...

    # other processes read these bytes from now on, ordered after `thread` and `events` only (detector.py)
    def hand_over(self, thread: str, reads: Ranges = (), events: Iterable = (), site: int = -1,
                  op: str = "") -> None: ...

    def event_record(self, thread: str, event: int, stream: str) -> None: ...

    def event_wait(self, thread: str, event: int, stream: str) -> None: ...

    def event_destroy(self, event: int) -> None: ...

    def sync_event(self, thread: str, event: int) -> None: ...

    def sync_stream(self, thread: str, stream: str) -> None: ...

    def sync_device(self, thread: str, device: int) -> None: ...

    def thread_start(self, parent: str, child: str) -> None: ...

    def thread_join(self, parent: str, child: str) -> None: ...

    def alloc(self, storage: int, size: int, stream: str, site: int = -1) -> None: ...

    def record_stream(self, storage: int, stream: str) -> None: ...

    def free(self, thread: str, storage: int, site: int = -1) -> None: ...

    def collective(self, thread: str, stream: str, comm: str, reads: Ranges = (), writes: Ranges = (),
                   async_op: bool = False, work: int | None = None, site: int = -1, op: str = "") -> None: ...

    def work_wait(self, thread: str, stream: str, work: int, blocking: bool = False) -> None: ...

    # naming events: they may come anywhere, before or after the events that use them
    def site(self, id: int, frames: list) -> None: ...  # noqa: A002 - the trace's field name

    def stream_name(self, stream: str, name: str) -> None: ...

    def storage_info(self, storage: int, **info: Any) -> None: ...  # plus any descriptive keys


def _parameters(name: str) -> list[inspect.Parameter]:
    return [p for p in inspect.signature(getattr(Sink, name)).parameters.values()
            if p.name != "self" and p.kind is not p.VAR_KEYWORD]


# event name -> (required arguments, optional arguments), in the protocol's order
EVENTS: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    name: (tuple(p.name for p in _parameters(name) if p.default is p.empty),
           tuple(p.name for p in _parameters(name) if p.default is not p.empty))
    for name in Sink.__dict__ if not name.startswith("_") and callable(Sink.__dict__[name])
}
OPEN_EVENTS = ("storage_info",)  # events that carry keys beyond their arguments
NAMING_EVENTS = ("site", "stream_name", "storage_info")  # they name what other events use, wherever they come


def defaults(name: str) -> dict[str, Any]:
    """The optional arguments of an event with their default values."""
    return {p.name: p.default for p in _parameters(name) if p.default is not p.empty}


class EventError(ValueError):
    """A known event without one of its required arguments."""


def arguments(event: dict) -> dict:
    """The keyword arguments of a known event (unknown keys dropped); EventError if a required one is missing."""
    name = event["e"]
    required, optional = EVENTS[name]
    missing = [key for key in required if key not in event]
    if missing:
        raise EventError(f"{name!r} lacks {', '.join(missing)}")
    if name in OPEN_EVENTS:
        return {key: value for key, value in event.items() if key != "e"}
    return {key: event[key] for key in required + optional if key in event}


def deliver(sink: Any, event: dict) -> None:
    """Hand one known event (a dict as read from a trace) to a Sink."""
    getattr(sink, event["e"])(**arguments(event))
