"""SC101: a tensor written on one stream is consumed on another with nothing ordering the two."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Iterator

from streamcheck.findings import ROLE_CALL, ROLE_READ, ROLE_STREAM_CONTEXT, ROLE_WRITE, Finding

from .aliasing import access_keys, accesses_by_key
from .facts import NO_REGION, Access, Region
from .program import CURRENT_STREAM, Edge, Function, Program
from .rule import Rule, location

# Orderings that make a later consumer wait (consumer side) ...
CONSUMER_ORDERINGS = frozenset({"wait_stream", "wait_event", "synchronize"})
# ... and that, after a write, make every later launch follow it (writer side; `.item()` blocks the host on the
# writer's current stream, and a wait_stream after the write is the fix placed on the writer's side).
WRITER_ORDERINGS = frozenset({"wait_stream", "wait_event", "synchronize", "host_sync"})

MAX_READS_SHOWN = 3


@dataclass(frozen=True)
class _Read:
    function: Function
    access: Access
    chain: tuple[Edge, ...]  # calls from the region to the reading function (empty: read inside the region)


class CrossStreamConsumer(Rule):
    """
    What it does:
        Finds a device write (`copy_`, another in-place method, `out=`) to a tensor that a different stream then
        reads: a kernel or a collective launched inside `with torch.cuda.stream(s):` (or
        `get_accelerator().stream(s)`), directly or through calls, when the write was enqueued on the current
        stream, or the other way round. It reports it when no ordering lies between them on some path: no
        `wait_stream` / `wait_event` on the consumer's stream before the read (orderings inside a branch that may
        be skipped do not count), and no stream, event or device `synchronize()` (nor a blocking `.item()`) after
        the write on the writer's side, before anything that could run the consumer (a call, `backward()`). An
        event recorded after the write counts when some code waits on an event. Writes and reads are matched by
        access path: the same `self.<attr>` within a class family, the same local variable (closures included),
        or the same specific attribute name (`param.ds_secondary_tensor`); generic names like `.data`, `.grad`
        and `.weight` never match by name alone.

    Why it is bad:
        Streams run independently. A kernel (or NCCL collective, which waits only for the stream it was issued
        on) on stream B may start before the copy on stream A has finished and read stale or half-written data.
        Nothing fails: results are silently wrong, and only under timing that differs between runs and machines.
        DeepSpeed 0.13.2-0.13.4's ZeRO++ hpZ secondary partition had exactly this bug (issue #5059).

    Example:
        def release(param, full):
            param.secondary.copy_(full.narrow(0, 0, n))      # current stream

        def prefetch(params, side_stream):
            with torch.cuda.stream(side_stream):
                gather(params)                               # reads param.secondary on side_stream

    Fix:
        Make the consumer's stream wait for the writer's before the read:
        `side_stream.wait_stream(torch.cuda.current_stream())` before entering the region (or an event recorded
        after the write and `side_stream.wait_event(event)`). Blocking the host after the write
        (`torch.cuda.current_stream().synchronize()`) also orders it, at the cost of a stall. If the tensor is
        freed afterwards, also call `tensor.record_stream(side_stream)`.
    """

    id = "SC101"
    summary = "tensor written on one stream is consumed on another stream without a wait or synchronize"

    VALID = [
        # A wait before the read.
        """
import torch

def run(x, y, s):
    x.copy_(y)
    with torch.cuda.stream(s):
        s.wait_stream(torch.cuda.current_stream())
        z = x * 2
""",
        # The consumer stream waits before entering the region.
        """
import torch

def run(x, y, s):
    x.copy_(y)
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        z = x * 2
""",
        # A synchronize after the write (DeepSpeed 0.13.5's fix).
        """
import torch

class Store:
    def release(self, param, full):
        param.secondary_shard.copy_(full)
        torch.cuda.current_stream().synchronize()

class Fetcher:
    def fetch(self, params):
        with torch.cuda.stream(self.side):
            self.gather(params)

    def gather(self, params):
        return torch.cat([p.secondary_shard for p in params])
""",
        # An event recorded after the write and waited before the read.
        """
import torch

class Store:
    def release(self, param, full):
        param.secondary_shard.copy_(full)
        self.done = torch.cuda.Event()
        self.done.record()

    def fetch(self, params):
        with torch.cuda.stream(self.side):
            self.side.wait_event(self.done)
            return torch.cat([p.secondary_shard for p in params])
""",
        # Write and read on the same stream context.
        """
import torch

def run(x, y, s):
    with torch.cuda.stream(s):
        x.copy_(y)
        z = x * 2
""",
        # Generic attribute names do not match by name alone.
        """
import torch

def release(p, full):
    p.data.copy_(full)

def fetch(module, s):
    with torch.cuda.stream(s):
        return module.weight.data * 2
