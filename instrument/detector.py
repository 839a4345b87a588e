"""The online race detector: vector clocks (clocks.py) + byte-range shadow state (shadow.py), plain method calls.

The runtime hooks (and `replay` of a recorded trace) call one method per event: the Detector is a Sink
(events.py), and every method name and argument is also a trace event (trace.py). Each call is one event of the
trace, so the Detector numbers them: `Access.seq` is the index of the event (0-based, the trace header not counted).

Happens-before, as implemented (the model of docs/architecture.md):
- thread T enqueues anything on stream S (kernel, event record/wait, collective launch, work wait): S ⊔= T.
- event_record: the event keeps S's clock; event_wait: S ⊔= event; a destroyed or never-recorded event orders
  nothing. sync_event / sync_stream / sync_device: T ⊔= event / S / every stream of that device seen so far
  (NCCL streams of the device included).
- collective on comm N launched from S: N ⊔= S; accesses by N; the work remembers N's clock; if not async_op,
  S ⊔= N. work_wait: S ⊔= work; blocking also T ⊔= work.
- thread_start: child ⊔= parent; thread_join: parent ⊔= child. stream_created: S ⊔= T.
- free: the block goes back to its allocation stream's pool, and the caching allocator may hand it to the next
  allocation of that stream without waiting for other streams (unless they were given to record_stream, whose
  events it waits for). So a free is not a hazard by itself: the hazard is the pool stream's next work (a kernel,
  or a collective launched from it), which may reuse the block. The free keeps the storage's history (and the
  clocks of the recorded streams as they stand now) as a pending free of the pool stream; that stream's next work
  checks it, as a write of the whole block by the pool stream at that work, joined with the recorded streams'
  clocks, and drops it. Free → synchronize (or a wait) → reuse is ordered; free → reuse on the pool stream with no
  ordering is a FREE race, whose `later` is the free and whose `reuse` is that next work. Nothing can touch the
  freed storage itself later (a new allocation at the same address starts a fresh history), so its shadow state
  leaves `shadows` at the free. A free of a storage whose allocation was never seen is not checked (the detector
  may have started after the allocation).

- hand_over: other processes read the given bytes from now on (a CUDA IPC export handed out, a host barrier over
  symmetric memory). Their reads are ordered after the handing thread's present and after the given events (the
  one torch's IPC export records on the current stream), and after nothing else of this process: each last write
  of those bytes not ordered before that is a PEER race. Nothing is recorded (what the peers do next is ordered by
  their own protocol, which this process cannot see), and a write is judged at the first hand-over after it only.

Race kinds: FREE when the later access is a free; PEER when it is a hand-over; HOST when either access is by a host
thread (host_access); otherwise RAW / WAR / WAW by (later, earlier) being (read, write) / (write, read) /
(write, write).

Which races: every access is checked against the last write of each byte it touches and, if it is a write, the
latest read of each other actor since that write. All conflicting pairs that are unordered are reported, never
only the first; one Race per (later access, earlier access, storage), its [start, end) spanning the bytes where
they met. The detector never raises on odd input: unknown streams, threads, events and storages are created lazily.

Not thread-safe: a method call updates several structures, so callers on several threads hold one lock around each
call (the runtime's recorder does). `races` keeps every race; a long-running caller trims it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Iterable, Optional

from .clocks import Clocks, join
from .names import Names
from .shadow import MIXED, StorageShadow

Ranges = Iterable  # of (storage, start, end)
MAX_PENDING_FREES = 4096  # per pool stream; the oldest unchecked free is dropped past this


@dataclass(slots=True, eq=False)
class Access:
    """One kernel's (or host op's, or free's) reads or writes: who, enqueued by which thread, where, when.

    `clock` is the actor's own time at the access (its epoch); `seq` is the trace index of the event. `stream` is
    set for collectives only: the stream the collective was launched from (the only one its comm waits for).
    """

    actor: str
    thread: str
    is_write: bool
    site: int
    op: str
    seq: int
    clock: int = 0
    stream: str = ""


@dataclass(slots=True)
class Race:
    """Two conflicting accesses to bytes [start, end) of `storage` with no happens-before edge between them."""

    kind: str  # RAW | WAR | WAW | FREE | HOST | PEER
    storage: int
    start: int
    end: int
    earlier: Access
    later: Access
    reuse: Optional[Access] = None  # FREE: the pool stream's next work after the free `later`, where it got real


@dataclass(slots=True, eq=False)
class PendingFree:
    """A freed block whose pool stream has not worked since: its history, the recorded streams' clocks then."""

    storage: int
    shadow: StorageShadow
    held: dict
    free: Access
    allocation: Allocation


