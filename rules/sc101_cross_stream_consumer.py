"""SC101: a tensor written on one stream is consumed on another with nothing ordering the two."""

from __future__ import annotations

from typing import Iterable

from streamcheck.findings import ROLE_READ, ROLE_WRITE, Finding

from .callback_handbacks import callbacks_handing_back_unordered_writes
from .collectives import launched_async
from .extract import ALIAS
from .facts import Access
from .hook_handoffs import hooks_returning_unordered_writes
from .outside_consumers import writes_for_outside_consumers
from .outside_producers import reads_of_outside_producers
from .program import Function, Program
from .races import Context, contexts, matching, ordered_only_in_its_own_hook_call, unordered
from .returned_from_a_side_stream import returned_unwaited
from .rule import Rule, location, way_of
from .side_waits_on_one_way import side_streams_waiting_on_one_way
from .streams import CURRENT_STREAM, as_code, display, stream_words
from .waits_on_one_way import writes_waited_on_one_way

MAX_READS_SHOWN = 3


# torchrec's maglev `_InputDataAwaitable` without its wait: the all-to-all's outputs (the elements of a parameter)
# and the event recorded after them are kept on `self`, and `wait()` hands the outputs on to the current stream
# without waiting the event (INVALID; the VALID twin adds the wait).
AWAITABLE = """
import torch
import torch.distributed as dist


class DataAwaitable:
    def __init__(self, out_bufs, in_bufs, copy_done, stream):
        stream.wait_event(copy_done)
        stream.wait_stream(torch.cuda.current_stream())
        done = torch.cuda.Event()
        with torch.cuda.stream(stream):
            for out_buf, in_buf in zip(out_bufs, in_bufs):
                dist.all_to_all_single(out_buf, in_buf)  # expect: SC101
            done.record(stream)
        self._out_bufs = out_bufs
        self._in_bufs = in_bufs
        self._done = done

    def wait(self):
        received = []
        for buf in self._out_bufs:
            received.append(buf.view(-1, 4))
        return received
"""


class CrossStreamConsumer(Rule):
    """
    What it does:
        Finds a device write (`copy_`, another in-place tensor method, `out=`, `torch.nn.init.*_`) to a tensor
        that a different stream then reads: a kernel or a collective launched inside
        `with torch.cuda.stream(s):` (or `get_accelerator().stream(s)`), directly or through calls, when the
        write was enqueued on the current stream, or the other way round. It is a query over the static
        happens-before engine: the two accesses are reported when no ordering on any path between them makes the
        reading stream wait for the writing one. Orderings count with their targets: `r.wait_stream(w)` orders
        r after w only, `r.wait_event(e)` after the streams `e` is recorded on, a synchronize of the writing
        stream, event or device orders everything launched after it; waits compose (`a` after `w`, then `r`
        after `a`). Inside `with torch.cuda.stream(s):` the current stream *is* s, so
        `s.wait_stream(torch.cuda.current_stream())` there waits for nothing. When the write and the read are in
        different functions, an ordering after the write (before any call that could run the read) or before
        the read on its way (in the region, before the `with`, in the callers) counts; callees count with what
        they always do, parameters bound to arguments. Writes and reads are matched by access path: the same
        `self.<attr>` of the class that assigns it, the same local variable (closures included, and a helper's
        parameter as its caller's argument), the same element of a container (`buf[i]` is not `buf[1 - i]`), or
        the same specific attribute name (`param.ds_secondary_tensor`); generic names like `.data`, `.grad` and
        `.weight` never match by name alone. Hidden producers count as writes: an out-of-place result
        (`y = x.to(dev, non_blocking=True)`, `torch.cat(...)`) is written where it is made, and a gradient
        (`p.grad`, `p.main_grad`) by the backward pass on the current stream, so a side stream reading it must
        wait for the current stream first (a `work.wait()` / `fut.wait()` before the read, as in a DDP comm hook,
        counts: the gradient came through the collective). A collective writes its outputs (all-gather and
        reduce-scatter outputs, an all-reduce in place). A Triton kernel of the scan (`kernel[grid](x, out, n)`, of the file or
        imported, also through an op wrapper of its module) writes the arguments its body stores through (`tl.store`,
        atomics, block pointers, tensor descriptors; streamcheck/triton_kernels.py) and reads the others. A tensor a function gets from outside (a parameter's
        path or a `self.` attribute) that nothing in the scan writes was made by code the scan does not hold,
        taken to run on the current stream: a side stream that reads it must have waited for the current stream
        on the reader's way (outside_producers.py; host buffers and `.to(device)` uploads excepted). Inside a
        function handed to a hook registrar (`register_hook`, `register_post_accumulate_grad_hook`, a module
        hook, `queue_callback`) and what it calls, the current stream is the invoker's: `default_stream()` there
        is another stream, and a wait for it orders nothing the hook reads (hooks.py); and as each call of a
        gradient hook runs on its own parameter's backward stream, a call's wait for its current stream does not
        order what an earlier call wrote there after the call that reaches the read (ZeRO's bucket, reduced
        when full and then copied into: DeepSpeed PR #8080). A local this function
        wrote and then handed to other code (`module.forward(batch)`) is read there, on the stream current at
        the call; what an awaitable's `wait()` hands back inside `with stream(s):` is s's output. A side-stream
        write handed out of a function to readers on the current stream is waited for on every way out (into
        the elements of a parameter the method keeps on `self`, the readers are the other methods of its class
        that take that attribute out: an event recorded after the write and kept on `self` orders it only where
        it is waited, outside_consumers.py, torchrec's maglev awaitable); a
        function that makes the current stream wait for it in one arm of an if/else and not in the other
        (waits_on_one_way.py), or a hook (a function the scan only hands over as a value) that has a side stream
        work on its own parameters through a call and returns with no wait after it (hook_handoffs.py), leaves
        the code it returns to reading unordered. A callback queued with `queue_callback` runs when the backward
        pass ends and returns to the code after `backward()`: when it makes the current stream wait for one of the
        side streams a backward hook of its file writes on and not for another (on some way through it), the other stream's
        write is read there unordered (callback_handbacks.py). The other direction too: a function that makes a
        side stream wait for the current stream in one arm of an if/else and not in the other, where that arm
        makes other side streams wait, leaves the stream's next reads unordered after the current stream's writes
        on that way (side_waits_on_one_way.py).
        A tensor a function allocates and fills in place inside `with stream(s):`, records for the current
        stream and returns to its caller (returned_from_a_side_stream.py: an unpack hook restoring an offloaded
        activation) is read by the caller on the current stream: the function must make the current stream wait
        for s before the return (or a caller in the scan after the call, or return an event recorded on s with
        it). When the function chooses the stream per branch (`if overlap: stream = side ... else: stream =
        current`), each way through the branch is judged by its own waits and its own stream
        (races.ways_through_branches).

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

    Known problems:
        A tensor made long ago (weights loaded before a device synchronize the scan does not see) is still
        taken as made on the current stream just before the read; a tensor written only through views stored
        elsewhere looks unwritten. A kernel the scan does not hold (a library's, a TileLang or CuTe kernel), or a
        Triton kernel whose pointer comes out of memory (`tl.load(ptrs_ptr + i)`), is taken to read its arguments
        only. A wait under a condition in the accesses' own function counts on every way (correlated guards are
        not related), except one inside an `if` block holding neither access that works on the waiting stream
        itself, for a read inside a block whose test reads other names only (guards.py); a host synchronize
        that a helper makes only under a condition (a profiling timer) does not count for the helper's callers,
        and one under a test for another device (`if current_platform.is_xpu():`) counts nowhere. Suppress with
        `# streamcheck: ignore[SC101]` and say why.

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
        # ... each way through the branch waits for the stream it chose; the `else` way runs on the current stream.
        """
