"""SC104's hand-over query: tensors allocated on a side stream are kept in a container together with an event recorded
there, another stream waits that event and uses them, and nothing records them for that stream.

The mirror of the keepalive (kept_with_events.py). vLLM's PPHandler.receive allocates `sampled_tokens` and
`combined` inside `with torch.cuda.stream(self.broadcast_stream):`, receives into them, records
`event = self.broadcast_stream.record_event()` and keeps `PendingRecv(event, sampled_tokens, num_sampled, ...)` in
`self.queue`; `get_prev_sampled_outputs` pops an element, makes the main stream wait its event and hands the
tensors to the model. The event is what orders the main stream's reads after the receive; it says nothing to the
caching allocator. The blocks belong to the side stream's pool: once the consumer drops them, the next allocation
on the side stream may take a block and write it while the main stream's reads are still queued. So the storing
function must call `t.record_stream(<consumer stream>)` (vLLM does, with the comment "Must record_stream since these
were allocated on broadcast stream but later used on the main stream").

Reported, at the store, for each kept tensor (or a view of one: `num_sampled, num_rejected = combined.unbind(0)`)
allocated inside a region of the one side stream the kept event is recorded on, when some other function waits
(or synchronizes) an event taken from an element of the same container on another stream with the element's tensors
at hand (a waiter that takes out only the event, `_, ev = C[k]`, waits to drop the stash, not to use it: TRL's
activation offload), and the storing function records neither the tensor nor its base for any stream.
"""

from __future__ import annotations

from typing import Iterable, Iterator

from streamcheck.findings import ROLE_FREE, ROLE_SYNC, ROLE_WRITE, Finding

from .kept_with_events import Kept, _keys, _side, event_streams
from .orderings import named_stream, site_stream
from .program import Function, Program
from .rule import location
from .streams import display

# Methods whose results share the receiver's storage (`a, b = t.unbind(0)`): keeping them keeps its block.
VIEW_METHODS = frozenset({"unbind", "split", "chunk", "view", "narrow", "tensor_split", "view_as", "reshape",
                          "flatten", "squeeze", "unsqueeze", "transpose", "t", "permute", "expand"})


def kept_from_side_streams(program: Program, rule_id: str) -> Iterable[Finding]:
    waits = [(function, Kept(*fact)) for function in program.functions.values()
             for fact in function.facts.kept_events if fact[0] == "wait" and fact[3] == "tensors"]
    if not waits:
        return
    for function in program.functions.values():
        for pair in (Kept(*fact) for fact in function.facts.kept_events if fact[0] == "pair"):
            side = _side(event_streams(program, function, pair))
            if not side or side == "*":
                continue
            keys = _keys(program, function, pair)
            waiter = next(((other, wait) for other, wait in waits if other is not function
                           and keys & _keys(program, other, wait) and _waiting_stream(program, other, wait) != side),
                          None)
            if waiter is None:
                continue
            for name, base, line in _side_allocated(program, function, pair, side):
                yield _finding(rule_id, function, pair, name, base, line, side, waiter)


def _side_allocated(program: Program, function: Function, pair: Kept, side: str) -> Iterator[tuple[str, str, int]]:
    """(kept name, the tensor it shares storage with, its allocation line) for each kept tensor the function
    allocated inside a region of `side` and records for no stream."""
    recorded = {u.path for u in function.facts.uses if u.how == "record_stream"}
    seen = set()  # one finding per block: two views of one tensor (`a, b = t.unbind(0)`) keep one block
    for name in dict.fromkeys(n for n in pair.others.split(",") if n):
        base = _view_base(function, name, pair.line)
        if name in recorded or base in recorded or base in seen:
            continue
        seen.add(base)
        for placement in function.facts.placements:
            if placement.path == base and placement.fresh and 0 <= placement.region and placement.line < pair.line \
                    and program.stream_id(function, function.facts.regions[placement.region]) == side:
                yield name, base, placement.line
                break


def _view_base(function: Function, name: str, before: int) -> str:
    """The local `name` is a view of (`a, b = t.unbind(0)`, `v = t.view(-1)`: `t`), else `name` itself."""
    calls = {(c.line, c.column): c.callee for c in function.facts.calls}
    for row in function.facts.handle_flow:
        if row[0] == "unpack" and name in row[1] and row[4] < before:
            spot = (row[2], row[3])
        elif row[0] == "bind" and row[1] == name and row[3] < before and len(row[2]) == 1 and row[2][0][0] == "call":
            spot = (row[2][0][1], row[2][0][2])
        else:
            continue
        receiver, _, method = calls.get(spot, "").rpartition(".")
        if method in VIEW_METHODS and receiver.isidentifier():
            return receiver
    return name


def _waiting_stream(program: Program, function: Function, wait: Kept) -> str:
    """The stream a wait on an element's event orders (`s.wait_event(e)`: s), else the function's current one (a
    host wait: the code after it runs there)."""
    for sync in function.facts.syncs:
        if sync.line == wait.line and sync.kind == "wait_event":
            return named_stream(program, function, sync.receiver, site_stream(program, function, sync.region))
    return site_stream(program, function, -1)


def _finding(rule_id: str, function: Function, pair: Kept, name: str, base: str, line: int, side: str,
             waiter: tuple[Function, Kept]) -> Finding:
    other, wait = waiter
    what = f"`{name}`" + (f" (a view of `{base}`)" if base != name else "")
    return Finding(
        rule=rule_id,
        message=(f"{what} is allocated on `{display(side)}` and kept in `{pair.container}` with the event "
                 f"`{pair.element}` recorded there, which `{other.facts.qualname}` waits before using the tensors "
                 f"on another stream; nothing records `{base}` for that stream, so once the consumer drops it the "
                 f"block goes back to `{display(side)}`'s pool while the other stream's reads may still be queued"),
        primary=location(function, pair.line, pair.column, ROLE_FREE, f"handed on with `{pair.element}`, unrecorded"),
        related=(location(function, line, 1, ROLE_WRITE, f"`{base}` allocated on `{display(side)}`"),
                 location(other, wait.line, wait.column, ROLE_SYNC, "waits the element's event")),
        fix=(f"Call `{base}.record_stream(<consumer stream>)` (the stream that waits the event, e.g. the main "
             f"stream captured before the region) after its last use on `{display(side)}` and before line "
             f"{pair.line}."),
        kind="FREE",
        symbol=function.facts.qualname,
        extra={"path": base, "stream": display(side), "event": pair.element},
    )
