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

The same containers carry a write-after-read (SC106's arm, `taken_without_event_waits`): a tensor a side stream
reads (the source of DeepSpeed's D2H offload copy, `cpu_tensor.copy_(tensor)` on `s1`), kept with an event recorded
on that stream after the read (`self._fwd_stash[i] = (tensor, self.s1.record_event())`), is taken back out
(`tensor, event = self._fwd_stash.pop(i)`) and written, or returned to the caller, which may write it in place,
with no wait for that event: the current stream's write may land before the side stream's read. The event is the
only ordering there is; `record_stream` on the kept tensor keeps the block from the allocator, it orders no write.
The wait counts as for a drop (above); a local the element's event is bound to again (`ev = event`) is the element.
"""

from __future__ import annotations

from typing import Iterable, NamedTuple

from streamcheck.findings import ROLE_FREE, ROLE_READ, ROLE_WRITE, Finding

from .aliasing import access_keys
from .facts import NO_REGION, Access
from .hazard_flow import host_blocked_between
from .orderings import event_id, recorded_streams, site_stream
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


def taken_without_event_waits(program: Program, rule_id: str) -> Iterable[Finding]:
    """SC106's arm: a kept tensor its side stream read before the event was recorded, taken out of the container
    and written (or returned to the caller) with no wait for the event."""
    pairs = []
    for function in program.functions.values():
        for pair in (Kept(*fact) for fact in function.facts.kept_events if fact[0] == "pair"):
            stream = _side(event_streams(program, function, pair))
            read = _side_read(program, function, pair, stream) if stream else None
            if read is not None:
                pairs.append((function, pair, stream, read, _keys(program, function, pair)))
    if not pairs:
        return
    for function in program.functions.values():
        for take in (Kept(*fact) for fact in function.facts.kept_events if fact[0] == "drop" and fact[2]):
            keys = _keys(program, function, take)
            stored = [(storer, pair, stream, read) for storer, pair, stream, read, pair_keys in pairs
                      if keys & pair_keys]
            if not stored:
                continue
            tensors = [name for name in take.element.split(",") if not _names_an_event(name)]
            stream = stored[0][2]
            use = _later_use(program, function, take, tensors, stream)
            if use is None or _waited(program, function, take, keys):
                continue
            storer, pair, stream, read = min(stored, key=lambda s: (s[0].file.path, s[1].line, s[1].column))
            yield _war_finding(rule_id, function, take, use, storer, pair, stream, read)


def _names_an_event(name: str) -> bool:
    last = name.lower()
    return last.endswith("event") or last == "ev"


def _side_read(program: Program, storer: Function, pair: Kept, stream: str) -> Access | None:
    """The storer's read of a kept tensor on the event's stream, before the pair is stored."""
    others = set(pair.others.split(",")) - {""}
    for access in storer.facts.accesses:
        if access.kind == "read" and access.path in others and access.line <= pair.line \
                and access.region != NO_REGION and stream in ("*", site_stream(program, storer, access.region)):
            return access
    return None


def _later_use(program: Program, function: Function, take: Kept, tensors: list[str], stream: str
               ) -> tuple[int, int, str] | None:
    """(line, column, what) of the first write of a taken tensor after the take on another stream than the side
    stream, else of the take itself when the function returns the tensor to its caller; None for neither."""
    # (a write through a local taken out of a `self.` container is filed under the container's path)
    paths = {take.container, *tensors}
    writes = [a for a in function.facts.accesses if a.kind == "write" and a.line > take.line
              and any(a.path == path or a.path.startswith(path + ".") for path in paths)
              and site_stream(program, function, a.region) != stream]
    if writes:
        first = min(writes, key=lambda a: (a.line, a.column))
        return first.line, first.column, f"written by `{first.op}`"
    returned = [name for name in tensors if name in function.facts.returned]
    if returned:
        return take.line, take.column, "returned to the caller"
    return None


def _war_finding(rule_id: str, function: Function, take: Kept, use: tuple[int, int, str], storer: Function,
                 pair: Kept, stream: str, read: Access) -> Finding:
    line, column, what = use
    named = "a side stream" if stream == "*" else f"`{display(stream)}`"
    tensors = ", ".join(f"`{name}`" for name in take.element.split(",") if not _names_an_event(name))
    event = next((name for name in take.element.split(",") if _names_an_event(name)), "")
    wait = f"torch.cuda.current_stream().wait_event({event or '<element>.event'})"
    return Finding(
        rule=rule_id,
        message=(f"{tensors} is taken out of `{take.container}`, where it is kept with an event recorded on {named} "
                 f"after {named} read it (`{read.op}` in {storer.facts.qualname}), and {what} with no wait for that "
                 f"event: the current stream may overwrite it while {named} still reads it"),
        primary=location(function, line, column, ROLE_WRITE, f"{what} in {function.facts.qualname}"),
        related=(location(storer, read.line, read.column, ROLE_READ, f"{read.op} in {storer.facts.qualname}"),
                 location(storer, pair.line, pair.column, ROLE_WRITE, f"kept with `{pair.element}`")),
        fix=f"Wait the element's event once it is taken out: `{wait}` after line {take.line}.",
        kind="WAR",
        symbol=function.facts.qualname,
        extra={"path": take.container, "writer_stream": "", "other_stream": "" if stream == "*" else display(stream),
               "event": pair.element},
    )
