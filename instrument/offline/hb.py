"""The happens-before relation of a recorded trace as a networkx DiGraph: the explanation and the test oracle.

Graph: one chain of nodes per actor (program order). Each event adds a node to the chain of the actor it changes,
with an edge from the last node of every actor (or event / work) it is ordered after:
- kernel / event_record / event_wait / work_wait / stream_created / collective launch on S by T: a node on S after
  T's last node ("enqueue"); event_record remembers the node, event_wait adds an edge from it ("event");
  event_destroy forgets it;
- sync_event / sync_stream / sync_device by T: a node on T after the event / S / every stream of that device;
- collective on comm N from S: node on S (enqueue), then an access node on N after it; the work remembers the
  N node; a blocking collective adds a node on S after it; work_wait adds an S node (and, blocking, a T node)
  after the remembered N node;
- thread_start: a node on the child after the parent; thread_join: a node on the parent after the child;
- hand_over by T: a node on no chain after T's last node and the given events' nodes; the last writes of its bytes since the storage's
  previous hand-over with no path to it race as PEER (nothing is added to the history);
- host_access: a node on T; free: pending until the allocation (pool) stream's next kernel or collective launch,
  then a node on no chain after that work's node and after every stream given to record_stream as it stood at
  the free (the block may be reused there: instrument/detector.py).
Access A happens before access B iff there is a path from A's node to B's node.

Which races (the same definition as instrument/detector.py, computed independently): for every access X (in trace
order; a kernel's reads before its writes, ranges in the given order) and every byte b it touches, the candidates
are the last write of b before X and, if X is a write, the latest read of b by each actor since that write. A
candidate by another actor, conflicting with X (not both reads) and with no path to X, races with X. Pairs are
merged over bytes into one Race per (later access, earlier access, storage) spanning the bytes where they met.
This is computed by scanning each storage's full history backwards with interval sets (no epochs, no segments), so
the property test compares two different algorithms on one definition. It is quadratic: meant for tests,
witnesses and small traces; `streamcheck analyze` uses the online detector to find races.

A witness explains one race: the two accesses and their actors, the missing edge (from the earlier access to the
later access, or to the launch of the collective that made it), and the last point of the earlier actor that is
ordered before the later access, if any. `witness_dot` draws the neighbourhood as Graphviz DOT.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable

import networkx as nx

from streamcheck.instrument.actors import device_of
from streamcheck.instrument.detector import Access, Race, race_kind
from streamcheck.instrument.names import Names
from streamcheck.instrument.events import deliver
from streamcheck.instrument.trace import replay

Intervals = list  # sorted, disjoint [(start, end), ...]


def _intersect(intervals: Intervals, start: int, end: int) -> Intervals:
    return [(max(a, start), min(b, end)) for a, b in intervals if a < end and start < b]


def _subtract(intervals: Intervals, start: int, end: int) -> Intervals:
    out = []
    for a, b in intervals:
        if b <= start or end <= a:
            out.append((a, b))
            continue
        if a < start:
            out.append((a, start))
        if end < b:
            out.append((end, b))
    return out


def _union(intervals: Intervals, more: Intervals) -> Intervals:
    merged: Intervals = []
    for a, b in sorted(intervals + more):
        if merged and a <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], b))
        else:
            merged.append((a, b))
    return merged


def _minus(intervals: Intervals, other: Intervals) -> Intervals:
    for a, b in other:
        intervals = _subtract(intervals, a, b)
    return intervals


@dataclass
class Witness:
    """Why two accesses race: their nodes, the edge that would order them, and the closest existing ordering."""

    race: Race
    earlier_node: int
    later_node: int
    missing_edge: tuple[int, int]
    waiter: str  # the actor that must wait (the launch stream of a collective, else the later actor)
    last_ordered: int | None  # latest node of the earlier actor's chain that is ordered before the later access


class HappensBefore:
    """Builds the graph from trace events (`add(event, seq)` or `from_events`) and finds races by reachability."""

    def __init__(self, find_races: bool = True) -> None:
        self.find_races = find_races  # False: only the graph (for witnesses), skipping the quadratic race search
        self.graph = nx.DiGraph()
        self.chains: dict[str, list[int]] = {}
        self.names = Names()  # the trace's site / stream_name / storage_info events
        self.sites, self.stream_names, self.storage_infos = (self.names.sites, self.names.stream_names,
                                                              self.names.storage_infos)
        self.access_nodes: dict[tuple[int, str], int] = {}  # (seq, actor) -> node
        self._found: list[Race] = []
        self._events: dict[int, int] = {}
        self._works: dict[int, int] = {}
        self._allocations: dict[int, tuple[str | None, set]] = {}
        self._history: dict[int, list[tuple[Access, int, int, int]]] = {}  # storage -> (access, node, start, end)
        self._pending_frees: dict[str, list[tuple]] = {}  # pool stream -> (free access, storage, history, held)
        self._handed_at: dict[int, int] = {}  # storage -> seq of its last hand_over
        self.seq = 0  # the index of the event being added (replay sets it)

    @classmethod
    def from_events(cls, events: Iterable[dict], find_races: bool = True) -> "HappensBefore":
        hb = cls(find_races)
        replay(events, hb)
        return hb

    def add(self, event: dict, seq: int) -> None:
        """Add one trace event (a dict as read_trace yields it) with its index."""
        self.seq = seq
        deliver(self, event)

    # ---- building: the Sink's events (instrument/events.py), each with its index in self.seq -------------------------
    def _node(self, actor: str | None, label: str, after: Iterable[tuple[int | None, str]] = (),
              seq: int | None = None) -> int:
        node = self.graph.number_of_nodes()
        self.graph.add_node(node, actor=actor or "", seq=self.seq if seq is None else seq, label=label)
        if actor is not None:
            chain = self.chains.setdefault(actor, [])
            if chain:
                self.graph.add_edge(chain[-1], node, kind="program")
            chain.append(node)
        for source, kind in after:
            if source is not None:
                self.graph.add_edge(source, node, kind=kind)
        return node

    def last(self, actor: str) -> int | None:
        chain = self.chains.get(actor)
        return chain[-1] if chain else None

    def _enqueue(self, thread: str, stream: str, label: str, *after: tuple[int | None, str]) -> int:
        """A node on `stream` after the enqueuing thread's last node (and after `after`)."""
        return self._node(stream, label, [(self.last(thread), "enqueue"), *after])

    def kernel(self, thread: str, stream: str, reads=(), writes=(), site: int = -1, op: str = "") -> None:
        node = self._enqueue(thread, stream, op or "kernel")
        self._check_frees(stream, node, thread, site, op)
        self._accesses(node, stream, thread, reads, writes, site, op, "")

    def host_access(self, thread: str, reads=(), writes=(), site: int = -1, op: str = "") -> None:
        node = self._node(thread, op or "host_access")
        self._accesses(node, thread, thread, reads, writes, site, op, "")

    def hand_over(self, thread: str, reads=(), events=(), site: int = -1, op: str = "") -> None:
        # on no chain: what the peers are ordered after orders nothing of this process
        node = self._node(None, op or "hand over",
                          [(self.last(thread), "hand over")] + [(self._events.get(event), "event") for event in events])
        self.graph.nodes[node]["actor"] = thread
        access = Access(thread, thread, False, site, op, self.seq, 0, "")
        met: dict[tuple, Race] = {}
        for storage, start, end in reads:
            since = self._handed_at.get(storage, -1)
            self._handed_at[storage] = self.seq
            if start < end:
                self._check(access, node, storage, [(start, end)], met, kind="PEER", since=since)
        self._found.extend(met.values())

    def stream_created(self, thread: str, stream: str) -> None:
        self._enqueue(thread, stream, "stream created")

    def event_record(self, thread: str, event: int, stream: str) -> None:
        self._events[event] = self._enqueue(thread, stream, "event record")

    def event_wait(self, thread: str, event: int, stream: str) -> None:
        self._enqueue(thread, stream, "event wait", (self._events.get(event), "event"))

    def event_destroy(self, event: int) -> None:
        self._events.pop(event, None)

    def sync_event(self, thread: str, event: int) -> None:
        self._node(thread, "event synchronize", [(self._events.get(event), "sync")])

    def sync_stream(self, thread: str, stream: str) -> None:
        self._node(thread, "stream synchronize", [(self.last(stream), "sync")])

    def sync_device(self, thread: str, device: int) -> None:
        streams = [actor for actor in self.chains if device_of(actor) == device]
        self._node(thread, "device synchronize", [(self.last(s), "sync") for s in streams])

    def thread_start(self, parent: str, child: str) -> None:
        self._node(child, "thread start", [(self.last(parent), "thread")])

    def thread_join(self, parent: str, child: str) -> None:
        self._node(parent, "thread join", [(self.last(child), "thread")])

    def collective(self, thread: str, stream: str, comm: str, reads=(), writes=(), async_op: bool = False,
                   work: int | None = None, site: int = -1, op: str = "") -> None:
        launch = self._enqueue(thread, stream, f"launch {op or 'collective'}")
        self._check_frees(stream, launch, thread, site, op)
        node = self._node(comm, op or "collective", [(launch, "collective")])
        self._accesses(node, comm, thread, reads, writes, site, op, stream)
        if work is not None:
            self._works[work] = node
        if not async_op:
            self._node(stream, "collective end", [(node, "collective")])

    def work_wait(self, thread: str, stream: str, work: int, blocking: bool = False) -> None:
        done = self._works.get(work)
        self._enqueue(thread, stream, "work wait", (done, "work"))
        if blocking:
            self._node(thread, "work wait (blocking)", [(done, "work")])

    def alloc(self, storage: int, size: int, stream: str, site: int = -1) -> None:
        self._history.pop(storage, None)
        self._handed_at.pop(storage, None)
        self._allocations[storage] = (stream, set())

    def record_stream(self, storage: int, stream: str) -> None:
        self._allocations.setdefault(storage, (None, set()))[1].add(stream)

    def free(self, thread: str, storage: int, site: int = -1) -> None:
        stream, recorded = self._allocations.pop(storage, (None, set()))
        history = self._history.pop(storage, None)  # nothing can touch a freed block again: its history ends here
        if stream is not None and history:
            held = [(self.last(r), "record_stream") for r in sorted(recorded)]
            free = Access(stream, thread, True, site, "free", self.seq, 0, "")
            self._pending_frees.setdefault(stream, []).append((free, storage, history, held))

    def site(self, id: int, frames: list) -> None:  # noqa: A002 - the trace's field name
        self.sites[id] = frames

    def stream_name(self, stream: str, name: str) -> None:
        self.stream_names[stream] = name

    def storage_info(self, storage: int, **info) -> None:
        self.storage_infos[storage] = info

    def _accesses(self, node: int, actor: str, thread: str, reads, writes, site: int, op: str, stream: str) -> None:
        self.access_nodes[(self.seq, actor)] = node
        for is_write, ranges in ((False, reads or ()), (True, writes or ())):
            if not ranges:
                continue
            access = Access(actor, thread, is_write, site, op, self.seq, 0, stream)
            met: dict[tuple, Race] = {}
            for storage, start, end in ranges:
                if start >= end:
                    continue
                self._check(access, node, storage, [(start, end)], met)
                self._history.setdefault(storage, []).append((access, node, start, end))
            self._found.extend(met.values())

    def _check_frees(self, stream: str, work: int, thread: str, site: int, op: str) -> None:
        """The pool stream's next work after frees of its blocks: a FREE race where a block's history is unordered."""
        for access, storage, history, held in self._pending_frees.pop(stream, ()):
            node = self._node(None, "free", [(work, "reuse")] + held, seq=access.seq)
            self.graph.nodes[node]["actor"] = stream
            self.access_nodes[(access.seq, stream)] = node
            reuse = Access(stream, thread, True, site, op, self.seq, 0, "")
            touched: Intervals = []
            for _, _, start, end in history:
                touched = _union(touched, [(start, end)])
            met: dict[tuple, Race] = {}
            saved, self._history[storage] = self._history.get(storage), history
            try:
                self._check(access, node, storage, touched, met)
            finally:
                if saved is None:
                    self._history.pop(storage, None)
                else:
                    self._history[storage] = saved
            for race in met.values():
                race.reuse = reuse
            self._found.extend(met.values())

    def _check(self, access: Access, node: int, storage: int, bytes_: Intervals, met: dict, kind: str | None = None,
               since: int = -1) -> None:
        """Races of `access` (at `node`) on `bytes_` of `storage`, merged into `met` by earlier access; `since`:
        earlier accesses up to that seq are not candidates (a hand-over judges only writes after the last one)."""
        if not self.find_races:
            return
        uncovered = bytes_  # bytes whose last write is still to be found, scanning backwards
        later_reads: dict[str, Intervals] = {}  # actor -> bytes where a later read by that actor was already seen
        for earlier, earlier_node, start, end in reversed(self._history.get(storage, ())):
            if not uncovered:
                break
            overlap = _intersect(uncovered, start, end)
            if not overlap:
                continue
            if earlier.is_write:
                candidate = overlap
                uncovered = _subtract(uncovered, start, end)
            else:
                seen = later_reads.get(earlier.actor, [])
                candidate = _minus(overlap, seen)
                later_reads[earlier.actor] = _union(seen, overlap)
                if not access.is_write:
                    continue
            if not candidate or earlier.actor == access.actor or earlier.seq <= since:
                continue
            if nx.has_path(self.graph, earlier_node, node):
                continue
            key = (storage, earlier.seq, earlier.is_write)
            lo, hi = candidate[0][0], candidate[-1][1]
            race = met.get(key)
            if race is None:
                met[key] = Race(kind or race_kind(earlier, access), storage, lo, hi, earlier, access)
            else:
                race.start, race.end = min(race.start, lo), max(race.end, hi)

    # ---- queries --------------------------------------------------------------------------------------------------
    def races(self) -> list[Race]:
        """Every race of the trace, in the order the later accesses happened."""
        return list(self._found)

    def ordered(self, earlier: Access, later: Access) -> bool:
        """Is there a happens-before path from one access to the other?"""
        return nx.has_path(self.graph, self.node_of(earlier), self.node_of(later))

    def node_of(self, access: Access) -> int:
        return self.access_nodes[(access.seq, access.actor)]

    def witness(self, race: Race) -> Witness:
        earlier_node = self.node_of(race.earlier)
        later_node = self.node_of(race.later)
        waiter = race.later.stream or race.later.actor
        target = later_node
        if race.later.stream:  # a collective: its comm waits for the launch stream, so the edge goes there
            target = next((p for p in self.graph.predecessors(later_node)
                           if self.graph.nodes[p]["actor"] == waiter), later_node)
        ancestors = nx.ancestors(self.graph, later_node)
        last_ordered = None
        for node in self.chains.get(race.earlier.actor, []):
            if node >= earlier_node:
                break
            if node in ancestors:
                last_ordered = node
        return Witness(race, earlier_node, later_node, (earlier_node, target), waiter, last_ordered)

    def witness_subgraph(self, witness: Witness, context: int = 4) -> nx.DiGraph:
        """The two chains around the race, the edges among them, and the missing edge (attribute missing=True)."""
        keep: set[int] = {witness.earlier_node, witness.later_node, *witness.missing_edge}
        earlier_chain = self.chains.get(witness.race.earlier.actor, [])
        if witness.earlier_node in earlier_chain:
            i = earlier_chain.index(witness.earlier_node)
            keep.update(earlier_chain[max(0, i - context): i + context + 1])
        for actor in {witness.waiter, witness.race.later.actor}:
            chain = self.chains.get(actor, [])
            for node in (witness.later_node, witness.missing_edge[1]):
                if node in chain:
                    i = chain.index(node)
                    keep.update(chain[max(0, i - context): i + 1])
        if witness.last_ordered is not None:
            keep.add(witness.last_ordered)
        for node in list(keep):  # what the kept nodes were ordered after (waits, syncs): the edges that did exist
            keep.update(p for p in self.graph.predecessors(node) if self.graph.edges[p, node]["kind"] != "program")
        sub = self.graph.subgraph(keep).copy()
        sub.add_edge(*witness.missing_edge, kind="missing", missing=True)
        return sub

    def witness_dot(self, witness: Witness, name: str = "race") -> str:
        sub = self.witness_subgraph(witness)
        by_actor: dict[str, list[int]] = {}
        for node, data in sorted(sub.nodes(data=True)):
            by_actor.setdefault(data["actor"], []).append(node)
        race = witness.race
        title = (f"{race.kind}: {self._where(witness, witness.later_node)} on {race.later.actor} is not ordered "
                 f"after {self._where(witness, witness.earlier_node)} on {race.earlier.actor}")
        lines = [f"digraph {name} {{", "  rankdir=TB;", f"  label={_quote(title)};", "  labelloc=t;",
                 '  node [shape=box, fontname="monospace"];']
        for k, (actor, nodes) in enumerate(sorted(by_actor.items())):
            title = f"{actor} ({self.stream_names[actor]})" if actor in self.stream_names else actor
            lines.append(f"  subgraph cluster_{k} {{")
            lines.append(f"    label={_quote(title)};")
            for node in nodes:
                data = sub.nodes[node]
                label = f"#{data['seq']} {data['label']}"
                style = ""
                if node in (witness.earlier_node, witness.later_node):
                    label += f"\\n{self._where(witness, node)}"
                    style = ', color=red, penwidth=2'
                lines.append(f"    n{node} [label={_quote(label)}{style}];")
            lines.append("  }")
        for u, v, data in sorted(sub.edges(data=True)):
            if data.get("missing"):
                lines.append(f'  n{u} -> n{v} [style=dashed, color=red, label="missing"];')
            else:
                lines.append(f"  n{u} -> n{v} [label={_quote(data['kind'])}];")
        lines.append("}")
        return "\n".join(lines) + "\n"

    def _where(self, witness: Witness, node: int) -> str:
        access = witness.race.earlier if node == witness.earlier_node else witness.race.later
        frames = self.sites.get(access.site)
        if not frames:
            return access.op
        path, line = frames[0][0], frames[0][1]
        return f"{str(path).rsplit('/', 1)[-1]}:{line}"


def _quote(text: str) -> str:
    return '"' + str(text).replace("\\n", "\x00").replace("\\", "\\\\").replace('"', '\\"').replace("\x00", "\\n") + '"'