import torch


class Reducer:
    def __init__(self):
        self.side = torch.cuda.Stream()
        self.bucket = torch.zeros(1024, device="cuda")

    def fill(self, grad):
        self.bucket.copy_(grad)

    def reduce(self, offload, overlap):
        if offload:
            stream = self.side if overlap else torch.cuda.current_stream()
            stream.wait_stream(torch.cuda.current_stream())
            torch.cuda.current_stream().wait_stream(stream)
        elif overlap:
            stream = self.side
            stream.wait_stream(torch.cuda.current_stream())
        else:
            stream = torch.cuda.current_stream()
        with torch.cuda.stream(stream):
            return self.bucket.sum()
""",
        # ... the returned tensor waited for and recorded for the current stream.
        """
import torch


class Restorer:
    def __init__(self):
        self.side = torch.cuda.Stream()

    def restore(self, cpu_tensor):
        with torch.cuda.stream(self.side):
            gpu = torch.empty(cpu_tensor.shape, device="cuda")
            gpu.copy_(cpu_tensor, non_blocking=True)
        torch.cuda.current_stream().wait_stream(self.side)
        gpu.record_stream(torch.cuda.current_stream())
        return gpu
""",
        # ... a prefetcher that leaves the hand-over to its caller (neither waits nor records): not judged here.
        """
import torch


class Prefetcher:
    def __init__(self):
        self.side = torch.cuda.Stream()

    def prefetch(self, cpu_tensor):
        with torch.cuda.stream(self.side):
            gpu = cpu_tensor.to("cuda", non_blocking=True)
        return gpu
""",
        # ... and its fixed twin: the current stream waits for the copies back.
        """
import torch


class Offloader:
    def __init__(self):
        self.d2h = torch.cuda.Stream()
        self.h2d = torch.cuda.Stream()
        self.done = {}

    def offload(self, key, grad, host):
        self.d2h.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(self.d2h):
            host.copy_(grad, non_blocking=True)
        self.done[key] = self.d2h.record_event()

    def step(self, key):
        event = self.done.pop(key, None)
        if event is not None:
            event.synchronize()

    def copy_back(self, params, hosts):
        self.h2d.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(self.h2d):
            for p, h in zip(params, hosts):
                p.data.copy_(h, non_blocking=True)
        torch.cuda.current_stream().wait_stream(self.h2d)