@dataclass(slots=True)
class Allocation:
    stream: Optional[str]
    size: int
    site: int
    recorded: Optional[set] = None  # streams given to record_stream; None until the first


def race_kind(earlier: Access, later: Access) -> str:
    if later.op == "free":
        return "FREE"
    if earlier.actor == earlier.thread or later.actor == later.thread:
        return "HOST"
    if later.is_write:
        return "WAW" if earlier.is_write else "WAR"
    return "RAW"


class Detector:
    """Online happens-before race detector. See the module docstring for the model."""

    def __init__(self, on_race: Callable[[Race], None] | None = None) -> None:
        self.on_race = on_race
        self.races: list[Race] = []
        self.clocks = Clocks()
        self.shadows: dict[int, StorageShadow] = {}
        self.allocations: dict[int, Allocation] = {}
        self.names = Names()  # what the trace says about sites, streams and storages, for findings
        self.sites, self.stream_names, self.storage_infos = (self.names.sites, self.names.stream_names,
                                                              self.names.storage_infos)
        self.header: dict = {}
        self.seq = 0  # index of the next event
        # stream -> {thread: clocks.received[thread] at the thread's last full join into the stream} (kernel())
        self._joined_at: dict[str, dict[str, int]] = {}
        self._pending_frees: dict[str, list[PendingFree]] = {}  # pool stream -> frees its next work checks
        self._handed_at: dict[int, int] = {}  # storage -> seq of its last hand_over (earlier writes were judged)

    # ---- streams, events, synchronization -------------------------------------------------------------------
    def stream_created(self, thread: str, stream: str) -> None:
        self.seq += 1
        self.clocks.send(thread, stream)

    def event_record(self, thread: str, event: int, stream: str) -> None:
        self.seq += 1
        self.clocks.send(thread, stream)
        self.clocks.record(event, stream)

    def event_wait(self, thread: str, event: int, stream: str) -> None:
        self.seq += 1
        self.clocks.send(thread, stream)
        self.clocks.wait(stream, event)

    def event_destroy(self, event: int) -> None:
        self.seq += 1
        self.clocks.forget_event(event)

    def sync_event(self, thread: str, event: int) -> None:
        self.seq += 1
        self.clocks.wait(thread, event)

    def sync_stream(self, thread: str, stream: str) -> None:
        self.seq += 1
        self.clocks.send(stream, thread)

    def sync_device(self, thread: str, device: int) -> None:
        self.seq += 1
        for stream in self.clocks.streams_on(device):
            self.clocks.send(stream, thread)

    def thread_start(self, parent: str, child: str) -> None:
        self.seq += 1
        self.clocks.send(parent, child)

    def thread_join(self, parent: str, child: str) -> None:
        self.seq += 1
        self.clocks.send(child, parent)

    # ---- accesses ---------------------------------------------------------------------------------------------
    def kernel(self, thread: str, stream: str, reads: Ranges = (), writes: Ranges = (), site: int = -1,
               op: str = "") -> None:
        seq = self.seq
        self.seq = seq + 1
        # clocks.send(thread, stream), inlined: this is the per-op path. When the thread's clock took in nothing
        # since its last full join into this stream, only its own entry can have grown: one entry, not a join.
        clocks = self.clocks
        of_actor = clocks.of_actor
        clock = of_actor.get(stream) or clocks.clock(stream)
        sent = of_actor.get(thread) or clocks.clock(thread)
        received = clocks.received.get(thread, 0)
        joined = self._joined_at.get(stream)
        if joined is not None and joined.get(thread) == received:
            if clock.get(thread, 0) < sent[thread]:
                clock[thread] = sent[thread]
        else:
            join(clock, sent)
            if joined is None:
                joined = self._joined_at[stream] = {}
            joined[thread] = received
        sent[thread] += 1
        if self._pending_frees and stream in self._pending_frees:
            self._check_frees(stream, thread, clock, site, op, seq)
        if reads:
            self._access(Access(stream, thread, False, site, op, seq, clock[stream]), clock, reads)
        if writes:
            self._access(Access(stream, thread, True, site, op, seq, clock[stream]), clock, writes)

    def host_access(self, thread: str, reads: Ranges = (), writes: Ranges = (), site: int = -1,
                    op: str = "") -> None:
        seq = self.seq
        self.seq = seq + 1
        clock = self.clocks.clock(thread)
        if reads:
            self._access(Access(thread, thread, False, site, op, seq, clock[thread]), clock, reads)
        if writes:
            self._access(Access(thread, thread, True, site, op, seq, clock[thread]), clock, writes)

    def collective(self, thread: str, stream: str, comm: str, reads: Ranges = (), writes: Ranges = (),
                   async_op: bool = False, work: int | None = None, site: int = -1, op: str = "") -> None:
        seq = self.seq
        self.seq = seq + 1
        clocks = self.clocks
        launched_from = clocks.send(thread, stream)
        if self._pending_frees and stream in self._pending_frees:
            self._check_frees(stream, thread, launched_from, site, op, seq)
        clock = clocks.send(stream, comm)
        if reads:
            self._access(Access(comm, thread, False, site, op, seq, clock[comm], stream), clock, reads)
        if writes:
            self._access(Access(comm, thread, True, site, op, seq, clock[comm], stream), clock, writes)
        if work is not None:
            clocks.finish_work(work, comm)
        if not async_op:
            clocks.send(comm, stream)

    def work_wait(self, thread: str, stream: str, work: int, blocking: bool = False) -> None:
        self.seq += 1
        self.clocks.send(thread, stream)
        self.clocks.wait_work(stream, work)
        if blocking:
            self.clocks.wait_work(thread, work)

    def hand_over(self, thread: str, reads: Ranges = (), events: Iterable = (), site: int = -1,
                  op: str = "") -> None:
        seq = self.seq
        self.seq = seq + 1
        clocks = self.clocks
        peers = dict(clocks.clock(thread))
        for event in events:
            join(peers, clocks.of_event.get(event, {}))
        handing = Access(thread, thread, False, site, op, seq, peers[thread])
        for storage, start, end in reads:
            shadow = self.shadows.get(storage)
            judged_until = self._handed_at.get(storage, -1)
            self._handed_at[storage] = seq
            if shadow is None or start >= end:
                continue
            found = [hit for hit in shadow.check_range(handing, peers, start, end) or () if hit[0].seq > judged_until]
            if found:
                self._report(storage, handing, found, kind="PEER")

    def forget_accesses(self) -> None:
        """Drop every storage's history and allocation (clocks, events and works stay): instrumentation resumes
        after a gap (instrument/sampling.py), and what the gap hid must not order or disorder old accesses.

        Bookkeeping, not an event: no sequence number."""
        self.shadows.clear()
        self.allocations.clear()
        self._pending_frees.clear()
        self._handed_at.clear()

    def forget_work(self, work: int) -> None:
        """The runtime will never wait for `work` again (its one Work.wait() was reported): drop its clock.

        Bookkeeping, not an event: no sequence number (a trace without it replays to the same `seq`s)."""
        self.clocks.of_work.pop(work, None)

    # ---- memory -----------------------------------------------------------------------------------------------
    def alloc(self, storage: int, size: int, stream: str, site: int = -1) -> None:
        """A new block: a fresh history (whatever was recorded at this address before is gone)."""
        self.seq += 1
        self.shadows.pop(storage, None)
        if self._handed_at:
            self._handed_at.pop(storage, None)
        self.allocations[storage] = Allocation(stream, size, site)

    def record_stream(self, storage: int, stream: str) -> None:
        self.seq += 1
        allocation = self.allocations.get(storage)
        if allocation is None:
            allocation = self.allocations[storage] = Allocation(None, 0, -1)
        if allocation.recorded is None:
            allocation.recorded = {stream}
        else:
            allocation.recorded.add(stream)

    def free(self, thread: str, storage: int, site: int = -1) -> None:
        seq = self.seq
        self.seq = seq + 1
        allocation = self.allocations.pop(storage, None)
        shadow = self.shadows.pop(storage, None)
        if allocation is None or allocation.stream is None or shadow is None:
            return
        stream = allocation.stream
        if shadow.actor == stream:
            return  # the allocation stream's own history: its next work is ordered after all of it
        clocks = self.clocks
        held: dict = {}
        for recorded in allocation.recorded or ():
            join(held, clocks.clock(recorded))
        pending = PendingFree(storage, shadow, held, Access(stream, thread, True, site, "free", seq), allocation)
        frees = self._pending_frees.setdefault(stream, [])
        frees.append(pending)
        if len(frees) > MAX_PENDING_FREES:  # a pool stream that never works again must not hold every block
            del frees[0]

    def _check_frees(self, stream: str, thread: str, clock: dict, site: int, op: str, seq: int) -> None:
        """The pool stream's next work after frees of its blocks: each block may be reused here."""
        reuse = Access(stream, thread, True, site, op, seq, clock[stream])
        for pending in self._pending_frees.pop(stream):
            at = dict(clock)
            join(at, pending.held)
            free = pending.free
            free.clock = at[stream]
            found = pending.shadow.check_all(free, at)
            if found:
                storage = pending.storage
                known = storage in self.allocations
                if not known:  # the report may name the block's allocation site
                    self.allocations[storage] = pending.allocation
                try:
                    self._report(storage, free, found, reuse)
                finally:
                    if not known:
                        self.allocations.pop(storage, None)

    # ---- what the trace knows about names ---------------------------------------------------------------------
    def site(self, id: int, frames: list) -> None:  # noqa: A002 - the trace's field name
        self.seq += 1
        self.sites[id] = frames

    def stream_name(self, stream: str, name: str) -> None:
        self.seq += 1
        self.stream_names[stream] = name

    def storage_info(self, storage: int, **info) -> None:
        self.seq += 1
        self.storage_infos[storage] = info

    # ---- internals --------------------------------------------------------------------------------------------
    def free_can_race(self, storage: int) -> bool:
        """Whether a free of `storage` now would be checked against anything (the runtime skips capturing the free's
        site otherwise): False for a block whose whole history is its allocation stream's."""
        allocation = self.allocations.get(storage)
        if allocation is None or allocation.stream is None:
            return False
        shadow = self.shadows.get(storage)
        return shadow is not None and shadow.actor != allocation.stream

    def _access(self, access: Access, clock: dict, ranges: Ranges) -> None:
        shadows = self.shadows
        actor = access.actor
        found_by_storage = None
        for storage, start, end in ranges:
            if start >= end:
                continue
            shadow = shadows.get(storage)
            if shadow is None:
                shadows[storage] = StorageShadow.of_first_access(access, start, end)
                continue
            if shadow.actor != actor:
                shadow.actor = MIXED
            found = shadow.access(access, clock, start, end, None)
            if found:
                if found_by_storage is None:
                    found_by_storage = {}
                found_by_storage.setdefault(storage, []).extend(found)
        if found_by_storage:
            for storage, found in found_by_storage.items():
                self._report(storage, access, found)

    def _report(self, storage: int, later: Access, found: list, reuse: Access | None = None,
                kind: str | None = None) -> None:
        """One Race per earlier access, spanning every byte range where the two met."""
        merged: dict[int, Race] = {}
        for earlier, start, end in found:
            race = merged.get(id(earlier))
            if race is None:
                merged[id(earlier)] = Race(kind or race_kind(earlier, later), storage, start, end, earlier, later,
                                           reuse)
            else:
                race.start = min(race.start, start)
                race.end = max(race.end, end)
        for race in merged.values():
            self.races.append(race)
            if self.on_race is not None:
                self.on_race(race)
