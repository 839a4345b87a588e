"""Side streams made to wait for the current stream on one way through an if/else and not on the other.

A function that prepares side streams for work on what the current stream made (FSDP2's root pre-forward: the
all-gather copy-in stream reads the sharded parameters the optimizer step wrote) makes each of them wait for the
current stream, in each arm of an if/else its own way: `wait_event(post_optim_event)` in one,
`wait_stream(current_stream)` in the other. When both arms make side streams wait for the current stream's work,
they are the author's choice of waits for each way, and a side stream one arm makes wait and the other does not is
left unordered on the other way: its next work reads what the current stream wrote, maybe before it is written.
The stream must do work on tensors somewhere (a read in a region on it, also through a parameter of that name);
a read whose region first makes the stream wait for a stream the bare arm does order is covered through it
(`all_gather_stream.wait_stream(all_gather_copy_in_stream)` before each all-gather) and not judged.

The mirror of waits_on_one_way.py (the current stream waiting for a side stream on one way out); streams are
matched across functions by their last name, as the reader's region names a stream handed in as a parameter.
"""

from __future__ import annotations

from typing import Iterable, Iterator

from streamcheck.findings import ROLE_READ, ROLE_SYNC, Finding

from .facts import NO_REGION, Access
from .orderings import Ordering, orderings_of, waits_for
from .program import Function, Program
from .races import Context, contexts
from .rule import location, way_of
from .streams import CURRENT_STREAM, DEFAULT_STREAM, HOST, UNKNOWN, as_code, display, stream_words

Branch = tuple[int, int, int, int]


def side_streams_waiting_on_one_way(program: Program, rule_id: str) -> Iterable[Finding]:
    for function in program.functions.values():
        if not function.facts.branches:
            continue
        window = None
        judged: set[str] = set()  # one finding per stream of a function: its first if/else
        for branch in function.facts.branches:
            if window is None:
                # its own waits (not its calls': the arms of a dispatcher call helpers that wait for their own
                # reasons), each where it is made, whatever follows it
                window = orderings_of(program, function)
                if not window:
                    break
            for stream, waiting, bare in _one_way(program, window, branch):
                read = None if stream in judged else _first_read(program, stream, [o.waiter for o in bare])
                if read is not None:
                    judged.add(stream)
                    yield _finding(program, rule_id, function, branch, stream, waiting, read)


def _one_way(program: Program, window: list[Ordering], branch: Branch) -> Iterator[tuple[str, Ordering, list]]:
    """(side stream, its wait in one arm, the other arm's waits) for each side stream one arm of `branch` makes
    wait for the current stream and the other does not, when the other arm makes some side stream wait for it."""
    body_start, body_end, else_start, else_end = branch
    body = [o for o in window if body_start <= o.line <= body_end and _side_wait_for_current(program, o)]
    other = [o for o in window if else_start <= o.line <= else_end and _side_wait_for_current(program, o)]
    if not body or not other:
        return
    for waits, bare in ((body, other), (other, body)):
        bare_names = {_name(o.waiter) for o in bare}
        for ordering in waits:
            if _name(ordering.waiter) not in bare_names:
                yield ordering.waiter, ordering, bare


def _side_wait_for_current(program: Program, ordering: Ordering) -> bool:
    return ordering.waiter not in (CURRENT_STREAM, DEFAULT_STREAM, HOST, UNKNOWN) \
        and ordering.kind in ("wait_stream", "wait_event") and waits_for(program, ordering, CURRENT_STREAM)


def _name(stream: str) -> str:
    return display(stream).rsplit(".", 1)[-1]


def _first_read(program: Program, stream: str, covering: list[str]) -> tuple[Function, Access, Context] | None:
    """The first read (by place) in a region on a stream named as `stream` is, whose region does not first make
    the stream wait for one of the `covering` streams (waited for the current stream on the bare way)."""
    index = program.memo("side_waits.reads", lambda: _reads_by_stream_name(program))
    covered = {_name(s) for s in covering}
    for reader, read, ctx in index.get(_name(stream), ()):
        if not _waits_first(program, ctx, covered):
            return reader, read, ctx
    return None


def _reads_by_stream_name(program: Program) -> dict[str, list[tuple[Function, Access, Context]]]:
    found: dict[str, list[tuple[Function, Access, Context]]] = {}
    for reader, read in program.all_accesses():
        if read.kind != "read" or read.region == NO_REGION:
            continue
        for ctx in contexts(program, reader, read):
            if ctx.stream not in (CURRENT_STREAM, UNKNOWN):
                found.setdefault(_name(ctx.stream), []).append((reader, read, ctx))
    for reads in found.values():
        reads.sort(key=lambda r: (r[0].file.path, r[1].line, r[1].column, r[1].path))
    return found


def _waits_first(program: Program, ctx: Context, covered: set[str]) -> bool:
    """The region's function makes the region's stream wait for a `covered` stream before the `with`."""
    region = ctx.region_fn.facts.regions[ctx.region]
    name = _name(ctx.stream)
    return any(o.kind in ("wait_stream", "wait_event") and _name(o.waiter) == name and _name(o.target) in covered
               and (o.line, o.column) < (region.line, region.column) for o in orderings_of(program, ctx.region_fn))


def _finding(program: Program, rule_id: str, function: Function, branch: Branch, stream: str, waiting: Ordering,
             read: tuple[Function, Access, Context]) -> Finding:
    reader, access, ctx = read
    body_start, _body_end, else_start, _else_end = branch
    bare_line = else_start if body_start <= waiting.line <= branch[1] else body_start
    where = function.facts.qualname
    related = [location(function, waiting.line, waiting.column, ROLE_SYNC,
                        f"{stream_words(stream)} waits for the current stream in this arm"),
               location(function, bare_line, 1, ROLE_SYNC, "and not in this one")]
    related.extend(way_of(program, ctx, ctx))
    return Finding(
        rule=rule_id,
        message=(f"`{where}` makes {stream_words(stream)} wait for the current stream in one arm of an if/else "
                 f"(line {waiting.line}) and not in the other (line {bare_line}), where it makes other side streams "
                 f"wait; on that way `{access.path}` is read by `{access.op}` in `{reader.facts.qualname}` on "
                 f"{stream_words(ctx.stream)} before the current stream's writes are done"),
        primary=location(reader, access.line, access.column, ROLE_READ, f"{access.op} in {reader.facts.qualname}"),
        related=tuple(related),
        fix=(f"Make {stream_words(stream)} wait for the current stream on every way through `{where}`: the arm at "
             f"{function.file.path}:{bare_line} needs `{as_code(stream)}.wait_stream(torch.cuda.current_stream())` "
             f"(or a wait on the event the other arm waits on)."),
        kind="RAW",
        symbol=where,
        extra={"path": access.path, "writer_stream": "", "reader_stream": display(ctx.stream),
               "consumer": "collective" if access.collective else "device op", "producer": "outside"},
    )
