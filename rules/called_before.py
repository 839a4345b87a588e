"""An access reached through a call that the other access's function makes before it: their order on that way.

`unordered` (races.py) judges two accesses of two function bodies without a known order: an ordering anywhere on
the writer's side after the write, or on the reader's side before the read, in any caller, counts. Where the
writer's function itself calls, before its write, a function that reaches the earlier access (ZeRO-1/2's gradient
hook reduces the full IPG bucket on the reduction stream, `reduce_ipg_grads` -> `average_tensor`, then copies its
gradient into the bucket), the order on that way is known: the earlier access, then the rest of each function on
the way down, then the writer's function up to its write. Only an ordering there orders the pair on that way; the
backward epilogue's device synchronize after its own call of `reduce_ipg_grads` is another way, where no write of
this call follows.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .aliasing import access_keys, derived_paths, self_key
from .callgraph import Function
from .extract_paths import split_index
from .facts import NO_REGION, exclusive
from .races import END, Context, Position, event_handed_off, exits_before, ordered_between
from .streams import CURRENT_STREAM
from .summaries import argument_for

if TYPE_CHECKING:
    from .program import Program

WAY_DEPTH = 4  # how many calls down from the writer's function the earlier access's function is looked for


def unordered_on_the_way_down(program: "Program", earlier: Context, later: Context) -> bool | None:
    """None where `later`'s function does not reach `earlier` through a call (outside stream regions) made before
    `later` (this is not the shape); else whether some such way leaves the pair unordered. `later` is an access
    made directly in its function, on its current stream."""
    ways = _ways(program, earlier, later)
    if ways is None:
        return None
    return unordered_way_down(program, earlier, later) is not None


def unordered_way_down(program: "Program", earlier: Context, later: Context
                       ) -> list[tuple[Function, Position, str]] | None:
    """The first way down from `later`'s function to `earlier` that leaves the pair unordered, as (function, call
    position, callee id) from the writer's call down; None where every way orders it (or there is none)."""
    top = earlier.region_fn or earlier.function
    start = (earlier.chain[0].call.line, earlier.chain[0].call.column) if earlier.chain else earlier.position
    consumers = frozenset({later.function.id})
    for way in _ways(program, earlier, later) or ():
        if not _ordered_on(program, way, top, start, later.position, earlier.stream, later.stream, consumers):
            return way
    return None


def _ways(program: "Program", earlier: Context, later: Context) -> list | None:
    if later.chain or later.stream != CURRENT_STREAM or later.access.region != NO_REGION \
            or " in " in later.access.op:
        return None  # (a write a callee makes, bound at its call, runs where the callee runs it)
    top = earlier.region_fn or earlier.function
    if top is later.function or not program.reaches(later.function.id, frozenset({top.id})):
        return None
    ways = program.memo(("called_before.ways", later.function.id, later.position, top.id),
                        lambda: list(_ways_down(program, later.function, later.position, top.id)))
    return [way for way in ways if _hands_over(program, way, top, earlier, later)] or None


def _hands_over(program: "Program", way, top: Function, earlier: Context, later: Context) -> bool:
    """Whether the way's last call hands `top` the written tensor, where the earlier access is `top`'s own access
    to one of its parameters: `reduce_ipg_grads` calls `average_tensor(bucket.buffer[...].narrow(...))` for the
    bucket and `average_tensor(extra_large_grad)` for an oversized gradient, and only the first reads the bucket
    the hook refills. Any way does for another access (an attribute: the same on every way)."""
    root, dot, rest = earlier.access.path.partition(".")
    if earlier.chain or root not in top.facts.params or root in ("self", "cls"):
        return True
    caller, at, _ = way[-1]
    written = access_keys(program, later.function, later.access)
    for call, edges in program.calls_of(caller.id):
        if (call.line, call.column) == at and any(edge.callee == top.id for edge in edges):
            arg = argument_for(top, call, root)
            if arg is None:
                return True  # (a default or a value the lint does not follow: not told apart)
            path = split_index(arg)[0] + dot + rest
            return not written.isdisjoint(
                {self_key(program, caller, p) for p in derived_paths(caller, path, call.line)
                 if p.split(".", 1)[0] == "self" and p.count(".") > 1})
    return True


def _ways_down(program: "Program", writer: Function, before: Position, target: str):
    """Each way from a call of `writer` before `before` down to `target`: the list of (function, call position,
    callee id), the writer's call first; calls inside stream regions are not followed (their current stream is
    another)."""
    def down(function: Function, limit: Position, depth: int, way: list):
        for call, edges in program.calls_of(function.id):
            at = (call.line, call.column)
            if at >= limit or call.region != NO_REGION or limit != END and (
                    exclusive(function.facts, call.line, limit[0]) or exits_before(function, call.line, limit[0])):
                continue
            for edge in edges:
                if not edge.exact or edge.callee not in program.functions:
                    continue
                here = way + [(function, at, edge.callee)]
                if edge.callee == target:
                    yield here
                elif depth > 1 and program.reaches(edge.callee, frozenset({target})):
                    yield from down(program.functions[edge.callee], END, depth - 1, here)

    yield from down(writer, before, WAY_DEPTH, [])


def _ordered_on(program: "Program", way: list[tuple[Function, Position, str]], top: Function, start: Position,
                write_at: Position, earlier: str, later: str, consumers: frozenset[str]) -> bool:
    """An ordering after the earlier access in its function, after the call in each function of the way below
    the writer's, or in the writer's function between its call and its write."""
    (writer, call_at, _), below = way[0], way[1:]
    steps = [(top, start, END)] + [(fn, at, END) for fn, at, _ in reversed(below)]
    for function, after, before in steps:
        if ordered_between(program, function, after, before, earlier, later) \
                or event_handed_off(program, function, after, earlier, later, consumers):
            return True
    return ordered_between(program, writer, call_at, write_at, earlier, later)
