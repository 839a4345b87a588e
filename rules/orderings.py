"""Orderings as happens-before edges with their targets: who waits (a stream, or the host) for whom.

| source                                   | waiter                      | target                              |
|------------------------------------------|-----------------------------|-------------------------------------|
| `a.wait_stream(b)`                       | stream a                    | stream b                            |
| `s.wait_event(e)`, `e.wait(s)`, `e.wait()` | s (the site's stream)     | the streams `e` is recorded on      |
| `s.synchronize()`                        | the host                    | stream s                            |
| `e.synchronize()`                        | the host                    | the streams `e` is recorded on      |
| `torch.cuda.synchronize()`, configured   | the host                    | every stream                        |
| `.item()`, `.tolist()`, `.cpu()`         | the host                    | the site's stream                   |
| `work.wait()` (a handle, not an event)   | the site's stream           | its collective's launching streams  |

(The collective followed its launching streams' earlier work; a handle whose launch the scan does not see waits
for the communication stream, COMM, only.)

An event is recorded where the scan sees `e.record(s)` / `s.record_event()`, also through a helper it is handed
to (`launch(plan, stream, self.events[i])` recording its parameter: the caller's `self.events` on the caller's
`stream`). A target the source does not pin down (an event recorded nowhere in the scan, a stream the engine
cannot name) orders everything: the lint reports what nothing orders, so that what it reports is real. The waiter
of a host wait is `HOST`: every launch the host makes afterwards, on any stream, follows the target's earlier work.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING

from .extract import split_index
from .facts import NO_REGION, Sync
from .hooks import hook_run_functions
from .streams import (CURRENT_STREAM, DEFAULT_STREAM, EARLIER_HOOK_CALL, HOST, PARAM, UNKNOWN, handed_in,
                      holds_captured_current, names_current, names_default, stream_id)

if TYPE_CHECKING:
    from .callgraph import Function
    from .program import Program

ANY_STREAM = "*"
COMM = "<comm>"  # the communication library's stream: what `work.wait()` waits for
EVENT = "event:"  # prefix of an event's identity as an ordering's target
WORK = "work:"  # prefix of an async collective handle's identity as an ordering's target
RECORD_HANDOFF_LEVELS = 3  # how many calls up an event a helper records is followed to the caller's name for it


@dataclass(frozen=True)
class Ordering:
    kind: str  # the Sync kind it comes from
    waiter: str  # a stream id, or HOST
    target: str  # a stream id, ANY_STREAM, or EVENT + the event's identity
    line: int
    column: int
    region: int = NO_REGION


def site_stream(program: "Program", function: "Function", region: int) -> str:
    """The stream code at a site runs on, relative to the function: its innermost region's, else the current."""
    if region == NO_REGION:
        return CURRENT_STREAM
    return stream_id(program, function, function.facts.regions[region])


def event_id(program: "Program", function: "Function", text: str, line: int = 0) -> str:
    """An event's identity: a `self.` path per owning class, any other path per function. An event taken out
    of a container (`self.events[m].popleft()`, `events[0]`) is the container's: at `line`, the take in force
    there, none when the local was bound again since (`tensor, event = self._fwd_stash.pop(k)` ... `event =
    self.s1.record_event()`: a wait of `event` after the second binding waits the new event, not the stash's);
    with no line, the last take. So is an element of an attribute's container held by a local (`for k, (out, done)
    in self._buffers.items(): done.record(s)`, vLLM's engram prefetch, whose other method waits `out, done =
    self._buffers[k]`)."""
    text = _TAKEN.sub("", text)
    container = taken_container(function, text, line) or next(
        (source for local, source, bound in reversed(function.facts.derived)
         if local == text and source.startswith("self.") and (not line or bound <= line)), "")
    if container:  # `_, ev = self.stash[i]`: the container's events
        text = container
    elif "." in text:
        text = _through_held_element(function, text, line)
    if text.startswith("self."):
        attr = text.split(".")[1]
        return f"{text}@{program.attr_owner(function.file.path, function.owner, attr)}"
    owner = function.facts.outer_names.get(text.split(".", 1)[0].split("[", 1)[0])
    if owner:  # a closure's name: the enclosing function's (one list of events for its sibling closures)
        return f"{function.file.path}::{owner}::{text}"
    return f"{function.id}::{text}"