""",
        # ... and its fixed twin: each way through the if/else makes the copy stream wait (for the event handed in,
        # or for the current stream); and a stream chosen together with its wait (`stream = self.side` / `stream =
        # current`) needs no wait on the other way.
        """
import torch

class Stash:
    def __init__(self):
        self.side = torch.cuda.Stream()

    def stash(self, tensors, sync_event=None):
        if sync_event is not None:
            self.side.wait_event(sync_event)
        else:
            self.side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(self.side):
            for t in tensors:
                t.cpu_copy.copy_(t, non_blocking=True)
        torch.cuda.current_stream().wait_stream(self.side)

    def offload(self, tensor, use_streams):
        if use_streams:
            self.side.wait_stream(torch.cuda.current_stream())
            stream = self.side
        else:
            stream = torch.cuda.current_stream()
        with torch.cuda.stream(stream):
            tensor.cpu_copy.copy_(tensor, non_blocking=True)
        torch.cuda.current_stream().wait_stream(stream)
""",
        # ... and its fixed twin: the current stream waits for the prefetch before the next iteration reads it.
        """
import torch

def attend(chunks, side):
    current = chunks[0].load()
    for i in range(1, len(chunks)):
        total = torch.matmul(current, current)
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            current = chunks[i].load()
            current.mul_(2)
        torch.cuda.current_stream().wait_stream(side)
    return total
""",
        # ... and its fixed twin: the copy stream waits for the current stream first.
        """
import torch

def to_host(tensors, dtoh_stream):
    copies = {}
    dtoh_stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(dtoh_stream):
        for name, value in tensors.items():
            copies[name] = torch.empty(value.shape, device="cpu", pin_memory=True)
            copies[name].copy_(value, non_blocking=True)
    return copies
""",
        # The copy service's fixed twin: the current stream waits for the copy stream before `run` returns.
        """
import torch

class CopyService:
    def __init__(self):
        self.recvs = []
        self._copy_stream = torch.cuda.Stream()

    def run(self, sends):
        local = [op for op in self.recvs if op[0] in sends]
        self._copy_stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(self._copy_stream):
            for key, tensor in local:
                tensor.copy_(sends[key], non_blocking=True)
        torch.cuda.current_stream().wait_stream(self._copy_stream)
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
    def fetch(self):
        params = self.all_params()
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
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        x.copy_(y)
        z = x * 2
""",
        # Generic attribute names do not match by name alone.
        """
import torch

def release(p, full):
    p.data.copy_(full)

def fetch(model, s):
    module = model.layer
    with torch.cuda.stream(s):
        return module.weight.data * 2
""",
        # An async collective launched on the side stream, waited on the current stream before the read: the
        # wait orders the reader after the collective, which followed the side stream's earlier work.
        """
import torch
import torch.distributed as dist

class Bucket:
    def launch(self, side):
        with torch.cuda.stream(side):
            self.buf.mul_(2)
            self.handle = dist.all_reduce(self.buf, async_op=True)

    def finish(self):
        self.handle.wait()
        return self.buf.sum()
""",
        # An input of the function (made by its caller, on the current stream) read on a side stream after the
        # side stream waited for the current one.
        """
import torch

def offload(activation, side):
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        return activation.to("cpu", non_blocking=True).sum()
""",
        # The same gradient hook waiting for the current stream (the backward op's) first.
        """
import torch

class Bucket:
    def attach(self, params):
        for p in params:
            p.register_post_accumulate_grad_hook(self.add_grad)

    def add_grad(self, param):
        self.reduce_stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(self.reduce_stream):
            self.buffer.copy_(param.grad.view(-1), non_blocking=True)

    def finish(self):
        torch.cuda.current_stream().wait_stream(self.reduce_stream)
""",
        # The stream chosen by a conditional between a side stream and a property that returns the current
        # stream: the side arm switches, and the wait names the stream current at the hook (TRL >= 1.14).
        """
import torch

class Offload(torch.autograd.graph.saved_tensors_hooks):
    def __init__(self):
        self.s1 = torch.cuda.Stream()
        self.use_streams = True
        super().__init__(self.pack, self.unpack)

    @property
    def s0(self):
        return torch.cuda.current_stream()

    def pack(self, activation):
        if self.use_streams:
            self.s1.wait_stream(self.s0)
        stream = self.s1 if self.use_streams else self.s0
        with torch.cuda.stream(stream):
            cpu = torch.empty_like(activation, device="cpu", pin_memory=True)
            cpu.copy_(activation, non_blocking=True)
        return cpu

    def unpack(self, cpu):
        return cpu.to("cuda")
""",
        # A synchronize behind `if self.side is not None:` (there is a stream to drain) orders its callers too.
        """
import torch

class Offload:
    def offload(self, t):
        self.side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(self.side):
            self.staged.copy_(t, non_blocking=True)

    def drain(self):
        if self.side is not None:
            self.side.synchronize()

    def total(self):
        self.drain()
        return self.staged.sum()
