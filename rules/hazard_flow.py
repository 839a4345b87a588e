"""Program order inside one function, shared by SC102-SC105: where a tensor lives, what a path does after a
line, and whether the host or a stream was ordered in between.

The hazard rules are intra-procedural: a non_blocking copy, an async collective or a side-stream use is matched
with what the same function does to the same name or `self.` path afterwards, in source order. A branch that
cannot run after another (`if` body vs. its `else`) is skipped, and an ordering counts when it lies on some path
to the later use (inside an `if` too, but not in a block that returns first), as in the engine's race query.
Calls in between count when the callee always blocks the host (SC102/SC103) or orders (SC104), from its summary
(summaries.py).
"""

from __future__ import annotations

from typing import Iterator
from weakref import WeakKeyDictionary

from .facts import AsyncCopy, FunctionFacts, Placement, Use, exclusive
from .program import Function, Program
from .races import exits_before
from .streams import HOST
from .summaries import performed

HOST_BLOCKING_SYNCS = frozenset({"synchronize", "host_sync"})
STREAM_ORDERING_SYNCS = frozenset({"wait_stream", "wait_event", "synchronize", "host_sync"})

# Words in a path's last name that say where the tensor lives, when no assignment says it.
HOST_WORDS = ("cpu", "pinned", "pin_", "host")
DEVICE_WORDS = ("gpu", "cuda", "device")

_class_placements: "WeakKeyDictionary[Program, dict]" = WeakKeyDictionary()


def uses_after(facts: FunctionFacts, path: str, line: int, end_line: int | None = None) -> Iterator[Use]:
    """Uses of `path` after the statement spanning `line`..`end_line`, in source order, minus the other arm of an
    if/else holding `line`. A temporary (`(to@12:9)`, the unbound result of a copy) is used where it is made."""
    last = end_line or line
    temporary = path.startswith("(")
    for use in sorted((u for u in facts.uses if u.path == path), key=lambda u: (u.line, u.column)):
        if (temporary or use.line > last) and not exclusive(facts, line, use.line):
            yield use


def where(program: Program, function: Function, path: str, line: int) -> str:
    """"host" (pinned or pageable), "device" or "" for the tensor `path` holds at `line`."""
    bound = [p for p in function.facts.placements if p.path == path and p.line <= line]
    if bound:
        return _kind(max(bound, key=lambda p: p.line))
    if path.startswith("self.") and function.owner:
        found = {_kind(p) for p in _placements_of_class(program, function).get(path, ())} - {""}
        if len(found) == 1:
            return found.pop()
    name = path.rsplit(".", 1)[-1].lower()
    if any(word in name for word in HOST_WORDS):
        return "host"
    if any(word in name for word in DEVICE_WORDS):
        return "device"
    return ""


def _kind(placement: Placement) -> str:
    return "host" if placement.where in ("host", "pinned") else placement.where


def _placements_of_class(program: Program, function: Function) -> dict[str, list[Placement]]:
    by_class = _class_placements.setdefault(program, {})
    key = (function.file.path, function.owner)
    if key not in by_class:
        found: dict[str, list[Placement]] = {}
        for other in program.functions_of_class(function):
            for placement in other.facts.placements:
                found.setdefault(placement.path, []).append(placement)
        by_class[key] = found
    return by_class[key]


def direction(program: Program, function: Function, copy: AsyncCopy) -> str:
    """"d2h", "h2d" or "" (unknown, or a copy that stays on one side) for a non_blocking copy."""
    if copy.op == "cpu":
        return "d2h"
    src = where(program, function, copy.src, copy.line) if copy.src else ""
    if copy.op == "copy_":
        dst = where(program, function, copy.dst, copy.line)
        if dst == "host" and src != "host":
            return "d2h"
        if src == "host" and dst != "host":
            return "h2d"
        return ""
    if copy.op == "to":
        target = copy.target.lower()
        if "cpu" in target:
            return "d2h" if src != "host" else ""
        return "h2d" if src == "host" else ""
    return "h2d" if src == "host" else ""  # `.cuda(non_blocking=True)`


def host_blocked_between(program: Program, function: Function, start: int, end: int, skip: set[str]) -> bool:
    """Whether the host waits for the device after line `start` and before `end` on some path to `end` (an
    ordering inside an `if` counts; one in a block that returns before `end` does not): a stream, event or
    device `synchronize()`, a blocking `.item()` / `.cpu()` / `.tolist()` on a tensor other than those in `skip`
    (which live on the host), or a call that does one of these (summaries.py)."""
    for sync in function.facts.syncs:
        if sync.kind in HOST_BLOCKING_SYNCS and start < sync.line < end and not exits_before(function, sync.line, end):
            if sync.kind == "host_sync" and _on_path(sync.receiver, skip):
                continue  # `.item()` of a host tensor waits for nothing
            return True
    return _calls_between(program, function, start, end, HOST)


def _on_path(receiver: str, paths: set[str]) -> bool:
    """Whether a receiver's text (`h`, `h[]`, `self.buf.view()`) starts with one of `paths`."""
    return any(receiver == p or receiver.startswith((p + ".", p + "[")) for p in paths)


def stream_ordered_between(program: Program, function: Function, start: int, end: int) -> bool:
    """Whether a wait_stream / wait_event / synchronize / blocking host read lies between `start` and `end` on
    some path to `end`."""
    for sync in function.facts.syncs:
        if sync.kind in STREAM_ORDERING_SYNCS and start < sync.line < end \
                and not exits_before(function, sync.line, end):
            return True
    return _calls_between(program, function, start, end, None)


def stream_ordered_on_every_way(program: Program, function: Function, start: int, end: int) -> bool:
    """`stream_ordered_between`, and no if/else between the two lines leaves the ordering to one arm while the
    other does nothing of the kind (torchrec's `DeferrableMetrics.update` synchronizes the transfer's event when
    resolved, and in its `elif` only hands it to a callback that runs later): for a caller that may drop what it
    passed as soon as the call returns, an ordering on one way out is no ordering on the other."""
    if not stream_ordered_between(program, function, start, end):
        return False
    # (a function handed to the call, `future.add_done_callback(fn)`, runs some time later: not on the way out)
    lines = [s.line for s in function.facts.syncs if s.kind in STREAM_ORDERING_SYNCS and start < s.line < end] + [
        call.line for call, edges in program.calls_of(function.id) if start < call.line < end
        and any(performed(program, edge.callee) for edge in edges
                if program.functions[edge.callee].facts.name == call.callee.rsplit(".", 1)[-1])]
    for body_start, body_end, else_start, else_end in function.facts.branches:
        if body_start <= start or else_end >= end:
            continue
        in_body = any(body_start <= line <= body_end for line in lines)
        in_else = any(else_start <= line <= else_end for line in lines)
        beside = any(not (body_start <= line <= body_end or else_start <= line <= else_end) for line in lines)
        if in_body != in_else and not beside:
            return False
    return True


def _calls_between(program: Program, function: Function, start: int, end: int, waiter: str | None) -> bool:
    """A call between the two lines that always orders something (its summary), the host if `waiter` is HOST."""
    for call, edges in program.calls_of(function.id):
        if start < call.line < end and not exits_before(function, call.line, end):
            for edge in edges:
                pairs = performed(program, edge.callee)
                if pairs and (waiter is None or any(w == waiter for w, _ in pairs)):
                    return True
    return False