def _through_held_element(function: "Function", text: str, line: int) -> str:
    """`bucket.reuse_events` where the local `bucket` holds an element of an attribute's container (`bucket =
    self.ipg_buckets[dtype]`): `self.ipg_buckets.reuse_events`, one name in every method that takes an element out
    (DeepSpeed ZeRO-1/2 records each IPG bucket's reuse event in one method and waits it in another)."""
    root, _, rest = text.partition(".")
    container = taken_container(function, root, line)
    return f"{container}.{rest}" if container.startswith("self.") else text


def taken_container(function: "Function", local: str, line: int = 0) -> str:
    """The container `local` holds an element of at `line` (FunctionFacts.taken less .rebound), "" for none."""
    takes = [(at, container) for name, container, at in function.facts.taken if name == local
             and (not line or at <= line)]
    if not takes:
        return ""
    at, container = takes[-1] if not line else max(takes)
    if line and any(name == local and at < bound <= line for name, bound in function.facts.rebound):
        return ""
    return container


_TAKEN = re.compile(r"(\[\]|\.(pop|popleft|get|get_nowait|__getitem__)\(\))+$")


def orderings_of(program: "Program", function: "Function") -> list[Ordering]:
    """The orderings `function` performs itself, in source order."""
    if not function.facts.syncs:
        return []  # (most functions: asked for about 400 k times on vLLM 0.33.0)
    return program.memo(("orderings", function.id), lambda: _orderings(program, function))


def orderings_in_program(program: "Program") -> list[tuple["Function", Ordering]]:
    """(function, ordering) of every ordering in the program, function by function in source order: the few
    functions that order anything, found once (asking orderings_of of all 50 k functions of vLLM 0.33.0 for each
    stream a rule asks about took 0.6 s)."""
    return program.memo("orderings.in_program", lambda: [
        (function, ordering) for function in program.functions.values() if function.facts.syncs
        for ordering in orderings_of(program, function)])


def _taken_from_a_container(function: "Function", text: str) -> bool:
    """A plain local bound only as an element of a container (a loop's variable: FunctionFacts.derived), not to a
    stream expression the function names."""
    return text.isidentifier() and text not in function.facts.stream_aliases \
        and any(local == text for local, _source, _line in function.facts.derived)


def _orderings(program: "Program", function: "Function") -> list[Ordering]:
    found = []
    for sync in function.facts.syncs:
        ordering = _ordering(program, function, sync)
        if ordering is not None:
            found.append(ordering)
    return found


def _ordering(program: "Program", function: "Function", sync: Sync) -> Ordering | None:
    here = site_stream(program, function, sync.region)

    def make(waiter: str, target: str) -> Ordering:
        return Ordering(sync.kind, waiter, target, sync.line, sync.column, sync.region)

    def stream(text: str) -> str:
        if not text:
            return here
        if names_default(text):  # the current stream, except inside a hook (hooks.py)
            return DEFAULT_STREAM if function.id in hook_run_functions(program) else CURRENT_STREAM
        return named_stream(program, function, text, here)

    if sync.kind == "wait_stream":
        if sync.arg and _taken_from_a_container(function, sync.arg):
            # `for s in bucket.copy_streams: side.wait_stream(s)`: the streams some code collected, which the lint
            # cannot name (DeepSpeed #8080's fix waits for every stream a gradient hook copied on)
            return make(stream(sync.receiver), UNKNOWN)
        return make(stream(sync.receiver), stream(sync.arg) if sync.arg else UNKNOWN)
    if sync.kind in ("wait_event", "wait"):
        if sync.method == "wait_event":
            return make(stream(sync.receiver), _event_target(program, function, sync.arg, sync.line))
        handle = event_id(program, function, sync.receiver, sync.line)
        if sync.kind == "wait" and not recorded_streams(program, handle):
            # A work handle or future: the collective's end, which followed its launching stream's earlier work
            # (where the scan sees the launch), else only the communication stream.
            launched = launch_streams(program, handle)
            if len(launched) == 1:  # one launching stream, named as the launch site names it (its frame: a
                return make(here, next(iter(launched)))  # region's stream when a call from a region got there)
            return make(here, WORK + handle if launched else COMM)
        return make(stream(sync.arg), _event_target(program, function, sync.receiver, sync.line))
    if sync.kind == "synchronize":
        return make(HOST, _synchronized(program, function, sync, here))
    if sync.kind == "host_sync":
        return make(HOST, here)
    return None


