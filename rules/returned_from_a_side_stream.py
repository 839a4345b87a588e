"""A tensor made on a side stream and returned to the caller, who uses it on the current stream.

A function that allocates a tensor inside `with stream(s):` and fills it there in place (`t = torch.empty(...)`,
`t.copy_(src, non_blocking=True)`: a buffer staged for the caller) hands it to its caller by returning it; the
caller, in the scan or outside it (autograd's unpack hook, a model's forward), uses it on the current stream. Two
edges are the function's to give before it returns:
- RAW (SC101): the current stream (or the host) waits for s after the fill (`current.wait_stream(s)`, a wait on an
  event recorded on s after it), else the caller's kernels may read the tensor before the fill lands. An event
  recorded on s after the fill and returned with the tensor is the caller's to wait; so is a wait that a caller in
  the scan makes after the call (races.ordered_after_return).
- FREE (SC104): `t.record_stream(current_stream())` (by the function or by a caller in the scan on the local it
  binds the result to), else once the caller frees it the block goes back to s's pool with the current stream's
  reads still queued, and s's next allocation (the function's next call) may overwrite it. A function whose side
  stream waits for the current stream before the allocation orders that next allocation after the earlier reads.
Only where the function itself gives the other edge (it records the tensor for the current stream, or it makes
the current stream wait for s) is the hand-over taken as its job and a missing edge judged: a function that does
neither leaves the hand-over to its callers (a prefetcher whose consumer waits for its stream where the scan may
not see it; outside_consumers.py and the main query judge those).
DeepSpeed's activation offload engine restores an offloaded activation this way for autograd
(`_ActivationOffloadEngine._restore_tensor`: `compute.wait_event(event)` and `gpu_tensor.record_stream(compute)`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator

from streamcheck.findings import ROLE_READ, ROLE_STREAM_CONTEXT, ROLE_WRITE, Finding, Location

from .facts import NO_REGION, RETURNED, Access, Region, Use
from .free_after_handoff import _may_be_current
from .orderings import recording_stream, site_stream
from .program import Function, Program
from .races import START, ordered_after_return, ordered_between
from .rule import insert_edit, location
from .streams import CURRENT_STREAM, DEFAULT_STREAM, PARAM, UNKNOWN, as_code, writable


@dataclass(frozen=True)
class Returned:
    """A local made inside region `region` (on side stream `stream`) of `function`, filled by `fill` there and
    returned by `out`."""

    function: Function
    path: str
    made: Use  # the binding that allocates it in the region
    fill: Access
    region: Region
    stream: str
    out: Use


def returned_from_side_streams(program: Program) -> Iterator[Returned]:
    for function in program.functions.values():
        facts = function.facts
        if not facts.regions:
            continue
        returns = [u for u in facts.uses if u.how == "escape" and u.arg == RETURNED and "." not in u.path]
        for use in facts.uses:
            if use.how != "rebind" or use.region == NO_REGION or not any(r.path == use.path for r in returns):
                continue
            stream = site_stream(program, function, use.region)
            if stream in (CURRENT_STREAM, UNKNOWN, DEFAULT_STREAM) or stream.startswith(PARAM):
                continue  # a stream the caller chooses is the caller's to order
            region = facts.regions[use.region]
            # filled in place after the allocation (`t = torch.empty(...)` then `t.copy_(src)`): a buffer the function
            # stages for its caller, not a kernel's result handed back as made (`return x.sum()`: SC104 leaves the
            # lifetime of such a result to the caller)
            fills = [a for a in facts.accesses if a.kind == "write" and a.path == use.path and a.region == use.region
                     and not a.fresh and a.line >= use.line]
            rebound = min((u.line for u in facts.uses if u.path == use.path and u.how == "rebind"
                           and u.line > region.end_line), default=facts.end_line + 1)
            outs = [r for r in returns if r.path == use.path and region.end_line < r.line < rebound]
            if fills and outs and _allocated_there(function, use):
                yield Returned(function, use.path, use, max(fills, key=lambda a: (a.line, a.column)), region,
                               stream, min(outs, key=lambda u: u.line))


def _allocated_there(function: Function, use: Use) -> bool:
    """The binding makes a new tensor (a factory, a kernel's output), not another name for an existing one."""
    return any(p.path == use.path and p.line == use.line and p.fresh for p in function.facts.placements) or any(
        a.path == use.path and a.fresh and a.line == use.line for a in function.facts.accesses)


def waited_here(program: Program, found: Returned) -> bool:
    """The function makes the current stream (or the host) wait for the fill's stream before the return."""
    fill = found.fill
    return ordered_between(program, found.function, (fill.line, fill.column), (found.out.line, found.out.column),
                           found.stream, CURRENT_STREAM)


def waited_for(program: Program, found: Returned) -> bool:
    """Waited here, or by a caller after the call, or an event recorded on the stream after the fill goes back
    with the tensor."""
    function, fill = found.function, found.fill
    if waited_here(program, found):
        return True
    returned = {u.path for u in function.facts.uses if u.how == "escape" and u.arg == RETURNED}
    if any(s.kind == "record" and s.receiver in returned and s.line > fill.line
           and recording_stream(program, function, s) == found.stream for s in function.facts.syncs):
        return True
    return ordered_after_return(program, function, found.stream, CURRENT_STREAM)


def recorded_here(program: Program, found: Returned) -> bool:
    """`record_stream` of the tensor for (what may be) the current stream in the function."""
    return any(u.how == "record_stream" and u.path == found.path and _may_be_current(program, found.function, u.arg)
               for u in found.function.facts.uses)


def kept_alive(program: Program, found: Returned) -> bool:
    """Recorded here, or by a caller in the scan on the local it binds the result to; or the side stream waits for
    the current stream before the allocation (its next allocation then follows the caller's earlier reads)."""
    function = found.function
    if recorded_here(program, found):
        return True
    if ordered_between(program, function, START, (found.made.line, 0), CURRENT_STREAM, found.stream):
        return True
    for caller, call in program.call_sites.get(function.id, ()):
        bound = {local for local, line, column in caller.facts.call_results
                 if (line, column) == (call.line, call.column)}
        if any(u.how == "record_stream" and u.path in bound and _may_be_current(program, caller, u.arg)
               for u in caller.facts.uses):
            return True
    return False


def returned_unwaited(program: Program, rule_id: str) -> Iterator[Finding]:
    """SC101's part: recorded for the current stream here (the hand-over is the function's), never waited for."""
    for found in _memo(program):
        if recorded_here(program, found) and not waited_for(program, found):
            yield _finding(program, rule_id, found, "RAW")


def returned_unrecorded(program: Program, rule_id: str) -> Iterator[Finding]:
    """SC104's part: waited for here (the hand-over is the function's), never kept alive for the current stream."""
    for found in _memo(program):
        if waited_here(program, found) and not kept_alive(program, found):
            yield _finding(program, rule_id, found, "FREE")


def _memo(program: Program) -> list[Returned]:
    return program.memo("returned_from_a_side_stream", lambda: list(returned_from_side_streams(program)))


def _finding(program: Program, rule_id: str, found: Returned, kind: str) -> Finding:
    function, fill, out, code = found.function, found.fill, found.out, as_code(found.stream)
    where = function.facts.qualname
    returned = f"returned by {where}: its caller uses it on the current stream"
    related: tuple[Location, ...] = (
        location(function, found.region.line, found.region.column, ROLE_STREAM_CONTEXT, f"switches to `{code}`"),
        location(function, out.line, out.column, ROLE_READ, returned))
    if kind == "RAW":
        message = (f"`{found.path}` is made and written by `{fill.op}` on stream `{code}` and returned by `{where}` "
                   f"to its caller, which uses it on the current stream; the current stream never waits for "
                   f"`{code}` before the return")
        fix = (f"Make the current stream wait before returning: `torch.cuda.current_stream().wait_stream({code})` "
               f"(or wait on an event recorded on `{code}` after the write) before the return at line {out.line}.")
        primary = location(function, fill.line, fill.column, ROLE_WRITE, f"{fill.op} in {where}")
        statement = f"torch.cuda.current_stream().wait_stream({code})"
    else:
        message = (f"`{found.path}` is allocated on stream `{code}` and returned by `{where}` to its caller, which "
                   f"uses it on the current stream, with no `{found.path}.record_stream(current_stream())`: once "
                   f"the caller frees it, the allocator may give its memory to `{code}`'s next allocation while "
                   f"the current stream still uses it")
        fix = (f"Call `{found.path}.record_stream(torch.cuda.current_stream())` before the return at line "
               f"{out.line}.")
        primary = location(function, out.line, out.column, ROLE_READ, returned)
        statement = f"{found.path}.record_stream(torch.cuda.current_stream())"
        made = found.made
        related = (location(function, made.start_line or made.line, made.start_column or made.column, ROLE_WRITE,
                            f"allocated on `{code}`"), related[0])
    extra = {"path": found.path, "writer_stream": code, "reader_stream": "", "consumer": "caller",
             "producer": "device op"}
    if writable(code):  # for --fix: right before the return
        extra["fix_edit"] = insert_edit(function, out.line, out.column, statement,
                                        f"before the return at line {out.line}")
    return Finding(rule=rule_id, message=message, primary=primary, related=related, fix=fix, kind=kind,
                   symbol=where, extra=extra)
