"""SC104 through a container of another object: its elements handed to helpers that use them on a side stream,
then the container cleared with no record and no wait between.

DeepSpeed 0.19.8's ZeRO-1/2 gradient reduction:

    self.buffered_reduce_fallback(None, bucket.grads, ...)   # ... allreduce_and_copy(small_bucket):
                                                             #     with stream(self.reduction_stream):
                                                             #         for buf, synced in zip(small_bucket, ...):
                                                             #             buf.copy_(synced)
                                                             #             buf.record_stream(stream)
    ...
    bucket.clear()                                           # IPGBucket.clear: self.grads.clear()

The gradients were allocated by autograd on the current stream; the reduction stream writes them. Dropping the
container's references (with the `param.grad` ones the code drops beside it) gives the blocks back to the current
stream's pool while the reduction stream's copies may still be queued, unless a helper records them for that
stream (`record_stream`, summaries.parameter_lifetimes, followed through rebuilt lists by element_flow.py) or the
function waits for the stream before the clear. The clear is `path.clear()` itself, or `holder.m()` where a method
`m` of the program clears `self.<attr>` (`bucket.grads`: a `clear` whose body calls `self.grads.clear()`).
Reported only where a device op of a helper on the side stream touches an element (not a list of index tuples
iterated beside it), at the clear, with that device op among its related locations.
"""

from __future__ import annotations

from typing import Iterable

from streamcheck.findings import ROLE_FREE, ROLE_READ, ROLE_STREAM_CONTEXT, ROLE_WRITE, Finding

from .element_flow import element_parameters
from .extract import split_index
from .facts import Access, Call, exclusive
from .orderings import site_stream, waits_for
from .program import Function, Program
from .rule import insert_edit, location
from .races import window_between
from .streams import CURRENT_STREAM, HOST, UNKNOWN, display
from .summaries import argument_for, call_lifetimes, parameter_lifetimes, translate

WITNESS_DEPTH = 8  # reduce_ipg_grads -> buffered_reduce_fallback -> allreduce_no_retain -> allreduce_and_copy


def cleared_after_side_use(program: Program, rule_id: str) -> Iterable[Finding]:
    for function in program.functions.values():
        if not function.file.detailed:
            continue
        lifetimes = call_lifetimes(program, function)
        reported: set[str] = set()
        for call, how, path, stream in lifetimes:
            if how != "side" or "." not in path or path in reported or stream in (CURRENT_STREAM, UNKNOWN) \
                    or _recorded(function, lifetimes, call, path, stream):
                continue
            clear = _cleared(program, function, path, call)
            if clear is None or _waits_for_side(program, function, stream, call, clear[0]):
                continue
            witness = _device_use(program, function, call, path, stream)
            if witness is None:
                continue
            reported.add(path)
            yield _finding(rule_id, function, call, path, stream, clear, witness)


def _recorded(function: Function, lifetimes: list, call: Call, path: str, stream: str) -> bool:
    """Whether the function records `path` for `stream` itself, or a call that can run with `call` (not in the
    other arm of an if/else: `if compact: fallback_fp32(bucket.grads)` / `else: fallback(bucket.grads)`) hands
    it to a helper that does."""
    facts = function.facts
    return any(u.path == path and u.how == "record_stream" for u in facts.uses) or any(
        how == "record" and recorded == path and on == stream and not exclusive(facts, call.line, other.line)
        for other, how, recorded, on in lifetimes)


def _waits_for_side(program: Program, function: Function, stream: str, after: Call, before: Call) -> bool:
    """Whether the current stream or the host waits for `stream` (or the whole device) between the two calls on
    some way to `before`: by the function's own orderings or by what a call between always does (the race query's
    window, races.window_between). Only such a wait: one by another stream (an offload event's
    `copy_stream.wait_event(...)`, a parameter stream) does not order the current stream's next allocation."""
    window = window_between(program, function, (after.line, after.column), (before.line, before.column))
    return any(o.waiter in (CURRENT_STREAM, HOST) and waits_for(program, o, stream) for o in window)


def _cleared(program: Program, function: Function, path: str, call: Call) -> tuple[Call, str] | None:
    """The first call after `call` that clears the container `path` (and how it does), None when there is none.
    The holder must not be bound to another object in between."""
    holder, _, attr = path.rpartition(".")
    if "." in attr or "[" in path:
        return None
    clears = program.memo("cleared_containers.clears", lambda: _clearing_methods(program))
    component = program.component(function.file)
    root = holder.split(".", 1)[0]
    rebinds = [u.line for u in function.facts.uses if u.path == root and u.how == "rebind"]
    for later in sorted(function.facts.calls, key=lambda c: (c.line, c.column)):
        if later.line <= call.line or exclusive(function.facts, call.line, later.line):
            continue
        receiver, _, method = later.callee.rpartition(".")
        clearing = clears.get((component, method), {})
        if later.callee == f"{path}.clear":
            how = f"`{path}.clear()`"
        elif receiver == holder and attr in clearing:
            how = f"`{later.callee}()` ({clearing[attr]}: `self.{attr}.clear()`)"
        else:
            continue
        # `bucket = self.ipg_buckets[k]` again between the two: the same container only when bound from the same
        # source each time (DeepSpeed's reduce_ipg_grads walks its buckets twice)
        if any(call.line < line < later.line for line in rebinds) and not _one_source(function, root):
            return None
        return later, how
    return None


