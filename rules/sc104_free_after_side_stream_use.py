"""SC104: a tensor used on a side stream is freed without record_stream or a wait on that stream."""

from __future__ import annotations

from typing import Iterable

from streamcheck.findings import Finding

from .cleared_containers import cleared_after_side_use
from .free_after_handoff import frees_after_handoff
from .free_element_blocks import frees_of_element_blocks
from .handed_back_with_event import inputs_handed_back_with_events
from .kept_from_a_side_stream import kept_from_side_streams
from .kept_with_events import drops_without_event_waits
from .noop_record_stream import noop_record_streams
from .program import Program
from .refilled_attributes import refilled_attributes_taken_over
from .release_after_side_use import releases_after_side_use
from .returned_from_a_side_stream import returned_unrecorded
from .rule import Rule

# A bucket's gradients written on the reduction stream by a helper, then the bucket cleared (INVALID as it is;
# VALID with the helper's record_stream).
CLEARED_BUCKET = """
import torch


class Bucket:
    def __init__(self):
        self.grads = []

    def clear(self):
        self.grads.clear()


class Reducer:
    def copy_back(self, grads, reduced):
        with torch.cuda.stream(self.reduction_stream):
            for grad, new in zip(grads, reduced):
                grad.copy_(new)

    def reduce(self, bucket, reduced):
        self.copy_back(bucket.grads, reduced)
        bucket.clear()  # expect: SC104
"""


