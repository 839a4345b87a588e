"""Side-stream writes handed back to the current stream that a function waits for on one way out and not on the
other.

A function that calls code writing on a side stream s (FSDP's `_unshard(state, handle, state._unshard_stream,
...)`, whose all-gather fills the flat parameter under `with stream(unshard_stream):`) and then returns to code
the scan does not see (a module's forward after a pre-forward hook) hands the written tensor to that code, on the
current stream. Where the function makes the current stream wait for s in one arm of an if/else after the call
(`current_stream.wait_event(state._unshard_event)`) and the other arm orders nothing (the `else` lost its
`current_stream.wait_stream(state._unshard_stream)`), the way out through the other arm hands the tensor over
unordered. The function's own wait says the hand-over needs one; a function that waits for s on no way at all
hands the write on to another consumer (a prefetch, waited by the next hook) and is not judged here.
Writes count when they touch what outlives the call (aliasing.from_outside), in the function's own region or in
one of its direct callee's (through the call chain into the region), with the stream bound to the call's
argument (summaries.translate).
"""

from __future__ import annotations

from typing import Iterable, Iterator

from streamcheck.findings import ROLE_CALL, ROLE_SYNC, ROLE_WRITE, Finding

from .aliasing import from_outside
from .collectives import launched_async
from .extract import ALIAS
from .facts import NO_REGION, Access
from .orderings import ordered_by
from .program import Function, Program
from .races import END, Context, contexts, ways_through_branches, window_between
from .rule import handed_out_extra, location, way_of
from .streams import CURRENT_STREAM, UNKNOWN, display, stream_words
from .summaries import translate

Branch = tuple[int, int, int, int]


def side_stream_writes_of_outliving_tensors(program: Program) -> Iterator[tuple[Function, Access, Context]]:
    """Each write, in a context on a named side stream reached through a region, of a tensor that outlives its
    function (aliasing.from_outside), not fresh, not an async collective's: what may be handed back unordered."""
    for writer, write in program.all_accesses():
        if write.kind != "write" or write.op == ALIAS or write.fresh or launched_async(writer, write) \
                or not from_outside(program, writer, write):
            continue
        for ctx in contexts(program, writer, write):
            if ctx.stream not in (CURRENT_STREAM, UNKNOWN) and ctx.region_fn is not None:
                yield writer, write, ctx


def writes_waited_on_one_way(program: Program, rule_id: str) -> Iterable[Finding]:
    found: dict[tuple, tuple] = {}  # (function, position, branch) -> the first write handed out there
    for writer, write, ctx in side_stream_writes_of_outliving_tensors(program):
        if handed_on(program, ctx):
            continue
        for function, position, stream in _ways_out(program, ctx):
            branch = _unordered_arm(program, function, position, stream)
            if branch is not None:
                # one finding per way out: the write on the stream the arm's wait names, then the nearest
                key = (function.id, position, branch)
                rank = (not _named(program, function, position, stream), len(ctx.chain), writer.file.path,
                        write.line, write.column, write.path)
                if key not in found or rank < found[key][0]:
                    found[key] = (rank, function, position, stream, branch, writer, write, ctx)
    for key in sorted(found):
        _rank, function, position, stream, branch, writer, write, ctx = found[key]
        yield _finding(program, rule_id, function, position, stream, branch, writer, write, ctx)


def _ways_out(program: Program, ctx: Context) -> Iterable[tuple[Function, tuple[int, int], str]]:
    """(function, position, the write's stream there): the region's function after the write's way into it (the
    access, or the first call of its chain), and each caller of it after the call (outside any region)."""
    region_fn = ctx.region_fn
    first = ctx.chain[0].call if ctx.chain else None
    yield region_fn, ((first.line, first.column) if first else ctx.position), ctx.stream
    for caller, call in program.call_sites.get(region_fn.id, ()):
        if call.region == NO_REGION:
            stream = translate(program, caller, call, region_fn, ctx.stream)
            if stream not in (CURRENT_STREAM, UNKNOWN):
                yield caller, (call.line, call.column), stream


def handed_on(program: Program, ctx: Context) -> bool:
    """The region's function makes another side stream wait for the write's stream after it (FSDP's
    `unshard_stream.wait_stream(pre_unshard_stream)` after the mixed-precision cast): the write goes to that
    stream, whose own writes are what the function hands out."""
    first = ctx.chain[0].call if ctx.chain else None
    anchor = (first.line, first.column) if first else ctx.position
    return any(o.target == ctx.stream and o.waiter not in (ctx.stream, CURRENT_STREAM, UNKNOWN)
               for o in window_between(program, ctx.region_fn, anchor, END))


def _named(program: Program, function: Function, position: tuple[int, int], stream: str) -> bool:
    """Whether an ordering after `position` waits for `stream` by its name (not through an event or a device-wide
    synchronize that may cover it)."""
    return any(o.target == stream for o in window_between(program, function, position, END))


def _unordered_arm(program: Program, function: Function, position: tuple[int, int], stream: str) -> Branch | None:
    """The if/else after `position` through which `function` leaves without the current stream waiting for
    `stream`, when some other way out does wait for it; None otherwise."""
    window = window_between(program, function, position, END)
    if not ordered_by(program, window, stream, CURRENT_STREAM):
        return None  # no way out waits: handed on (or left to the caller)
    for branch, way in ways_through_branches(function, window, position, END):
        if branch is not None and not ordered_by(program, way, stream, CURRENT_STREAM):
            return branch
    return None


def _finding(program: Program, rule_id: str, function: Function, position: tuple[int, int], stream: str,
             branch: Branch, writer: Function, write: Access, ctx: Context) -> Finding:
    body_start, _body_end, else_start, _else_end = branch
    window = window_between(program, function, position, END)
    in_body = any(body_start <= o.line <= branch[1] for o in window)
    waiting_line, bare_line = (body_start, else_start) if in_body else (else_start, body_start)
    where = function.facts.qualname
    related = way_of(program, ctx, ctx)
    if function is not ctx.region_fn:
        related.append(location(function, position[0], position[1], ROLE_CALL,
                                f"calls {ctx.region_fn.facts.qualname}"))
    related.append(location(function, waiting_line, 1, ROLE_SYNC, f"the current stream waits for "
                                                                  f"{stream_words(stream)} in this arm"))
    related.append(location(function, bare_line, 1, ROLE_SYNC, "and not in this one"))
    return Finding(
        rule=rule_id,
        message=(f"`{write.path}` is written by `{write.op}` on {stream_words(stream)} and handed out of "
                 f"`{where}` to readers on the current stream; `{where}` makes the current stream wait for it in "
                 f"one arm of an if/else (line {waiting_line}) and not in the other (line {bare_line})"),
        primary=location(writer, write.line, write.column, ROLE_WRITE, f"{write.op} in {writer.facts.qualname}"),
        related=tuple(related),
        fix=(f"Make the current stream wait on every way out of `{where}`: the arm at {function.file.path}:"
             f"{bare_line} needs the ordering the other arm has (`torch.cuda.current_stream().wait_stream(...)` "
             f"or a wait on an event recorded after the write)."),
        kind="RAW",
        symbol=where,
        extra=handed_out_extra(write.path, display(stream)),
    )
