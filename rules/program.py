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
from .streams import CURRENT_STREAM, UNKNOWN, stream_id
from .summaries import bound_accesses, performed

# A chain of calls from a stream region follows at most this many calls resolved by name alone (a closure stored on
# a parameter, as in hpZ); chains of guesses wander into unrelated code (`self.param_queue.put` -> `Engine.put`).
GUESSES_PER_CHAIN = 1

__all__ = ["CURRENT_STREAM", "Edge", "Function", "Program"]


_MISSING = object()  # (a memo's value may be None)

HANDOFF_CALL_LINES = 8  # how far above an argument a multi-line call may start


class Program(CallGraph):
    """Build once per scan from every file's facts; rules only read it."""

    def __init__(self, files: list[FileFacts], options: StaticOptions) -> None:
        super().__init__(files, options)
        self._reach_memo: dict[str, frozenset[str]] = {}
        self._callers_memo: dict[str, frozenset[str]] = {}
        self._memo: dict[str, Any] = {}
        self._accesses_in: dict[str, list[Access]] = {}
        self._exact_memo: dict[str, list[tuple[Call, list[Edge]]]] = {}  # exact_edges_of, per function

    def memo(self, key: str, build: Callable[[], Any]) -> Any:
        """A value derived from the whole program, built once (rules share indexes through this)."""
        found = self._memo.get(key, _MISSING)
        if found is _MISSING:
            found = self._memo[key] = build()
        return found

    def stream_id(self, function: Function, stream: Region | str) -> str:
        """A stream's identity (see streams.py)."""
        return stream_id(self, function, stream)

    def exact_edges_of(self, fid: str) -> Iterator[tuple[Call, list[Edge]]]:
        """Calls of `fid` with their exactly resolved edges only (imports, self, super: no guess by name).

        Kept per function: the summaries, the aliasing and the rules ask for the same functions again and again
        (vLLM 0.33.0: 280 k times for 45 k functions, each time a new list per call)."""
        found = self._exact_memo.get(fid)
        if found is None:
            found = self._exact_memo[fid] = [(call, exact) for call, edges in self._calls_with_edges[fid]
                                             if (exact := [e for e in edges if e.exact])]
        return iter(found)

    def all_edges_of(self, fid: str) -> Iterator[tuple[Call, list[Edge]]]:
        return self.calls_of(fid)

    def reaches(self, fid: str, targets: frozenset[str]) -> bool:
        """Whether calling `fid` may run one of `targets` (itself or through calls)."""
        if fid in targets:
            return True
        reached = self._reach_memo.get(fid)
        if reached is None:
            reached = self._reach_memo[fid] = frozenset(self._descendants(fid))
        return not reached.isdisjoint(targets)

    def callers_reaching(self, fid: str) -> frozenset[str]:
        """Every function some chain of calls leads from to `fid` (`fid` itself only through a cycle): `reaches`
        the other way round."""
        found = self._callers_memo.get(fid)
        if found is None:
            seen: set[str] = set()
            stack = [fid]
            while stack:
                for caller, _call in self.call_sites.get(stack.pop(), ()):
                    if caller.id not in seen:
                        seen.add(caller.id)
                        stack.append(caller.id)
            found = self._callers_memo[fid] = frozenset(seen)
        return found

    def _descendants(self, fid: str) -> set[str]:
        """Every function some chain of calls from `fid` reaches (`fid` itself only through a cycle)."""
        found: set[str] = set()
        stack = [fid]
        while stack:
            for callee in self.callees[stack.pop()]:
                if callee not in found:
                    found.add(callee)
                    stack.append(callee)
        return found

    def functions_of_class(self, function: Function) -> list[Function]:
        """Every function of `function`'s file whose `self` is the same class (its methods and the functions nested
        in them), in program order; one index for all queries instead of a pass over every function per query."""
        return self.functions_of_class_at(function.file.path, function.owner)

    def functions_of_class_at(self, path: str, cls: str | None) -> list[Function]:
        """The same for class `cls` of file `path` (an owner id's two halves)."""
        return self._by_class.get((path, cls), [])

    @cached_property
    def _by_class(self) -> dict[tuple[str, str | None], list[Function]]:
        index: dict[tuple[str, str | None], list[Function]] = {}
        for function in self.functions.values():
            index.setdefault((function.file.path, function.owner), []).append(function)
        return index

    @cached_property
    def call_sites(self) -> dict[str, list[tuple[Function, Call]]]:
        """Function id -> (caller, call) of every resolved call of it."""
        sites: dict[str, list[tuple[Function, Call]]] = {}
        for caller in self.functions.values():
            for call, edges in self.calls_of(caller.id):
                for edge in edges:
                    sites.setdefault(edge.callee, []).append((caller, call))
        return sites

    @cached_property
    def runs_on_current_stream(self) -> frozenset[str]:
        """Functions some call chain reaches outside every stream region (roots count: their callers are unknown)."""
        called = set().union(*self.callees.values())
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
    def _region_chains(self) -> dict[str, list[tuple[Function, int, tuple[Edge, ...]]]]:
        chains: dict[str, list[tuple[Function, int, tuple[Edge, ...]]]] = {}
        for function in self.functions.values():
            for index in range(len(function.facts.regions)):
                for fid, chain in self.walk_region(function.id, index):
                    chains.setdefault(fid, []).append((function, index, chain))
        return chains

    def region_chains(self, fid: str) -> list[tuple[Function, int, tuple[Edge, ...]]]:
        """(function, region index, shortest call chain) of every region whose calls reach `fid`."""
        return self._region_chains.get(fid, [])

    @cached_property
    def reached_from_region_any(self) -> dict[str, set[str]]:
        """Function id -> stream ids of regions whose calls reach it (ignoring waits)."""
        return {fid: {self.stream_id(fn, fn.facts.regions[index]) for fn, index, _ in chains}
                for fid, chains in self._region_chains.items()}

    def only_side_stream(self, fid: str) -> str | None:
        """The one side stream `fid`'s body runs on when every call of it comes from regions of that stream (its
        `current_stream()` is that stream), else None."""
        if fid in self.runs_on_current_stream:
            return None
        streams = self.reached_from_region_any.get(fid, set())
        if len(streams) != 1 or UNKNOWN in streams or CURRENT_STREAM in streams:
            return None
        return next(iter(streams))

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
            guesses = sum(not e.exact for e in chain)
            for call, edges in self.calls_of(current):
                if call.region != NO_REGION:
                    continue
                for edge in edges:
                    if not edge.exact and guesses >= GUESSES_PER_CHAIN:
                        continue
                    if edge.callee not in seen and (edge_allowed is None or edge_allowed(current, call, edge)):
                        seen.add(edge.callee)
                        queue.append((edge.callee, chain + (edge,)))

    def performs_wait(self, fid: str) -> bool:
        """Whether calling `fid` orders the calling stream or host (a wait or sync in it or in a callee)."""
        return bool(performed(self, fid))

    def accesses(self) -> Iterator[tuple[Function, Access]]:
        for function in self.functions.values():
            for access in function.facts.accesses:
                yield function, access

    def accesses_in(self, function: Function) -> list[Access]:
        """The function's own accesses and those its calls make through the callees' parameters, in source order."""
        found = self._accesses_in.get(function.id)
        if found is None and not function.file.detailed and not function.facts.accesses:
            found = self._accesses_in[function.id] = []  # (bound_accesses binds nothing in a plain file either)
        if found is None:
            found = self._accesses_in[function.id] = sorted(
                self.own_accesses(function) + bound_accesses(self, function), key=lambda a: (a.line, a.column))
        return found

    def own_accesses(self, function: Function) -> list[Access]:
        """The function's own accesses, less the hand-off reads of calls the scan resolves (read there instead)."""
        def known(fid: str) -> bool:  # what the callee does to its parameters is in the facts
            callee = self.functions[fid]
            return callee.file.detailed or callee.facts.kernel

        return self.memo(("program.own", function.id), lambda: _without_resolved_handoffs(
            function, self.exact_edges_of(function.id), known))

    def all_accesses(self) -> Iterator[tuple[Function, Access]]:
        for function in self.functions.values():
            for access in self.accesses_in(function):
                yield function, access


