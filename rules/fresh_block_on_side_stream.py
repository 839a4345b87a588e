"""A side stream writes memory that another stream has just allocated, before waiting for that stream (one of
SC106's overwrites).

The caching allocator hands out a freed block to the next allocation on the same stream at once: that stream's
later kernels run after the earlier tenant's, so nothing else is needed. A block taken on the current stream
(`buf = torch.empty_like(x, device=dev)`, or a helper of the scan that returns such a fresh tensor) and then
filled inside `with torch.cuda.stream(side):` is written by `side`, whose kernels may run before the current
stream's queued kernels that still read or write the earlier tenant (a freed activation, a gradient): the write
corrupts memory another stream still uses. DeepSpeed's optimizer-state reload says so in its comment ("a
mid-backward reload writing from copy_stream would overwrite a live activation (seen as NaN losses)") and waits
with `copy_stream.wait_stream(compute_stream)`; torchrec's pipelines pre-allocate on the default stream and make
the memcpy stream wait before the copies.

A storage grown by `resize_(n)` (`stor.resize_(n)`, `x.untyped_storage().resize_(n)`) is such an allocation too,
and a local that views the block (`tmp.set_(ref.untyped_storage(), ...)`, `ref.data = view`, `row = buf[i]`:
FunctionFacts.derived) writes into it (torchrec's memory stashing restore re-allocates the stashed storage and fills
it on the H2D stream through a second view).

The allocation must be in the writing function (or be a helper's returned allocation bound there), the write
inside a stream region of that function, and no ordering of the region's stream after the allocating stream may
lie before the write on its way (the engine's reader-side search: the function from its start, the region's
callers before the call): a wait before the allocation counts too, as the lint reports only what nothing orders.
"""

from __future__ import annotations

from typing import Iterable, NamedTuple

from streamcheck.findings import ROLE_STREAM_CONTEXT, ROLE_WRITE, Finding

from .aliasing import derived_paths
from .facts import NO_REGION, RETURNED, Access, Placement, Use
from .facts import exclusive
from .hazard_flow import where
from .orderings import orderings_of, site_stream
from .program import Function, Program
from .races import CALLER_LEVELS, START, Position, ordered_between
from .rule import insert_edit, location
from .streams import CURRENT_STREAM, UNKNOWN, as_code, display, stream_words, writable
from .summaries import translate


class Allocation(NamedTuple):
    line: int
    column: int
    stream: str
    how: str  # "allocated by `empty_like`" or "returned by `Class.helper`, which allocates it"


def writes_into_fresh_blocks(program: Program, rule_id: str) -> Iterable[Finding]:
    for function in program.functions.values():
        facts = function.facts
        if not facts.regions:
            continue
        # The function's own current stream: a side stream when it only ever runs under one (called inside
        # `with stream(s):`, as FSDP's `_reduce_grad`); unknown when it runs under several.
        frame = program.only_side_stream(function.id) or (
            CURRENT_STREAM if program.streams_of(function.id) == {CURRENT_STREAM} else UNKNOWN)
        reported: set[tuple[str, int]] = set()
        for write in program.accesses_in(function):  # (a helper's write to its parameter: the argument's)
            if write.kind != "write" or write.region == NO_REGION or write.fresh or "." in write.path:
                continue  # only locals: an attribute's binding here need not be the memory written later
            if (write.path, write.region) in reported:
                continue
            allocation = _allocation(program, function, write)
            if allocation is None:
                continue
            stream = site_stream(program, function, write.region)
            if allocation.stream == CURRENT_STREAM:
                allocation = allocation._replace(stream=frame)
            if UNKNOWN in (stream, allocation.stream) or stream == allocation.stream:
                continue
            if ordered_on_every_way(program, function, (write.line, write.column), allocation.stream, stream,
                                     CALLER_LEVELS, frame):
                continue
            reported.add((write.path, write.region))
            yield _finding(program, rule_id, function, write, stream, allocation)


def ordered_on_every_way(program: Program, function: Function, position: Position, earlier: str, later: str,
                          levels: int, frame: str = CURRENT_STREAM) -> bool:
    """An ordering of `later` after `earlier` before `position` in `function`, or else before the call in every
    caller, the streams named as each caller names them (each call path is a run of its own: one caller that
    waits does not order another's)."""
    if ordered_between(program, function, START, position, earlier, later, frame):
        return True
    sites = program.call_sites.get(function.id, ())
    if levels == 0 or not sites:
        return False
    return all(ordered_on_every_way(program, caller, (call.line, call.column),
                                     translate(program, caller, call, function, earlier),
                                     translate(program, caller, call, function, later), levels - 1)
               for caller, call in sites)


def _allocation(program: Program, function: Function, write: Access) -> Allocation | None:
    """The allocation of the block the write lands in: the written local's own, or else that of a path the local
    views (`tmp.set_(ref.untyped_storage(), ...)`, `ref.data = view`, `row = buf[i]`: FunctionFacts.derived, a few
    steps: torchrec's restore re-allocates a storage with `resize_`, points a tensor at it and fills it through a
    second view)."""
    position = (write.line, write.column)
    found = allocation_before(program, function, write.path, position)
    if found is None:
        for path in sorted(derived_paths(function, write.path, write.line) - {write.path}):
            found = allocation_before(program, function, path, position)
            if found is not None:
                return found._replace(how=f"{found.how} as `{path}`, whose memory it views,")
    return found


