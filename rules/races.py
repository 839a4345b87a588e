"""The race query: two accesses to the same path, at least one a write, on different streams, with no ordering
on any path between them.

An access is seen in a *context*: the stream it runs on, and how it got there. Code inside
`with stream(s):` runs on s; code a call inside such a region reaches (through functions that do not switch
streams themselves) runs on s too, with that call chain; code some chain from a root reaches outside every region
runs on the current stream.

Whether two contexts are ordered:
- one function body, program order known (both accesses directly in the body): an ordering between them, on any
  path (inside an `if` too), that makes the later access's stream wait for the earlier one's;
- otherwise the order of the two is not known to the lint, so either side may carry the edge: on the writer's
  side an ordering after the write (in its function, or in a caller after the call), on the reader's side an
  ordering before the read (in its function, before the region or inside it before the call that reaches it, in
  each function of the chain before the next call, or in a caller of the region's function before the call).
Callees count wherever they are called (summaries.py), with parameters bound to the arguments.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Iterator

from .aliasing import access_keys, object_of, same_element, self_key
from .callgraph import Edge, Function
from .facts import NO_REGION, Access, FunctionFacts, exclusive
from .orderings import (EVENT, Ordering, event_id, ordered_by, orderings_in_program, orderings_of, recording_stream,
                        site_stream)
from .guards import serves_another_block
from .hooks import hook_run_functions
from .streams import CURRENT_STREAM, EARLIER_HOOK_CALL, HOST, PARAM, UNKNOWN, display, stream_id
from .summaries import call_orderings, call_records, event_waiters, translate

if TYPE_CHECKING:
    from .program import Program

CALLER_LEVELS = 2  # how far up the callers an ordering after a write (or before a read) is looked for
Position = tuple[int, int]
START: Position = (0, 0)
END: Position = (1 << 30, 0)


@dataclass(frozen=True)
class Context:
    """An access as it runs: on `stream`, in `function`; reached through `chain` from the region `region_of`
    (index into the region function's regions) of `region_fn`, or directly (empty chain)."""

    function: Function
    access: Access
    stream: str
    chain: tuple[Edge, ...] = ()
    region_fn: Function | None = None
    region: int = NO_REGION

    @property
    def position(self) -> Position:
        return (self.access.line, self.access.column)


def contexts(program: "Program", function: Function, access: Access) -> list[Context]:
    """Every stream `access` (made by `function`) may run on, with how."""
    if access.region != NO_REGION:
        return [Context(function, access, site_stream(program, function, access.region), (), function,
                        access.region)]
    found = []
    if function.id in program.runs_on_current_stream:
        found.append(Context(function, access, CURRENT_STREAM))
    for region_fn, index, chain in program.region_chains(function.id):
        stream = site_stream(program, region_fn, index)
        if all(c.stream != stream for c in found):
            found.append(Context(function, access, stream, chain, region_fn, index))
    return found


def may_leave_the_current_stream(program: "Program", function: Function, access: Access) -> bool:
    """Whether `contexts` can give `access` a stream other than the current one: only a region around it, or a
    region whose calls reach its function, does (asked first where working out the rest costs more)."""
    return access.region != NO_REGION or bool(program.region_chains(function.id))


def ordered_between(program: "Program", function: Function, after: Position, before: Position, earlier: str,
                    later: str, frame: str = CURRENT_STREAM) -> bool:
    """An ordering in `function` strictly between two positions (on any path) that makes work of stream
    `later` launched afterwards follow earlier work of stream `earlier`. `frame` is the stream the function's
    own current stream stands for (a region's, when a chain of calls from it reached the function). Up to the
    function's END, an ordering after a block that returns (`if not remote: return`) is not on every way out."""
    ways = ways_through_branches(function, window_between(program, function, after, before, frame), after, before,
                                 _stream_choices(program, function, later, frame))
    return all(ordered_by(program, way, earlier, later) for _branch, way in ways)


def window_between(program: "Program", function: Function, after: Position, before: Position,
                   frame: str = CURRENT_STREAM) -> list[Ordering]:
    """The orderings `ordered_between` reads, each arm of an if/else included (in `frame`, in source order)."""
    def between(line: int, column: int) -> bool:
        return after < (line, column) < before and not exits_before(function, line, before[0]) \
            and not exclusive(function.facts, line, before[0]) and not exclusive(function.facts, after[0], line) \
            and not (before == END and returned_before(function, after[0], line))

    def in_frame(ordering: Ordering) -> Ordering:
        if frame == CURRENT_STREAM:
            return ordering
        return replace(ordering, waiter=frame if ordering.waiter == CURRENT_STREAM else ordering.waiter,
                       target=frame if ordering.target == CURRENT_STREAM else ordering.target)

    window = _window(program, function, between, _as_is)
    if before != END:
        window = [o for o in window if not serves_another_block(program, function, o, after, before)]
    return [in_frame(o) for o in window]


def ways_through_branches(function: Function, window: list[Ordering], after: Position, before: Position,
                          chooses_later=None):
    """(branch, way): the window as each way through an if/else between the two positions leaves it (the whole
    window first, with branch None; then each branch of FunctionFacts.branches it skips), where one arm orders and
    the other does nothing of the kind (`if event: s.wait_event(event) else: log(...)`): the way through the
    other arm is not ordered by the first arm's waits. Left as orderings that may run (the lenient reading; a
    "must" reading of every guard flooded real code with correlated guards): a bare `if`, an if/else whose two
    arms both order (the author chose a wait for each way), and arms that bind a name (`stream = self.s1` /
    `stream = current_stream()`: the wait belongs to the stream chosen with it).

    `chooses_later(first, last)`, where given, says whether an arm binds the later access's stream (True), binds
    stream names to other streams only (False), or binds none (None). Where an arm chooses the later stream the
    stream itself is decided per way, so each such way is read by its own orderings alone (DeepSpeed's
    average_tensor: `if offload: stream = side if overlap else current; stream.wait_event(...)` / `elif overlap:
    stream = side; stream.wait_stream(producer)` / `else: stream = current`, then `with stream(stream):`): the way
    through an arm that binds another stream (the current one) runs the access elsewhere and is not read."""
    yield None, window
    choosing = function.facts.choosing
    for body_start, body_end, else_start, else_end in function.facts.branches:
        if not (after[0] < body_start and else_end < before[0]):
            continue
        branch = (body_start, body_end, else_start, else_end)
        arms = ((body_start, body_end), (else_start, else_end))
        chosen = [chooses_later(*arm) for arm in arms] if chooses_later is not None else [None, None]
        if True in chosen:
            for (first, last), choice, (skip_first, skip_last) in zip(arms, chosen, reversed(arms)):
                if choice:
                    yield branch, [o for o in window if not skip_first <= o.line <= skip_last]
            continue
        if arms[0] in choosing or arms[1] in choosing:
            continue
        in_body = any(body_start <= o.line <= body_end for o in window)
        in_else = any(else_start <= o.line <= else_end for o in window)
        if in_body != in_else:
            yield branch, [o for o in window
                           if not (body_start <= o.line <= body_end or else_start <= o.line <= else_end)]


def _stream_choices(program: "Program", function: Function, later: str, frame: str):
    """For ways_through_branches: whether an arm (first, last) binds a stream name (FunctionFacts.stream_bindings)
    to `later` (True), only to other streams (False), or binds none (None); None for a function binding none."""
    bindings = function.facts.stream_bindings
    if not bindings or later in (CURRENT_STREAM, UNKNOWN):
        return None

    def chooses(first: int, last: int) -> bool | None:
        streams = {stream_id(program, function, text) for _name, line, text in bindings if first <= line <= last}
        if not streams:
            return None
        return later in {frame if sid == CURRENT_STREAM else sid for sid in streams}

    return chooses


def _window(program: "Program", function: Function, between, in_frame) -> list[Ordering]:
    """The orderings of `function` (its own and its calls') at positions `between` accepts, in source order."""
    window = [o for o in orderings_of(program, function) if between(o.line, o.column)]
    for call, edges in program.calls_of(function.id):
        if between(call.line, call.column):
            window.extend(call_orderings(program, function, call, edges))
    window.sort(key=lambda o: (o.line, o.column))
    return [in_frame(o) for o in window]


def ordered_across_iterations(program: "Program", function: Function, after: Position, before: Position,
                              loop: tuple[int, int], earlier: str, later: str) -> bool:
    """An ordering from `after` to the end of the loop's body, then from its start to `before`: the way from an
    access late in one iteration to one early in the next (a prefetch for the next chunk, read there)."""
    first, last = loop

    def tail(line: int, column: int) -> bool:
        return after < (line, column) <= (last, 1 << 30) and not exits_before(function, line, last + 1)

    def head(line: int, column: int) -> bool:
        return (first, 0) <= (line, column) < before and not exits_before(function, line, before[0])

    return ordered_by(program, _window(program, function, tail, _as_is) + _window(program, function, head, _as_is),
                      earlier, later)


def _as_is(ordering: Ordering) -> Ordering:
    return ordering  # in the function's own frame


def loop_around(facts: FunctionFacts, *lines: int) -> tuple[int, int] | None:
    """The innermost `for` / `while` loop holding all `lines`."""
    holding = [(a, b) for a, b in facts.loops if all(a <= line <= b for line in lines)]
    return min(holding, key=lambda loop: loop[1] - loop[0]) if holding else None


def exits_before(function: Function, line: int, target: int) -> bool:
    """Whether code at `line` sits in a block that returns (or raises, continues, breaks) without reaching
    `target`: then it is on no path to it."""
    return any(first <= line <= last and not first <= target <= last for first, last in function.facts.exits)


def returned_before(function: Function, line: int, target: int) -> bool:
    """Whether a block that returns ends after `line` and before `target`: a way out between them."""
    return any(line <= last < target for _first, last in function.facts.returns)


def ordered_after(program: "Program", context: Context, earlier: str, later: str,
                  consumers: frozenset[str]) -> bool:
    """The writer's side: an ordering after the access, before anything that could run the other access (a
    call that reaches one of the `consumers`, function ids, or one that runs hooks): in its function, then up
    the chain of calls it was reached through (after each call), then in the callers (after the call)."""
    # The function's own current stream: the region's when a chain reached it; the caller's region stream when
    # it only ever runs under one (torchrec's prefetch helpers, called inside `with stream(prefetch_stream)`).
    frame = context.stream if context.chain else program.only_side_stream(context.function.id) or CURRENT_STREAM
    found, blocked = _after_in(program, context.function, context.position, earlier, later, consumers, frame)
    if found or blocked:
        return found
    for edge in reversed(context.chain):
        caller = program.functions[edge.caller]
        frame = CURRENT_STREAM if edge is context.chain[0] else context.stream
        found, blocked = _after_in(program, caller, (edge.call.line, edge.call.column), earlier, later, consumers,
                                   frame)
        if found or blocked:
            return found
    top = context.region_fn if context.chain else context.function
    return _after_in_callers(program, top, earlier, later, consumers, CALLER_LEVELS)


def _after_in(program: "Program", function: Function, position: Position, earlier: str, later: str,
              consumers: frozenset[str], frame: str) -> tuple[bool, bool]:
    """(an ordering follows `position` in `function` before a call that may run a consumer, such a call)."""
    limit = _first_reaching_call(program, function, position, consumers, later)
    if ordered_between(program, function, position, limit, earlier, later, frame):
        return True, False
    if event_handed_off(program, function, position, earlier, later, consumers):
        return True, False
    return False, limit != END


def ordered_after_return(program: "Program", function: Function, earlier: str, later: str) -> bool:
    """An ordering in a caller of `function` after the call (up to CALLER_LEVELS callers up), before anything
    of the scan the result could reach there: what a function returning a tensor leaves to its callers."""
    return _after_in_callers(program, function, earlier, later, frozenset(), CALLER_LEVELS)


def _after_in_callers(program: "Program", function: Function, earlier: str, later: str,
                      consumers: frozenset[str], levels: int) -> bool:
    if levels == 0:
        return False
    for caller, call in program.call_sites.get(function.id, ()):
        here = site_stream(program, caller, call.region)
        earlier_there, later_there = _in_caller(earlier, here), _in_caller(later, here)
        found, blocked = _after_in(program, caller, (call.line, call.column), earlier_there, later_there,
                                   consumers, CURRENT_STREAM)
        if found or (not blocked and _after_in_callers(program, caller, earlier_there, later_there, consumers,
                                                       levels - 1)):
            return True
    return False


def event_handed_off(program: "Program", function: Function, position: Position, stream: str, reader: str,
                      consumers: frozenset[str] = frozenset()) -> bool:
    """An event recorded on the writer's stream after the write, in a program that waits on some event: the
    event travels (a queue, a dict per module) to a consumer that waits on it, which the lint cannot follow.
    An event a helper records for the function (`group.record_reload_event(self.h2d_stream)`) is followed: it
    hands the write off to the reader only when the reader's stream waits for that event somewhere (Megatron's
    offload events are waited by the reload stream only, #7398; its reload events by the current stream). An event
    kept on the object whose own method reads is not handed to that reader when only the host waits for it
    (_kept_for_host_waits)."""
    recorded = [sync.receiver for sync in function.facts.syncs if sync.kind == "record"
                and (sync.line, sync.column) > position and recording_stream(program, function, sync) == stream]
    if recorded and program.memo("races.waits_on_events", lambda: any(
            o.target.startswith(EVENT) for _fn, o in orderings_in_program(program))) \
            and not all(_kept_for_host_waits(program, function, event, consumers) for event in recorded):
        return True
    # (a waiter the lint cannot name, `wait_reload_event(torch.cuda.current_stream())`'s argument, may be the reader)
    return any(recorded_on == stream and not event_waiters(program, event).isdisjoint({reader, UNKNOWN})
               for call, edges in program.calls_of(function.id) if (call.line, call.column) > position
               for event, recorded_on in call_records(program, function, call, edges))


def _kept_for_host_waits(program: "Program", function: Function, event: str, consumers: frozenset[str]) -> bool:
    """The event `function` records goes into an attribute of its object (`self.param_reduce_events.append(event)`,
    DeepSpeed ZeRO-3's reduce events; `bucket.reuse_events[i] = event` of a `bucket = self.ipg_buckets[dtype]`,
    orderings.event_id), a method of that object's class is the reader, and every wait of the
    attribute's events the program makes is the host's (`self.param_reduce_events.popleft().synchronize()`: back-
    pressure on the oldest), or nothing in the scan waits for them at all (vLLM's engram prefetch keeps `(out, done)`
    in `self._buffers` and its `forward` takes the pair out by key: without its `wait_event(done)` no wait of the
    container's events is left), or the attribute itself (`self._data_done_event = data_done_event`, torchrec's
    maglev awaitable, whose `_wait_impl` waits it). Nothing travels out of sight to that reader: a host wait orders the write only where
    it runs, which the race query judges by position like any other ordering. (A reader in another class may still
    be handed the event in ways the lint does not follow: vLLM's double-buffered copy events.)"""
    kept = [held for sync in function.facts.syncs if sync.kind == "store" and sync.arg == event
            for held in [event_id(program, function, sync.receiver)] if held.startswith("self.")]
    # `self._data_done_event = data_done_event` (torchrec's maglev awaitable): the attribute holds the event
    kept += [event_id(program, function, use.arg) for use in function.facts.uses
             if use.how == "escape" and use.path == event and use.arg.startswith("self.") and use.arg.count(".") == 1]
    own = event_id(program, function, event)
    if own.startswith("self."):  # `self.done`, or an element of an attribute's container (event_id)
        kept.append(own)
    for held in kept:
        attr, owner = held.split("@", 1)[0].split(".")[1], held.split("@", 1)[1]
        waiters = event_waiters(program, held)
        if owner and all(w == HOST for w in waiters) and any(
                program.attr_owner(program.functions[c].file.path, program.functions[c].owner, attr) == owner
                for c in consumers if c in program.functions):
            return True
    return False


# Calls that run code the scan cannot see (autograd hooks), even when they resolve to nothing scanned.
RUNS_HOOKS = frozenset({"backward", "grad", "run_backward"})


def _first_reaching_call(program: "Program", function: Function, position: Position,
                         consumers: frozenset[str], later: str = UNKNOWN) -> Position:
    """The first call after `position` (not on its line) that may run a consumer on the reader's stream `later`:
    a call inside a region of another named stream runs it there, as another context (DeepSpeed FPDT's forward
    calls `load_to_gpu` under its own `offload_stream`; the reader is the backward's call under its stream)."""
    for call, edges in program.calls_of(function.id):
        if (call.line, call.column) <= position or call.line == position[0]:
            continue
        if call.callee.rsplit(".", 1)[-1] in RUNS_HOOKS:
            return (call.line, call.column)
        if call.region != NO_REGION and _named(later):
            there = site_stream(program, function, call.region)
            if _named(there) and there != later:
                continue
        if any(program.reaches(edge.callee, consumers) for edge in edges):
            return (call.line, call.column)
    return END


def _named(stream: str) -> bool:
    return stream not in (CURRENT_STREAM, UNKNOWN) and not stream.startswith(PARAM)


def ordered_before(program: "Program", context: Context, earlier: str) -> bool:
    """The reader's side: an ordering before the access on its way (see the module docstring)."""
    later = context.stream
    if _ordered_on_chain(program, context, earlier):
        return True
    first = context.chain[0] if context.chain else None
    if first and ordered_between(program, context.region_fn, START, (first.call.line, first.call.column), earlier,
                                 later):
        return True
    if later.startswith(PARAM) and _param_stream_waited_anywhere(program, context.region_fn or context.function,
                                                                  later):
        return True
    if context.region_fn is not None:
        return _ordered_before_call(program, context.region_fn, earlier, later, CALLER_LEVELS)
    return False


def _param_stream_waited_anywhere(program: "Program", function: Function, stream: str) -> bool:
    """A stream handed in by the caller: which one it is, and where it was made to wait, is decided on another
    call path (FSDP waits on its pre-unshard stream in the root's pre-forward). Where `function`'s callers name
    the streams they pass (`copy_stream=self.output_copy_stream`), a wait of one of those streams anywhere in the
    program is taken as that ordering (or a wait of a parameter of the same name in a caller or in the
    function's own module, decided further up: `_decided_further_up`); a wait of another class's stream that
    happens to carry the name (vLLM's `self.copy_stream.wait_stream(...)` of the structured-output and
    draft-token copiers vs the async-output constructors' parameter `copy_stream`) is not. Where no caller names it, a wait of a stream of the same last
    name anywhere is taken. Either way, not a wait that opens a region of its own stream (`with stream(s):
    s.wait_stream(current)`, then the region's own work): it orders its own region's reads, not those of another
    function that gets a stream of that name (vLLM's two async-output constructors)."""
    waits = program.memo("races.waits_by_stream", lambda: _waits_by_stream(program))
    waited = set(waits)
    name = display(stream).rsplit(".", 1)[-1]
    sites = program.call_sites.get(function.id, ())
    passed = {translate(program, caller, call, function, stream) for caller, call in sites}
    named = {s for s in passed if _named(s)}
    if named:
        return any(not _only_after_the_calls(where, sites) for s in named for where in waits.get(s, ())) or any(
            _decided_further_up(program, fid, function) for w in waited
            if w.startswith(PARAM) and display(w).rsplit(".", 1)[-1] == name for fid, _at in waits[w])
    return name in {display(w).rsplit(".", 1)[-1] for w in waited}


def _decided_further_up(program: "Program", fid: str, function: Function) -> bool:
    """The waiting function sits in the same module (FSDP's root pre-forward calls `_wait_for_computation_stream(
    computation_stream, unshard_stream, pre_unshard_stream)` before the hooks that unshard on those streams, all
    in _runtime_utils.py) or is one of the callers; not a function elsewhere whose parameter happens to be called
    `stream` too (vLLM's DeepSeek mHC overlap)."""
    return program.functions[fid].file is function.file or fid in program.callers_reaching(function.id)


def _waits_by_stream(program: "Program") -> dict[str, list[tuple[str, Position]]]:
    """waiter -> (function id, position) of every wait of it, less those that open their own region."""
    found: dict[str, list[tuple[str, Position]]] = {}
    for fn in program.functions.values():
        for o in orderings_of(program, fn):
            if o.kind in ("wait_stream", "wait_event") and not _opens_its_region(program, fn, o):
                found.setdefault(o.waiter, []).append((fn.id, (o.line, o.column)))
    return found


def _only_after_the_calls(where: tuple[str, Position], sites) -> bool:
    """A wait in a caller after every call it makes of the function (vLLM's DeepSeek boundary: `stream.wait_event(
    ready)` after `mhc_pre_delayed_overlap(..., stream=stream)`): it orders what comes after, not the callee's
    reads in those calls."""
    fid, position = where
    calls = [(call.line, call.column) for caller, call in sites if caller.id == fid]
    return bool(calls) and all(position > at for at in calls)


def _opens_its_region(program: "Program", function: Function, ordering: Ordering) -> bool:
    """The waiter is the stream of the region the wait sits in."""
    return ordering.region != NO_REGION and site_stream(program, function, ordering.region) == ordering.waiter


def _ordered_before_call(program: "Program", function: Function, earlier: str, later: str, levels: int) -> bool:
    if levels == 0:
        return False
    for caller, call in program.call_sites.get(function.id, ()):
        here = site_stream(program, caller, call.region)
        earlier_there, later_there = _in_caller(earlier, here), _in_caller(later, here)
        if ordered_between(program, caller, START, (call.line, call.column), earlier_there, later_there):
            return True
        if _ordered_before_call(program, caller, earlier_there, later_there, levels - 1):
            return True
    return False


def _in_caller(stream: str, site: str) -> str:
    return site if stream == CURRENT_STREAM else stream


def unordered(program: "Program", first: Context, second: Context) -> bool:
    """Whether `first` may run before `second` with nothing ordering `second`'s stream after `first`'s.

    False as well when both start from one function body and `second` comes first there (the other direction)."""
    if first.stream == second.stream or UNKNOWN in (first.stream, second.stream):
        return False
    if first.function is second.function and None not in (_origin(first), _origin(second)) \
            and _origin(first) != _origin(second):
        return False  # one call of a function runs on one stream: two of its calls are two different contexts
    if _both_ways(program, first, second):
        return False
    (first_fn, first_at), (second_fn, second_at) = _anchor(first), _anchor(second)
    if first_fn is second_fn:
        if exclusive(first_fn.facts, first_at[0], second_at[0]):
            return False  # the two arms of one if/else: one of them runs
        objects = {object_of(program, first_fn, c.chain, c.function, c.access) for c in (first, second)}
        if len(objects) == 2 and None not in objects:
            return False  # the attributes of two objects the body holds in two locals
        if first_at >= second_at:
            loop = loop_around(first_fn.facts, first_at[0], second_at[0]) if first_at > second_at else None
            if loop is None or ordered_across_iterations(program, first_fn, first_at, second_at, loop,
                                                         first.stream, second.stream):
                return False  # the other direction, unless a loop brings `second` round again after `first`
        elif ordered_between(program, first_fn, first_at, second_at, first.stream, second.stream):
            return False
        if first.chain and ordered_between(program, first.function, first.position, END, first.stream,
                                           second.stream, first.stream):
            return False
        return not (second.chain and _ordered_on_chain(program, second, first.stream))
    consumers = frozenset({second.function.id} | ({second.region_fn.id} if second.region_fn else set()))
    if not second.chain and _only_called_before(program, second.function, first):
        # The second's function runs only from the first's, before it (Megatron's check_grads before the
        # all-reduce): in one call the order is the other one; a hook's next call, on its own stream, comes after.
        return not ordered_after(program, first, first.stream, second.stream, consumers) \
            and _across_hook_calls(program, first, second, consumers)
    later_lines = [second.access.line] if second.function is first.function else []
    later_lines += [edge.call.line for edge in second.chain if edge.caller == first.function.id]
    if any(exits_before(first.function, first.access.line, line) for line in later_lines):
        return False  # the second is reached through a call of the first's function that a block holding the
        # first returns before (`if hybrid: ...write...; return` then the other path's call)
    if ordered_after(program, first, first.stream, second.stream, consumers):
        return False
    if not ordered_before(program, second, first.stream):
        return True
    return _across_hook_calls(program, first, second, consumers)


def _across_hook_calls(program: "Program", first: Context, second: Context, consumers: frozenset[str]) -> bool:
    """`second` follows `first` in a later call of their hook, and waits for no stream but that call's own."""
    return _earlier_hook_call(program, first, second, consumers) \
        and not ordered_before(program, second, EARLIER_HOOK_CALL)


def ordered_only_in_its_own_hook_call(program: "Program", first: Context, second: Context) -> bool:
    """Whether the pair races only because `second`'s wait for the current stream is made in a later call of the
    hook than `first` (for the report: there is a wait, for another call's stream)."""
    consumers = frozenset({second.function.id} | ({second.region_fn.id} if second.region_fn else set()))
    return _earlier_hook_call(program, first, second, consumers) and ordered_before(program, second, first.stream)


def _earlier_hook_call(program: "Program", first: Context, second: Context, consumers: frozenset[str]) -> bool:
    """Whether `second` can only follow `first` in a later call of the hook that runs both: `first` on the hook's
    current stream, after the call that reaches `second` and before none (ZeRO's gradient hook reduces the full
    bucket, then copies its own gradient into it: the next call's reduction reads that copy). Each call of a
    gradient hook runs on the stream of its parameter's backward, so the later call's `current_stream()` need
    not be the stream `first` ran on (DeepSpeed PR #8080)."""
    if first.stream != CURRENT_STREAM or first.chain:
        return False
    hooks = hook_run_functions(program)
    reader = second.region_fn or second.function
    if first.function.id not in hooks or reader.id not in hooks:
        return False
    if _first_reaching_call(program, first.function, first.position, consumers) != END:
        return False  # the same call reaches `second` after `first`: its current stream is first's
    return any((call.line, call.column) < first.position and any(
        program.reaches(edge.callee, consumers) for edge in edges)
        for call, edges in program.calls_of(first.function.id))


def _only_called_before(program: "Program", function: Function, first: Context) -> bool:
    """Every call of `function` in the program is made by `first`'s function, before `first`'s access, and calls
    it there (a function handed over as a value, `w.register_hook(fn)`, runs later)."""
    sites = program.call_sites.get(function.id, ())
    return bool(sites) and all(
        caller is first.function and (call.line, call.column) < first.position
        and call.callee.rsplit(".", 1)[-1] == function.facts.name for caller, call in sites)


def _both_ways(program: "Program", first: Context, second: Context) -> bool:
    """Each access can also run on the other's stream (their functions are called from both contexts): the pair
    races only across two different calls mixed up by the lint, not within one run of the code that calls them."""
    return first.stream in _streams(program, second) and second.stream in _streams(program, first)


def _streams(program: "Program", context: Context) -> set[str]:
    if context.access.region != NO_REGION:
        return {context.stream}
    return program.streams_of(context.function.id)


def _origin(context: Context) -> tuple | None:
    """How the call of the function holding the access was entered: on the current stream, or from a region
    through a chain; None for an access inside the function's own region (any entry)."""
    if context.access.region != NO_REGION:
        return None
    return (context.region_fn.id if context.region_fn else "", context.region)


def same_anchor(first: Context, second: Context) -> bool:
    """Both accesses start from one function body, where their program order is the source order."""
    return _anchor(first)[0] is _anchor(second)[0]


def _anchor(context: Context) -> tuple[Function, Position]:
    """Where an access starts in the function its context begins in: itself, or the first call of its chain."""
    if not context.chain:
        return context.function, context.position
    first = context.chain[0]
    return context.region_fn, (first.call.line, first.call.column)


def _ordered_on_chain(program: "Program", context: Context, earlier: str) -> bool:
    """An ordering before the access in its function or before the next call in the chain's functions below
    the region's (whose current stream is the region's)."""
    later = context.stream
    frame = context.stream if context.chain else CURRENT_STREAM
    if ordered_between(program, context.function, START, context.position, earlier, later, frame):
        return True
    return any(ordered_between(program, program.functions[edge.caller], START, (edge.call.line, edge.call.column),
                               earlier, later, context.stream) for edge in context.chain[1:])


def matching(program: "Program", function: Function, access: Access, kind: str) -> Iterator[tuple[Function, Access]]:
    """Accesses of `kind` that may touch the same tensor as `access` (each once)."""
    index = program.memo(f"races.by_key.{kind}", lambda: _index(program, kind))
    seen: set[tuple[str, Access]] = set()
    field = _own_field(access)
    for key in access_keys(program, function, access):
        for other_fn, other in index.get(key, ()):
            if (other_fn.id, other) not in seen and same_element(access, other) \
                    and not (field and _own_field(other) and self_key(program, function, access.path)
                             != self_key(program, other_fn, other.path)):
                # (`self._input_tensor` of two classes that do not share the field, aliasing.self_key: the
                # field's name alone, the ("attr", ...) key, pairs them, not the object)
                seen.add((other_fn.id, other))
                yield other_fn, other


def _own_field(access: Access) -> bool:
    """`self.<field>` (or `cls.<field>`) itself, not a path below it."""
    return access.path.count(".") == 1 and access.path.split(".", 1)[0] in ("self", "cls")


def build_indexes(program: "Program") -> None:
    """Build the indexes `matching` reads (both kinds) now, before the rules fork (parallel_rules.py): each of the
    two processes would build them again (vLLM 0.33.0: a quarter of the rules' time)."""
    for kind in ("read", "write"):
        program.memo(f"races.by_key.{kind}", lambda: _index(program, kind))


def _index(program: "Program", kind: str) -> dict:
    index: dict = {}
    for function, access in program.all_accesses():
        if access.kind == kind:
            for key in access_keys(program, function, access):
                index.setdefault(key, []).append((function, access))
    return index
