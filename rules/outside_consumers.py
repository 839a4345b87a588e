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

A tensor the writer keeps on `self` through the parameter it is (an element of) (`self._out_bufs = out_bufs`,
torchrec's maglev `_InputDataAwaitable.__init__`) is handed to the methods of its class that take that attribute
out (`_wait_impl`: `for buf, slots in zip(self._out_bufs, ...)`, whose views go back to the caller): they are its
readers for the way out, so an event recorded after the write and kept on `self` (`self._data_done_event`) orders
the write only when the program waits it, not because some other event of the program travels out of sight; and
with those readers known, their own waits before the take (any wait or synchronize, `_taker_waits`) decide the
hand-over, not a wait anywhere in the program that may cover a handed-in stream (torchrec has 57 of those).
"""

from __future__ import annotations

from typing import Iterable

from streamcheck.findings import ROLE_READ, ROLE_WRITE, Finding

from .aliasing import derived_paths, from_outside
from .collectives import launched_async
from .extract import ALIAS
from .facts import NO_REGION, Access
from .orderings import EVENT, orderings_in_program, orderings_of, recorded_streams, waits_for
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
        takers = _sibling_takers(program, writer, write)
        consumers = frozenset(taker.id for taker, _attr, _line in takers)
        for ctx in contexts(program, writer, write):
            if ctx.stream in (CURRENT_STREAM, UNKNOWN):
                continue
            # With the readers known (the class's takers), their own waits say whether the hand-over is made, not
            # some wait elsewhere in the program that may cover a handed-in stream.
            if _taker_waits(program, takers) if takers else _ever_waited_for(program, ctx.stream, writer):
                continue
            if ordered_after(program, ctx, ctx.stream, CURRENT_STREAM, consumers):
                continue
            key = (writer.id, write.region)
            if key not in reported:  # one finding per region
                reported.add(key)
                yield _finding(program, rule_id, writer, write, ctx, takers[0] if takers else None)
            break


def _sibling_takers(program: Program, writer: Function, write: Access) -> list[tuple[Function, str, int]]:
    """(method, `self.<attr>`, line) of each other method of the writer's class that takes out the attribute the
    writer keeps the written tensor's parameter in (torchrec's maglev `_InputDataAwaitable`: `__init__` runs
    `all_to_all_single(out_buf, ...)` for each `out_buf` of its parameter `out_bufs` under `with
    stream(pp_data_dist_stream)`, keeps `self._out_bufs = out_bufs`, and `_wait_impl` hands the elements of
    `self._out_bufs` on to its caller). Those methods are the readers the write is handed to: an event recorded
    after the write and kept on `self` orders the write for them only when the program waits it
    (races._kept_for_host_waits), not because some other event travels out of sight."""
    if not writer.owner:
        return []
    params = set(writer.facts.params) - {"self", "cls"}
    sources = derived_paths(writer, write.path, write.line) & params
    kept = {u.arg for u in writer.facts.uses if u.how == "escape" and u.path in sources
            and u.arg.startswith("self.") and u.arg.count(".") == 1}
    if not kept:
        return []
    found = []
    for other in program.functions_of_class(writer):
        if other is writer:
            continue
        takes = [(line, source) for _local, source, line in other.facts.derived if source in kept] + [
            (a.line, a.path) for a in other.facts.accesses if a.path in kept]
        if takes:
            line, attr = min(takes)
            found.append((other, attr, line))
    return found


def _taker_waits(program: Program, takers: list[tuple[Function, str, int]]) -> bool:
    """Some taker orders its stream or the host before it takes the attribute out: a wait, a synchronize, or a
    call of a function that performs one (any stream or event: the kept event may be waited through a name the
    engine does not tie to it, `torch.cuda.current_stream().wait_stream(self._stream)`)."""
    for taker, _attr, line in takers:
        if any(o.line < line for o in orderings_of(program, taker)):
            return True
        if any(call.line < line and any(program.performs_wait(edge.callee) for edge in edges)
               for call, edges in program.exact_edges_of(taker.id)):
            return True
    return False


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


def _finding(program: Program, rule_id: str, writer: Function, write: Access, ctx: Context,
             taker: tuple[Function, str, int] | None = None) -> Finding:
    waited, where = as_code(ctx.stream), writer.facts.qualname
    related = list(way_of(program, ctx, ctx))
    readers = "readers on the current stream, which never wait"
    if taker is not None:  # the method of the class that hands the kept tensors on (_sibling_takers)
        other, attr, line = taker
        readers = f"`{other.facts.qualname}` (through `{attr}`) on the current stream, which never waits"
        related.append(location(other, line, 1, ROLE_READ, f"takes `{attr}` on the current stream"))
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
                 f"`{where}` to {readers} for {stream_words(ctx.stream)}"),
        primary=location(writer, write.line, write.column, ROLE_WRITE, f"{write.op} in {where}"),
        related=tuple(related),
        fix=(f"Make the current stream wait before the result is used: "
             f"`torch.cuda.current_stream().wait_stream({waited})` after the `with` in `{where}` (or record an "
             f"event on `{waited}` after the write and wait on it where the result is read)."),
        kind="RAW",
        symbol=where,
        extra=extra,
    )
