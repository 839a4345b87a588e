"""Async handles left behind at a function's end while the caller's tensors are still in flight (SC105).

A function that launches an async collective or a point-to-point op on a tensor its caller can see (a parameter, an
element of a parameter's container, a `self.` attribute) and then returns, along the path that falls off its end,
without waiting the handle and without handing the handle on (returning it, storing it, passing it to a call),
gives its caller a tensor that the communication stream still writes (a receive, an all-gather's output) or reads
(a send): nothing can wait for it any more. DeepSpeed's `all_gather_coalesced(..., async_op=False)` wrapper and
Megatron's `recv_from_prev_pipeline_rank_` are of this kind: their `req.wait()` before returning is the only edge.

Waits and hand-offs inside a block that returns first (`if async_op: return reqs[-1]`) are on no path to the end;
iterating the handles (`for req in reqs: pass`) or testing one (`h is not None`) hands nothing on.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator

from streamcheck.findings import ROLE_READ, ROLE_WRITE, Finding

from .extract_handles import BATCH_P2P, P2P_SEND
from .extract_pairs import EVENT_RECORD
from .facts import AsyncWork
from .program import Function, Program
from .races import exits_before
from .rule import location
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
        for work in facts.async_works:
            if work.op == EVENT_RECORD:
                continue  # an event taken with its tensor: only a touch before its wait is reported (SC105)
            if not work.handle or "." in work.handle or work.handle.startswith("(") and not _looped(work.handle):
                continue  # dropped (or not seen where it went), or stored on an object: it travels
            tensor = _visible(function, work)
            if tensor is None:
                continue
            handles = {work.handle} | {u.arg for u in facts.uses if u.path == work.handle and u.how == "escape"}
            # `reqs.append(handle)` records the handle's escape into `reqs`, and its escape as an argument: both
            # only put it in a list this function made (`reqs = []`; not a global, not a parameter)
            bound = {u.path for u in facts.uses if u.how == "rebind" and u.line <= work.line} - set(facts.params)
            into_lists = {(u.line, u.column) for u in facts.uses
                          if u.path == work.handle and u.how == "escape" and u.arg in bound}
            settled = any(u.path in handles and u.line >= work.line and u.how != "rebind"
                          and not (u.how == "read" and u.arg in MENTIONS)  # `for r in reqs`, `h is None`
                          and not (u.path == work.handle and (u.line, u.column) in into_lists)
                          and not exits_before(function, u.line, end) for u in facts.uses)
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
    """The first of the work's tensors (or the paths holding them) that the caller can see."""
    params = set(function.facts.params) - {"self", "cls"}
    for path in work.tensors + work.aliases:
        if path.startswith("self.") or path.split(".", 1)[0] in params:
            return path
    return None


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
