"""The whole-program view the rules read: the call graph plus the streams each function can run on.

A function runs on the *current* stream (written "") when some chain of calls from a root (a function nobody
calls) reaches it outside every `with ...stream(s):` region; it runs on stream `s` when a call inside such a region
reaches it. A stream is identified by its expression text (a local alias replaced by what it was bound to),
qualified by the class family for `self.` expressions, so `self.__allgather_stream` of one class is one stream
wherever that class uses it.
"""

from __future__ import annotations

from collections import deque
from functools import cached_property
from typing import Any, Callable, Iterator

from .callgraph import CallGraph, Edge, Function
from .facts import NO_REGION, Access, Call, FileFacts, Region
from .options import StaticOptions

CURRENT_STREAM = ""

__all__ = ["CURRENT_STREAM", "ORDERING_SYNCS", "Edge", "Function", "Program"]


class Program(CallGraph):
    """Build once per scan from every file's facts; rules only read it."""

    def __init__(self, files: list[FileFacts], options: StaticOptions) -> None:
        super().__init__(files, options)
        self._wait_memo: dict[str, bool] = {}
        self._memo: dict[str, Any] = {}

    def memo(self, key: str, build: Callable[[], Any]) -> Any:
        """A value derived from the whole program, built once (rules share indexes through this)."""
        if key not in self._memo:
            self._memo[key] = build()
        return self._memo[key]

    def stream_id(self, function: Function, stream: Region | str) -> str:
        """A stream's identity: its text (a local alias replaced by what it was bound to), qualified by the class
        family when it is an attribute of `self`."""
        text = stream.stream if isinstance(stream, Region) else stream
        aliases = function.facts.stream_aliases.get(text)
        if aliases:
            named = [a for a in aliases if not a.endswith("current_stream()") and a != "None"]
            text = named[0] if named else CURRENT_STREAM
        if text.startswith(("self.", "cls.")):
            return f"{text}@{self.family_root(function.file.path, function.owner)}"
        return text

    @cached_property
    def runs_on_current_stream(self) -> frozenset[str]:
        """Functions some call chain reaches outside every stream region (roots count: their callers are unknown)."""
        called = {v for _, v in self.graph.edges()}
        roots = [fid for fid in self.functions if fid not in called]
        seen = set(roots)
        queue = deque(roots)
        while queue:
            fid = queue.popleft()
            for call, edges in self.calls_of(fid):
                if call.region != NO_REGION:
                    continue
                for edge in edges:
                    if edge.callee not in seen:
                        seen.add(edge.callee)
                        queue.append(edge.callee)
        under_regions = self.reached_from_region_any
        # Functions only reachable through cycles nobody enters: their entry is unknown, assume the current stream.
        rest = {fid for fid in self.functions if fid not in seen and fid not in under_regions}
        return frozenset(seen | rest)

    @cached_property
    def reached_from_region_any(self) -> dict[str, set[str]]:
        """Function id -> stream ids of regions whose calls reach it (ignoring waits)."""
        result: dict[str, set[str]] = {}
        for function in self.functions.values():
            for index, region in enumerate(function.facts.regions):
                stream = self.stream_id(function, region)
                for fid, _chain in self.walk_region(function.id, index):
                    result.setdefault(fid, set()).add(stream)
        return result

    def streams_of(self, fid: str) -> set[str]:
        """Every stream the body of `fid` (outside its own regions) can run on."""
        streams = set(self.reached_from_region_any.get(fid, ()))
        if fid in self.runs_on_current_stream:
            streams.add(CURRENT_STREAM)
        return streams

    def walk_region(
        self,
        fid: str,
        region_index: int,
        edge_allowed: Callable[[str, Call, Edge], bool] | None = None,
    ) -> Iterator[tuple[str, tuple[Edge, ...]]]:
        """Functions reached by calls made inside a region (breadth first), with the call chain to each.

        Calls inside nested regions and inside reached functions' own regions switch streams and are not followed.
        `edge_allowed(function_id, call, edge)` can cut edges (for example calls after a wait).
        """
        starts = [(call, edges) for call, edges in self.calls_of(fid) if call.region == region_index]
        seen: set[str] = set()
        queue: deque[tuple[str, tuple[Edge, ...]]] = deque()
        for call, edges in starts:
            for edge in edges:
                if edge.callee not in seen and (edge_allowed is None or edge_allowed(fid, call, edge)):
                    seen.add(edge.callee)
                    queue.append((edge.callee, (edge,)))
        while queue:
            current, chain = queue.popleft()
            yield current, chain
            for call, edges in self.calls_of(current):
                if call.region != NO_REGION:
                    continue
                for edge in edges:
                    if edge.callee not in seen and (edge_allowed is None or edge_allowed(current, call, edge)):
                        seen.add(edge.callee)
                        queue.append((edge.callee, chain + (edge,)))

    def performs_wait(self, fid: str) -> bool:
        """Whether calling `fid` orders the calling stream or host (a wait or sync in it or an exact callee)."""
        memo = self._wait_memo
        if fid in memo:
            return memo[fid]
        memo[fid] = False  # cycles: assume no wait until proven
        function = self.functions[fid]
        found = any(s.kind in ORDERING_SYNCS for s in function.facts.syncs)
        if not found:
            for _call, edges in self.calls_of(fid):
                if any(e.exact and self.performs_wait(e.callee) for e in edges):
                    found = True
                    break
        memo[fid] = found
        return found

    def accesses(self) -> Iterator[tuple[Function, Access]]:
        for function in self.functions.values():
            for access in function.facts.accesses:
                yield function, access


# Syncs that order later work after earlier work (record and record_stream alone do not).
ORDERING_SYNCS = frozenset({"wait_stream", "wait_event", "synchronize", "host_sync"})