class FreeAfterSideStreamUse(Rule):
    """
    What it does:
        Finds a tensor that was allocated outside a `with torch.cuda.stream(side):` region (on the current
        stream), used inside it, and then released by the same function (inside the region after the use, or
        after it): `del x`, rebinding the local that held the only reference or the attribute that held it
        (`param.grad = None`), `x.data = <new tensor>` (not a swap to another tensor it holds),
        `x.resize_(...)`, `x.storage().resize_(0)` (also after the tensor was handed on, e.g. appended to a list:
        a storage resize frees the block whatever else holds it), `del container[key]`, an attribute rebound to
        what a scanned helper makes of it (`self.splits = to_cpu(self.splits)`, when the helper returns a new tensor), or the end
        of the function for a local it allocated and never handed out. A `record_stream` by a scanned helper the
        tensor is passed to counts as the function's own (summaries.parameter_lifetimes). A local it allocated (or got from a scanned helper that allocates it) and then stores
        for later code (`state[key] = buf`, `dest.data = buf`, `obj.f = buf`) counts as released there, unless
        the current stream waits for the side stream before the function ends: whoever frees it later does not
        know a side stream used the block. It is reported when the function
        never calls `x.record_stream(...)` and no `wait_stream` / `wait_event` / synchronize lies between the
        region and the release. A `self.` attribute that some method of the class assigns inside a region of the
        same stream is taken as allocated on that stream (its release there is ordered).

        The other direction too (free_after_handoff.py): a tensor allocated inside the region (a kernel's
        output, what an awaitable's `wait()` hands back there), handed over after it (the current stream waits for
        the side stream) and read on the current stream (by a device op, or by code it is passed to), with no
        `record_stream(current_stream())` in the function, when the side stream never waits for the current
        stream anywhere in the program and the host does not wait for the current stream after the last read
        and before the release (`.item()` there: the reads are done when the block can go back); also for a tensor taken out of a container (`data = ctx.batches.pop(k)`)
        that other code fills only inside regions of one side stream.

        A helper that uses a tensor its caller passes on a side stream of its own (`move_key(state, key)`
        copies `state[key]` out on the copy stream) needs a record (its own, or the caller's) before the caller
        frees it (`del state[key]`) unless the caller waits for that stream between the call and the free.

        And a keepalive (kept_with_events.py): a container that keeps tensors together with an event recorded on
        a side stream (`states.append(State(buf, event))`, FSDP2's reduce-scatter states) must wait an element's
        event before dropping it (`states.pop(0)` then `del`, `states.clear()`, `del stash[k]`): the reference
        was what kept the block from being handed out again.

        And through the methods of objects held in a local (free_element_blocks.py): `chunks[i].load()` inside
        the region binds `self.buf` to a new tensor (allocated on the side stream), the current stream reads it
        (`chunks[i].get_buf()`, an accessor), and `chunks[i].drop()` (`del self.buf`) releases it with no wait of the
        host for the current stream in between, while the side stream never waits for the current stream after
        the read (DeepSpeed FPDT's SequenceChunk).

        And a borrowed input handed back with an event (handed_back_with_event.py): a tensor the function was
        handed (a parameter, or an element of one), used inside its side-stream region, when the function records
        an event after that use and returns it instead of waiting (a pipeline stage), and no caller in the scan
        waits or synchronizes after the call: the caller may drop the input as soon as the call returns, so it
        needs `record_stream(side)` there.

        And the wrong record (noop_record_stream.py): `t.record_stream(torch.cuda.current_stream())` right after
        `t` was allocated inside the region (or in a helper only called from one), where the current stream is
        the allocation stream itself: it records nothing.

        And a refilled attribute (refilled_attributes.py): `self.batch` bound to new tensors inside regions of one
        side stream by other code (a pipeline's copy stage), read on the current stream after the current stream
        waits for it (under a local that names it too, `cur = self.batch`, handed to the model), with no
        `record_stream(current_stream())` by the function or a helper it hands the tensor to, while the side stream
        never waits for the current stream: the next fill drops the old tensor and its block goes back to the side
        stream's pool with the current stream's reads still queued (torchrec's TrainPipelineBase records it in
        `_wait_for_batch`).

        And a tensor returned from a side stream (returned_from_a_side_stream.py): allocated inside
        `with stream(s):` and filled there in place (`t = torch.empty(...)`, `t.copy_(src)`), the current stream
        made to wait for s, and returned to the caller, who uses it on the current stream,
        with no `record_stream(current_stream())` by the function (or by a caller in the scan on the local it
        binds the result to), while s does not wait for the current stream before the allocation: once the caller
        frees it, the block goes back to s's pool and the next call's allocation may overwrite it under the
        caller's queued reads (DeepSpeed's activation offload restores each activation for autograd this way).

        And a tensor kept from a side stream (kept_from_a_side_stream.py): allocated inside `with stream(s):`
        (or a view of such a tensor, `a, b = t.unbind(0)`), kept in a container together with an event recorded
        on s (`self.queue[-1] = PendingRecv(event, t, ...)`), while other code waits an element's event on
        another stream before using the tensors, and the storing function records the tensor for no stream
        (vLLM's PPHandler.receive, which calls `t.record_stream(self.main_stream)` for this reason).

        And a container of another object cleared after helpers used its elements on a side stream
        (cleared_containers.py): `self.reduce(bucket.grads)` hands the list down (also through lists the helpers
        rebuild from its elements, `for t in grads: small.append(t)`: element_flow.py) to code that writes the
        elements by a device op inside `with stream(side):`, and the function then clears the container
        (`bucket.grads.clear()`, or `bucket.clear()` where a method of that name calls `self.grads.clear()`) with
        no helper on that way calling `record_stream(side)` on them and no wait for `side` in between (DeepSpeed
        ZeRO-1/2's IPG buckets, whose gradients the reduction stream overwrites with their reduced values).

    Why it is bad:
        The caching allocator remembers only the stream a block was allocated on. Once the tensor is freed, the
        block can be handed to the next allocation on that stream and overwritten while the side stream's kernel
        is still reading (or writing) it: silent corruption that depends on timing.

    Example:
        t = torch.ones(n, device="cuda")
        with torch.cuda.stream(side):
            total = t.sum()
        del t                          # the block may be reused while `sum` still reads it

    Fix:
        Call `t.record_stream(side)` after the use on the side stream (the allocator then waits for the side
        stream's work before reusing the block), or make the current stream wait for the side stream
        (`torch.cuda.current_stream().wait_stream(side)`) before the tensor is released.
    """

    id = "SC104"
    summary = "tensor used on a side stream is freed without record_stream or a wait"

    VALID = [
        # ... recorded for the current stream before it is returned.
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
        # A pipeline's batch attribute, filled on the memcpy stream and taken over by `progress` through a helper
        # that waits for the memcpy stream and records the current stream on it (torchrec's TrainPipelineBase).
        """
import torch


def _wait_for_batch(batch, stream):
    cur = torch.cuda.current_stream()
    cur.wait_stream(stream)
    batch.record_stream(cur)


class Pipeline:
    def _copy_batch_to_gpu(self, batch):
        with torch.cuda.stream(self._memcpy_stream):
            self._cur_batch = batch.to("cuda", non_blocking=True)

    def progress(self, it):
        cur_batch = self._cur_batch
        _wait_for_batch(cur_batch, self._memcpy_stream)
        out = self._model(cur_batch)
        self._copy_batch_to_gpu(next(it))
        return out
""",
        # A keepalive list of (block, event): the keeper waits each element's event before dropping it (FSDP2).
        """
import torch


def reduce_grads(grads, rs_stream):
    flat = torch.cat(grads)
    rs_stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(rs_stream):
        out = flat.sum()
    event = rs_stream.record_event()
    return flat, event, out


class Group:
    def post_backward(self, grads):
        flat, event, out = reduce_grads(grads, self.rs_stream)
        self.states.append((flat, event))
        return out

    def finalize(self):
        for state in self.states:
            torch.cuda.current_stream().wait_event(state[1])
        self.states.clear()
""",
        # Stored together with an event recorded on the side stream after its use (TRL 1.14's forward stash): the
        # keeper waits the event before it lets the block go.
        """
import torch


class Stash:
    def offload(self, key, x, side):
        activation = x.clone()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            cpu = torch.empty(activation.shape, device="cpu", pin_memory=True)
            cpu.copy_(activation, non_blocking=True)
        event = side.record_event()
        self.stash[key] = (activation, event)
        return cpu, event
""",
        # A block of the current stream (from a helper that allocates it) filled on the copy stream and stored
        # for later code, recorded for the copy stream first (DeepSpeed's offload_adam_states move_back_key).
        """
import torch

def alloc(like):
    buf = torch.empty_like(like, device="cuda")
    return buf

def move_back(state, key, host, copy_stream):
    buf = alloc(host)
    with torch.cuda.stream(copy_stream):
        buf.copy_(host, non_blocking=True)
    buf.record_stream(copy_stream)
    state[key] = buf
""",
        # A chunk an element's method loads on the side stream, read on the current stream and dropped once the
        # host has waited for the current stream (DeepSpeed FPDT's compute_stream.synchronize()).
        """
import torch


class Chunk:
    def load(self):
        buf = torch.empty(self.shape, device="cuda")
        buf.copy_(self.cpu, non_blocking=True)
        self.buf = buf

    def get_buf(self):
        return self.buf

    def drop(self):
        del self.buf


def attend(chunks, side):
    compute = torch.cuda.current_stream()
    for i in range(len(chunks)):
        with torch.cuda.stream(side):
            chunks[i].load()
        compute.wait_stream(side)
        out = torch.matmul(chunks[i].get_buf(), chunks[i].get_buf())
        compute.synchronize()
        chunks[i].drop()
""",
        # record_stream before the free.
        """
import torch

def run(side, n):
    t = torch.ones(n, device="cuda")
    with torch.cuda.stream(side):
        total = t.sum()
    t.record_stream(side)
    del t
    return total
""",
        # The current stream waits for the side stream before the free.
        """
import torch

def run(side, n):
    t = torch.ones(n, device="cuda")
    with torch.cuda.stream(side):
        total = t.sum()
    torch.cuda.current_stream().wait_stream(side)
    t = None
    return total
""",
        # Allocated on the side stream itself.
        """
import torch

def run(side, n):
    with torch.cuda.stream(side):
        t = torch.ones(n, device="cuda")
        total = t.sum()
    del t
    return total
""",
        # A parameter: the caller still holds it, `del` frees nothing.
        """
import torch

def run(side, t):
    with torch.cuda.stream(side):
        total = t.sum()
    del t
    return total
""",
        # Handed out: whoever keeps it decides when it is freed.
        """
import torch

def run(side, n):
    t = torch.ones(n, device="cuda")
    with torch.cuda.stream(side):
        total = t.sum()
    return t, total
""",
        # `.data` swapped to another held tensor (DDP's mixed-precision params): the old storage is kept too.
        """
import torch

def cast_params(params, side):
    with torch.cuda.stream(side):
        for param in params:
            param.mp.copy_(param.data)
            param.data = param.mp
""",
        # Allocated on the same side stream by another method of the class.
        """
import torch

class Overlap:
    def start(self, x):
        with torch.cuda.stream(self.stream):
            self.cached = self.fc1(x)

    def finish(self):
        with torch.cuda.stream(self.stream):
            out = self.fc2(self.cached)
            self.cached = None
        return out
""",
        # ... and `record_stream(current_stream())` there records it for the region's stream (DeepSpeed ZeRO-3).
        """
import torch

class Reducer:
    def reduce(self, params):
        with torch.cuda.stream(self.reduce_stream):
            for p in params:
                self.move(p)

    def move(self, param):
        self.flat.copy_(param.grad.view(-1))
        param.grad.record_stream(torch.cuda.current_stream())
        param.grad = None
""",
        # ... recorded for the current stream once taken out.
        """
import torch

def prefetch(context, dist_stream):
    with torch.cuda.stream(dist_stream):
        data = context.request.wait()
    context.staged_batches["emb"] = data

class Forward:
    def __call__(self, context):
        data = context.staged_batches.pop("emb")
        torch.cuda.current_stream().wait_stream(self.stream)
        data.record_stream(torch.cuda.current_stream())
        return self.module.compute(data)
""",
        # ... each element recorded for the current stream as it is taken out.
        """
import torch

def lookup(requests, modules, dist_stream):
    waited = {}
    with torch.cuda.stream(dist_stream):
        for name in modules:
            waited[name] = requests[name].wait()
    torch.cuda.current_stream().wait_stream(dist_stream)
    for name, module in modules.items():
        kjt = waited[name]
        kjt.record_stream(torch.cuda.current_stream())
        module.compute(kjt)
""",
        # The reading stream taken before the region and recorded (diffusers >= 0.36).
        """
import torch

class Group:
    def onload(self):
        reader = torch.cuda.current_stream()
        with torch.cuda.stream(self.stream):
            for param in self.params:
                self.transfer(param, self.cpu_copies[param], reader)

    def transfer(self, tensor, source, reader):
        tensor.data = source.to("cuda", non_blocking=True)
        tensor.data.record_stream(reader)
""",
        # Made on the side stream, used on the current stream, recorded for it (torchrec's pipelines).
        """
import torch

def take(side, request, module):
    with torch.cuda.stream(side):
        batch = request.wait()
    torch.cuda.current_stream().wait_stream(side)
    batch.record_stream(torch.cuda.current_stream())
    return module.forward(batch)
""",
        # ... or the side stream waits for the current one before its next work (a prefetcher's next copy).
        """
import torch

class Prefetcher:
    def take(self, batch):
        with torch.cuda.stream(self.side):
            staged = batch.float()
        torch.cuda.current_stream().wait_stream(self.side)
        return staged.sum()

    def start_next(self):
        self.side.wait_stream(torch.cuda.current_stream())
""",
        # A context made on the dist stream, moved on by the prefetch helper, recorded where it is taken.
        """
import torch
from typing import Generic, TypeVar

C = TypeVar("C")

class BaseForward(Generic[C]):
    def __init__(self, context, stream):
        self._context = context
        self._stream = stream  # the pipeline's dist stream, under this class's own name


class PrefetchForward(BaseForward[dict]):
    def __call__(self, name):
        torch.cuda.current_stream().wait_stream(self._stream)
        ctx = self._context.contexts_after_prefetch.pop(name)
        ctx.record_stream(torch.cuda.current_stream())
        return self._module.compute(ctx)


class Pipeline:
    def wait_dist(self):
        with torch.cuda.stream(self._dist_stream):
            self._context.module_contexts = self._context.next_contexts.copy()

    def prefetch(self):
        with torch.cuda.stream(self._prefetch_stream):
            move(self._context)


def move(context):  # only run on the prefetch stream: moves each context on
    for name in list(context.module_contexts):
        context.contexts_after_prefetch[name] = context.module_contexts.pop(name)
""",
        # Handed on with another stream and recorded for that one too (torchrec's prefetch).
        """
import torch

def prefetch(context, modules, dist_stream, forward_stream):
    for name, module in modules.items():
        request = context.requests.pop(name)
        with torch.cuda.stream(dist_stream):
            data = request.wait()
        torch.cuda.current_stream().wait_stream(dist_stream)
        data.record_stream(torch.cuda.current_stream())
        data.record_stream(forward_stream)
        module.prefetch(data, forward_stream=forward_stream)
""",
        # Made on the side stream, all-reduced on the current one, then read by the host before it is dropped
        # (DeepSpeed ZeRO-3's `has_overflow`): the host waited for the current stream's reads.
        """
import torch
import torch.distributed as dist

def has_overflow(tracker, side, group):
    with torch.cuda.stream(side):
        overflow = tracker.clone().to(torch.uint8)
    torch.cuda.current_stream().wait_stream(side)
    dist.all_reduce(overflow, group=group)
    return overflow.item() > 0
""",
        # Handed on into a list, then its storage freed by the same function: recorded for the copy stream first
        # (torchrec's memory stashing).
        """
import torch


def stash(tensors, d2h_stream):
    stash_data = []
    d2h_stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(d2h_stream):
        for tensor in tensors:
            cpu_buffer = torch.empty(tensor.shape, device="cpu", pin_memory=True)
            cpu_buffer.copy_(tensor, non_blocking=True)
            tensor.record_stream(d2h_stream)
            stash_data.append((tensor, cpu_buffer))
        for tensor, _ in stash_data:
            tensor.untyped_storage().resize_(0)
    return stash_data
""",
        # A borrowed input used on the side stream and handed back with an event, recorded for that stream
        # (torchrec's transfer_tensors_to_cpu).
        """
import torch


def offload(tensors, side):
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        out = {}
        for k, v in tensors.items():
            dst = torch.empty(v.shape, device="cpu", pin_memory=True)
            dst.copy_(v, non_blocking=True)
            v.record_stream(side)
            out[k] = dst
        event = torch.cuda.Event()
        event.record()
    return out, event
""",
        # A bucket's gradients written on the reduction stream by a helper that records them, then the bucket
        # cleared.
        CLEARED_BUCKET.replace("  # expect: SC104", "").replace(
            "                grad.copy_(new)\n",
            "                grad.copy_(new)\n                grad.record_stream(self.reduction_stream)\n"),
    ]

    INVALID = [
        # A tensor made on a side stream, waited for and returned to the caller, who uses it on the current stream
        # and frees it: no record for the current stream (returned_from_a_side_stream.py).
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
        return gpu  # expect: SC104
""",
        # ... the same pipeline whose helper waits for the memcpy stream but records nothing.
        """
import torch


def _wait_for_batch(batch, stream):
    torch.cuda.current_stream().wait_stream(stream)


class Pipeline:
    def _copy_batch_to_gpu(self, batch):
        with torch.cuda.stream(self._memcpy_stream):
            self._cur_batch = batch.to("cuda", non_blocking=True)

    def progress(self, it):
        cur_batch = self._cur_batch
        _wait_for_batch(cur_batch, self._memcpy_stream)
        out = self._model(cur_batch)  # expect: SC104
        self._copy_batch_to_gpu(next(it))
        return out
""",
        # ... dropped with no wait of the host for the current stream.
        """
import torch


class Chunk:
    def load(self):
        buf = torch.empty(self.shape, device="cuda")
        buf.copy_(self.cpu, non_blocking=True)
        self.buf = buf

    def get_buf(self):
        return self.buf

    def drop(self):
        del self.buf


def attend(chunks, side):
    compute = torch.cuda.current_stream()
    for i in range(len(chunks)):
        with torch.cuda.stream(side):
            chunks[i].load()
        compute.wait_stream(side)
        out = torch.matmul(chunks[i].get_buf(), chunks[i].get_buf())
        chunks[i].drop()  # expect: SC104
""",
        # ... the keeper dropping the blocks without waiting their events.
        """
import torch


def reduce_grads(grads, rs_stream):
    flat = torch.cat(grads)
    rs_stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(rs_stream):
        out = flat.sum()
    event = rs_stream.record_event()
    return flat, event, out


class Group:
    def post_backward(self, grads):
        flat, event, out = reduce_grads(grads, self.rs_stream)
        self.states.append((flat, event))
        return out

    def finalize(self):
        self.states.clear()  # expect: SC104
""",
        # An attribute replaced, inside the D2H region, by the host copy a helper makes of it (Megatron's MoE
        # dispatcher without `record_stream=True`).
        """
import torch


def move_to_cpu(tensor):
    if tensor.is_cuda:
        cpu_tensor = tensor.to("cpu", non_blocking=True)
        tensor = cpu_tensor
    return tensor


class Dispatcher:
    def dtoh(self):
        self.dtoh_stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(self.dtoh_stream):
            self.splits = move_to_cpu(  # expect: SC104
                self.splits
            )
        self.d2h_event = self.dtoh_stream.record_event()
""",
        # A helper copies the item out on its own copy stream and records nothing; the caller frees it.
        """
import torch

copy_stream = torch.cuda.Stream()
done = torch.cuda.Event()


def move_key(state, key):
    with torch.cuda.stream(copy_stream):
        state["cpu_" + key].copy_(state[key], non_blocking=True)
    done.record(copy_stream)


def offload(state):
    copy_stream.wait_stream(torch.cuda.current_stream())
    move_key(state, "exp_avg")
    del state["exp_avg"]  # expect: SC104
""",
        # ... the same without the record: whoever frees `state[key]` later returns the block to the current
        # stream's pool while the copy may still write it.
        """
import torch

def alloc(like):
    buf = torch.empty_like(like, device="cuda")
    return buf

def move_back(state, key, host, copy_stream):
    buf = alloc(host)
    with torch.cuda.stream(copy_stream):
        buf.copy_(host, non_blocking=True)
    state[key] = buf  # expect: SC104
""",
        # Stored into another tensor's `.data` (move_back_hp_param).
        """
import torch

def move_back(dest, host, copy_stream):
    buf = torch.empty_like(host, device="cuda")
    with torch.cuda.stream(copy_stream):
        buf.copy_(host, non_blocking=True)
    dest.data = buf  # expect: SC104
""",
        # Made on the side stream and handed to the current stream without `record_stream`.
        """
import torch

def take(side, request, module):
    with torch.cuda.stream(side):
        batch = request.wait()
    torch.cuda.current_stream().wait_stream(side)
    return module.forward(batch)  # expect: SC104
""",
        # A multi-line release is reported where its statement starts (torch DDP's `_root_copy_hook`).
        """
import torch

def cast_grads(params, side, dtype):
    with torch.cuda.stream(side):
        for param in params:
            param.grad.data = param.grad.to(  # expect: SC104
                dtype
            )
""",
        # Dropping the last reference inside the region, right after the side stream read it.
        """
import torch

class Offload:
    def copy_grad(self, param, fp32_grad):
        with torch.cuda.stream(self.copy_stream):
            fp32_grad.copy_(param.grad.view(-1).float(), non_blocking=True)
            param.grad = None  # expect: SC104
""",
        """
import torch

def run(side, n):
    t = torch.ones(n, device="cuda")
    with torch.cuda.stream(side):
        total = t.sum()
    del t  # expect: SC104
    return total
""",
        # Freed by dropping the storage.
        """
import torch

class Gatherer:
    def gather(self, param):
        with torch.cuda.stream(self.side_stream):
            self.out.copy_(param.ds_tensor)
        param.ds_tensor.storage().resize_(0)  # expect: SC104
""",
        # Freed at the end of the function.
        """
import torch

def prefetch(side, x):
    staged = x.float()
    with torch.cuda.stream(side):
        y = staged * 2
    return y  # expect: SC104
""",
        # `.data` rebound to a tensor from elsewhere drops the old storage (DeepSpeed ZeRO-3's gradient bucket).
        """
import torch

class Reducer:
    def add_grad(self, param, bucket):
        with torch.cuda.stream(self.reduce_stream):
            view = bucket.narrow(0, 0, param.grad.numel()).view_as(param.grad)
            view.copy_(param.grad, non_blocking=True)
            param.grad.data = view  # expect: SC104
""",
        # Dropping the container's reference to an item the side stream still reads.
        """
import torch

def offload(state, key, host, side):
    with torch.cuda.stream(side):
        host.copy_(state[key], non_blocking=True)
    del state[key]  # expect: SC104
""",
        # An earlier `param.grad = None` (another branch of the loop) allocates nothing (DeepSpeed ZeRO-3).
        """
import torch

class Reducer:
    def reduce(self, params):
        with torch.cuda.stream(self.reduce_stream):
            self.partition(params)

    def partition(self, params):
        for param in params:
            if param.skip:
                param.grad = None
                continue
            self.flat.copy_(param.grad.view(-1))
            param.grad = None  # expect: SC104
""",
        # Recording `current_stream()` inside the region names the stream the tensor was allocated on: nothing
        # is recorded for the reader (diffusers' group offloading before PR #12721).
        """
import torch

class Group:
    def onload(self):
        with torch.cuda.stream(self.stream):
            for param in self.params:
                self.transfer(param, self.cpu_copies[param])

    def transfer(self, tensor, source):
        tensor.data = source.to("cuda", non_blocking=True)
        tensor.data.record_stream(torch.cuda.current_stream())  # expect: SC104
""",
        # Taken out of a container that is only filled on a side stream (torchrec's prefetched batches).
        """
import torch

def prefetch(context, dist_stream):
    with torch.cuda.stream(dist_stream):
        data = context.request.wait()
    context.staged_batches["emb"] = data

class Forward:
    def __call__(self, context):
        data = context.staged_batches.pop("emb")
        torch.cuda.current_stream().wait_stream(self.stream)
        return self.module.compute(data)  # expect: SC104
""",
        # Awaited results kept in a local dict inside the region, taken out after it (torchrec's PEC pipeline).
        """
import torch

def lookup(requests, modules, dist_stream):
    waited = {}
    with torch.cuda.stream(dist_stream):
        for name in modules:
            waited[name] = requests[name].wait()
    torch.cuda.current_stream().wait_stream(dist_stream)
    for name, module in modules.items():
        kjt = waited[name]
        module.compute(kjt)  # expect: SC104
""",
        # A helper called only inside a side-stream region runs on that stream: its release needs the record too.
        """
import torch

class Reducer:
    def reduce(self, params):
        with torch.cuda.stream(self.reduce_stream):
            for p in params:
                self.move(p)

    def move(self, param):
        self.flat.copy_(param.grad.view(-1))
        param.grad = None  # expect: SC104
""",
        # ... not recorded: the forward holds the dist stream as `self._stream` (torchrec's pipelined forwards).
        """
import torch
from typing import Generic, TypeVar

C = TypeVar("C")

class BaseForward(Generic[C]):
    def __init__(self, context, stream):
        self._context = context
        self._stream = stream  # the pipeline's dist stream, under this class's own name


class PrefetchForward(BaseForward[dict]):
    def __call__(self, name):
        torch.cuda.current_stream().wait_stream(self._stream)
        ctx = self._context.contexts_after_prefetch.pop(name)
        return self._module.compute(ctx)  # expect: SC104


class Pipeline:
    def wait_dist(self):
        with torch.cuda.stream(self._dist_stream):
            self._context.module_contexts = self._context.next_contexts.copy()

    def prefetch(self):
        with torch.cuda.stream(self._prefetch_stream):
            move(self._context)


def move(context):  # only run on the prefetch stream: moves each context on
    for name in list(context.module_contexts):
        context.contexts_after_prefetch[name] = context.module_contexts.pop(name)
""",
        # ... not recorded for the stream it is handed on with: that code may use it there.
        """
import torch

def prefetch(context, modules, dist_stream, forward_stream):
    for name, module in modules.items():
        request = context.requests.pop(name)
        with torch.cuda.stream(dist_stream):
            data = request.wait()
        torch.cuda.current_stream().wait_stream(dist_stream)
        data.record_stream(torch.cuda.current_stream())
        module.prefetch(data, forward_stream=forward_stream)  # expect: SC104
""",
        # ... without the record: `resize_(0)` frees the block whatever the list still holds, while the D2H copy
        # may still read it.
        """
import torch


def stash(tensors, d2h_stream):
    stash_data = []
    d2h_stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(d2h_stream):
        for tensor in tensors:
            cpu_buffer = torch.empty(tensor.shape, device="cpu", pin_memory=True)
            cpu_buffer.copy_(tensor, non_blocking=True)
            stash_data.append((tensor, cpu_buffer))
        for tensor, _ in stash_data:
            tensor.untyped_storage().resize_(0)  # expect: SC104
    return stash_data
""",
        # ... without the record: the caller may drop its tensors once the call returns.
        """
import torch


def offload(tensors, side):
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        out = {}
        for k, v in tensors.items():
            dst = torch.empty(v.shape, device="cpu", pin_memory=True)
            dst.copy_(v, non_blocking=True)
            out[k] = dst
        event = torch.cuda.Event()
        event.record()
    return out, event  # expect: SC104
""",
        # ... without the record: the cleared bucket's gradients may go back to the allocator under the copies.
        CLEARED_BUCKET,
    ]

    # Kept from a side stream with its event, waited on the main stream by another method: with
    # `t.record_stream(self.main)` before the store, VALID.
    INVALID.append("""
import torch


class Receiver:
    def __init__(self):
        self.main = torch.cuda.current_stream()
        self.side = torch.cuda.Stream()
        self.queue = []

    def receive(self, n):
        with torch.cuda.stream(self.side):
            t = torch.empty(n, device="cuda")
            torch.distributed.broadcast(t, src=0)
            event = self.side.record_event()
        self.queue.append((event, t))  # expect: SC104

    def consume(self):
        event, t = self.queue.pop(0)
        self.main.wait_event(event)
        return t * 2
""")
    VALID.append(INVALID[-1].replace("            event = self.side.record_event()",
                                     "            event = self.side.record_event()\n"
                                     "            t.record_stream(self.main)").replace("  # expect: SC104", ""))

    def check(self, program: Program) -> Iterable[Finding]:
        yield from releases_after_side_use(program, self.id)
        yield from cleared_after_side_use(program, self.id)
        handed_over = set()  # (function, tensor) reported at a read after the hand-over: not again at its return
        for finding in frees_after_handoff(program, self.id):
            handed_over.add((finding.symbol, finding.extra.get("path")))
            yield finding
        yield from frees_of_element_blocks(program, self.id)
        yield from noop_record_streams(program, self.id)
        yield from drops_without_event_waits(program, self.id)
        yield from kept_from_side_streams(program, self.id)
        yield from inputs_handed_back_with_events(program, self.id)
        yield from refilled_attributes_taken_over(program, self.id)
        yield from (f for f in returned_unrecorded(program, self.id) if (f.symbol, f.extra["path"]) not in handed_over)
