"""SC106: a tensor another stream still reads (or writes) is overwritten with nothing ordering the two."""

from __future__ import annotations

from itertools import chain
from typing import Iterable

from streamcheck.findings import ROLE_CALL, ROLE_READ, ROLE_WRITE, Finding

from .collectives import reads_in_place
from .extract import ALIAS
from .fresh_block_on_side_stream import writes_into_fresh_blocks
from .kept_with_events import taken_without_event_waits
from .unwaited_side_stream_writes import writes_on_never_waiting_streams
from .facts import NO_REGION, Access
from .program import Function, Program
from .called_before import unordered_on_the_way_down, unordered_way_down
from .races import Context, contexts, matching, same_anchor, unordered
from .rule import Rule, insert_edit, location, way_of
from .streams import as_code, display, stream_words, writable


class OverwriteWhileAnotherStreamUses(Rule):
    """
    What it does:
        Finds a device write to a tensor that another stream read (write-after-read, WAR) or wrote (WAW) before
        it, with no ordering from that stream to the writing one in between: typically a side stream consumes a
        buffer inside `with torch.cuda.stream(s):` and the current stream then refills it (a ping-pong or
        staging buffer) without `torch.cuda.current_stream().wait_stream(s)`. The two accesses are taken in
        program order: in one function body, or in two functions a common function calls one after the other
        (directly or through calls), or a read that the writer's function reaches through a call it makes before
        the write (a hook that reduces the full bucket on a side stream, then refills it): there only an
        ordering on that way counts (called_before.py). Two writes in two different stream regions of two
        functions are also reported (WAW), whatever their order. A wait in the other direction
        (`s.wait_stream(current)`) orders nothing here. Two overwrites by a side stream of what the current stream may still use are found too:
        a block the current stream just allocated (in the function, or returned by a helper of the scan; a
        storage grown by `resize_(n)` too, also filled through a view of it: `tmp.set_(storage)`, `x.data = view`)
        filled inside `with torch.cuda.stream(s):` before `s` waits for the current stream, on every call path
        (fresh_block_on_side_stream.py); and a tensor that came from outside the function (a parameter, a loop
        variable over one, a `self.` attribute, a value taken out of an attribute's container) overwritten on a
        side stream that nothing in the whole program ever makes wait (unwaited_side_stream_writes.py). And a
        tensor a side stream read, kept in a container together with an event recorded on that stream after the
        read (`self.stash[k] = (t, side.record_event())`), then taken back out and written, or returned to the
        caller, with no wait for that event (kept_with_events.py; DeepSpeed's forward stash of offloaded
        activations).

    Why it is bad:
        Launching the side stream's kernel returns at once; the kernel may run much later. The current stream's
        write can land first, and the side stream then reads the new data (or its result is overwritten), a
        silent error that depends on timing. A wait for the producer before the consumer (SC101's fix) does not
        help: the edge needed goes the other way, from the consumer back to the next producer.

    Example:
        with torch.cuda.stream(side):
            total = staging.sum()        # side stream reads staging
        staging.copy_(next_batch)        # current stream overwrites it: may run first

    Known problems:
        Two accesses in functions that nothing calls one after the other are not paired (their order is not
        known). A read reached through a call before the write is paired with it through the same path, also
        where an index flips in between (`bucket.index = 1 - bucket.index`, a double buffer): a double buffer
        whose only wait back comes before the next reduction (it orders the refill of the buffer reduced the
        time before) is reported; that holds only where one stream makes every refill (not gradient hooks,
        which autograd runs on each parameter's backward stream). A side stream that is made to wait anywhere in the program is taken as waited before each of its
        overwrites of outside tensors; a stream handed to a constructor is not followed. An allocation is followed
        only through the writing function and the helpers it calls; the runtime detector starts a fresh history
        at each allocation, so it does not report the fresh-block overwrite. An element store of a new tensor
        (`kv_cache[blocks] = cpu[ids].to("cuda")`) is a write into the tensor stored into, also where that is a
        dict or a list (which only rebinds an element): the lint does not tell containers from tensors there.
        A kept tensor handed back to the caller is reported at its take, as the caller may write it in place:
        a caller that only reads it is no race; the wait counts anywhere in the taking function.

    Fix:
        Make the writing stream wait for the other one before the write:
        `torch.cuda.current_stream().wait_stream(side)` (or record an event on `side` after the read and
        `wait_event` it), or double-buffer with an index that alternates and a wait per buffer. For a side
        stream's overwrite, `s.wait_stream(torch.cuda.current_stream())` before the `with` (inside it,
        `current_stream()` is `s` itself). For a tensor kept with an event, wait the event once it is taken
        out: `t, ev = self.stash.pop(k)`, `torch.cuda.current_stream().wait_event(ev)`.
    """

    id = "SC106"
    summary = "tensor overwritten while another stream may still use it (WAR / WAW)"

    VALID = [
        # The current stream waits for the side stream before overwriting.
        """
import torch

def step(staging, batch, side):
    with torch.cuda.stream(side):
        total = staging.sum()
    torch.cuda.current_stream().wait_stream(side)
    staging.copy_(batch)
    return total
""",
        # Double buffer: the side stream reads one half, the current stream fills the other.
        """
import torch

def step(bufs, batch, side, cur):
    with torch.cuda.stream(side):
        total = bufs[cur].sum()
    bufs[1 - cur].copy_(batch)
    return total
""",
        # The side stream waits for the current stream, which allocated the buffer, before it fills it; an
        # outside tensor overwritten on a side stream that waits for the current stream first.
        """
import torch

def reload(host_state, copy_stream):
    buf = torch.empty_like(host_state, device="cuda")
    copy_stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(copy_stream):
        buf.copy_(host_state, non_blocking=True)
    return buf

def copy_back(gpu_param, host_param, copy_stream):
    copy_stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(copy_stream):
        gpu_param.copy_(host_param, non_blocking=True)

def step(params, host_params):
    copy_stream = torch.cuda.Stream()
    copy_back(params, host_params, copy_stream)
""",
        # The load stream waits for the current stream before it copies new blocks into the caller's cache.
        """
import torch

def load(kv_cache, cpu_cache, cpu_blocks, gpu_blocks, load_stream):
    load_stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(load_stream):
        kv_cache[gpu_blocks] = cpu_cache[cpu_blocks].to("cuda", non_blocking=True)

def step(kv_cache, cpu_cache, cpu_blocks, gpu_blocks):
    load_stream = torch.cuda.Stream()
    load(kv_cache, cpu_cache, cpu_blocks, gpu_blocks, load_stream)
""",
        # A tensor kept with the side stream's event after its read: waited when it is taken back out, also
        # through another name for the event.
        """
import torch

class Stash:
    def offload(self, tag, x):
        with torch.cuda.stream(self.d2h):
            host = x.to("cpu", non_blocking=True)
        self.stash[tag] = (x, self.d2h.record_event())
        return host

    def restore(self, tag):
        x, event = self.stash.pop(tag)
        ev = event
        torch.cuda.current_stream().wait_event(ev)
        x.mul_(2)
        return x
""",
        # A storage re-allocated with `resize_` and filled through a view after the side stream waited.
        """
import torch

h2d_stream = torch.cuda.Stream()

def restore(storage, nbytes, like, host):
    storage.resize_(nbytes)
    tmp = torch.tensor([], dtype=like.dtype, device="cuda")
    tmp.set_(storage, 0, like.shape)
    h2d_stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(h2d_stream):
        tmp.copy_(host, non_blocking=True)
""",
        # The bucket's reduction, reached through a call before the refill, is waited for before the refill.
        """
import torch

class Bucket:
    def add(self, grad):
        if self.full:
            self.reduce()
        self.buffer.copy_(grad)

    def reduce(self):
        self.side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(self.side):
            self.total = self.buffer.sum()
        torch.cuda.current_stream().wait_stream(self.side)
""",
        # Written first, read later (SC101's business, not a WAR).
        """
import torch

def step(staging, batch, side):
    staging.copy_(batch)
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        return staging.sum()
""",
    ]

    INVALID = [
        """
import torch

def step(staging, batch, side):
    with torch.cuda.stream(side):
        total = staging.sum()
    staging.copy_(batch)  # expect: SC106
    return total
""",
        # A wait in the other direction orders nothing for the overwrite.
        """
import torch

class Prefetcher:
    def step(self, batch):
        with torch.cuda.stream(self.side):
            out = self.staging * 2
        self.side.wait_stream(torch.cuda.current_stream())
        self.staging.copy_(batch)  # expect: SC106
        return out
""",
        # Through a helper called in the region.
        """
import torch

def consume(buf):
    return buf.sum()

def step(staging, batch, side):
    with torch.cuda.stream(side):
        total = consume(staging)
    staging.zero_()  # expect: SC106
    return total
""",
        # The bucket's reduction on a side stream, reached through a call before the refill, with no wait back.
        """
import torch

class Bucket:
    def add(self, grad):
        if self.full:
            self.reduce()
        self.buffer.copy_(grad)  # expect: SC106

    def reduce(self):
        self.side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(self.side):
            self.total = self.buffer.sum()
""",
        # Two writers on two streams (WAW).
        """
import torch

def run(t, s1, s2):
    def writer_a():
        with torch.cuda.stream(s1):
            t.fill_(1.0)

    def writer_b():
        with torch.cuda.stream(s2):
            t.fill_(2.0)  # expect: SC106

    writer_a()
    writer_b()
""",
        # A block of the current stream's pool filled on a side stream before it waits (DeepSpeed's reload).
        """
import torch

copy_stream = torch.cuda.Stream()

def reload(host_state):
    buf = torch.empty_like(host_state, device="cuda")
    with torch.cuda.stream(copy_stream):
        buf.copy_(host_state, non_blocking=True)  # expect: SC106
    copy_stream.wait_stream(torch.cuda.current_stream())
    return buf
""",
        # A storage re-allocated with `resize_` on the current stream, filled through a `set_` view on a side
        # stream that did not wait (torchrec's memory stashing restore less its wait).
        """
import torch

h2d_stream = torch.cuda.Stream()

def restore(storage, nbytes, like, host):
    storage.resize_(nbytes)
    tmp = torch.tensor([], dtype=like.dtype, device="cuda")
    tmp.set_(storage, 0, like.shape)
    with torch.cuda.stream(h2d_stream):
        tmp.copy_(host, non_blocking=True)  # expect: SC106
""",
        # The caller's tensor overwritten on a stream nothing ever makes wait (Megatron's hybrid optimizer less
        # its wait).
        """
import torch

def copy_back(gpu_param, host_param, copy_stream):
    with torch.cuda.stream(copy_stream):
        gpu_param.copy_(host_param, non_blocking=True)  # expect: SC106

def step(params, host_params):
    copy_stream = torch.cuda.Stream()
    copy_back(params, host_params, copy_stream)
""",
        # An element store of a new tensor copies it into the caller's tensor (vLLM's KV-block load, reduced).
        """
import torch

def load(kv_cache, cpu_cache, cpu_blocks, gpu_blocks, load_stream):
    with torch.cuda.stream(load_stream):
        kv_cache[gpu_blocks] = cpu_cache[cpu_blocks].to("cuda", non_blocking=True)  # expect: SC106

def step(kv_cache, cpu_cache, cpu_blocks, gpu_blocks):
    load_stream = torch.cuda.Stream()
    load(kv_cache, cpu_cache, cpu_blocks, gpu_blocks, load_stream)
""",
        # A tensor kept with the side stream's event after its read, taken out and written with no wait (the wait
        # after it is for a new event of another stream).
        """
import torch

class Stash:
    def offload(self, tag, x):
        with torch.cuda.stream(self.d2h):
            host = x.to("cpu", non_blocking=True)
        self.stash[tag] = (x, self.d2h.record_event())
        return host

    def restore(self, tag):
        x, event = self.stash.pop(tag)
        x.mul_(2)  # expect: SC106
        event = self.h2d.record_event()
        torch.cuda.current_stream().wait_event(event)
        return x
""",
    ]

    def check(self, program: Program) -> Iterable[Finding]:
        reported: set[tuple[str, int]] = set()  # one finding per write
        for writer, write in program.all_accesses():
            if write.kind != "write" or write.fresh:
                continue  # a new tensor bound to the path overwrites no memory another stream uses
            found: list[tuple[Context, Context, str]] = []
            for write_ctx in contexts(program, writer, write):
                for kind, other_kind in (("WAR", "read"), ("WAW", "write")):
                    for other_fn, other in matching(program, writer, write, other_kind):
                        if (other_fn is writer and other == write) or other.op == ALIAS:
                            continue
                        if kind == "WAW" and reads_in_place(writer, write):
                            continue  # an in-place collective reads first: SC101 reports the pair as RAW
                        for other_ctx in contexts(program, other_fn, other):
                            if self._races(program, other_ctx, write_ctx, kind):
                                found.append((other_ctx, write_ctx, kind))
            if found:
                reported.add((writer.file.path, write.line))
                yield _finding(program, writer, write, found)
        for finding in chain(writes_into_fresh_blocks(program, self.id),
                             writes_on_never_waiting_streams(program, self.id),
                             taken_without_event_waits(program, self.id)):
            if (finding.primary.path, finding.primary.line) not in reported:
                reported.add((finding.primary.path, finding.primary.line))
                yield finding

    @staticmethod
    def _races(program: Program, earlier: Context, later: Context, kind: str) -> bool:
        if same_anchor(earlier, later):
            return unordered(program, earlier, later)
        on_the_way = unordered_on_the_way_down(program, earlier, later)
        if on_the_way is not None:
            return on_the_way
        # Order unknown: SC101 already reports a write read elsewhere; two writes in two explicit regions are WAW.
        both_regions = earlier.access.region != NO_REGION and later.access.region != NO_REGION
        if kind != "WAW" or not both_regions or earlier.function is later.function:
            return False
        return unordered(program, earlier, later) and _first(earlier, later)


