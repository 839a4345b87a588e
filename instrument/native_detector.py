"""The C++ race detector (native_hook/detector.h) behind the Python Detector's interface.

`NativeDetector` takes the same calls as `detector.Detector` (the runtime's Recorder, `trace.replay`, the tests'
random programs) and finds the same races; the per-op hook also feeds its C++ core directly, without Python
(instrument/native.py). Races come back from C++ as tuples after each call and become the same `Race` / `Access`
objects the Python Detector makes, handed to `on_race` in the order they were found.

What stays in Python: the names a report needs (`sites`, `stream_names`, `storage_infos`, `header`) and the kept
`races` list. `allocations` answers `get(storage)` (Watch names a raced storage's allocation site with it); during
`on_race` it also knows the freed block of a FREE race, as the Python Detector does.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Callable

from .detector import Access, Allocation, Race
from .names import Names
from .shadow import MIXED


def _access(fields: tuple) -> Access:
    actor, thread, is_write, site, op, seq, clock, stream = fields
    return Access(actor, thread, is_write, site, op, seq, clock, stream)


def _allocation(fields: tuple | None) -> Allocation | None:
    if fields is None:
        return None
    stream, size, site, recorded = fields
    return Allocation(stream, size, site, recorded)


class AllocationsView:
    """`get(storage)` over the C++ detector's allocations (plus the block of the race being delivered)."""

    def __init__(self, owner: "NativeDetector") -> None:
        self._owner = owner

    def get(self, storage: int, default: Any = None) -> Any:
        delivering = self._owner._delivering
        if delivering is not None and delivering[0] == storage and delivering[1] is not None:
            return delivering[1]
        found = _allocation(self._owner.core.allocation(storage))
        return default if found is None else found

    def __contains__(self, storage: int) -> bool:
        return self.get(storage) is not None

    def __len__(self) -> int:
        return self._owner.core.sizes()["allocations"]


class ShadowView:
    """What tests and reports read of one storage's shadow: its one actor (or MIXED) and its segments."""

    __slots__ = ("actor", "segments")

    def __init__(self, actor: str | None, segments: list) -> None:
        self.actor = actor if actor is not None else MIXED
        self.segments = [tuple(segment) for segment in segments]


class ShadowsView(Mapping):
    """The C++ detector's shadow state as a read-only mapping storage -> ShadowView (built when asked)."""

    def __init__(self, core: Any) -> None:
        self._core = core

    def __getitem__(self, storage: int) -> ShadowView:
        found = self._core.shadow(storage)
        if found is None:
            raise KeyError(storage)
        return ShadowView(*found)

    def __iter__(self):
        return iter(self._core.storages())

    def __len__(self) -> int:
        return self._core.sizes()["storages"]


class NativeDetector:
    """The Python Detector's methods on the C++ core; see the module docstring."""

    def __init__(self, on_race: Callable[[Race], None] | None = None, module: Any = None) -> None:
        if module is None:
            from . import native

            module = native.load()
        self.core = module.Core()
        self.on_race = on_race
        self.races: list[Race] = []
        self.names = Names()  # what the trace says about sites, streams and storages, as the Python Detector's
        self.sites, self.stream_names, self.storage_infos = (self.names.sites, self.names.stream_names,
                                                              self.names.storage_infos)
        self.header: dict = {}
        self.allocations = AllocationsView(self)
        self.shadows = ShadowsView(self.core)
        self._delivering: tuple | None = None

    @property
    def seq(self) -> int:
        return self.core.seq

    @seq.setter
    def seq(self, value: int) -> None:
        self.core.seq = value

    # ---- races -------------------------------------------------------------------------------------------------
    def deliver(self) -> None:
        """Turn the races the core found into Race objects, in order (the hook calls this after its own calls)."""
        for kind, storage, start, end, earlier, later, reuse, allocation in self.core.take_races():
            race = Race(kind, storage, start, end, _access(earlier), _access(later),
                        _access(reuse) if reuse is not None else None)
            self.races.append(race)
            if self.on_race is not None:
                self._delivering = (storage, _allocation(allocation))
                try:
                    self.on_race(race)
                finally:
                    self._delivering = None

    # ---- the Detector's events ---------------------------------------------------------------------------------
    def stream_created(self, thread: str, stream: str) -> None:
        self.core.stream_created(thread, stream)

    def event_record(self, thread: str, event: int, stream: str) -> None:
        self.core.event_record(thread, event, stream)

    def event_wait(self, thread: str, event: int, stream: str) -> None:
        self.core.event_wait(thread, event, stream)

    def event_destroy(self, event: int) -> None:
        self.core.event_destroy(event)

    def sync_event(self, thread: str, event: int) -> None:
        self.core.sync_event(thread, event)

    def sync_stream(self, thread: str, stream: str) -> None:
        self.core.sync_stream(thread, stream)

    def sync_device(self, thread: str, device: int) -> None:
        self.core.sync_device(thread, device)

    def thread_start(self, parent: str, child: str) -> None:
        self.core.thread_start(parent, child)

    def thread_join(self, parent: str, child: str) -> None:
        self.core.thread_join(parent, child)

    def kernel(self, thread: str, stream: str, reads=(), writes=(), site: int = -1, op: str = "") -> None:
        core = self.core
        core.kernel(thread, stream, reads, writes, site, op)
        if core.has_races():
            self.deliver()

    def host_access(self, thread: str, reads=(), writes=(), site: int = -1, op: str = "") -> None:
        core = self.core
        core.host_access(thread, reads, writes, site, op)
        if core.has_races():
            self.deliver()

    def hand_over(self, thread: str, reads=(), events=(), site: int = -1, op: str = "") -> None:
        core = self.core
        core.hand_over(thread, reads, events, site, op)
        if core.has_races():
            self.deliver()

    def collective(self, thread: str, stream: str, comm: str, reads=(), writes=(), async_op: bool = False,
                   work: int | None = None, site: int = -1, op: str = "") -> None:
        core = self.core
        core.collective(thread, stream, comm, reads, writes, async_op, work, site, op)
        if core.has_races():
            self.deliver()

    def work_wait(self, thread: str, stream: str, work: int, blocking: bool = False) -> None:
        self.core.work_wait(thread, stream, work, blocking)

    def forget_accesses(self) -> None:
        self.core.forget_accesses()

    def forget_work(self, work: int) -> None:
        self.core.forget_work(work)

    def alloc(self, storage: int, size: int, stream: str, site: int = -1) -> None:
        self.core.alloc(storage, size, stream, site)

    def record_stream(self, storage: int, stream: str) -> None:
        self.core.record_stream(storage, stream)

    def free(self, thread: str, storage: int, site: int = -1) -> None:
        self.core.free(thread, storage, site)

    def free_can_race(self, storage: int) -> bool:
        return self.core.free_can_race(storage)

    # ---- what the trace knows about names -----------------------------------------------------------------------
    def site(self, id: int, frames: list) -> None:  # noqa: A002 - the trace's field name
        self.core.seq += 1
        self.sites[id] = frames

    def stream_name(self, stream: str, name: str) -> None:
        self.core.seq += 1
        self.stream_names[stream] = name

    def storage_info(self, storage: int, **info) -> None:
        self.core.seq += 1
        self.storage_infos[storage] = info

    def state_size(self) -> dict:
        """memory.shadow_state_size's figures, counted in C++ (accesses live inside the cells: not counted apart)."""
        sizes = dict(self.core.sizes())
        sizes["races"] = len(self.races)
        return sizes
