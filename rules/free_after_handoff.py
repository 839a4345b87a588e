"""Memory made on a side stream and handed to the current stream without `record_stream(current)` (SC104's other
direction).

The caching allocator gives a block back to the stream it was allocated on as soon as the tensor is freed; it does
not know that another stream still has kernels queued on it. A tensor made inside `with stream(s):` (a kernel's
output, what an awaitable hands back there), handed over to the current stream (it waits for s) and read there
(by a device op, or by other code it is passed to) needs `t.record_stream(current_stream())` after that use, or
the free may hand the block to s's next allocation while the current stream still reads it. The torchrec pipelines call
`record_stream` on every batch and context they take over for exactly this reason.

When s waits for the current stream after the read, or in another function (a prefetcher's
`side.wait_stream(current)` at the start of the next copy), its next allocation's work is ordered after the
current stream's earlier reads: that is not reported.
"""

from __future__ import annotations

from typing import Iterable

from streamcheck.findings import ROLE_READ, ROLE_STREAM_CONTEXT, ROLE_WRITE, Finding

from .facts import NO_REGION, Access, exclusive
from .orderings import orderings_in_program, orderings_of, waits_for
from .program import CURRENT_STREAM, Function, Program
from .aliasing import access_keys, held_containers
from .races import contexts, matching
from .rule import insert_edit, location
from .streams import HOST, UNKNOWN, as_code

def frees_after_handoff(program: Program, rule_id: str) -> Iterable[Finding]:
    for function in program.functions.values():
        facts = function.facts
        recorded = {u.path for u in facts.uses
                    if u.how == "record_stream" and _may_be_current(program, function, u.arg)}
        recorded |= {container for local, container, _ in facts.taken if local in recorded}  # `kjt = waited[n]`
        reported: set[tuple[int, int]] = set()
        for made in facts.accesses:
            if made.kind != "write" or not made.fresh or made.region == NO_REGION or "." in made.path \
                    or made.path in recorded or made.owner:
                continue
            region = facts.regions[made.region]
            stream = program.stream_id(function, region)
            if stream in (CURRENT_STREAM, UNKNOWN):
                continue
            use = _first_use_on_current(function, made, region.end_line)
            # Handed over (the current stream waits first) but not kept alive for it: without the wait, the
            # missing edge is the read's (SC101), the lifetime comes second.
            if use is None or not _current_waits_between(program, function, stream, region.end_line, use.line):
                continue
            if not _waits_for_current_later(program, function, stream, use.line) \
                    and not _host_waits_before_release(program, function, made.path, use.line):
                reported.add((use.line, use.column))
                yield _finding(rule_id, function, made, region, use, local=_taken_as(function, made.path, use.line))
        for finding in _taken_from_containers(program, function, recorded, rule_id):
            if (finding.primary.line, finding.primary.column) not in reported:  # a local dict: reported above
                yield finding
        yield from _passed_on_with_streams(program, function, rule_id)


def _taken_from_containers(program: Program, function: Function, recorded: set[str], rule_id: str
                           ) -> Iterable[Finding]:
    """The same for a local taken out of a container (`data = self._context.batches.pop(name)`) that other code
    filled, only ever inside regions of one side stream: the element was made there (torchrec's prefetch
    pipeline hands its batches over this way)."""
    facts = function.facts
    for local, container, line in facts.taken:
        if local in recorded:
            continue
        filled = _filled_on(program, function, container)
        if filled is None:
            continue
        writer, write, ctx = filled
        reads = [a for a in facts.accesses if a.kind == "read" and a.path == container and a.region == NO_REGION
                 and a.line > line]
        use = min(reads, key=lambda a: (a.line, a.column), default=None)
        # The hand-over wait may come before the take (`cur.wait_stream(dist); ctx = context.module_contexts[n]`):
        # the element sat in the container since the other code filled it.
        if use is None or not _current_waits_between(program, function, ctx.stream, facts.line, use.line):
            continue
        if not _waits_for_current_later(program, function, ctx.stream, use.line):
            region = ctx.region_fn.facts.regions[ctx.region]
            yield _finding(rule_id, function, write, region, use, local=local, maker=(writer, ctx.region_fn))


