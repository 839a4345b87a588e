"""SC104's borrowed-input query: a function uses a tensor its caller handed it on a side stream and returns before
that work is done, handing back an event for the caller to wait, with no `record_stream(side)`.

The caller owns the input and may drop it as soon as the call returns (torchrec's staged pipeline:
`_run_with_event` returns each stage's output with its event, the next stage's stream waits the event, and the
stage input is dropped when its slot is overwritten). The event tells a waiter when the side stream is done;
nothing ties the input's block to it: once freed, the allocator hands it to the next allocation of the input's own
stream while the side stream still reads (or writes) it. Reported when the function records an event after the use
and returns it, never records the input for the side stream (itself or through a helper it passes it to), never
waits for the side stream between the region and its end, and no caller in the scan waits or synchronizes after
the call (measured: without that last condition, vLLM 0.33.0 gave 5 findings whose callers wait the returned event,
flashmla_sparse.py:1141, or hand it to the consumer; torchrec's transfer_tensors_to_cpu would be skipped too, its callers
synchronize the event on some path, but `DeferrableMetrics.update` does so in one arm of an if/elif only).
"""

from __future__ import annotations

from typing import Iterable

from streamcheck.findings import ROLE_FREE, ROLE_READ, ROLE_STREAM_CONTEXT, Finding

from .facts import NO_REGION, RETURNED, Access
from .hazard_flow import stream_ordered_between, stream_ordered_on_every_way
from .outside_producers import UPLOADS
from .program import Function, Program
from .rule import location
from .streams import CURRENT_STREAM, UNKNOWN
from .summaries import call_lifetimes


def inputs_handed_back_with_events(program: Program, rule_id: str) -> Iterable[Finding]:
    for function in program.functions.values():
        facts = function.facts
        if not facts.regions:
            continue
        returned = {u.path: u for u in facts.uses if u.how == "escape" and u.arg == RETURNED and "." not in u.path}
        records = [s for s in facts.syncs if s.kind == "record" and s.receiver in returned]
        if not records:
            continue
        recorded = {u.path for u in facts.uses if u.how == "record_stream"} | {
            path for _call, how, path, _stream in call_lifetimes(program, function) if how == "record"}
        reported: set[str] = set()
        for use in program.accesses_in(function):
            if use.region == NO_REGION:
                continue
            if use.op.split(" ", 1)[0] in UPLOADS and "cpu" not in function.file.lines.get(use.line, "").lower():
                continue  # `x.to(device)` of an input: taken as host memory being uploaded (outside_producers.py)
            root = _borrowed_root(function, use)
            if root is None or root in reported or use.path in recorded or root in recorded:
                continue
            region = facts.regions[use.region]
            if program.stream_id(function, region) in (CURRENT_STREAM, UNKNOWN):
                continue
            later = [s for s in records if (s.line, s.column) > (use.line, use.column)]
            if not later or stream_ordered_between(program, function, region.end_line, facts.end_line + 1) \
                    or _callers_wait(program, function):
                continue  # no event handed back for this work, or the function (or its callers) waits for it
            reported.add(root)
            yield _finding(rule_id, function, use, root, region, returned[later[0].receiver])


def _callers_wait(program: Program, function: Function) -> bool:
    """Every caller in the scan waits or synchronizes after the call (on some path, as the engine reads orderings):
    then the input's own stream (or the host) is ordered after the side stream before the caller can drop it.
    Where the call always runs, on each way through an if/else that waits in one arm only, too; a conditional
    call is mostly waited for under the same condition (vLLM's `if uses_host_cache: ...wait_event(ready)` after
    the gather made `if uses_host_cache`), and the lenient reading stays there. A function the scan sees no
    caller of is an API whose callers are unknown."""
    sites = program.call_sites.get(function.id, ())
    return bool(sites) and all(
        (stream_ordered_on_every_way if call.block == (0, 0) else stream_ordered_between)(
            program, caller, call.line, caller.facts.end_line + 1) for caller, call in sites)


def _borrowed_root(function: Function, use: Access) -> str | None:
    """The parameter whose tensor `use` touches: the parameter itself, or an element a loop or a subscript takes out
    of it (FunctionFacts.derived); None when the name was rebound before the use (`batch = batch.to(...)`: a new
    tensor under the old name, not the caller's)."""
    facts = function.facts
    params = set(facts.params) - {"self", "cls"}
    name = use.path.split(".", 1)[0]
    roots = sorted({name} & params or {source.split(".", 1)[0].split("[", 1)[0] for local, source, line
                                       in facts.derived if local == name and line <= use.line} & params)
    if not roots or any(u.path == name and u.how == "rebind" and u.line < use.line for u in facts.uses):
        return None
    return roots[0]


def _finding(rule_id: str, function: Function, use: Access, root: str, region, handed) -> Finding:
    stream = region.stream
    where = function.facts.qualname
    origin = "" if use.path.split(".", 1)[0] == root else f" (from the parameter `{root}`)"
    return Finding(
        rule=rule_id,
        message=(f"`{use.path}`{origin} is used on stream `{stream}` in `{where}`, which returns "
                 f"an event for that work instead of waiting for it, with no `{use.path}.record_stream({stream})`: "
                 f"once the caller drops it, the allocator may hand its memory to new work while `{stream}` still "
                 f"uses it"),
        primary=location(function, handed.line, handed.column, ROLE_FREE, f"handed back to the caller of {where}"),
        related=(location(function, use.line, use.column, ROLE_READ, f"used on `{stream}`"),
                 location(function, region.line, region.column, ROLE_STREAM_CONTEXT, f"switches to `{stream}`")),
        fix=f"Call `{use.path}.record_stream({stream})` after its use on `{stream}`.",
        kind="FREE",
        symbol=where,
        extra={"path": use.path, "stream": stream},
    )