def _synchronized(program: "Program", function: "Function", sync: Sync, here: str) -> str:
    receiver = sync.receiver
    if sync.method != "synchronize":
        return ANY_STREAM  # a configured sync callable (`sync-callables`): it orders everything, as declared
    if not receiver or receiver.split(".", 1)[0] in function.file.imports or receiver.endswith("get_accelerator()"):
        return ANY_STREAM  # torch.cuda.synchronize(), get_accelerator().synchronize(), a configured sync
    if "event" in receiver.lower() or recorded_streams(program, event_id(program, function, receiver, sync.line)):
        return _event_target(program, function, receiver, sync.line)
    if names_current(receiver):
        return here
    return stream_id(program, function, receiver)


def _event_target(program: "Program", function: "Function", text: str, line: int = 0) -> str:
    if not text:
        return ANY_STREAM
    return EVENT + event_id(program, function, text, line)


def recorded_streams(program: "Program", event: str) -> frozenset[str]:
    """Every stream an event is recorded on anywhere in the program (empty when the scan never records it)."""
    index = program.memo("orderings.records", lambda: _records(program))
    return index.get(event, frozenset())


def recording_stream(program: "Program", function: "Function", sync: Sync) -> str:
    """The stream a record puts its event on: `ev.record(s)` / `s.record_event()` name it, else the current one."""
    here = site_stream(program, function, sync.region)
    return named_stream(program, function, sync.arg, here) if sync.arg else here


def named_stream(program: "Program", function: "Function", text: str, here: str) -> str:
    """The stream `text` stands for at a site that runs on `here`. `current_stream()` called there is `here`; a
    value that holds the current stream taken earlier (`cur = current_stream()` outside the region, vLLM's
    `self.main_stream` captured in `__init__`) is the stream current then: the function's own, not the region's
    (else `self.broadcast_stream.wait_stream(self.main_stream)` inside `with stream(self.broadcast_stream)` would
    read as the stream waiting for itself)."""
    sid = stream_id(program, function, text)
    if sid == CURRENT_STREAM and (text in function.facts.stream_aliases or holds_captured_current(program, function,
                                                                                                  text)):
        return CURRENT_STREAM
    return here if sid == CURRENT_STREAM else sid


def _records(program: "Program") -> dict[str, frozenset[str]]:
    found: dict[str, set[str]] = {}
    handed: list[tuple["Function", str, str]] = []  # (function, its parameter recorded, the stream in its frame)
    for function in program.functions.values():
        local: dict[str, set[str]] = {}
        for sync in function.facts.syncs:
            if sync.kind == "record":
                stream = recording_stream(program, function, sync)
                local.setdefault(sync.receiver, set()).add(stream)
                found.setdefault(event_id(program, function, sync.receiver, sync.line), set()).add(stream)
                if sync.receiver in function.facts.params and sync.receiver not in ("self", "cls"):
                    handed.append((function, sync.receiver, stream))
        for sync in function.facts.syncs:
            if sync.kind == "store":  # `self.events.append(event)`: the container holds what `event` was
                found.setdefault(event_id(program, function, sync.receiver), set()).update(local.get(sync.arg, ()))
    for event, streams in _recorded_through_parameters(program, handed).items():
        found.setdefault(event, set()).update(streams)
    return {k: frozenset(v) for k, v in found.items()}