def _passed_on_with_streams(program: Program, function: Function, rule_id: str) -> Iterable[Finding]:
    """A tensor handed over from a side stream and passed on together with another stream
    (`module.prefetch(ctx=ctx, forward_stream=forward_stream)`): the code it goes to may use it on that stream,
    so it needs `record_stream` for that one too (torchrec records each context for the forward stream it hands on)."""
    facts = function.facts
    handed: dict[str, tuple[int, str]] = {}  # local -> (where it is handed over, the side stream it was made on)
    for local, container, line in facts.taken:
        filled = _filled_on(program, function, container)
        if filled is not None:
            handed[local] = (line, filled[2].stream)
    for made in facts.accesses:
        if made.kind == "write" and made.fresh and made.region != NO_REGION and "." not in made.path:
            stream = program.stream_id(function, facts.regions[made.region])
            if stream not in (CURRENT_STREAM, UNKNOWN):
                handed.setdefault(made.path, (facts.regions[made.region].end_line, stream))
    if not handed:
        return
    records = {(u.path, u.arg) for u in facts.uses if u.how == "record_stream"}
    for call in facts.calls:
        values = [arg.split("=", 1)[-1] for arg in call.args]
        streams = [v for v in values if "stream" in v.lower() and v.isidentifier()
                   and program.stream_id(function, v) not in (CURRENT_STREAM, UNKNOWN)]
        for tensor in values if streams and call.region == NO_REGION else ():
            start, side = handed.get(tensor, (facts.end_line, ""))
            if call.line <= start or not _current_waits_between(program, function, side, facts.line, call.line):
                continue
            for stream in streams:
                if program.stream_id(function, stream) != side and (tensor, stream) not in records:
                    yield _passed_on(rule_id, function, call, tensor, side, stream)


def _passed_on(rule_id: str, function: Function, call, tensor: str, side: str, stream: str) -> Finding:
    code = as_code(side)
    return Finding(
        rule=rule_id,
        message=(f"`{tensor}` is allocated on stream `{code}` and handed to `{call.callee}` with stream `{stream}`, "
                 f"with no `{tensor}.record_stream({stream})`: if that code uses it on `{stream}`, once it is freed "
                 f"the allocator may give its memory to `{code}`'s next allocation while `{stream}` still uses it"),
        primary=location(function, call.line, call.column, ROLE_READ, f"passed on with `{stream}`"),
        related=(),
        fix=f"Call `{tensor}.record_stream({stream})` before the call at line {call.line}.",
        kind="FREE",
        symbol=function.facts.qualname,
        extra={"path": tensor, "stream": stream, "allocated_on": code},
    )


def _taken_as(function: Function, container: str, line: int) -> str:
    """The local an element of `container` was last taken out as before `line` (`kjt = waited[name]`), or ""."""
    takes = [(at, local) for local, path, at in function.facts.taken if path == container and at <= line]
    return max(takes)[1] if takes else ""


def _filled_on(program: Program, function: Function, container: str, moved: bool = False):
    """(writer, write, context) of the writes into `container` (any function: the container's key) when they all
    run on one side stream, inside a region; else None. A container nothing writes but other code moves elements
    into from another container (`ctx.b[k] = ctx.a.pop(k)`) holds what that one was filled with. Once per
    (function, container): both the hand-over query and the passed-on query ask it for every taken local."""
    table = program.memo("free_after_handoff.filled", lambda: {})
    key = (function.id, container, moved)
    if key not in table:
        table[key] = _filled_on_uncached(program, function, container, moved)
    return table[key]


def _filled_on_uncached(program: Program, function: Function, container: str, moved: bool):
    probe = Access("read", container, 0, 0, "")
    if not moved:
        moves = program.memo("free_after_handoff.moves", lambda: _moves_by_key(program))
        sources = {move for key in access_keys(program, function, probe) for move in moves.get(key, ())}
        if sources and not any(True for _ in matching(program, function, probe, "write")):
            filled = [_filled_on(program, mover, source, moved=True) for mover, source in sorted(
                sources, key=lambda pair: (pair[0].id, pair[1]))]
            if None in filled or len({f[2].stream for f in filled}) > 1:
                return None
            return filled[0]
    found = None
    for writer, write in matching(program, function, probe, "write"):
        if "." not in write.path and held_containers(writer, write):
            continue  # `for k, (out, ev) in self.bufs.items(): out.copy_(x)` writes into an element, it makes none
        for ctx in contexts(program, writer, write):
            if ctx.stream in (CURRENT_STREAM, UNKNOWN) or ctx.region_fn is None:
                return None
            if ctx.chain and program.only_side_stream(writer.id) != ctx.stream:
                return None  # a helper also called elsewhere: which stream fills it depends on the caller
            if found is not None and found[2].stream != ctx.stream:
                return None
            found = found or (writer, write, ctx)
    return found


def _moves_by_key(program: Program) -> dict[tuple, list[tuple[Function, str]]]:
    """(mover, source) of each move of an element into an attribute path (`ctx.b[k] = ctx.a.pop(k)`), under every
    access key of the path moved into: keyed once for the program, where each query keyed every move again (vLLM
    0.33.0: 174 k access_keys calls, a sixth of its rules' time)."""
    index: dict[tuple, list[tuple[Function, str]]] = {}
    for mover in program.functions.values():
        for into, source, _ in mover.facts.taken:
            if "." in into:
                for key in access_keys(program, mover, Access("read", into, 0, 0, "")):
                    index.setdefault(key, []).append((mover, source))
    return index


