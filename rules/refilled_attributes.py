"""An attribute of `self` that other code fills with new tensors on a side stream, taken over by the current
stream without `record_stream(current_stream())` (SC104).

    def _copy_batch_to_gpu(self, batch):
        with torch.cuda.stream(self._memcpy_stream):
            self._cur_batch = batch.to(device, non_blocking=True)      # a new block of the memcpy stream
    def progress(self, it):
        torch.cuda.current_stream().wait_stream(self._memcpy_stream)   # handed over
        out = self._model(self._cur_batch)                            # read on the current stream
        self._copy_batch_to_gpu(next(it))                              # rebinds: the old block is freed

Each fill binds the attribute to a new tensor and drops the one it held: the block goes back to the side stream's
pool, and its next allocation there may overwrite it while the current stream's reads are still queued. The
pipeline must record the current stream on the tensor it takes over (its own `record_stream`, or one a helper it
hands the tensor to makes: summaries.call_lifetimes; torchrec's `_wait_for_batch(batch, stream)`), unless the side
stream waits for the current stream after the read (the next fill starts with `side.wait_stream(current)`).
The read is the function's own or one its calls make (a module's forward, a helper, under a local that names the
attribute: FunctionFacts.attribute_names); the hand-over is a wait of the current stream (or the host) for the
side stream before it, in the function or in a helper it calls.
"""

from __future__ import annotations

from typing import Iterable

from streamcheck.findings import ROLE_READ, ROLE_STREAM_CONTEXT, ROLE_WRITE, Finding

from .facts import NO_REGION, Access
from .free_after_handoff import _filled_on, _may_be_current, _waits_for_current_later
from .orderings import waits_for
from .program import CURRENT_STREAM, Function, Program
from .races import START, window_between
from .rule import location
from .streams import HOST, UNKNOWN, as_code
from .summaries import call_lifetimes


def refilled_attributes_taken_over(program: Program, rule_id: str) -> Iterable[Finding]:
    for function in program.functions.values():
        if function.id not in program.runs_on_current_stream or function.id in program.reached_from_region_any:
            continue
        reads = [a for a in program.accesses_in(function)
                 if a.kind == "read" and a.region == NO_REGION and a.path.startswith("self.")
                 and a.path.count(".") == 1 and not a.index]
        if not reads:
            continue
        recorded = _recorded_for_current(program, function)
        reported: set[str] = set()
        for read in reads:
            if read.path in recorded or read.path in reported:
                continue
            filled = _filled_on(program, function, read.path)
            if filled is None:
                continue
            writer, write, ctx = filled
            if not _all_fresh(program, function, read) or not _handed_over(program, function, read, ctx.stream):
                continue
            if _waits_for_current_later(program, function, ctx.stream, read.line):
                continue
            reported.add(read.path)
            yield _finding(rule_id, function, read, writer, write, ctx)


def _recorded_for_current(program: Program, function: Function) -> set[str]:
    """The paths the function records the current stream on, itself or through a helper it hands them to, each
    under the attribute a local names there (FunctionFacts.attribute_names) as well."""
    paths = {u.path for u in function.facts.uses
             if u.how == "record_stream" and _may_be_current(program, function, u.arg)}
    paths |= {path for _call, how, path, stream in call_lifetimes(program, function)
              if how == "record" and stream in (CURRENT_STREAM, UNKNOWN)}
    named = {local: attr for local, attr, _line in function.facts.attribute_names if attr}
    return paths | {named[p] for p in paths if p in named}


def _all_fresh(program: Program, function: Function, read: Access) -> bool:
    """Every write of the attribute binds it to a new tensor (no in-place fill of a block it keeps)."""
    from .races import matching

    return all(write.fresh for _writer, write in matching(program, function, read, "write"))


def _handed_over(program: Program, function: Function, read: Access, stream: str) -> bool:
    """The current stream (or the host) waits for `stream` before the read, in the function or a helper it calls."""
    return any(o.waiter in (CURRENT_STREAM, HOST) and waits_for(program, o, stream)
               for o in window_between(program, function, START, (read.line, read.column)))


def _finding(rule_id: str, function: Function, read: Access, writer: Function, write: Access, ctx) -> Finding:
    region = ctx.region_fn.facts.regions[ctx.region]
    code, path = as_code(region.stream), read.path
    return Finding(
        rule=rule_id,
        message=(f"`{path}` is filled with new tensors on stream `{code}` and read by `{read.op}` on the current "
                 f"stream with no `record_stream(current_stream())`: when the next fill rebinds it, the allocator "
                 f"may give the old block to `{code}`'s next allocation while the current stream still reads it"),
        primary=location(function, read.line, read.column, ROLE_READ, f"used on the current stream in "
                                                                       f"{function.facts.qualname}"),
        related=(location(writer, write.line, write.column, ROLE_WRITE, f"allocated by `{write.op}` on `{code}`"),
                 location(ctx.region_fn, region.line, region.column, ROLE_STREAM_CONTEXT, f"switches to `{code}`")),
        fix=(f"Call `{path}.record_stream(torch.cuda.current_stream())` where the current stream takes it over "
             f"(after its wait for `{code}`)."),
        kind="FREE",
        symbol=function.facts.qualname,
        extra={"path": path, "stream": region.stream, "allocated_on": code},
    )