""",
        # A tensor handed to a helper the scan holds is read where the helper reads it: here only its size.
        """
import torch

class Offload:
    @staticmethod
    def num_bytes(t):
        return t.element_size() * t.nelement()

    def stage(self, t):
        self.side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(self.side):
            staged = t * 2
        return self.num_bytes(staged)
""",
        # ... and with the consumer's wait: on a stream of its own class, which may be the one handed in as
        # `dist_stream` (a parameter's stream is any stream the caller has).
        """
import torch

def prefetch(context, dist_stream):
    with torch.cuda.stream(dist_stream):
        data = context.request.wait()
    torch.cuda.current_stream().wait_stream(dist_stream)
    context.staged_batches["emb"] = data

class Pipeline:
    def progress(self, context):
        with torch.cuda.stream(self.prefetch_stream):
            prefetch(context, self.dist_stream)

class Forward:
    def __call__(self, context):
        data = context.staged_batches.pop("emb")
        torch.cuda.current_stream().wait_stream(self.stream)
        return self.module.compute(data)
""",
        # ... recorded on the writing stream: waiting for it where it is taken out orders the read.
        """
import torch

class Offload:
    def offload(self, t, key):
        self.side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(self.side):
            self.staged.copy_(t, non_blocking=True)
        event = self.side.record_event()
        self.stash[key] = (t, event)

    def reload(self, key):
        _, ev = self.stash[key]
        torch.cuda.current_stream().wait_event(ev)
        return self.staged.sum()
""",
        # A stream captured as `current_stream()` at construction is the one the methods run on (vLLM's pp_utils).
        """
import torch

class Broadcaster:
    def __init__(self, device):
        self.main_stream = torch.cuda.current_stream(device)
        self.bcast_stream = torch.cuda.Stream(device)

    def send(self, tokens):
        counts = tokens.sum(dim=0)
        self.bcast_stream.wait_stream(self.main_stream)
        with torch.cuda.stream(self.bcast_stream):
            torch.distributed.broadcast(counts, src=0)
        torch.cuda.current_stream().wait_stream(self.bcast_stream)
""",
        # An awaitable that launched its exchange when built and waits for its event before handing the result out.
        """
import torch

class InputAwaitable:
    def __init__(self, inputs):
        self.side = torch.cuda.Stream()
        out = torch.empty_like(inputs)
        self.side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(self.side):
            torch.distributed.all_to_all_single(out, inputs)
            done = torch.cuda.Event()
            done.record(self.side)
        self._out = out
        self._done = done

    def wait(self):
        torch.cuda.current_stream().wait_event(self._done)
        return self._out.sum()
""",
        # ... and its fixed twin: the copy stream is synchronized before the moves are handed back.
        """
import torch


class Launcher:
    def launch(self, plan, torch_stream, done_event):
        plan.run()
        done_event.record(stream=torch_stream)


class Executor:
    def __init__(self, launcher: Launcher):
        self.launcher = launcher
        self.pack_stream = None
        self.copy_stream = None
        self.events = []

    def set_streams(self, pack_stream, copy_stream, events):
        self.pack_stream = pack_stream
        self.copy_stream = copy_stream
        self.events = events

    def run(self, plans):
        for i, plan in enumerate(plans):
            self.launcher.launch(plan, self.pack_stream, self.events[i % 2])
            self.events[i % 2].synchronize()

    def self_moves(self, receives, sends):
        self.copy_stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(self.copy_stream):
            for req in receives:
                req.dest.copy_(sends[req.key], non_blocking=True)
        self.copy_stream.synchronize()
""",
        # ... and its fixed twin: the end-of-backward callback waits for both of the hook's side streams.
        """
import functools

import torch
import torch.distributed as dist
from torch.autograd import Variable


def post_backward_hook(state, handle, *unused):
    state.post_backward_stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(state.post_backward_stream):
        dist.reduce_scatter_tensor(handle.flat_param.saved_grad_shard, handle.flat_param.grad)
        state.all_reduce_stream.wait_stream(state.post_backward_stream)
        with torch.cuda.stream(state.all_reduce_stream):
            dist.all_reduce(handle.flat_param.saved_grad_shard)


def final_callback(state):
    current = torch.cuda.current_stream()
    current.wait_stream(state.post_backward_stream)
    current.wait_stream(state.all_reduce_stream)


def register(state, handle, acc_grad):
    acc_grad.register_hook(functools.partial(post_backward_hook, state, handle))
    Variable._execution_engine.queue_callback(functools.partial(final_callback, state))
""",
        # ... and its fixed twin: the copy-in stream waits for the optimizer's writes on both ways.
        """
import torch


def all_gather(params, copy_in_stream, gather_stream):
    with torch.cuda.stream(copy_in_stream):
        flat = torch.cat([p.sharded for p in params])
    gather_stream.wait_stream(copy_in_stream)
    return flat


