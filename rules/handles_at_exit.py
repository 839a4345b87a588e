"""Async handles left behind at a function's end while the caller's tensors are still in flight (SC105).

A function that launches an async collective or a point-to-point op on a tensor its caller can see (a parameter, an
element of a parameter's container, a `self.` attribute, a tensor it returns or puts in a container it returns) and
then returns, along the path that falls off its end,
without waiting the handle and without handing the handle on (returning it, storing it, passing it to a call),
gives its caller a tensor that the communication stream still writes (a receive, an all-gather's output) or reads
(a send): nothing can wait for it any more. DeepSpeed's `all_gather_coalesced(..., async_op=False)` wrapper and
Megatron's `recv_from_prev_pipeline_rank_` are of this kind: their `req.wait()` before returning is the only edge.

Waits and hand-offs inside a block that returns first (`if async_op: return reqs[-1]`; unless the launch is in that
block too: ZeRO-3's `return AllReduceCoalescedHandle(handle=handle, ...)`), or in the other arm of the
launch's if/else (vLLM's `broadcast_tensor_dict` waits its sends in one arm, its receives in the other), are on no
path to the end;
iterating the handles (`for req in reqs: pass`) or testing one (`h is not None`) hands nothing on.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator

from streamcheck.findings import ROLE_READ, ROLE_WRITE, Finding

from .extract_handles import BATCH_P2P, P2P_SEND
from .extract_pairs import EVENT_RECORD
from .facts import RETURNED, AsyncWork, exclusive
from .program import Function, Program
from .races import exits_before
from .returned_handles import returned_works
from .rule import location
from .summaries import argument_for
from .travelling_handles import MENTIONS


@dataclass(frozen=True)
class LeftInFlight:
    function: Function
    work: AsyncWork
    tensor: str  # the caller's tensor in flight: a parameter's path or alias, or a `self.` path


def left_in_flight(program: Program, waited_by_call) -> Iterator[LeftInFlight]:
    """Every work whose handle is a plain local of its function that nothing waits or hands on after the launch
    on the way to the function's end, with one of its tensors visible to the caller."""
    for function in program.functions.values():
        facts = function.facts
        end = facts.end_line
        # its own launches, and those of callees that return their handles to a list it binds (returned_handles.py)
        for work in facts.async_works + returned_works(
                program, function, lambda launcher, launched: _param_of(program, launcher, launched)):
            if work.op == EVENT_RECORD:
                continue  # an event taken with its tensor: only a touch before its wait is reported (SC105)
            if not work.handle or "." in work.handle or work.handle.startswith("(") and not _looped(work.handle):
                continue  # dropped (or not seen where it went), or stored on an object: it travels
            tensor = _visible(function, work) or _from_argument(program, function, work)
            if tensor is None:
                continue
            handles = {work.handle} | {u.arg for u in facts.uses if u.path == work.handle and u.how == "escape"}
            # `reqs.append(handle)` records the handle's escape into `reqs`, and its escape as an argument: both
            # only put it in a list this function made (`reqs = []`; not a global, not a parameter)
            bound = {u.path for u in facts.uses if u.how == "rebind" and u.line <= work.line} - set(facts.params)
            into_lists = {(u.line, u.column) for u in facts.uses
                          if u.path == work.handle and u.how == "escape" and u.arg in bound}
            # launched in a block that returns first: its own hand-offs there (`return Handle(handle=h)`) count
            early = exits_before(function, work.line, end)
            settled = any(u.path in handles and u.line >= work.line and u.how != "rebind"
                          and not (u.how == "read" and u.arg in MENTIONS)  # `for r in reqs`, `h is None`
                          and not (u.path == work.handle and (u.line, u.column) in into_lists)
                          and (early or not exits_before(function, u.line, end))
                          and not exclusive(facts, work.line, u.line) for u in facts.uses)  # the other arm's wait
            if settled or waited_by_call(program, function, work.end_line, end + 1):
                continue
            yield LeftInFlight(function, work, tensor)


def single_handle(facts, work: AsyncWork) -> str:
    """The work's handle when it names one handle (`h`, `self._work`); "" for a list of them (`reqs` of a batch,
    `handles` the launch was appended to, made before it), whose wait is a loop, not `reqs.wait()`."""
    if not work.handle or work.handle.startswith("(") or work.op in (BATCH_P2P, P2P_SEND) and "." not in work.handle:
        return ""
    made_before = any(u.path == work.handle and u.how == "rebind" and u.line < work.line for u in facts.uses)
    return "" if made_before else work.handle


def wait_text(facts, work: AsyncWork) -> str:
    """How to wait the work's handle(s), the start of a finding's fix line."""
    if single_handle(facts, work):
        return f"Call `{work.handle}.wait()`"
    if _looped(work.handle) or not work.handle:
        return "Wait each of its handles"
    return f"Wait each handle in `{work.handle}` (`for h in {work.handle}: h.wait()`)"


def _looped(handle: str) -> bool:
    """`for req in dist.batch_isend_irecv(ops)`: the handles only the loop holds (extract_hazards names them)."""
    return handle.startswith("(iter@")


