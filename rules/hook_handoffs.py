"""Side-stream writes to what a hook was handed, left unordered for the code the hook returns to.

A function that the scan only ever hands over as a value (`t.register_hook(functools.partial(_pre_backward_hook,
state, module, handle))`, `register_forward_pre_hook(hook)`, a callback) is run by code the scan does not see:
autograd, a module's `__call__`. What it prepares for that code, it prepares on the current stream's behalf: when
it calls a function whose `with stream(s):` region works on one of the hook's own parameters (FSDP's
`_unshard(state, handle, state._unshard_stream, ...)`, whose region calls `handle.unshard()`: the all-gather of the
handle's flat parameter), the backward or forward that runs after the hook returns reads the result on the current
stream, so the hook must make the current stream wait for s after the call, on every way out
(`current_stream().wait_stream(state._unshard_stream)`). The same call with a tensor the hook did not get (a
prefetch of the next module's handle, `_unshard(state, target_handle, ...)`) prepares it for a later hook, which
waits for it there: only the hook's own parameters tie the write to the code it returns to.
"""

from __future__ import annotations

from typing import Iterable

from streamcheck.findings import ROLE_CALL, ROLE_WRITE, Finding

from .facts import NO_REGION
from .program import Function, Program
from .races import END, Context, ordered_between
from .rule import handed_out_extra, location, way_of
from .streams import CURRENT_STREAM, UNKNOWN, display, stream_words
from .summaries import argument_for, translate
from .waits_on_one_way import handed_on, side_stream_writes_of_outliving_tensors


def hooks_returning_unordered_writes(program: Program, rule_id: str) -> Iterable[Finding]:
    found: dict[tuple, tuple] = {}  # (hook, call, region) -> the first write handed back there
    for writer, write, ctx in side_stream_writes_of_outliving_tensors(program):
        if not ctx.chain or handed_on(program, ctx):
            continue
        receiver = _parameter_receiver(ctx)
        if receiver is None:
            continue
        for hook, call in program.call_sites.get(ctx.region_fn.id, ()):
            if call.region != NO_REGION or not _handed_over(program, hook) \
                    or argument_for(ctx.region_fn, call, receiver) not in _own_parameters(hook):
                continue
            stream = translate(program, hook, call, ctx.region_fn, ctx.stream)
            if stream in (CURRENT_STREAM, UNKNOWN) or ordered_between(
                    program, hook, (call.line, call.column), END, stream, CURRENT_STREAM):
                continue
            key = (hook.id, call.line, call.column, ctx.region)
            rank = (len(ctx.chain), writer.file.path, write.line, write.column, write.path)
            if key not in found or rank < found[key][0]:
                found[key] = (rank, hook, call, stream, writer, write, ctx)
    for key in sorted(found):
        _rank, hook, call, stream, writer, write, ctx = found[key]
        yield _finding(program, rule_id, hook, call, stream, writer, write, ctx)


def _parameter_receiver(ctx: Context) -> str | None:
    """The parameter of the region's function whose method the region calls on the write's way in
    (`handle.unshard()` in `_unshard(state, handle, ...)`), or None."""
    first = ctx.chain[0].call
    root = first.callee.split(".", 1)[0]
    if "." in first.callee and root in _own_parameters(ctx.region_fn):
        return root
    return None


def _own_parameters(function: Function) -> set[str]:
    return set(function.facts.params) - {"self", "cls"}


def _handed_over(program: Program, function: Function) -> bool:
    """Every call of `function` in the scan hands it over as a value (its name is an argument, not the callee)."""
    sites = program.call_sites.get(function.id, ())
    return bool(sites) and all(call.callee.rsplit(".", 1)[-1] != function.facts.name for _caller, call in sites)


def _finding(program: Program, rule_id: str, hook: Function, call, stream: str, writer: Function, write,
             ctx: Context) -> Finding:
    where = hook.facts.qualname
    related = way_of(program, ctx, ctx)
    related.append(location(hook, call.line, call.column, ROLE_CALL, f"calls {ctx.region_fn.facts.qualname}"))
    return Finding(
        rule=rule_id,
        message=(f"`{write.path}` is written by `{write.op}` on {stream_words(stream)} for what `{where}` was "
                 f"handed, and `{where}` (run by code outside the scan: a hook or callback) returns to it with no "
                 f"wait for {stream_words(stream)} after the call at line {call.line}: the code after the hook "
                 f"reads it on the current stream"),
        primary=location(writer, write.line, write.column, ROLE_WRITE, f"{write.op} in {writer.facts.qualname}"),
        related=tuple(related),
        fix=(f"Make the current stream wait before `{where}` returns: `torch.cuda.current_stream()."
             f"wait_stream(...)` for {stream_words(stream)} after the call at {hook.file.path}:{call.line}."),
        kind="RAW",
        symbol=where,
        extra=handed_out_extra(write.path, display(stream)),
    )
