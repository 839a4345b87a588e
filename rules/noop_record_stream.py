"""`record_stream(current_stream())` evaluated where the current stream is the tensor's own allocation stream (one
of SC104's wrong edges).

The caching allocator already orders a block's reuse after the work of the stream it was allocated on; recording
that same stream changes nothing. Code that allocates inside `with stream(side):` (or in a helper only called from
such a region) and then calls `t.record_stream(torch.cuda.current_stream())` there meant the stream that reads `t`
later, the caller's current stream, but `current_stream()` names `side` at that point. The reader is left
unprotected: when `t` is dropped, `side`'s next allocation may take the block while the reader still uses it.
diffusers' group offloading had exactly this (PR #12721 took the current stream before the region and passed it
down).
"""

from __future__ import annotations

from typing import Iterable

from streamcheck.findings import ROLE_FREE, ROLE_STREAM_CONTEXT, ROLE_WRITE, Finding

from .facts import NO_REGION, Use
from .program import CURRENT_STREAM, Function, Program
from .rule import called_on_one_side_stream, location
from .streams import UNKNOWN, captures_current, display

# Calls whose result is new memory, allocated on the stream current where they run.
ALLOCATING = frozenset({"to", "cuda", "clone", "contiguous", "empty", "empty_like", "empty_strided", "zeros",
                        "zeros_like", "ones", "ones_like", "full", "new_empty", "new_zeros", "cat", "stack"})


def noop_record_streams(program: Program, rule_id: str) -> Iterable[Finding]:
    for function in program.functions.values():
        facts = function.facts
        records = [u for u in facts.uses if u.how == "record_stream" and captures_current(u.arg)]
        if not records:
            continue
        whole = None
        for record in records:
            allocation = _allocated_before(function, record)
            if allocation is None:
                continue
            if record.region != NO_REGION:
                region = facts.regions[record.region]
                stream = program.stream_id(function, region)
                context = location(function, region.line, region.column, ROLE_STREAM_CONTEXT,
                                   f"switches to `{region.stream}`")
            else:
                whole = whole or called_on_one_side_stream(program, function) or (None, None)
                if whole[0] is None:
                    continue
                region, context = whole
                stream = program.stream_id(function, region)
            if stream in (CURRENT_STREAM, UNKNOWN):
                continue
            yield _finding(rule_id, function, record, allocation, display(stream), context)


def _allocated_before(function: Function, record: Use) -> Use | None:
    """The binding that gave `record.path` new memory in the same region before the record (`t = x.to(dev)`,
    `t.data = src.to(dev)`), if the path was not bound otherwise in between."""
    facts = function.facts
    calls_by_line = {}
    for call in facts.calls:
        calls_by_line.setdefault(call.line, set()).add(call.callee.rsplit(".", 1)[-1])
    found = None
    for use in facts.uses:
        if use.path != record.path or use.line >= record.line or use.region != record.region:
            continue
        if use.how == "rebind" or (use.how == "free" and use.arg == ".data="):
            start = use.start_line or use.line
            made = any(calls_by_line.get(line, set()) & ALLOCATING for line in range(start, use.line + 1))
            found = use if made else None
    return found


def _finding(rule_id: str, function: Function, record: Use, allocation: Use, stream: str, context) -> Finding:
    facts, path = function.facts, record.path
    return Finding(
        rule=rule_id,
        message=(f"`{path}.record_stream({record.arg})` runs while the current stream is `{stream}`, the stream "
                 f"`{path}` was just allocated on: it records nothing, and the stream that reads `{path}` after "
                 f"the hand-over is not protected from the block's reuse"),
        primary=location(function, record.line, record.column, ROLE_FREE, f"record_stream in {facts.qualname}"),
        related=(location(function, allocation.start_line or allocation.line,
                          allocation.start_column or allocation.column, ROLE_WRITE, f"allocated on `{stream}`"),
                 context),
        fix=(f"Take the reading stream before switching to `{stream}` (`reader = torch.cuda.current_stream()` "
             f"before the `with`) and record that one: `{path}.record_stream(reader)`."),
        kind="FREE",
        symbol=facts.qualname,
        extra={"path": path, "allocated_on": stream},  # no "stream": the reading stream has no name here to fix with
    )
