"""SC104's keepalive query: a container that keeps tensors together with an event is emptied without waiting the
events first.

Code that hands a block to another stream and does not want to call `record_stream` keeps a reference to it,
together with an event recorded on that stream after its last use, in a container (FSDP2's
`reduce_scatter_states.append(ReduceScatterState(reduce_scatter_input, reduce_scatter_event))`, a stash of
`(activation, event)`). The reference is what keeps the caching allocator from handing the block out again, so
whoever drops an element (`oldest = states.pop(0)` ... `del oldest`, `states.clear()`, `del stash[k]`) must make
its stream wait the element's event first (`current_stream().wait_event(oldest.event)`), or block the host:
otherwise the block returns to its allocation stream's pool while the other stream may still read or write it.

Only pairs whose event the scan sees recorded on a side stream count (by the storing function, or by the one
scanned callee it got the event from: FSDP2's `foreach_reduce`), and not when the storing function calls
`record_stream` on the kept tensor (then the allocator itself waits for that stream, and the event is the
consumer's: DeepSpeed's forward stash). A drop counts as waited when the same function waits, synchronizes or
queries an event taken from an element of the container (for an element bound by a `pop`, anywhere in the
function; else before the drop), or blocks the host before the release (itself or in a call). Containers are
matched as the engine matches access paths (aliasing.py: `self.comm_ctx.reduce_scatter_states` in one class and
`self._comm_ctx.reduce_scatter_states` in another share the specific attribute name).
"""

from __future__ import annotations

from typing import Iterable, NamedTuple

from streamcheck.findings import ROLE_FREE, ROLE_WRITE, Finding

from .aliasing import access_keys
from .facts import Access
from .hazard_flow import host_blocked_between
from .orderings import event_id, recorded_streams
from .program import Function, Program
from .rule import location
from .streams import CURRENT_STREAM, UNKNOWN, display
from .summaries import translate


class Kept(NamedTuple):  # one row of FunctionFacts.kept_events (extract_keeps.py)
    how: str
    container: str
    element: str
    others: str
    line: int
    column: int


def drops_without_event_waits(program: Program, rule_id: str) -> Iterable[Finding]:
    pairs = []
    for function in program.functions.values():
        for pair in (Kept(*fact) for fact in function.facts.kept_events if fact[0] == "pair"):
            stream = _side(event_streams(program, function, pair))
            if stream and not _recorded(function, pair):
                pairs.append((function, pair, stream, _keys(program, function, pair)))
    if not pairs:
        return
    for function in program.functions.values():
        for drop in (Kept(*fact) for fact in function.facts.kept_events if fact[0] == "drop"):
            keys = _keys(program, function, drop)
            stored = [(storer, pair, stream) for storer, pair, stream, pair_keys in pairs if keys & pair_keys]
            if not stored or _waited(program, function, drop, keys):
                continue
            storer, pair, stream = min(stored, key=lambda s: (s[0].file.path, s[1].line, s[1].column))
            yield _finding(rule_id, function, drop, storer, pair, stream)


def _keys(program: Program, function: Function, fact: Kept) -> set[tuple]:
    return access_keys(program, function, Access("read", fact.container, fact.line, fact.column, ""))


def _recorded(function: Function, pair: Kept) -> bool:
    """The storing function records a kept tensor for some stream: the allocator keeps the block for it."""
    others = set(pair.others.split(",")) - {""}
    return any(u.how == "record_stream" and u.path in others for u in function.facts.uses)


def _waited(program: Program, function: Function, drop: Kept, keys: set[tuple]) -> bool:
    bound = bool(drop.element)
    for fact in (Kept(*f) for f in function.facts.kept_events if f[0] == "wait"):
        if (bound or fact.line <= drop.line) and keys & _keys(program, function, fact):
            return True
    end = _release(function, drop)[0]
    return host_blocked_between(program, function, function.facts.line, end + 1, set())


def _release(function: Function, drop: Kept) -> tuple[int, int]:
    """Where the dropped element's last reference goes: `del x` of a popped local, else the drop itself."""
    names = set(drop.element.split(",")) - {""}
    dels = [u for u in function.facts.uses if u.path in names and u.how == "free" and u.line > drop.line]
    if dels:
        first = min(dels, key=lambda u: (u.line, u.column))
        return first.start_line or first.line, first.start_column or first.column
    return drop.line, drop.column


def event_streams(program: Program, storer: Function, pair: Kept) -> frozenset[str]:
    """The streams the stored event may be recorded on: by the storing function, else by the scanned functions it
    calls before the store that record events (FSDP2's `foreach_reduce` returns its reduce-scatter event among
    others), in the storer's frame."""
    own = recorded_streams(program, event_id(program, storer, pair.element))
    if own:
        return own
    found = set()
    for call, edges in program.exact_edges_of(storer.id):
        if call.line > pair.line:
            continue
        for edge in edges:
            callee = program.functions[edge.callee]
            streams = {recorded for sync in callee.facts.syncs if sync.kind == "record"
                       for recorded in recorded_streams(program, event_id(program, callee, sync.receiver))}
            found |= {translate(program, storer, call, callee, s) for s in streams}
    return frozenset(found)


def _side(streams: frozenset[str]) -> str:
    """The one side stream the event is recorded on, "*" for several (a callee's events, some of them maybe on the
    current stream), "" when none is a side stream the scan can name."""
    side = streams - {UNKNOWN, CURRENT_STREAM}
    if not side:
        return ""
    return next(iter(side)) if streams == side and len(side) == 1 else "*"


def _finding(rule_id: str, function: Function, drop: Kept, storer: Function, pair: Kept, stream: str) -> Finding:
    line, column = _release(function, drop)
    element = f"`{drop.element.replace(',', ', ')}` is" if drop.element else "its elements are"
    named = "a side stream" if stream == "*" else f"`{display(stream)}`"
    return Finding(
        rule=rule_id,
        message=(f"`{drop.container}` keeps tensors together with an event recorded on {named} "
                 f"(`{pair.element}`, {storer.file.path}:{pair.line}), and {element} dropped here with no wait for "
                 f"that event: the allocator may hand the memory to new work while {named} still "
                 f"uses it"),
        primary=location(function, line, column, ROLE_FREE, f"release in {function.facts.qualname}"),
        related=(location(storer, pair.line, pair.column, ROLE_WRITE, f"kept with `{pair.element}`"),),
        fix=(f"Wait the element's event before dropping it: `torch.cuda.current_stream().wait_event(<element>."
             f"event)` before line {line} (for every element before a `clear()`)."),
        kind="FREE",
        symbol=function.facts.qualname,
        extra={"path": drop.container, "stream": "" if stream == "*" else display(stream), "event": pair.element},
    )
