"""A side stream that nothing ever makes wait overwrites a tensor that came from outside its function (one of
SC106's overwrites).

A tensor a function gets from outside (a parameter, an element of one it loops over, a `self.` attribute, a value
taken out of an attribute's container) lives on the current stream: the model's forward and backward, the
optimizer and the caller's kernels read it there. A side stream that writes it (`gpu_param.data.copy_(cpu,
non_blocking=True)` under `with torch.cuda.stream(self._h2d_stream):`) must first wait for the current stream, or
its copy can land while kernels queued earlier on the current stream still read the old values. Megatron's hybrid
optimizer (`self._h2d_stream.wait_stream(torch.cuda.current_stream())` before copying the updated params back)
and torchrec's `inplace_copy_to_gpu` ("the dedicated memcpy stream waits for the current stream, which allocated
the destination storage") do exactly that.

What tells a missing wait from one the lint cannot see: the side stream is made to wait (`wait_stream`,
`wait_event`, as the waiter) nowhere in the whole program, so no caller, hook or event path can be ordering it.
A stream the lint cannot name across classes (handed to a constructor, a parameter whose name is waited
somewhere) is left alone, as are streams no class of the scan creates (an attribute nothing assigns: code that
cannot run), host buffers (a download into pinned memory), and tensors bound anew in the function (other rules
follow those).
"""

from __future__ import annotations

from typing import Iterable

from streamcheck.findings import ROLE_STREAM_CONTEXT, ROLE_WRITE, Finding

from .facts import NO_REGION, Access
from .hazard_flow import HOST_WORDS, where
from .orderings import orderings_of, site_stream
from .program import Function, Program
from .fresh_block_on_side_stream import ordered_on_every_way
from .races import CALLER_LEVELS
from .rule import insert_edit, location
from .streams import (CURRENT_STREAM, DEFAULT_STREAM, PARAM, UNKNOWN, as_code, display, handed_in, stream_words,
                      writable)
from .summaries import translate

WAITING_KINDS = frozenset({"wait_stream", "wait_event"})
# How many callers up a stream handed down as a parameter is followed to the stream it is (torchrec's maglev
# driver hands `self._memcpy_stream` down three calls to `inplace_copy_to_gpu`).
PARAMETER_LEVELS = 4


def writes_on_never_waiting_streams(program: Program, rule_id: str) -> Iterable[Finding]:
    waiters = program.memo("unwaited.waiters", lambda: _waiters(program))
    for function in program.functions.values():
        reported: set[int] = set()
        for write in function.facts.accesses:
            if write.kind != "write" or write.region == NO_REGION or write.fresh or write.region in reported:
                continue
            stream = site_stream(program, function, write.region)
            streams = _as_callers_name_it(program, function, stream, PARAMETER_LEVELS)
            if not streams or any(_key(fn, s) in waiters or not _nameable(program, s) for fn, s in streams):
                continue
            shown = _from_outside(program, function, write, stream)
            if shown is None:
                continue
            if ordered_on_every_way(program, function, (write.line, write.column), CURRENT_STREAM, stream,
                                    CALLER_LEVELS):
                continue  # a host synchronize before it, on its way
            reported.add(write.region)  # one finding per region: its first such write
            yield _finding(function, rule_id, write, stream, shown)


def _waiters(program: Program) -> set[tuple[str, str]]:
    """Every stream some code makes wait, keyed as `_key` does; a parameter stream as its callers name it."""
    found = set()
    for function in program.functions.values():
        for ordering in orderings_of(program, function):
            if ordering.kind in WAITING_KINDS:
                found.update(_key(fn, s) for fn, s in _as_callers_name_it(
                    program, function, ordering.waiter, PARAMETER_LEVELS))
    return found


def _key(function: Function, stream: str) -> tuple[str, str]:
    """A stream's identity for "is it waited somewhere": a local's name (`side = torch.cuda.Stream()`) means one
    stream per file at most (the engine names locals by their text); attributes and the rest are program-wide."""
    local = not stream.startswith(("self.", "cls.", PARAM)) and "@" not in stream
    return (function.file.path if local else "", stream)


def _as_callers_name_it(program: Program, function: Function, stream: str,
                        levels: int) -> set[tuple[Function, str]]:
    """(function, stream) for what a parameter stream is at the calls of `function` (up the callers, `levels`
    deep); the stream itself when it is no parameter; empty when some call leaves it unknown."""
    if not stream.startswith(PARAM):
        return {(function, stream)}
    sites = program.call_sites.get(function.id, ())
    if levels == 0 or not sites:
        return set()
    found: set[tuple[Function, str]] = set()
    for caller, call in sites:
        there = _as_callers_name_it(program, caller, translate(program, caller, call, function, stream), levels - 1)
        if not there:
            return set()
        found |= there
    return found