def allocation_before(program: Program, function: Function, path: str, position: tuple[int, int]) \
        -> Allocation | None:
    """Where the tensor `path` holds at `position` was allocated, when its last binding before it in this function
    is a fresh device allocation (a factory, a copy, or a call of a scanned helper returning one)."""
    facts = function.facts
    line = position[0]
    bindings = [u for u in facts.uses if u.path == path and u.how in ("rebind", "alloc")
                and (u.line, u.column) < position and not exclusive(facts, u.line, line)]
    if not bindings:
        return None
    last = max(bindings, key=lambda u: (u.line, u.column))
    # The last binding, and those in the other arm of its if/else: each may be the one the write sees (the first
    # in the source that allocates is reported: `if preallocated: buf = torch.empty_like(...)` before its `else`).
    candidates = [last] + [b for b in bindings if exclusive(facts, b.line, last.line)]
    for binding in sorted(candidates, key=lambda u: (u.line, u.column)):
        found = _fresh_binding(program, function, path, binding)
        if found is not None:
            return found
    return None


def _fresh_binding(program: Program, function: Function, path: str, binding: Use) -> Allocation | None:
    facts = function.facts
    start = binding.start_line or binding.line
    placed = [p for p in facts.placements if p.path == path and start <= p.line <= binding.line]
    if placed:
        placement = placed[-1]
        if not placement.fresh or placement.where in ("host", "pinned") or not _on_device(
                program, function, path, placement):
            return None
        return Allocation(placement.line, binding.start_column or binding.column,
                          site_stream(program, function, placement.region),
                          "allocated by `resize_`" if binding.how == "alloc" else "allocated")
    return _helper_allocation(program, function, binding, start)


def _on_device(program: Program, function: Function, path: str, placement: Placement) -> bool:
    """A `_like` factory or a copy of unknown placement is taken as device memory only where the name does not
    say host (`cpu_buf = torch.empty_like(t)`)."""
    return placement.where == "device" or where(program, function, path, placement.line + 1) != "host" and not any(
        word in path.lower() for word in ("cpu", "host", "pin"))


def _helper_allocation(program: Program, function: Function, binding: Use, start: int) -> Allocation | None:
    """`buf = _alloc_reload_buffer(...)`: a call on the binding's lines to a scanned function that returns a fresh
    device tensor it allocated on its current stream (outside its own regions)."""
    for call, edges in program.exact_edges_of(function.id):
        if not start <= call.line <= binding.line:
            continue
        for edge in edges:
            callee = program.functions[edge.callee]
            if _returns_fresh_device_tensor(program, callee):
                return Allocation(call.line, call.column, site_stream(program, function, call.region),
                                  f"returned by `{callee.facts.qualname}`, which allocates it")
    return None


def _returns_fresh_device_tensor(program: Program, callee: Function) -> bool:
    facts = callee.facts
    for escape in facts.uses:
        if escape.how != "escape" or escape.arg != RETURNED or "." in escape.path:
            continue
        placed = [p for p in facts.placements if p.path == escape.path and p.line <= escape.line]
        if placed:
            last = max(placed, key=lambda p: p.line)
            if last.fresh and last.region == NO_REGION and last.where not in ("host", "pinned") and _on_device(
                    program, callee, escape.path, last):
                return True
    return False


def _finding(program: Program, rule_id: str, function: Function, write: Access, stream: str,
             allocation: Allocation) -> Finding:
    region = function.facts.regions[write.region]
    waiter, waited = as_code(stream), as_code(allocation.stream)
    extra = {"path": write.path, "writer_stream": display(stream), "other_stream": display(allocation.stream),
             "allocation_line": allocation.line}
    if writable(waiter) and writable(waited):  # before the `with`: inside it `current_stream()` is the side one
        extra["fix_edit"] = insert_edit(function, region.line, region.column, f"{waiter}.wait_stream({waited})",
                                        f"before the `with` at line {region.line}")
    owner = "the current stream" if allocation.stream == CURRENT_STREAM else stream_words(allocation.stream)
    selfish = [o for o in orderings_of(program, function) if o.kind == "wait_stream" and o.waiter == o.target == stream
               and (o.line, o.column) < (write.line, write.column)]
    note = (f" (the `wait_stream` at line {selfish[0].line} runs inside the region, where `current_stream()` is "
            f"that stream itself: it waits for nothing)") if selfish else ""
    return Finding(
        rule=rule_id,
        message=(f"`{write.path}` was just {allocation.how} on {owner} (line {allocation.line}) and is "
                 f"written by `{write.op}` on {stream_words(stream)} with no wait for {owner} first: the "
                 f"allocator may have handed out a block whose earlier tenant {owner} still reads or writes{note}"),
        primary=location(function, write.line, write.column, ROLE_WRITE, f"{write.op} in {function.facts.qualname}"),
        related=(location(function, allocation.line, allocation.column, ROLE_WRITE,
                          f"allocation on {owner}"),
                 location(function, region.line, region.column, ROLE_STREAM_CONTEXT,
                          f"switches to {stream_words(stream)}")),
        fix=(f"Make `{waiter}` wait for `{waited}` before the region: `{waiter}.wait_stream({waited})` before "
             f"the `with` at {function.file.path}:{region.line} (or allocate the buffer inside the region)."),
        kind="WAR",
        symbol=function.facts.qualname,
        extra=extra,
    )