class State:
    def root_pre_forward(self, event):
        if event is not None:
            self.copy_in_stream.wait_event(event)
            self.gather_stream.wait_event(event)
        else:
            self.copy_in_stream.wait_stream(torch.cuda.current_stream())
            self.gather_stream.wait_stream(torch.cuda.current_stream())
""",
        # An awaitable keeps the all-to-all's outputs (the elements of a parameter) and the event recorded after
        # them on `self`; `wait()` makes the current stream wait the event before handing the outputs on
        # (torchrec's maglev `_InputDataAwaitable`).
        AWAITABLE.replace("  # expect: SC101", "").replace(
            "    def wait(self):\n", "    def wait(self):\n        torch.cuda.current_stream().wait_event(self._done)\n"),
        # ... and its fixed twin: the hook's block makes the all-reduce stream wait for itself.
        """
import torch
import torch.distributed as dist


def reduce(inp, rs_stream, ar_stream, ar_group, hook, n):
    rs_stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(rs_stream):
        out = torch.empty(n, device="cuda")
        out.copy_(inp)
        if ar_group is not None:
            ar_stream.wait_stream(rs_stream)
            with torch.cuda.stream(ar_stream):
                dist.all_reduce(out, group=ar_group)
    if hook is not None:
        ar_stream.wait_stream(rs_stream)
        with torch.cuda.stream(ar_stream):
            hook(out)
    return out
""",
    ]

    INVALID = [
        # A wait inside an `if` block, for that block's own work on the waiting stream, does not order a later
        # block under a test of other names: the way through the hook without the HSDP all-reduce has no wait
        # (FSDP2's foreach_reduce without `all_reduce_stream.wait_stream(reduce_scatter_stream)`; guards.py).
        """
import torch
import torch.distributed as dist


def reduce(inp, rs_stream, ar_stream, ar_group, hook, n):
    rs_stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(rs_stream):
        out = torch.empty(n, device="cuda")
        out.copy_(inp)  # expect: SC101
        if ar_group is not None:
            ar_stream.wait_stream(rs_stream)
            with torch.cuda.stream(ar_stream):
                dist.all_reduce(out, group=ar_group)
    if hook is not None:
        with torch.cuda.stream(ar_stream):
            hook(out)
    return out
""",
        # The stream chosen per branch: the overlap arm of the first branch waits only the other way round
        # (DeepSpeed's average_tensor); the `elif`'s wait is on another way (races.ways_through_branches).
        """
import torch


class Reducer:
    def __init__(self):
        self.side = torch.cuda.Stream()
        self.bucket = torch.zeros(1024, device="cuda")

    def fill(self, grad):
        self.bucket.copy_(grad)  # expect: SC101

    def reduce(self, offload, overlap):
        if offload:
            stream = self.side if overlap else torch.cuda.current_stream()
            torch.cuda.current_stream().wait_stream(stream)
        elif overlap:
            stream = self.side
            stream.wait_stream(torch.cuda.current_stream())
        else:
            stream = torch.cuda.current_stream()
        with torch.cuda.stream(stream):
            return self.bucket.sum()
""",
        # A tensor made on a side stream, recorded for the current stream and returned to the caller, who reads it
        # there: nothing makes the current stream wait for the copy (returned_from_a_side_stream.py).
        """
import torch


class Restorer:
    def __init__(self):
        self.side = torch.cuda.Stream()

    def restore(self, cpu_tensor):
        with torch.cuda.stream(self.side):
            gpu = torch.empty(cpu_tensor.shape, device="cuda")
            gpu.copy_(cpu_tensor, non_blocking=True)  # expect: SC101
        gpu.record_stream(torch.cuda.current_stream())
        return gpu
""",
        # Events handed to a helper that records them on the pack stream (`done_event.record(stream=...)`): their
        # synchronize is no wait for the copy stream, whose moves go back to the current stream unwaited
        # (Megatron's NVSHMEM copy service without `self.torch_copy_stream.synchronize()`).
        """
import torch


class Launcher:
    def launch(self, plan, torch_stream, done_event):
        plan.run()
        done_event.record(stream=torch_stream)


class Executor:
    def __init__(self, launcher: Launcher):
        self.launcher = launcher
        self.pack_stream = None
        self.copy_stream = None
        self.events = []

    def set_streams(self, pack_stream, copy_stream, events):
        self.pack_stream = pack_stream
        self.copy_stream = copy_stream
        self.events = events

    def run(self, plans):
        for i, plan in enumerate(plans):
            self.launcher.launch(plan, self.pack_stream, self.events[i % 2])
            self.events[i % 2].synchronize()

    def self_moves(self, receives, sends):
        self.copy_stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(self.copy_stream):
            for req in receives:
                req.dest.copy_(sends[req.key], non_blocking=True)  # expect: SC101
""",
        # An event kept in a dict by the statement that records it is the recording stream's (d2h): its
        # synchronize elsewhere in the file is no wait for the h2d copies handed back to the current stream
        # (Megatron's hybrid CPU optimizer, with the copy-back's event wait missing).
        """
import torch