def _one_source(function: Function, local: str) -> bool:
    """Whether every binding of the local takes an element or view of one and the same path
    (FunctionFacts.derived)."""
    derived = {source for name, source, _line in function.facts.derived if name == local}
    bindings = sum(1 for name, _source, _line in function.facts.derived if name == local)
    rebinds = sum(1 for u in function.facts.uses if u.path == local and u.how == "rebind")
    return len(derived) == 1 and bindings >= rebinds


def _clearing_methods(program: Program) -> dict[tuple[str, str], dict[str, str]]:
    """(component, method name) -> attribute -> the qualname of a method of that name in that component
    (program.component: a top-level package) whose body calls `self.<attr>.clear()`."""
    found: dict[tuple[str, str], dict[str, str]] = {}
    for function in program.functions.values():
        if not function.owner:
            continue
        for call in function.facts.calls:
            parts = call.callee.split(".")
            if len(parts) == 3 and parts[0] == "self" and parts[2] == "clear" and not call.args:
                key = (program.component(function.file), function.facts.name)
                found.setdefault(key, {}).setdefault(parts[1], function.facts.qualname)
    return found


def _device_use(program: Program, function: Function, call: Call, path: str, stream: str
                ) -> tuple[Function, Access] | None:
    """A device op on the side stream `stream` (in `function`'s frame) that some helper reached from `call`
    makes on an element of what `function` passes there as `path`; None when only bookkeeping touches it."""
    todo = [found for callee_call, edges in program.exact_edges_of(function.id) if callee_call == call
            for found in _side_parameters(program, function, call, edges, stream, path, {})]
    seen: set[tuple[str, str]] = set()
    for _ in range(WITNESS_DEPTH):
        following = []
        for helper, param, own in todo:
            if (helper.id, param) in seen:
                continue
            seen.add((helper.id, param))
            held = element_parameters(program, helper)
            for access in helper.facts.accesses:
                root = split_index(access.path.split(".", 1)[0])[0]
                if access.region >= 0 and site_stream(program, helper, access.region) == own \
                        and not access.fresh and (root == param or param in held.get(root, ())):
                    return helper, access
            for inner_call, edges in program.exact_edges_of(helper.id):
                following += _side_parameters(program, helper, inner_call, edges, own, param, held)
        todo = following
        if not todo:
            break
    return None


def _side_parameters(program: Program, caller: Function, call: Call, edges: list, stream: str, path: str,
                     held: dict[str, frozenset[str]]) -> list[tuple[Function, str, str]]:
    """(callee, parameter, its stream) for each parameter a callee of `call` uses on a side stream that is
    `stream` in the caller's frame, where the call hands it the caller's `path` (or a local list of its
    elements: `held`, element_flow.element_parameters)."""
    found = []
    for edge in edges:
        callee = program.functions[edge.callee]
        for how, param, own in parameter_lifetimes(program, edge.callee):
            if how != "side" or translate(program, caller, call, callee, own) != stream:
                continue
            arg = argument_for(callee, call, param)
            root = split_index(arg)[0] if arg is not None else None
            if root is not None and (root == path or path in held.get(root, ())):
                found.append((callee, param, own))
    return found


def _finding(rule_id: str, function: Function, call: Call, path: str, stream: str, clear: tuple[Call, str],
             witness: tuple[Function, Access]) -> Finding:
    release, how = clear
    helper, use = witness
    shown = display(stream)
    return Finding(
        rule=rule_id,
        message=(f"the elements of `{path}` are used on stream `{shown}` by `{helper.facts.qualname}` and the "
                 f"container is cleared by {how} with no `record_stream({shown})` and no wait for `{shown}`: once "
                 f"their last reference goes, the allocator may hand their memory to new work while the side "
                 f"stream still uses it"),
        primary=location(function, release.line, release.column, ROLE_FREE, f"cleared in {function.facts.qualname}"),
        related=(location(helper, use.line, use.column, ROLE_WRITE if use.kind == "write" else ROLE_READ,
                          f"`{use.op}` on `{shown}` in {helper.facts.qualname}"),
                 location(function, call.line, call.column, ROLE_STREAM_CONTEXT,
                          f"`{call.callee}` uses its elements on `{shown}`")),
        fix=(f"Record each element for the side stream after its use in `{helper.facts.qualname}` "
             f"(`t.record_stream({shown})`), or make the current stream wait for `{shown}` before line "
             f"{release.line}: `torch.cuda.current_stream().wait_stream({shown})`."),
        kind="FREE",
        symbol=function.facts.qualname,
        # A list has no `record_stream`: the edit `--fix` applies is the wait, before the clear.
        extra={"path": path, "stream": shown,
               "fix_edit": insert_edit(function, release.line, release.column,
                                       f"torch.cuda.current_stream().wait_stream({shown})",
                                       f"before the clear at line {release.line}")},
    )
