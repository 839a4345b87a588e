"""Async handles carried to a loop's next iteration: the wait at the top of the body orders that iteration's use.

DeepSpeed's Domino transformer launches `fwd_handle1 = dist.all_reduce(hidden_states1, async_op=True)` at the end
of a layer's loop body and waits it at the top of the next iteration, right before `bias_dropout_add_func(
hidden_states1, ...)` reads the tensor. Source order puts the read before the launch, so the use-before-wait query
(which looks after the launch) does not see it; here the loop's body is read once more from its first line, as the
next iteration runs it, up to the launch.

Only a tensor the body makes afresh before the launch (a rebinding in the loop, before the launch) and keeps to the
body's end (no rebinding or free after the launch) is carried: a loop variable or an element `bufs[i]` is another
tensor in the next iteration. A wait of the handle after the launch in the same body leaves nothing to carry.
"""

from __future__ import annotations

from .facts import AsyncWork, Use
from .facts import exclusive
from .program import Function, Program
from .travelling_handles import MENTIONS, TOUCHES


def carried_touch(program: Program, function: Function, work: AsyncWork, tensor: str, waited_by_call) -> Use | None:
    """The first touch of `tensor` in the next iteration of the innermost loop around `work`, before any wait of
    its handle there, or None."""
    facts = function.facts
    loops = [(a, b) for a, b in facts.loops if a <= work.line <= b]
    if not loops or not work.handle:
        return None
    first, last = max(loops)  # the innermost: it starts last
    handles = {work.handle} | {u.arg for u in facts.uses if u.path == work.handle and u.how == "escape" and u.arg}
    body = sorted((u for u in facts.uses if first <= u.line <= last), key=lambda u: (u.line, u.column))
    after = [u for u in body if u.line > work.end_line]
    if any(u.path in handles and u.how == "wait" for u in after) or waited_by_call(
            program, function, work.end_line, last + 1):
        return None  # waited in the iteration that launched it
    if any(u.path == tensor and u.how in ("rebind", "free") for u in after):
        return None  # another tensor (or none) by the end of the body
    before = [u for u in body if u.line < work.line]
    if not any(u.path == tensor and u.how == "rebind" for u in before):
        return None  # not made afresh in the body: a loop variable's or a container's element, or one tensor
    for use in before:  # the next iteration, from the body's first line to the launch
        if use.path in handles and use.how == "wait":
            return None
        if use.path != tensor or exclusive(facts, work.line, use.line):
            continue
        if use.how in ("rebind", "free", "escape"):
            return None
        if use.how in TOUCHES and use.arg not in MENTIONS:
            if waited_by_call(program, function, first - 1, use.line):
                return None
            return use
    return None