class Offloader:
    def __init__(self):
        self.d2h = torch.cuda.Stream()
        self.h2d = torch.cuda.Stream()
        self.done = {}

    def offload(self, key, grad, host):
        self.d2h.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(self.d2h):
            host.copy_(grad, non_blocking=True)
        self.done[key] = self.d2h.record_event()

    def step(self, key):
        event = self.done.pop(key, None)
        if event is not None:
            event.synchronize()

    def copy_back(self, params, hosts):
        self.h2d.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(self.h2d):
            for p, h in zip(params, hosts):
                p.data.copy_(h, non_blocking=True)  # expect: SC101
""",
        # A wait on one way through an if/else only: when no event is handed in, the copy stream reads the tensors
        # with no wait for the current stream that made them (torchrec's memory stashing, one arm's wait missing).
        """
import torch

class Stash:
    def __init__(self):
        self.side = torch.cuda.Stream()

    def stash(self, tensors, sync_event=None):
        if sync_event is not None:
            self.side.wait_event(sync_event)
        else:
            print("no event")
        with torch.cuda.stream(self.side):
            for t in tensors:
                t.cpu_copy.copy_(t, non_blocking=True)  # expect: SC101
        torch.cuda.current_stream().wait_stream(self.side)
""",
        # Awaiting the input dist on a stream handed in orders that stream after the all-to-all, not the current
        # stream after that stream (a handle's wait is no wait for another stream).
        """
import torch

def stage(request, dist_stream, module):
    with torch.cuda.stream(dist_stream):
        data = request.wait()  # expect: SC101
    return module.compute(data)
""",
        # The event travels in a container (TRL's forward stash) but was recorded on another stream.
        """
import torch

class Offload:
    def offload(self, t, key):
        self.side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(self.side):
            self.staged.copy_(t, non_blocking=True)  # expect: SC101
        event = self.other.record_event()
        self.stash[key] = (t, event)

    def reload(self, key):
        _, ev = self.stash[key]
        torch.cuda.current_stream().wait_event(ev)
        return self.staged.sum()
""",
        # A helper only called inside another stream's region: its `current_stream()` is that (prefetch) stream,
        # so its wait orders nothing for the compute stream that takes the batch out of the context's dict
        # (torchrec's prefetch pipeline, with the consumer's wait missing).
        """
import torch

def prefetch(context, dist_stream):
    with torch.cuda.stream(dist_stream):
        data = context.request.wait()  # expect: SC101
    torch.cuda.current_stream().wait_stream(dist_stream)
    context.staged_batches["emb"] = data

class Pipeline:
    def progress(self, context):
        with torch.cuda.stream(self.prefetch_stream):
            prefetch(context, self.dist_stream)

class Forward:
    def __call__(self, context):
        data = context.staged_batches.pop("emb")
        return self.module.compute(data)
""",
        # A parameter rebound by a copy of itself is still read first as it came in (TRL's pack hook).
        """
import torch

class Offload:
    def pack(self, activation):
        with torch.cuda.stream(self.side):
            activation = activation.clone()  # expect: SC101
            host = torch.empty_like(activation, device="cpu", pin_memory=True)
            host.copy_(activation, non_blocking=True)
        return host
""",
        # The event comes from another stream's `record_event()`: waiting for it does not cover `side`.
        """
import torch

def run(x, y, side, other):
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        x.copy_(y)  # expect: SC101
    done = other.record_event()
    torch.cuda.current_stream().wait_event(done)
    return x * 2
""",
        # The same with the compute stream captured once at construction (TRL <= 1.13): the pack hook runs on
        # its invoker's stream, which the wait on the captured stream does not order.
        """
import torch

class Offload(torch.autograd.graph.saved_tensors_hooks):
    def __init__(self):
        self.s0 = torch.cuda.default_stream()
        self.s1 = torch.cuda.Stream()
        self.use_streams = True
        super().__init__(self.pack, self.unpack)

    def pack(self, activation):
        if self.use_streams:
            self.s1.wait_stream(self.s0)
        stream = self.s1 if self.use_streams else self.s0
        with torch.cuda.stream(stream):
            cpu = torch.empty_like(activation, device="cpu", pin_memory=True)
            cpu.copy_(activation, non_blocking=True)  # expect: SC101
        return cpu

    def unpack(self, cpu):
        return cpu.to("cuda")
""",
        # A gradient hook waits for the default stream: the backward op ran on its forward's stream (PR #7898).
        """
import torch

class Bucket:
    def attach(self, params):
        for p in params:
            p.register_post_accumulate_grad_hook(self.add_grad)

    def add_grad(self, param):
        self.reduce_stream.wait_stream(torch.cuda.default_stream())
        with torch.cuda.stream(self.reduce_stream):
            self.buffer.copy_(param.grad.view(-1), non_blocking=True)  # expect: SC101

    def finish(self):
        torch.cuda.current_stream().wait_stream(self.reduce_stream)
""",
        """
import torch

def run(x, y, s):
    x.copy_(y)  # expect: SC101
    with torch.cuda.stream(s):
        z = x * 2