def _nameable(program: Program, stream: str) -> bool:
    """A stream the lint knows by one name everywhere: not the current or default stream, not unknown, not one a
    constructor was handed; an attribute its class assigns."""
    if stream in (CURRENT_STREAM, DEFAULT_STREAM, UNKNOWN) or handed_in(program, stream):
        return False
    if stream.startswith("self.") and "@" in stream:
        text, owner = stream.split("@", 1)
        path, _, cls = owner.partition("::")
        attr = text.split(".")[1]
        return any(attr in method.facts.self_assigns for method in program.functions_of_class_at(path, cls))
    return True


def _made_on(program: Program, function: Function, path: str, stream: str) -> bool:
    """Whether a method of the class binds `path` to a new tensor inside a region of `stream`."""
    return any(use.path == path and use.how == "rebind" and use.arg != "None" and use.region != NO_REGION
               and program.stream_id(other, other.facts.regions[use.region]) == stream
               for other in program.functions_of_class(function) for use in other.facts.uses)


def _from_outside(program: Program, function: Function, write: Access, stream: str) -> str | None:
    """How to name the written tensor when it came from outside the function and lives on the device (a
    parameter's path, a `self.` path, a local taken out of an attribute's container, or a loop variable over one
    of these: a plain name the function never binds otherwise); None for any other tensor."""
    facts = function.facts
    root = write.path.split(".", 1)[0]
    # A local taken out of a container is written under the container's path; its own name says more.
    taken = [local for local, container, line in facts.taken if container == write.path and line <= write.line]
    name = (taken[-1] if taken else write.path.rsplit(".", 1)[-1]).lower()
    if any(word in name for word in HOST_WORDS) or (not taken and where(program, function, write.path,
                                                                         write.line) == "host"):
        return None
    if taken:
        return f"`{taken[-1]}` (taken out of `{write.path}`)"
    if any(u.path == write.path and u.how == "rebind" and (u.line, u.column) < (write.line, write.column)
           for u in facts.uses):
        return None  # bound anew here first
    if write.path.startswith("self.") and _made_on(program, function, write.path, stream):
        return None  # the class allocates it on this very stream: the stream owns the block
    if write.path.startswith("self.") or (root in facts.params and root not in ("self", "cls")):
        return f"`{write.path}`"
    if "." in write.path or any(u.path == root and u.how == "rebind" for u in facts.uses):
        return None
    iterated = [u for u in facts.uses if u.arg == "for" and u.line <= write.line and (
        u.path.startswith("self.") or u.path.split(".", 1)[0] in facts.params)]
    if not iterated:
        return None
    last = max(u.line for u in iterated)
    over = ", ".join(dict.fromkeys(f"`{u.path}`" for u in iterated if u.line == last))
    return f"`{write.path}` (bound by the loop over {over})"


def _finding(function: Function, rule_id: str, write: Access, stream: str, shown: str) -> Finding:
    region = function.facts.regions[write.region]
    waiter = as_code(stream)
    extra = {"path": write.path, "writer_stream": display(stream), "other_stream": display(CURRENT_STREAM)}
    if writable(waiter):
        extra["fix_edit"] = insert_edit(function, region.line, region.column,
                                        f"{waiter}.wait_stream(torch.cuda.current_stream())",
                                        f"before the `with` at line {region.line}")
    return Finding(
        rule=rule_id,
        message=(f"{shown} comes from outside `{function.facts.qualname}` (the current stream's kernels use "
                 f"it) and is overwritten by `{write.op}` on {stream_words(stream)}, which nothing in the program "
                 f"ever makes wait: kernels queued earlier on the current stream may still read it"),
        primary=location(function, write.line, write.column, ROLE_WRITE, f"{write.op} in {function.facts.qualname}"),
        related=(location(function, region.line, region.column, ROLE_STREAM_CONTEXT,
                          f"switches to {stream_words(stream)}"),),
        fix=(f"Make `{waiter}` wait for the current stream before the region: "
             f"`{waiter}.wait_stream(torch.cuda.current_stream())` before the `with` at "
             f"{function.file.path}:{region.line}."),
        kind="WAR",
        symbol=function.facts.qualname,
        extra=extra,
    )