""",
    ]

    INVALID = [
        """
import torch

def run(x, y, s):
    x.copy_(y)  # expect: SC101
    with torch.cuda.stream(s):
        z = x * 2
""",
        # The hpZ shape: a closure stored on the parameter and called under the all-gather stream.
        """
import torch
import torch.distributed as dist

class Init:
    def convert(self, param):
        def all_gather_coalesced(params):
            flat = torch.cat([p.ds_secondary_tensor for p in params])
            return dist.all_gather_into_tensor(self.out, flat, async_op=True)
        param.all_gather_coalesced = all_gather_coalesced

    def partition_sec(self, param, full):
        param.ds_secondary_tensor.copy_(full)  # expect: SC101

class Coordinator:
    def fetch(self, params):
        with torch.cuda.stream(self.allgather_stream):
            params[0].all_gather_coalesced(params)
""",
        # A side-stream write read later on the current stream with no wait.
        """
import torch

class Prefetcher:
    def prefetch(self, host):
        with torch.cuda.stream(self.copy_stream):
            self.staged_batch.copy_(host, non_blocking=True)  # expect: SC101

    def step(self, model):
        return model(self.staged_batch)
""",
    ]

    def check(self, program: Program) -> Iterable[Finding]:
        writes = accesses_by_key(program, "write")
        yield from self._side_stream_reads(program, writes)
        yield from self._current_stream_reads(program, writes)

    # --- write on the current (or another) stream, read under a region ------------------------------------------
    def _side_stream_reads(self, program: Program, writes: dict) -> Iterator[Finding]:
        for region_fn in program.functions.values():
            for index, region in enumerate(region_fn.facts.regions):
                if _waits_before_region(program, region_fn, region):
                    continue
                reader_stream = program.stream_id(region_fn, region)
                by_write: dict[tuple[str, Access], list[_Read]] = {}
                for read in _reads_under_region(program, region_fn, index, region):
                    for key in access_keys(program, read.function, read.access):
                        for writer, write in writes.get(key, ()):
                            if self._unordered_side(program, writer, write, read, region_fn, region, reader_stream):
                                reads = by_write.setdefault((writer.id, write), [])
                                if read not in reads:  # found again through another key
                                    reads.append(read)
                for (writer_id, write), reads in by_write.items():
                    writer = program.functions[writer_id]
                    yield _finding(program, writer, write, reads, region_fn, region, reader_stream)

    def _unordered_side(self, program, writer, write, read, region_fn, region, reader_stream) -> bool:
        if write.region != NO_REGION:
            writer_streams = {program.stream_id(writer, writer.facts.regions[write.region])}
        else:
            writer_streams = program.streams_of(writer.id)
        if not (writer_streams - {reader_stream}):
            return False  # always the same stream: stream order covers it
        if writer.id == read.function.id and write.region == read.access.region:
            return False
        same_body = writer.id == region_fn.id and write.region == NO_REGION
        if same_body and write.line > region.end_line:
            return False  # written after the region in program order: not a consumer of this write
        limit = region.line if same_body else None
        return not _ordered_after_write(program, writer, write, limit)

    # --- write under a region, read on the current stream --------------------------------------------------------
    def _current_stream_reads(self, program: Program, writes: dict) -> Iterator[Finding]:
        for writer, write in dict.fromkeys(w for ws in writes.values() for w in ws):
            if write.region == NO_REGION:
                continue
            region = writer.facts.regions[write.region]
            writer_stream = program.stream_id(writer, region)
            if writer_stream == CURRENT_STREAM:
                continue  # `with stream(current_stream())` in disguise
            reads: list[_Read] = []
            for key in access_keys(program, writer, write):
                for reader, access in accesses_by_key(program, "read").get(key, ()):
                    if access.region != NO_REGION or reader.id not in program.runs_on_current_stream:
                        continue
                    same_body = reader.id == writer.id
                    if same_body and access.line <= region.end_line:
                        continue
                    if _wait_before(program, reader, NO_REGION, access.line):
                        continue
                    if _ordered_after_write(program, writer, write, access.line if same_body else None):
                        continue
                    if all(r.access != access or r.function is not reader for r in reads):
                        reads.append(_Read(reader, access, ()))
            if reads:
                yield _finding(program, writer, write, reads, writer, region, CURRENT_STREAM, reader_first=False,
                               writer_stream=writer_stream)


# --- helpers ------------------------------------------------------------------------------------------------------
def _waits_before_region(program: Program, function: Function, region: Region) -> bool:
    """`s.wait_stream(...)` / `s.wait_event(...)` on the region's own stream before the `with`, in the function or
    in a function it calls exactly before it. Waits in branches count here: code that picks the stream and waits
    on it under the same condition (`if overlap: s.wait_stream(...)`) is the common shape."""
    stream = program.stream_id(function, region)

    def waits_on_stream(owner: Function, before: int | None) -> bool:
        return any(
            sync.kind in ("wait_stream", "wait_event") and (before is None or sync.line < before)
            and program.stream_id(owner, sync.receiver) == stream
            for sync in owner.facts.syncs
        )

    if waits_on_stream(function, region.line):
        return True
    if region.stream in function.facts.params and region.stream not in function.facts.stream_aliases:
        # A stream handed in by the caller: which one it is, and where it was made to wait, is decided on another
        # call path (FSDP waits on its pre-unshard stream in the root's pre-forward). A wait on a stream of the
        # same name anywhere in the program is taken as that ordering.
        return _stream_name_waited_anywhere(program, region.stream)
    return any(
        call.line < region.line and edge.exact and waits_on_stream(program.functions[edge.callee], None)
        for call, edges in program.calls_of(function.id) for edge in edges
    )


def _runs_whenever(block: tuple[int, int], line: int) -> bool:
    """Whether something in conditional `block` runs on every path through `line` (the block holds the line)."""
    return block == (0, 0) or block[0] <= line <= block[1]


def _stream_name_waited_anywhere(program: Program, name: str) -> bool:
    return any(
        sync.kind in ("wait_stream", "wait_event") and sync.receiver == name
        for function in program.functions.values() for sync in function.facts.syncs
    )


def _wait_before(program: Program, function: Function, region_index: int, line: int) -> bool:
    """A consumer-side ordering in `function` (in the given region) that runs before `line` on every path to it,
    directly or in an exact callee. Orderings in branches that may be skipped do not count."""
    for sync in function.facts.syncs:
        if (sync.region == region_index and sync.line < line and sync.kind in CONSUMER_ORDERINGS
                and _runs_whenever(sync.block, line)):
            return True
    for call, edges in program.calls_of(function.id):
        if (call.region == region_index and call.line < line and _runs_whenever(call.block, line)
                and any(e.exact and program.performs_wait(e.callee) for e in edges)):
            return True
    return False


def _ordered_after_write(program: Program, writer: Function, write: Access, before_line: int | None) -> bool:
    """A writer-side ordering that runs after the write whenever the write runs. With `before_line` (the read
    is later in the same body): anywhere in between. Otherwise the read may run from any call, so the ordering
    must be the next thing after the write that could reach it, in the writing function or, failing that, right
    after every call of the writing function in its callers (one level up)."""
    if before_line is not None:
        return _ordering_between(program, writer, write.line, before_line)
    if _next_is_ordering(program, writer, write.line, write.column):
        return True
    if _event_recorded_after(writer, write) and _event_waited_anywhere(program):
        # An event recorded after the write and handed over (a queue, a dict per module) to a consumer that waits
        # on it: the hand-off cannot be followed without values, so a wait on an event anywhere is taken as it.
        return True
    call_sites = _call_sites(program).get(writer.id, [])
    return bool(call_sites) and all(
        _next_is_ordering(program, caller, call.line, call.column) for caller, call in call_sites)


def _event_recorded_after(writer: Function, write: Access) -> bool:
    return any(s.kind == "record" and s.line > write.line and _runs_whenever(s.block, write.line)
               for s in writer.facts.syncs)


def _event_waited_anywhere(program: Program) -> bool:
    return program.memo("sc101.event_waited", lambda: any(
        s.kind == "wait_event" for function in program.functions.values() for s in function.facts.syncs))


def _is_ordering_call(program: Program, edges) -> bool:
    return any(e.exact and program.performs_wait(e.callee) for e in edges)


def _ordering_between(program: Program, function: Function, line: int, before_line: int) -> bool:
    def in_window(at: int, block: tuple[int, int]) -> bool:
        return line < at < before_line and _runs_whenever(block, line)

    if any(in_window(s.line, s.block) and s.kind in WRITER_ORDERINGS for s in function.facts.syncs):
        return True
    return any(in_window(c.line, c.block) and _is_ordering_call(program, e) for c, e in program.calls_of(function.id))


# Calls that run code we cannot see (autograd hooks) even when they resolve to nothing in the scanned tree.
RUNS_HOOKS = frozenset({"backward", "grad", "run_backward"})


def _next_is_ordering(program: Program, function: Function, line: int, column: int) -> bool:
    """Whether, after (line, column), `function` reaches an ordering that runs whenever that point does, before
    any call that could run the consumer (a resolved call, or `backward()`). Calls on the ordering's own line are
    part of it (`get_accelerator().current_stream().synchronize()`)."""
    after = lambda item: (item.line, item.column) > (line, column)  # noqa: E731
    candidates = [(s.line, s.column) for s in function.facts.syncs
                  if s.kind in WRITER_ORDERINGS and after(s) and _runs_whenever(s.block, line)]
    candidates += [(c.line, c.column) for c, edges in program.calls_of(function.id)
                   if after(c) and _runs_whenever(c.block, line) and _is_ordering_call(program, edges)]
    if not candidates:
        return False
    first = min(candidates)
    for call, edges in program.calls_of(function.id):
        if not after(call) or call.line >= first[0] or call.line == line:
            continue
        if (edges and not _is_ordering_call(program, edges)) or call.callee.rsplit(".", 1)[-1] in RUNS_HOOKS:
            return False
    return True


def _call_sites(program: Program) -> dict[str, list[tuple[Function, object]]]:
    """Function id -> (caller, call) of every resolved call of it."""
    def build() -> dict[str, list[tuple[Function, object]]]:
        sites: dict[str, list[tuple[Function, object]]] = {}
        for caller in program.functions.values():
            for call, edges in program.calls_of(caller.id):
                for edge in edges:
                    sites.setdefault(edge.callee, []).append((caller, call))
        return sites

    return program.memo("sc101.call_sites", build)


def _reads_under_region(program: Program, region_fn: Function, index: int, region: Region) -> Iterator[_Read]:
    """Reads that run on the region's stream with no consumer-side wait before them on some call path."""
    for access in region_fn.facts.accesses:
        if access.kind == "read" and access.region == index and not _wait_before(
                program, region_fn, index, access.line):
            yield _Read(region_fn, access, ())

    def edge_allowed(fid: str, call, _edge) -> bool:
        function = program.functions[fid]
        scope = index if fid == region_fn.id else NO_REGION
        return not _wait_before(program, function, scope, call.line)

    for fid, chain in program.walk_region(region_fn.id, index, edge_allowed):
        function = program.functions[fid]
        for access in function.facts.accesses:
            if access.kind == "read" and access.region == NO_REGION and not _wait_before(
                    program, function, NO_REGION, access.line):
                yield _Read(function, access, chain)