""",
        # The wrong wait: inside the `with`, the current stream is `s` itself.
        """
import torch

def run(x, y, s):
    x.copy_(y)  # expect: SC101
    with torch.cuda.stream(s):
        s.wait_stream(torch.cuda.current_stream())
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
        # A collective's output is written by the collective (collectives.py): all-gathered on `side`, read on
        # the current stream with no wait.
        """
import torch
import torch.distributed as dist

def gather(shard, out, side):
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        dist.all_gather_into_tensor(out, shard)  # expect: SC101
    return out.sum()
""",
        # Elements of an attribute's list, reached through a filtered copy and a loop, written on a copy stream
        # that nothing ever waits for (Megatron's NCCL copy service without its final `wait_stream`).
        """
import torch

class CopyService:
    def __init__(self):
        self.recvs = []
        self._copy_stream = torch.cuda.Stream()

    def run(self, sends):
        local = [op for op in self.recvs if op[0] in sends]
        self._copy_stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(self._copy_stream):
            for key, tensor in local:
                tensor.copy_(sends[key], non_blocking=True)  # expect: SC101
""",
        # The elements of an input, taken by a loop, read on a side stream that never waited for the current one
        # (torchrec's deferrable metrics without their `wait_stream`).
        """
import torch

def to_host(tensors, dtoh_stream):
    copies = {}
    with torch.cuda.stream(dtoh_stream):
        for name, value in tensors.items():
            copies[name] = torch.empty(value.shape, device="cpu", pin_memory=True)
            copies[name].copy_(value, non_blocking=True)  # expect: SC101
    return copies
""",
        # Written late in one iteration on a side stream, read early in the next on the current stream (a chunk
        # prefetched for the next step, DeepSpeed FPDT's shape): the loop brings the read round again.
        """
import torch

def attend(chunks, side):
    current = chunks[0].load()
    for i in range(1, len(chunks)):
        total = torch.matmul(current, current)
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            current = chunks[i].load()
            current.mul_(2)  # expect: SC101
    return total
""",
        # An input of the function, written by code outside the scan on the current stream, read on a side stream
        # that never waited for it (outside_producers.py).
        """
import torch

def offload(activation, side):
    with torch.cuda.stream(side):
        return torch.cat([activation, activation])  # expect: SC101
""",
        # A stream context held by a local, chosen under a condition (Megatron's `stream_context`): the stream arm.
        """
import torch
from contextlib import nullcontext

def reduce(grad, side, overlap):
    stream_context = torch.cuda.stream(side) if overlap else nullcontext()
    grad.mul_(2)  # expect: SC101
    with stream_context:
        return torch.cat([grad])
""",
        # ... without that wait: the attribute holds what the side stream wrote in `__init__` (torchrec's maglev).
        """
import torch

class InputAwaitable:
    def __init__(self, inputs):
        self.side = torch.cuda.Stream()
        out = torch.empty_like(inputs)
        self.side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(self.side):
            torch.distributed.all_to_all_single(out, inputs)  # expect: SC101
            done = torch.cuda.Event()
            done.record(self.side)
        self._out = out
        self._done = done

    def wait(self):
        return self._out.sum()
""",
        # ... without the callback's wait for the all-reduce stream: the optimizer after `backward()` reads the
        # gradient the hook all-reduces there (FSDP1's _post_backward_final_callback, HSDP).
        """
import functools

import torch
import torch.distributed as dist
from torch.autograd import Variable


def post_backward_hook(state, handle, *unused):
    state.post_backward_stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(state.post_backward_stream):
        dist.reduce_scatter_tensor(handle.flat_param.saved_grad_shard, handle.flat_param.grad)
        state.all_reduce_stream.wait_stream(state.post_backward_stream)
        with torch.cuda.stream(state.all_reduce_stream):
            dist.all_reduce(handle.flat_param.saved_grad_shard)  # expect: SC101


def final_callback(state):
    current = torch.cuda.current_stream()
    current.wait_stream(state.post_backward_stream)


def register(state, handle, acc_grad):
    acc_grad.register_hook(functools.partial(post_backward_hook, state, handle))
    Variable._execution_engine.queue_callback(functools.partial(final_callback, state))
""",
        # ... with the copy-in stream left out of the event arm: it reads the sharded parameters before the
        # optimizer step that recorded the event is done (FSDP2's _root_pre_forward).
        """
import torch


def all_gather(params, copy_in_stream, gather_stream):
    with torch.cuda.stream(copy_in_stream):
        flat = torch.cat([p.sharded for p in params])  # expect: SC101
    gather_stream.wait_stream(copy_in_stream)
    return flat


class State:
    def root_pre_forward(self, event):
        if event is not None:
            self.gather_stream.wait_event(event)
        else:
            self.copy_in_stream.wait_stream(torch.cuda.current_stream())
            self.gather_stream.wait_stream(torch.cuda.current_stream())
""",
        # The same awaitable without the wait: the event kept on `self` is waited nowhere, so it orders nothing for
        # `wait()`, which hands the outputs on to the current stream (outside_consumers._sibling_takers).
        AWAITABLE,
    ]

    def check(self, program: Program) -> Iterable[Finding]:
        for writer, write in program.all_accesses():
            if write.kind != "write" or write.op == ALIAS:
                continue
            races: dict[tuple[str, str], list[tuple[Context, Context]]] = {}
            for write_ctx in contexts(program, writer, write):
                for reader, read in matching(program, writer, write, "read"):
                    if reader is writer and launched_async(writer, write):
                        continue  # an async collective's buffer used in the function that launched it: SC105's
                    for read_ctx in contexts(program, reader, read):
                        if unordered(program, write_ctx, read_ctx):
                            races.setdefault((write_ctx.stream, read_ctx.stream), []).append((write_ctx, read_ctx))
            if races:
                yield _finding(program, writer, write, races)
        yield from reads_of_outside_producers(program, self.id)
        yield from writes_for_outside_consumers(program, self.id)
        yield from writes_waited_on_one_way(program, self.id)
        yield from hooks_returning_unordered_writes(program, self.id)
        yield from callbacks_handing_back_unordered_writes(program, self.id)
        yield from side_streams_waiting_on_one_way(program, self.id)
        yield from returned_unwaited(program, self.id)


