"""Writes on a side stream that leave the function for readers the scan does not see: the reader is taken to be the
current stream, after the function returns.

A tensor written inside `with stream(s):` into a `self.` attribute or into what a parameter holds is handed to code
outside the function (the caller, the next schedule stage, the model's forward), which runs on the current stream
unless it says otherwise. When nothing in the scan reads it (a read would be paired by the main query), the
current stream must be made to wait for s before the function returns (in it, or in its callers after the call),
or an event recorded on s after the write must go along with it. A stream that the current stream waits for
anywhere in the program is taken as handed over that way (the consumer waits where the scan cannot follow): only
side streams that nothing ever waits for are reported, so the finding is about a missing edge, not a hidden one.
A stream the writer holds in a local (`kv_stream = aux_stream()`) is named by that local only: a wait in another
file for a local of the same name counts only from the writer's callers or callees (code that runs after it).
"""

from __future__ import annotations

from typing import Iterable

from streamcheck.findings import ROLE_WRITE, Finding

from .aliasing import from_outside
from .collectives import launched_async
from .extract import ALIAS
from .facts import NO_REGION, Access
from .orderings import EVENT, orderings_in_program, recorded_streams, waits_for
from .program import Function, Program
from .races import Context, contexts, exits_before, matching, ordered_after
from .rule import handed_out_extra, insert_edit, location, way_of
from .streams import CURRENT_STREAM, PARAM, UNKNOWN, as_code, display, handed_in, stream_words, writable


def writes_for_outside_consumers(program: Program, rule_id: str) -> Iterable[Finding]:
    reported: set[tuple[str, int]] = set()
    for writer, write in program.all_accesses():
        if write.kind != "write" or write.op == ALIAS or write.region == NO_REGION \
                or not from_outside(program, writer, write):
            continue
        if any(_may_follow(writer, write, reader, read) for reader, read in matching(program, writer, write, "read")) \
                or launched_async(writer, write):
            continue  # a reader in the scan (the main query pairs the two), or a handle that carries the edge
        for ctx in contexts(program, writer, write):
            if ctx.stream in (CURRENT_STREAM, UNKNOWN) or _ever_waited_for(program, ctx.stream, writer):
                continue
            if ordered_after(program, ctx, ctx.stream, CURRENT_STREAM, frozenset()):
                continue
            key = (writer.id, write.region)
            if key not in reported:  # one finding per region
                reported.add(key)
                yield _finding(program, rule_id, writer, write, ctx)
            break


def _may_follow(writer: Function, write: Access, reader: Function, read: Access) -> bool:
    """Whether a read of the same tensor can come after the write: not one earlier in the writer, in a block that
    returns before the write (vLLM's `if tokens < SMALL: _run_fused_small(...); return` ahead of the side-stream
    path), which is a reader of the other way through the function, not of this write."""
    return not (reader is writer and read.line < write.line and exits_before(writer, read.line, write.line))


def _ever_waited_for(program: Program, stream: str, writer: Function) -> bool:
    """Some code waits for `stream`: a wait naming it (or an event recorded on it) anywhere, or in the writer's own
    file a wait that may cover it (a device-wide synchronize, a stream handed in, an event recorded elsewhere).
    Such a wait in another module (a checkpoint saver's synchronize, another class's pipeline events) says
    nothing about this stream."""
    waited = program.memo("outside_consumers.waited", lambda: {})
    # A stream handed in (a parameter, a constructor's argument) is whichever one the caller picks, waited for
    # on the caller's paths: any wait that may cover it counts, wherever it is.
    # The writer's own waits were judged on its way out (ordered_after): one on another path of it (a cache hit
    # that returns early) is no wait for this one.
    key = (stream, "" if stream.startswith(PARAM) or handed_in(program, stream) else writer.file.path)
    if key not in waited:  # the functions that wait for it
        waited[key] = {function.id for function, o in orderings_in_program(program)
                       if o.waiter != stream and waits_for(program, o, stream)
                       and (not key[1] or function.file is writer.file or _names(program, o, stream))}
    found = waited[key] - {writer.id}
    if stream in writer.facts.stream_aliases:
        # `kv_stream = aux_stream()`: a local, which the writer's own name stands for. Another function that binds
        # a local of that name and waits for it (vLLM's amd and nvidia twins of fused_qkvr_prep) orders this
        # write only when it runs after it: a caller of the writer or a function the writer calls.
        found = {fid for fid in found if program.functions[fid].file is writer.file
                 or fid in program.callers_reaching(writer.id) or program.reaches(writer.id, frozenset((fid,)))}
    return bool(found)


def _names(program: Program, ordering, stream: str) -> bool:
    if ordering.target == stream:
        return True
    return ordering.target.startswith(EVENT) and stream in recorded_streams(program, ordering.target[len(EVENT):])


def _finding(program: Program, rule_id: str, writer: Function, write: Access, ctx: Context) -> Finding:
    waited, where = as_code(ctx.stream), writer.facts.qualname
    extra = handed_out_extra(write.path, display(ctx.stream))
    region = writer.facts.regions[write.region]
    after = region.end_line + 1
    if after <= writer.facts.end_line and writable(waited):  # for --fix: right after the `with`
        extra["fix_edit"] = insert_edit(writer, after, max(region.column - 5, 1),
                                        f"torch.cuda.current_stream().wait_stream({waited})",
                                        f"after the `with` at line {region.line}")
    return Finding(
        rule=rule_id,
        message=(f"`{write.path}` is written by `{write.op}` on {stream_words(ctx.stream)} and handed out of "
                 f"`{where}` to readers on the current stream, which never wait for {stream_words(ctx.stream)}"),
        primary=location(writer, write.line, write.column, ROLE_WRITE, f"{write.op} in {where}"),
        related=tuple(way_of(program, ctx, ctx)),
        fix=(f"Make the current stream wait before the result is used: "
             f"`torch.cuda.current_stream().wait_stream({waited})` after the `with` in `{where}` (or record an "
             f"event on `{waited}` after the write and wait on it where the result is read)."),
        kind="RAW",
        symbol=where,
        extra=extra,
    )