def _visible(function: Function, work: AsyncWork) -> str | None:
    """The first of the work's tensors (or the paths holding them) that the caller can see: a parameter's, a
    `self.` path, or one the function returns (`tensor_dict[key] = buf; return tensor_dict`: the caller reads what
    the receive still writes)."""
    params = set(function.facts.params) - {"self", "cls"}
    paths = work.tensors + work.aliases
    for path in paths:
        if path.startswith("self.") or path.split(".", 1)[0] in params:
            return path
    facts = function.facts
    if exits_before(function, work.line, facts.end_line):
        return None  # launched in a block that returns first: what it returns there comes after its own waits
    returned = {u.path for u in facts.uses if u.how == "escape" and u.arg == RETURNED}
    return next((path for path in paths if path in returned), None)


def _from_argument(program: Program, function: Function, work: AsyncWork) -> str | None:
    """The first of the work's paths that holds parts of the caller's own tensors by way of a helper: a local bound
    from a call (`metadata, tensors = split(tensor_dict)`, `for t in tensors`) that hands back, at that position,
    what it took out of the parameter the function passes one of its own parameters (or `self.` paths) to."""
    found = _argument_source(program, function, work)
    return found[0] if found else None


def _param_of(program: Program, function: Function, work: AsyncWork) -> str | None:
    """The parameter of `function` (not self) that the work's tensor is, or is part of (directly or through a
    helper, as in _from_argument)."""
    params = set(function.facts.params) - {"self", "cls"}
    for path in work.tensors + work.aliases:
        if path.split(".", 1)[0] in params:
            return path.split(".", 1)[0]
    found = _argument_source(program, function, work)
    root = found[1].split(".", 1)[0] if found else ""
    return root if root in params else None


def _argument_source(program: Program, function: Function, work: AsyncWork) -> tuple[str, str] | None:
    """(the local, the function's own argument path it holds parts of) for _from_argument."""
    facts = function.facts
    params = set(facts.params) - {"self", "cls"}
    paths = set(work.tensors + work.aliases)
    results: dict[tuple[int, int], list[tuple[str, int]]] = {}  # the call's (line, column) -> (local, position)
    for row in facts.handle_flow:
        if row[0] == "unpack":
            results.setdefault((row[2], row[3]), []).extend(
                (name, position) for position, name in enumerate(row[1]) if name in paths)
        elif row[0] == "bind" and row[1] in paths:
            for operand in row[2]:
                if operand[0] == "call":
                    results.setdefault((operand[1], operand[2]), []).append((row[1], -1))
    if not results:
        return None
    for call, edges in program.calls_of(function.id):
        for local, position in results.get((call.line, call.column), ()):
            for edge in edges:
                callee = program.functions.get(edge.callee)
                if callee is None:
                    continue
                for param in _returned_parts(callee, position):
                    arg = argument_for(callee, call, param)
                    if arg and (arg.startswith("self.") or arg.split(".", 1)[0] in params):
                        return local, arg
    return None


def _returned_parts(callee: Function, position: int) -> set[str]:
    """The parameters of `callee` whose elements (or themselves) it returns at `position` (-1: the only value):
    `for v in d.values(): out.append(v)` ... `return meta, out` hands back parts of `d` at position 1."""
    rows = callee.facts.handle_flow
    params = set(callee.facts.params) - {"self", "cls"}
    taken = {r[1]: {o[1] for o in r[2] if o[0] in ("take", "name") and o[1] in params}
             for r in rows if r[0] == "bind"}
    parts: dict[str, set[str]] = {name: set(sources) for name, sources in taken.items() if sources}
    for r in rows:
        if r[0] == "store":
            for o in r[3]:
                if o[0] == "name":
                    parts.setdefault(r[1], set()).update(parts.get(o[1], set()) | ({o[1]} & params))
    found: set[str] = set()
    index = 0 if position == -1 else position
    for r in rows:
        if r[0] != "return" or (len(r[1]) == 1) != (position == -1) or index >= len(r[1]):
            continue  # (a single value bound whole, or a tuple taken apart by position)
        for o in r[1][index]:
            if o[0] == "name":
                found |= parts.get(o[1], set()) | ({o[1]} & params)
    return found


def finding(rule: str, left: LeftInFlight) -> Finding:
    function, work, facts = left.function, left.work, left.function.facts
    sends = work.op == P2P_SEND
    effect = "reads" if sends else "writes"
    hazard = "overwrite" if sends else "read"
    what = f"the tensors of the ops in `{left.tensor}`" if not work.tensors else f"`{left.tensor}`"
    handle = "the handles only its loop holds are" if _looped(work.handle) else f"`{work.handle}` is"
    return Finding(
        rule=rule,
        message=(f"{facts.qualname} returns while the async `{work.op}` (line {work.line}) still {effect} "
                 f"{what}, which its caller holds: {handle} neither waited nor handed on, so nothing orders "
                 f"the caller's next {hazard} after it"),
        primary=location(function, work.line, work.column, ROLE_READ if sends else ROLE_WRITE,
                         f"{work.op}(...) on `{left.tensor}` in {facts.qualname}"),
        related=(location(function, facts.end_line, 1, ROLE_READ if not sends else ROLE_WRITE,
                          f"the end of {facts.qualname}: the caller goes on with `{left.tensor}`"),),
        fix=f"{wait_text(facts, work)} before {facts.qualname} returns, or return the handles to the caller.",
        kind="WAR" if sends else "RAW",
        symbol=facts.qualname,
        # no "handle": the wait goes at the function's end, not before the launch (no derived --fix)
        extra={"path": left.tensor, "left_in_flight": work.handle, "collective": work.op},
    )