def _finding(program: Program, writer: Function, write: Access,
             races: dict[tuple[str, str], list[tuple[Context, Context]]]) -> Finding:
    # The pair of streams with a side-stream consumer first (the hpZ shape), then the most reads.
    (writer_stream, reader_stream), pairs = min(
        races.items(), key=lambda item: (item[0][1] == CURRENT_STREAM, -len(item[1]), item[0]))
    pairs = sorted(pairs, key=lambda p: (len(p[1].chain), p[1].function.file.path, p[1].access.line,
                                         p[1].access.column, p[1].access.op))  # total: the same report each run
    write_ctx, first = pairs[0]
    consumer = "a collective" if first.access.collective else f"`{first.access.op}`"
    across_hook_calls = ordered_only_in_its_own_hook_call(program, write_ctx, first)
    message = (
        f"`{write.path}` is written by `{write.op}` on {stream_words(writer_stream)} and read by {consumer} in "
        f"`{first.function.facts.qualname}` on {stream_words(reader_stream)} with no wait or synchronize between "
        f"them")
    if across_hook_calls:
        message = (
            f"`{write.path}` is written by `{write.op}` on the current stream of one call of a hook and read by "
            f"{consumer} in `{first.function.facts.qualname}` on {stream_words(reader_stream)} in a later call, "
            f"which waits only for its own current stream: autograd runs each call of a gradient hook on the stream "
            f"of its parameter's backward, so the write's stream may never be waited for")
    related = []
    shown = []
    for _, read_ctx in pairs:
        key = (read_ctx.function.id, read_ctx.access.line, read_ctx.access.column)
        if key not in shown and len(shown) < MAX_READS_SHOWN:
            shown.append(key)
            related.append(location(read_ctx.function, read_ctx.access.line, read_ctx.access.column, ROLE_READ,
                                    f"{read_ctx.access.op} in {read_ctx.function.facts.qualname}"))
    related += way_of(program, first if first.region_fn is not None else write_ctx, first)
    return Finding(
        rule=CrossStreamConsumer.id,
        message=message,
        primary=location(writer, write.line, write.column, ROLE_WRITE, f"{write.op} in {writer.facts.qualname}"),
        related=tuple(related),
        fix=_fix_across_hook_calls(writer, write) if across_hook_calls else _fix(program, write_ctx, first,
                                                                                  writer_stream, reader_stream),
        kind="RAW",
        symbol=writer.facts.qualname,
        extra={
            "path": write.path,
            "writer_stream": display(writer_stream) if writer_stream else "",
            "reader_stream": display(reader_stream) if reader_stream else "",
            "consumer": "collective" if first.access.collective else "device op",
            **({"across_hook_calls": True} if across_hook_calls else {}),
        },
    )


def _fix_across_hook_calls(writer: Function, write: Access) -> str:
    return (f"Record each call's own stream where it writes (`copy_streams.add(torch.cuda.current_stream())`, or an "
            f"event recorded after the write at {writer.file.path}:{write.line}) and make the reading stream wait for "
            f"every one of them, not only for the current stream of the call that reads (DeepSpeed PR #8080).")


def _fix(program: Program, write_ctx: Context, read_ctx: Context, writer_stream: str, reader_stream: str) -> str:
    reader = as_code(reader_stream)
    writer = as_code(writer_stream)
    if read_ctx.region_fn is not None and reader_stream != CURRENT_STREAM:
        region = read_ctx.region_fn.facts.regions[read_ctx.region]
        where = f"before the `with` at {read_ctx.region_fn.file.path}:{region.line}"
    else:
        where = f"before the read at {read_ctx.function.file.path}:{read_ctx.access.line}"
    return (f"Make `{reader}` wait for the writing stream before the read: `{reader}.wait_stream({writer})` "
            f"{where} (or record an event after the write and wait on it there).")