def _may_be_current(program: Program, function: Function, stream: str) -> bool:
    """Whether a `record_stream` argument may name the current stream: it does, or the engine cannot tell (a loop
    variable over several streams, `for s in consumers: t.record_stream(s)`)."""
    sid = program.stream_id(function, stream)
    bound = stream in function.facts.stream_aliases or stream in function.facts.params
    return sid in (CURRENT_STREAM, UNKNOWN) or (stream.isidentifier() and not bound)


def _first_use_on_current(function: Function, made: Access, after: int) -> Access | None:
    """The first read of the tensor after the region on the current stream (by a device op, or by other code it
    is handed to), before the name is bound again. (A result only returned is the caller's to keep alive.)"""
    facts = function.facts
    rebound = min((u.line for u in facts.uses if u.path == made.path and u.how == "rebind" and u.line > after),
                  default=facts.end_line + 1)
    reads = [a for a in facts.accesses if a.kind == "read" and a.path == made.path and a.region == NO_REGION
             and after < a.line < rebound]
    return min(reads, key=lambda a: (a.line, a.column), default=None)


def _current_waits_between(program: Program, function: Function, stream: str, start: int, end: int) -> bool:
    """Whether the current stream (or the host) waits for `stream` between the two lines."""
    return any(start < o.line < end and o.waiter in (CURRENT_STREAM, HOST) and waits_for(program, o, stream)
               for o in orderings_of(program, function))


def _waits_for_current_later(program: Program, function: Function, stream: str, line: int) -> bool:
    """Whether `stream` waits for the current stream after `line` in this function, or (an attribute's stream)
    anywhere in another method (the next batch's copy starts with it): then the block's next user on that stream
    comes after the read."""
    waiting = program.memo("free_after_handoff.waits_for_current", lambda: {})
    if stream not in waiting:
        waiting[stream] = [(fn.id, o.line) for fn, o in orderings_in_program(program)
                           if o.waiter == stream and waits_for(program, o, CURRENT_STREAM)]
    shared = stream.startswith(("self.", "cls."))  # one stream in the class's other methods; a local is not
    return any((fid != function.id and shared) or (fid == function.id and at > line) for fid, at in waiting[stream])


def _host_waits_before_release(program: Program, function: Function, path: str, line: int) -> bool:
    """Whether the host waits for the current stream after the last read of `path` from `line` on and before the
    tensor is released (freed, bound again, or dropped when the function ends): `overflow_gpu[0].item()` after the
    all-reduce (DeepSpeed ZeRO-3's `has_overflow`). The current stream's reads are then done before the host can
    free the block and launch the side stream's next allocation."""
    facts = function.facts
    release = min((u.line for u in facts.uses if u.path == path and u.how in ("free", "rebind") and u.line > line
                   and not exclusive(facts, line, u.line)), default=facts.end_line + 1)
    last = max((a.line for a in facts.accesses if a.kind == "read" and a.path == path and a.region == NO_REGION
                and line <= a.line < release), default=line)
    return any(last <= o.line < release and o.waiter == HOST and waits_for(program, o, CURRENT_STREAM)
               for o in orderings_of(program, function))


def _finding(rule_id: str, function: Function, made: Access, region, use: Access, local: str = "",
             maker: tuple[Function, Function] | None = None) -> Finding:
    """`local`: the name the function holds the tensor by when it is not `made.path` (taken from a container);
    `maker`: (writer, region function) when the tensor was made in another function."""
    facts, path, code = function.facts, local or made.path, as_code(region.stream)
    writer, region_fn = maker or (function, function)
    used = f"read by `{use.op}`"
    return Finding(
        rule=rule_id,
        message=(f"`{path}` is allocated on stream `{code}` and {used} on the current stream with no "
                 f"`{path}.record_stream(current_stream())`: once it is freed, the allocator may give its memory "
                 f"to `{code}`'s next allocation while the current stream still uses it"),
        primary=location(function, use.line, use.column, ROLE_READ, f"used on the current stream in {facts.qualname}"),
        related=(location(writer, made.line, made.column, ROLE_WRITE, f"allocated by `{made.op}` on `{code}`"),
                 location(region_fn, region.line, region.column, ROLE_STREAM_CONTEXT, f"switches to `{code}`")),
        fix=(f"Call `{path}.record_stream(torch.cuda.current_stream())` before or after the read at line {use.line} "
             f"(the allocator then waits for the current stream's work before reusing the block)."),
        kind="FREE",
        symbol=facts.qualname,
        extra={"path": path, "stream": region.stream, "allocated_on": code,
               "fix_edit": insert_edit(function, use.line, use.column,
                                       f"{path}.record_stream(torch.cuda.current_stream())",
                                       f"before the read at line {use.line}")},
    )
