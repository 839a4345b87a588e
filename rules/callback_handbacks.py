"""Side-stream writes of backward hooks that the end-of-backward callback hands back to the invoker unordered.

Autograd runs a callback queued with `Variable._execution_engine.queue_callback(fn)` once, when the backward pass
ends, on the current stream of the code that called `backward()`; that code reads what the backward's hooks left
(the optimizer step reads the gradients) on the same stream right after. A hook that works on a side stream s and
writes what outlives it (FSDP1's post-backward hook reduce-scatters the gradient on `state._post_backward_stream`
and, for HSDP, all-reduces it on `state._all_reduce_stream`) leaves that write to the code after backward: when no
way out of the hook waits for s, the callback must make the current stream wait for it. A callback that does so
for one of a hook's side streams (`current_stream.wait_stream(root_state._post_backward_stream)`) is where the hook's
work is handed back; each other side stream the same hook writes on that the callback leaves out, on some way
through it, is read after backward unordered. A callback that waits for none of a hook's streams is not judged
(the hook hands its work on another way).

A callback is judged against the hooks of its own file (one subsystem's hooks and callback live together: FSDP1's
in `_runtime_utils.py`); the hook's stream and the callback's name for it are matched by the stream's last name
(`_post_backward_stream`): the two functions reach one state object through different parameters (`state`,
`root_state`). Streams handed in as parameters are not matched (their name is the parameter's, not the stream's).
"""

from __future__ import annotations

from typing import Iterable

from streamcheck.findings import ROLE_SYNC, ROLE_WRITE, Finding

from .facts import Access
from .hooks import end_of_backward_callbacks, hook_roots
from .orderings import EVENT, Ordering, recorded_streams
from .program import Function, Program
from .races import END, START, Context, ordered_between, window_between
from .rule import handed_out_extra, location, way_of
from .streams import CURRENT_STREAM, HOST, PARAM, UNKNOWN, display, stream_words
from .waits_on_one_way import side_stream_writes_of_outliving_tensors


def callbacks_handing_back_unordered_writes(program: Program, rule_id: str) -> Iterable[Finding]:
    callbacks = sorted(end_of_backward_callbacks(program))
    if not callbacks:
        return
    by_hook = _hook_side_writes(program)
    found: dict[tuple, tuple] = {}  # (callback, hook, stream name) -> the first write left unordered there
    for cid in callbacks:
        callback = program.functions[cid]
        window = window_between(program, callback, START, END)
        for hook, writes in sorted(by_hook.items()):
            if program.functions[hook].file.path != callback.file.path:
                continue  # another subsystem's hook (the lint cannot tell which callback is its)
            waited = {name: _callback_stream(window, name, stream) for name, (stream, _w) in writes.items()}
            waited = {name: stream for name, stream in waited.items() if _waits_for(program, window, stream) and
                      ordered_between(program, callback, START, END, stream, CURRENT_STREAM)}
            if not waited:
                continue  # this callback hands back none of the hook's work
            for name, (stream, candidates) in sorted(writes.items()):
                there = _callback_stream(window, name, stream)
                if name in waited or ordered_between(program, callback, START, END, there, CURRENT_STREAM):
                    continue
                _rank, writer, write, ctx = min(candidates, key=lambda c: c[0])
                found[(cid, hook, name)] = (callback, hook, stream, sorted(waited), writer, write, ctx)
    for key in sorted(found):
        yield _finding(program, rule_id, *found[key])


def _hook_side_writes(program: Program) -> dict[str, dict[str, tuple[str, list]]]:
    """Hook root id -> the last name of each side stream (named, not handed in) its regions write outliving
    tensors on -> (the stream, the writes as (rank, writer, write, context)), for writes no way out of the hook
    orders the current stream after."""
    found: dict[str, dict[str, tuple[str, list]]] = {}
    roots = hook_roots(program)
    for writer, write, ctx in side_stream_writes_of_outliving_tensors(program):
        if ctx.stream.startswith(PARAM) or _waited_after_region(program, ctx):
            continue
        name = display(ctx.stream).rsplit(".", 1)[-1]
        # an attribute first (it outlives the call for sure; a callee's parameter may be its caller's local)
        rank = ("." not in write.path, len(ctx.chain), writer.file.path, write.line, write.column, write.path)
        for root in roots:
            if program.reaches(root, frozenset({ctx.region_fn.id})):
                stream, writes = found.setdefault(root, {}).setdefault(name, (ctx.stream, []))
                writes.append((rank, writer, write, ctx))
    return found


def _waited_after_region(program: Program, ctx: Context) -> bool:
    """The region's function makes the current stream wait for the write's stream after its way into the region."""
    first = ctx.chain[0].call if ctx.chain else None
    anchor = (first.line, first.column) if first else ctx.position
    return ordered_between(program, ctx.region_fn, anchor, END, ctx.stream, CURRENT_STREAM)


def _callback_stream(window: list[Ordering], name: str, stream: str) -> str:
    """The callback's id for the hook's stream `name` (`root_state._post_backward_stream` for the hook's
    `state._post_backward_stream`): a target of its orderings with that last name, else the hook's id."""
    for ordering in window:
        if not ordering.target.startswith((EVENT, PARAM)) and ordering.target not in (CURRENT_STREAM, UNKNOWN, HOST) \
                and display(ordering.target).rsplit(".", 1)[-1] == name:
            return ordering.target
    return stream


def _waits_for(program: Program, window: list[Ordering], stream: str) -> bool:
    """The callback names `stream` in a wait of the current stream: the stream itself, or an event recorded on it
    (not a wait that covers every stream: a device synchronize hands back nothing in particular)."""
    return any(o.waiter == CURRENT_STREAM and (o.target == stream or o.target.startswith(EVENT) and stream in
                                               recorded_streams(program, o.target[len(EVENT):])) for o in window)


def _finding(program: Program, rule_id: str, callback: Function, hook: str, stream: str, waited: list[str],
             writer: Function, write: Access, ctx: Context) -> Finding:
    where = callback.facts.qualname
    hook_name = program.functions[hook].facts.qualname
    window = window_between(program, callback, START, END)
    waits = [o for o in window if o.waiter == CURRENT_STREAM and display(o.target).rsplit(".", 1)[-1] in waited]
    related = way_of(program, ctx, ctx)
    related.extend(location(callback, o.line, o.column, ROLE_SYNC,
                            f"the callback makes the current stream wait for {stream_words(o.target)}")
                   for o in waits[:1])
    related.append(location(callback, callback.facts.line, 1, ROLE_SYNC,
                            f"and never for {stream_words(stream)}"))
    return Finding(
        rule=rule_id,
        message=(f"`{write.path}` is written by `{write.op}` on {stream_words(stream)} in the backward hook "
                 f"`{hook_name}`, which returns without a wait for it; the end-of-backward callback `{where}` makes "
                 f"the current stream wait for the hook's other side streams and not for this one, so the code "
                 f"after `backward()` reads it unordered"),
        primary=location(writer, write.line, write.column, ROLE_WRITE, f"{write.op} in {writer.facts.qualname}"),
        related=tuple(related),
        fix=(f"Make the current stream wait for {stream_words(stream)} in `{where}` on every way through it: "
             f"`torch.cuda.current_stream().wait_stream({display(stream)})` beside the callback's other waits."),
        kind="RAW",
        symbol=where,
        extra=handed_out_extra(write.path, display(stream)),
    )