def _recorded_through_parameters(program: "Program", handed: list[tuple["Function", str, str]]
                                 ) -> dict[str, set[str]]:
    """An event handed to a helper that records it (Megatron's copy service calls `launch_pack(plan,
    self.pack_stream, self.torch_pack_stream, self.pack_events[i % 2])`, which does
    `pack_event.record(stream=torch_pack_stream)`): at each call the caller's argument is recorded on the stream
    the helper records on, as the caller names it. Wrappers that pass the event on are followed a few levels up.
    Without this the caller's event is recorded nowhere in the scan, and a wait for it orders everything."""
    from .summaries import argument_for, translate  # summaries imports this module

    found: dict[str, set[str]] = {}
    for _ in range(RECORD_HANDOFF_LEVELS):
        passed_on: list[tuple["Function", str, str]] = []
        for function, param, stream in handed:
            for caller, call in program.call_sites.get(function.id, ()):
                arg = argument_for(function, call, param)
                if not arg or "(" in arg:
                    continue  # not given, or a value made at the call
                name = split_index(arg)[0]
                there = translate(program, caller, call, function, stream)
                found.setdefault(event_id(program, caller, name), set()).add(there)
                if name in caller.facts.params and name not in ("self", "cls"):
                    passed_on.append((caller, name, there))
        handed = passed_on
    return found


def launch_streams(program: "Program", handle: str) -> frozenset[str]:
    """Every stream an `async_op=True` collective whose handle goes to `handle` is launched on (empty when the scan
    never sees the launch: a handle returned by a library)."""
    index = program.memo("orderings.launches", lambda: _launches(program))
    return index.get(handle, frozenset())


def _launches(program: "Program") -> dict[str, frozenset[str]]:
    found: dict[str, set[str]] = {}
    for function in program.functions.values():
        for work in function.facts.async_works:
            if work.handle and not work.handle.startswith("("):
                stream = site_stream(program, function, work.region)
                found.setdefault(event_id(program, function, work.handle), set()).add(stream)
    return {k: frozenset(v) for k, v in found.items()}


def reaches_all(waiter: str) -> bool:
    """A waiter after which every later launch follows: the host, or a stream the lint cannot name."""
    return waiter in (HOST, UNKNOWN) or waiter.startswith(PARAM)


def waits_for(program: "Program", ordering: Ordering, stream: str) -> bool:
    """Whether `ordering`'s target covers earlier work of `stream`."""
    target = ordering.target
    if target in (ANY_STREAM, UNKNOWN, stream) or target.startswith(PARAM) or stream == UNKNOWN:
        return True
    if handed_in(program, target) and stream not in (CURRENT_STREAM, HOST, COMM) \
            and not stream.startswith((EVENT, WORK)):
        return True  # `current.wait_stream(self._stream)`, the stream the object was built with
    if (stream.startswith(PARAM) or handed_in(program, stream)) and ordering.waiter != stream \
            and target not in (CURRENT_STREAM, HOST, COMM) and not target.startswith((EVENT, WORK)):
        return True  # a stream handed in (`data_dist_stream`) may be the side stream another class names itself
    if target.startswith(EVENT):
        streams = recorded_streams(program, target[len(EVENT):])
        return not streams or stream in streams or UNKNOWN in streams \
            or stream == EARLIER_HOOK_CALL and CURRENT_STREAM in streams  # (recorded in that call, on its stream)
    if target.startswith(WORK):
        streams = launch_streams(program, target[len(WORK):])
        return stream in streams or UNKNOWN in streams
    return False


def ordered_by(program: "Program", orderings: list[Ordering], earlier: str, later: str) -> bool:
    """Whether a sequence of orderings (in program order) makes `later` follow `earlier`, transitively:
    `warm` -> current (`current.wait_stream(warm)`), then current -> side (`side.wait_stream(current)`)."""
    after = {earlier}  # streams whose later work follows the earlier access
    for ordering in orderings:
        if ordering.waiter == ordering.target:
            continue  # a stream waiting for itself (`s.wait_stream(current_stream())` inside `with stream(s)`)
        if any(waits_for(program, ordering, stream) for stream in after):
            if reaches_all(ordering.waiter):
                return True
            after.add(ordering.waiter)
    return later in after