def _without_resolved_handoffs(function: Function, exact_calls: Iterator[tuple[Call, list[Edge]]],
                               known: Callable[[str], bool]) -> list[Access]:
    """A local handed to code the scan holds (`self._num_bytes(t)`) is read where that code reads its parameter
    (bound_accesses), not at the call: the extraction's hand-off read (extract_calls.py `_handed_off`, made
    for code the scan does not see) is dropped there (a Triton kernel's loads are its reads, in any file). A callee
    in a file the prefilter passed over holds no access facts to read its parameters with: there a parameter
    annotated as a tensor keeps its hand-off read (what a detailed callee would make of it, extract_calls.py:
    vLLM's `tf32_hc_prenorm_gemm(x, ...)` of vllm/utils/deep_gemm.py hands `x` on to the kernel), other arguments
    do not (the helper may look at the shape only)."""
    accesses = function.facts.accesses
    if not accesses:
        return []  # (most functions: plain files hold no accesses; their calls need no look)
    kept = set(function.facts.tensor_params)
    exact_calls = list(exact_calls)
    resolved = {(call.callee.rsplit(".", 1)[-1], call.line) for call, _ in exact_calls}
    plain = {(call.callee.rsplit(".", 1)[-1], call.line) for call, edges in exact_calls
             if not any(known(edge.callee) for edge in edges)} if kept else set()
    if not resolved:
        return list(accesses)
    return [a for a in accesses if not (a.kind == "read" and not (a.path in kept and any(
        (a.op, line) in plain for line in range(a.line - HANDOFF_CALL_LINES, a.line + 1))) and any(
        (a.op, line) in resolved for line in range(a.line - HANDOFF_CALL_LINES, a.line + 1)))]