def _first(first: Context, second: Context) -> bool:
    """Report a two-writer race once: from the write that comes later in the source."""
    return (first.function.file.path, first.position) < (second.function.file.path, second.position)


def _finding(program: Program, writer: Function, write: Access, found: list[tuple[Context, Context, str]]) -> Finding:
    found.sort(key=lambda f: (f[2] != "WAR", len(f[0].chain), f[0].function.file.path, f[0].position, f[0].access.op))
    earlier, write_ctx, kind = found[0]
    verb = "read" if kind == "WAR" else "written"
    op = earlier.access.op
    message = (
        f"`{write.path}` is overwritten by `{write.op}` on {stream_words(write_ctx.stream)} while "
        f"{stream_words(earlier.stream)} may still use it ({verb} by `{op}` in `{earlier.function.facts.qualname}`): "
        f"no wait between them")
    related = [location(earlier.function, earlier.access.line, earlier.access.column,
                        ROLE_READ if kind == "WAR" else ROLE_WRITE, f"{op} in {earlier.function.facts.qualname}")]
    related += way_of(program, earlier if earlier.region_fn is not None else write_ctx, earlier)
    if not same_anchor(earlier, write_ctx):  # the calls through which the writer's function reached the read
        related += [location(fn, line, column, ROLE_CALL, f"calls {program.functions[callee].facts.qualname}")
                    for fn, (line, column), callee in unordered_way_down(program, earlier, write_ctx) or ()]
    waiter, waited = as_code(write_ctx.stream), as_code(earlier.stream)
    extra = {"path": write.path, "writer_stream": display(write_ctx.stream) if write_ctx.stream else "",
             "other_stream": display(earlier.stream) if earlier.stream else ""}
    if writable(waiter) and writable(waited):  # for --fix: the wait, right before the write
        extra["fix_edit"] = insert_edit(writer, write.line, write.column, f"{waiter}.wait_stream({waited})",
                                        f"before the write at line {write.line}")
    return Finding(
        rule=OverwriteWhileAnotherStreamUses.id,
        message=message,
        primary=location(writer, write.line, write.column, ROLE_WRITE, f"{write.op} in {writer.facts.qualname}"),
        related=tuple(related),
        fix=(f"Make `{waiter}` wait for `{waited}` before the write: `{waiter}.wait_stream({waited})` before "
             f"{writer.file.path}:{write.line} (or record an event on `{waited}` after its use and wait on it)."),
        kind=kind,
        symbol=writer.facts.qualname,
        extra=extra,
    )