def _stream_words(stream: str) -> str:
    return "the current stream" if stream == CURRENT_STREAM else f"stream `{stream.split('@', 1)[0]}`"


def _finding(program: Program, writer: Function, write: Access, reads: list[_Read], region_fn: Function,
             region: Region, reader_stream: str, reader_first: bool = True, writer_stream: str | None = None) -> Finding:
    reads = sorted(reads, key=lambda r: (len(r.chain), r.function.file.path, r.access.line))
    first = reads[0]
    if writer_stream is None:
        writer_stream = CURRENT_STREAM if write.region == NO_REGION else program.stream_id(
            writer, writer.facts.regions[write.region])
        if write.region == NO_REGION and CURRENT_STREAM not in program.streams_of(writer.id):
            writer_stream = sorted(program.streams_of(writer.id) - {reader_stream})[0]
    consumer = "a collective" if first.access.collective else f"`{first.access.op}`"
    message = (
        f"`{write.path}` is written by `{write.op}` on {_stream_words(writer_stream)} and read by {consumer} in "
        f"`{first.function.facts.qualname}` on {_stream_words(reader_stream)} with no wait or synchronize between "
        f"them")
    related = []
    for read in reads[:MAX_READS_SHOWN]:
        related.append(location(read.function, read.access.line, read.access.column, ROLE_READ,
                                f"{read.access.op} in {read.function.facts.qualname}"))
    related.append(location(region_fn, region.line, region.column, ROLE_STREAM_CONTEXT,
                            f"switches to {_stream_words(reader_stream if reader_first else writer_stream)}"))
    for edge in first.chain:
        caller = program.functions[edge.caller]
        callee = program.functions[edge.callee]
        related.append(location(caller, edge.call.line, edge.call.column, ROLE_CALL,
                                f"calls {callee.facts.qualname}"))
    if reader_first:
        stream_text = region.stream
        fix = (f"Make `{stream_text}` wait for the writing stream before the read: "
               f"`{stream_text}.wait_stream(torch.cuda.current_stream())` before the `with` at "
               f"{region_fn.file.path}:{region.line} (or record an event after the write and wait on it there).")
    else:
        fix = (f"Make the current stream wait for `{region.stream}` after the region at "
               f"{region_fn.file.path}:{region.line}: `torch.cuda.current_stream().wait_stream({region.stream})`, "
               f"before the read.")
    return Finding(
        rule=CrossStreamConsumer.id,
        message=message,
        primary=location(writer, write.line, write.column, ROLE_WRITE, f"{write.op} in {writer.facts.qualname}"),
        related=tuple(related),
        fix=fix,
        kind="RAW",
        symbol=writer.facts.qualname,
        extra={
            "path": write.path,
            "writer_stream": writer_stream.split("@", 1)[0],
            "reader_stream": reader_stream.split("@", 1)[0],
            "consumer": "collective" if first.access.collective else "device op",
        },
    )
