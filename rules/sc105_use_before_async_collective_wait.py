"""SC105: a tensor handed to an `async_op=True` collective is touched before the collective's handle is waited."""

from __future__ import annotations

from typing import Iterable
from weakref import WeakKeyDictionary

from streamcheck.findings import ROLE_CALL, ROLE_READ, ROLE_WRITE, Finding

from .facts import RETURNED, AsyncWork
from .hazard_flow import uses_after
from .program import Function, Program
from .races import exits_before, loop_around
from .rule import Rule, location
from .extract_handles import BATCH_P2P, P2P_LAUNCHES, P2P_SEND
from .extract_pairs import EVENT_RECORD, EVENT_WAIT
from .handle_flow import dropped_handles, finding as dropped_finding
from .handles_at_exit import finding as left_in_flight_finding, left_in_flight, single_handle, wait_text
from .loop_carried_handles import carried_touch
from .travelling_handles import MENTIONS, TravellingTouch, bound_local, travelling_touches

TOUCHES = frozenset({"read", "write", "host", "stream"})
P2P_OPS = P2P_LAUNCHES | {BATCH_P2P}  # asynchronous without `async_op=True`
_waiting_memo: "WeakKeyDictionary[Program, dict]" = WeakKeyDictionary()


class UseBeforeAsyncCollectiveWait(Rule):
    """
    What it does:
        Finds a collective called with `async_op=True` (`dist.all_reduce(t, async_op=True)`, `all_gather*`,
        `reduce_scatter*`, `broadcast`, ..., also wrapped: `instrument(dist.allgather_fn)(..., async_op=True)`)
        whose tensor the same function reads or writes before the returned handle is waited: `work.wait()`,
        also for handles appended to a list and waited in a loop (`for h in handles: h.wait()`). A call in
        between whose exactly resolved callee waits a handle counts as the wait. A dropped handle can never be
        waited, so any later use counts; so does returning the tensor while its handle stays behind unwaited
        (a backward returning its gradient to autograd). A handle stored on an object beside its buffer
        (`req.work = work; req.out = out`, or `self._work` beside `self._out`) travels with it: another function
        of the file (of the class, for `self.`) that mentions the handle's field and touches the buffer's field
        (or a name bound from it) before waiting the handle is reported too (torchrec's `Request` in autograd's
        backward). There, as for a launch in the function itself, a wait counts for a touch on a path to it: not
        one on the other arm of an if/else, nor one in a block that returns first; a wait under a condition with
        no other arm counts (`if isinstance(myreq.req, dist.Work): myreq.req.wait()`), and so does waiting a
        local bound from the handle's field (`work = myreq.req; work.wait()`); on the arm where the handle was
        tested None (the `else` of `if myreq.req is not None: myreq.req.wait()`) nothing is in flight.
        Point-to-point launches are async without the flag: `dist.isend`, `dist.irecv` and
        `dist.batch_isend_irecv(ops)` with the tensors of the `P2POp`s that went into `ops` (a send's tensor is
        only read: only writing it counts). The tensor is also touched through what holds it at the launch:
        the list it was appended to, the base it views, the container a loop variable iterates, and names
        bound from those (iterating a container is no touch). A function that returns (falling off its end)
        with the handle neither waited nor handed on (returned, stored, passed on) while a tensor its caller
        holds (a parameter, what a parameter holds, a `self.` attribute) is in flight is reported at the launch.
        A handle and its buffer handed on as one tuple (returned, queued, stored) and taken apart in another
        function of the file (`handle, buf = self.launch(p)`, `works, bufs = self.pending.popleft()`, `for p,
        (h, buf) in zip(params, pairs)`) are a launch there too (extract_pairs.py); so are the parameters
        of a class's `__init__` the pair is handed to (`Handle(work, out)`), and a parameter taken apart into
        the names a launcher of the file returned (`(out, work) = result` after `return Result(out, work)`),
        for launches with `async_op=<a variable>` too (only there: where they run, the flag is unknown). A launch
        in a loop whose tensor the body makes afresh and whose handle it waits only in the next iteration is
        checked from the body's first line again: a touch there before the wait races with the previous
        iteration's collective.
        Handles travel as values (handle_flow.py): returned inside a dict, list or tuple by a helper
        (`reqs["recv"] = dist.irecv(buf, src)` ... `return reqs`), merged (`reqs.update(...)`), taken apart by
        the caller (`buf, handles = comm.exchange(...)`), queued (`pending.append(handles.pop("recv"))`) and
        taken out again (`h = pending.pop(0)`). A handle of another function's receive or collective taken out
        of a container and then dropped (bound again, or the function ends, with no use of it in between) is
        never waited: nothing orders the current stream after it (Megatron's interleaved 1F1B schedule).
        A handle object of the file whose `wait()` writes a tensor it was constructed with (Megatron's
        `_ReduceScatterWithFP32AccumulationWorkHandle` copies the fp32 sum into `output_tensor`) is a launch where
        it is built and bound to a local, on that tensor (extract_handle_objects.py).
        A buffer stored into an element of a local container (`bufs[(i + 1) % 2] = buf`) is followed there:
        another element used in the loop iteration that stored it is the other half of a double buffer, but after
        the loop any element may be it (Megatron's `all_gathered_input[drain_idx]`).
        A coalescing manager's `cm` (`with dist._coalescing_manager(group, async_ops=...) as cm:`) is the handle
        of the collectives launched in its body; one launched with a variable flag (`async_op=async_op`) whose
        handle is stored on an object's field travels as above, to the methods that mention that field (Megatron's
        `self.param_gather_handle = cm`, waited in `finish_param_sync` before `bucket.param_data` of `for bucket
        in self.buckets` is read: an element's field through the loop over the object's container is the buffer
        too). A helper that waits only under a condition does not count as the wait there.
        An event recorded inside `with stream(s):` after the region's work on a tensor the function made or wrote
        stands for that work when the two are handed on together (`return AllGatherResult(out, event, ...)`): a
        function of the file that takes them apart must wait the event (`s.wait_event(event)`, `event.wait()`,
        `event.synchronize()`) before it touches the tensor.

    Why it is bad:
        An async collective runs on the communication library's stream; the calling stream does not wait for it
        until `work.wait()`. A kernel launched before that reads the buffer while NCCL is still writing it
        (half-reduced values), or writes it while NCCL is still sending it (peers receive the new values).

    Example:
        work = dist.all_reduce(grad, async_op=True)
        grad.div_(world_size)         # races with the all-reduce
        work.wait()

    Known problems:
        A travelling handle's object is matched by the pair of field names and the function's mention of the
        handle's field only (within the launch's file; its class, for `self.`), not by the object's type:
        another object of the file that carries the same two fields is taken for it, and a consumer in another
        file is not checked. Of the condition of an `if` around a wait there, only a test of the handle against
        None (or its truth) is read: a wait that runs only for one type of handle covers every handle.

    Fix:
        Call `work.wait()` before the first use of the tensor (it makes the current stream wait for the
        collective, without blocking the host), or move the use after the existing wait.
    """

    id = "SC105"
    summary = "tensor of an async_op=True collective is used before work.wait()"

    VALID = [
        """
import torch.distributed as dist

def reduce(t):
    work = dist.all_reduce(t, async_op=True)
    work.wait()
    return t.sum()
""",
        # Handles kept in a list and waited in a loop.
        """
import torch.distributed as dist

def reduce_all(tensors):
    handles = []
    for t in tensors:
        handles.append(dist.all_reduce(t, async_op=True))
    for h in handles:
        h.wait()
    return [t * 2 for t in tensors]
""",
        # A handle appended to a list, waited through the list; a second collective on the same tensor is
        # ordered with the first on the communication stream.
        """
import torch.distributed as dist

def gather(out, scale_out, shard, scale, group, rs):
    pending = []
    work = dist.all_gather_into_tensor(scale_out, scale, group=group, async_op=True)
    pending.append(work)
    rs_handle = dist_reduce_scatter_func(out, scale_out, group=group, async_op=True)
    for w in pending:
        w.wait()
    rs_handle.wait()
    return scale_out.sum()
""",
        # Waited in the same expression, or through a future.
        """
import torch.distributed as dist

def reduce(t, n):
    dist.all_reduce(t, async_op=True).wait()
    fut = dist.all_reduce(t, async_op=True).get_future()
    fut.wait()
    pending = [dist.broadcast(t, 0, async_op=True)]
    while pending:
        pending.pop().wait()
    return t / n
""",
        # Touching only metadata, or another tensor, is fine; so is waiting in a helper.
        """
import torch.distributed as dist

class Reducer:
    def reduce(self, grad, other):
        self.work = dist.all_reduce(grad, async_op=True)
        n = grad.numel() * grad.shape[0]
        other.mul_(2)
        self.finish()
        return grad.sum()

    def finish(self):
        self.work.wait()
""",
        # The travelling handle is waited before its buffer is read.
        """
import torch.distributed as dist

class AllToAll:
    def forward(ctx, req, out, inp, group):
        work = dist.all_to_all_single(out, inp, group=group, async_op=True)
        req.work = work
        req.out = out
        ctx.req = req

    def backward(ctx):
        req = ctx.req
        req.work.wait()
        req.work = None
        grad = req.out
        req.out = None
        return grad.div_(2)
""",
        # ... waited through a local bound from the handle's field, on the one path that reads the buffer.
        """
import torch.distributed as dist

class AllToAll:
    def forward(ctx, req, out, inp, group):
        work = dist.all_to_all_single(out, inp, group=group, async_op=True)
        req.work = work
        req.out = out
        ctx.req = req

    def backward(ctx, skip):
        req = ctx.req
        if skip:
            req.work = None
            return None
        work = req.work
        work.wait()
        return req.out.div_(2)
""",
        # Point-to-point: the receives of a batch are waited through the loop over its handles; reading a
        # tensor that is being sent is no race.
        """
import torch
import torch.distributed as dist

def exchange(sends, recvs, peers):
    ops = []
    for peer, send, recv in zip(peers, sends, recvs):
        ops.append(dist.P2POp(dist.isend, send, peer))
        ops.append(dist.P2POp(dist.irecv, recv, peer))
    reqs = dist.batch_isend_irecv(ops)
    total = torch.cat(sends).sum()
    for req in reqs:
        req.wait()
    return torch.cat(recvs) + total
""",
        # The caller's tensors go back with the handle, or after the wait; a handle stored in a global list
        # (waited by another function) is handed on.
        """
import torch.distributed as dist

_pending = []

def gather(outputs, inputs, group, async_op=False):
    reqs = []
    for out, inp in zip(outputs, inputs):
        reqs.append(dist.all_gather_into_tensor(out, inp, group=group, async_op=True))
    if async_op:
        return reqs[-1]
    reqs[-1].wait()

def send(tensor, dst):
    op = dist.isend(tensor, dst)
    _pending.append(op)
""",
        # A handle and its buffer returned together, taken apart and waited before the buffer is read.
        """
import torch.distributed as dist

class Partitioner:
    def reduce_all(self, params):
        pairs = []
        for p in params:
            pairs.append(self.reduce_one(p))
        for p, (handle, part) in zip(params, pairs):
            if handle is not None:
                handle.wait()
            p.grad.copy_(part)

    def reduce_one(self, p):
        out = p.grad.new_empty(p.numel() // 2)
        handle = dist.reduce_scatter_tensor(out, p.grad, async_op=True)
        return handle, out
""",
        # A handle carried to the loop's next iteration, waited there before the tensor is read (Domino).
        """
import torch.distributed as dist

def forward(layers, hidden, n, group):
    handle = None
    for i in range(n):
        if i > 0:
            handle.wait()
            hidden = layers[i - 1].residual(hidden)
        hidden = layers[i].mlp(hidden)
        handle = dist.all_reduce(hidden, group=group, async_op=True)
    handle.wait()
    return hidden
""",
        # One element of a list by a constant index is no path of its own: the other elements stay usable.
        """
import torch.distributed as dist

def roll(send_list, recv_list, prev, nxt, first):
    ops = [dist.irecv(tensor=recv_list[1], src=prev)]
    if first:
        recv_list[0].zero_()
    for op in ops:
        op.wait()
""",
        # The same handle object, waited on the synchronous path (Megatron's reduce_scatter_with_fp32_accumulation).
        """
import torch
import torch.distributed as dist

class Fp32ReduceScatterHandle:
    def __init__(self, work, gathered, output):
        self.work = work
        self.gathered = gathered
        self.output = output

    def wait(self):
        if self.work is not None:
            self.work.wait()
        self.output.copy_(self.gathered.sum(dim=0))

def reduce_scatter_fp32(output, tensor, group, async_op):
    gathered = torch.empty_like(tensor)
    work = dist.all_to_all_single(gathered, tensor, group=group, async_op=async_op)
    handle = Fp32ReduceScatterHandle(work, gathered, output)
    if async_op:
        return handle
    else:
        handle.wait()
""",
        # A double buffer: the in-flight buffer stored in one element of a local list while the other is read.
        """
import torch
import torch.distributed as dist

def drain(chunks, out, group, size):
    bufs = [None, None]
    for i in range(len(chunks)):
        buf = torch.empty(size, device="cuda")
        handle = dist.all_gather_into_tensor(buf, chunks[i], group=group, async_op=True)
        bufs[(i + 1) % 2] = buf
        buf = None
        torch.matmul(bufs[i % 2], bufs[i % 2], out=out)
        last = (i + 1) % 2
        handle.wait()
    torch.matmul(bufs[last], bufs[last], out=out)
""",
        # An event recorded after a stream's work on a tensor, handed on with it, waited before the tensor is read.
        """
import torch

def gather(out, stream, comm):
    with torch.cuda.stream(stream):
        out.copy_(comm(out))
        event = stream.record_event()
        return out, event

def copy_out(result, dst):
    out, event = result
    torch.cuda.current_stream().wait_event(event)
    dst.copy_(out)
""",
        # A coalescing manager's handle stored on the object, waited before the buckets it gathered are read.
        """
import torch.distributed as dist
from torch.distributed import _coalescing_manager

class BucketGroup:
    def __init__(self, buckets, group):
        self.buckets = buckets
        self.group = group
        self.gather_handle = None

    def start_gather(self, overlap, force_sync=False):
        if force_sync and self.gather_handle is not None:
            self.gather_handle.wait()
        async_op = overlap
        with _coalescing_manager(self.group, async_ops=async_op) as cm:
            for bucket in self.buckets:
                dist.all_gather_into_tensor(bucket.param_data, bucket.shard, group=self.group, async_op=async_op)
        self.gather_handle = cm if async_op else None

    def finish_gather(self, params):
        if self.gather_handle is not None:
            self.gather_handle.wait()
            self.gather_handle = None
            for bucket in self.buckets:
                params.copy_(bucket.param_data)
""",
        # A receive's handle returned in a dict inside a tuple, queued, and waited in the next iteration.
        """
import torch
import torch.distributed as dist

def _ops(send, recv, peer):
    reqs = {}
    if send is not None:
        reqs["send"] = dist.isend(send, peer)
    req = dist.irecv(recv, peer)
    reqs["recv"] = req
    return reqs

def exchange(send, shape, peer):
    recv = torch.empty(shape, device="cuda")
    handles = {}
    handles.update(_ops(send, recv, peer))
    return recv, handles

def schedule(model, x, n, shape):
    pending = []
    inputs = [x]
    for k in range(n):
        if k > 0:
            h = pending.pop(0)
            h.wait()
        y = model(inputs[-1])
        buf, handles = exchange(y, shape, 1)
        pending.append(handles.pop("recv"))
        inputs.append(buf)
""",
    ]

    INVALID = [
        # Returned to the caller (autograd, in a backward) while the handle stays here unwaited.
        """
import torch.distributed as dist

def backward(grad_input, group, sequence_parallel):
    handle = dist.all_reduce(grad_input, group=group, async_op=True)
    if sequence_parallel:
        handle.wait()
        return grad_input * 2
    return grad_input  # expect: SC105
""",
        # The handle travels beside its buffer; the backward clears it without waiting (torchrec's Request).
        """
import torch.distributed as dist

class AllToAll:
    def forward(ctx, req, out, inp, group):
        work = dist.all_to_all_single(out, inp, group=group, async_op=True)
        req.work = work
        req.out = out
        ctx.req = req

    def backward(ctx):
        req = ctx.req
        req.work = None
        grad = req.out
        req.out = None
        return grad.div_(2)  # expect: SC105
""",
        # ... waited on one arm of an if/else only: the other arm reads the buffer still in flight.
        """
import torch.distributed as dist

class AllToAll:
    def forward(ctx, req, out, inp, group):
        work = dist.all_to_all_single(out, inp, group=group, async_op=True)
        req.work = work
        req.out = out
        ctx.req = req

    def backward(ctx, scale):
        req = ctx.req
        if scale:
            req.work.wait()
            grad = req.out.mul(scale)
        else:
            grad = req.out.clone()  # expect: SC105
        req.out = None
        return grad
""",
        """
import torch.distributed as dist

class SizesAwaitable:
    def __init__(self, sizes, send, group):
        self._sizes = sizes
        self._work = dist.all_to_all_single(self._sizes, send, group=group, async_op=True)

    def wait(self):
        if self._work is None:
            return []
        return self._sizes.tolist()  # expect: SC105
""",
        # The received tensors are read through the list they were put in, before the batch's handles are waited.
        """
import torch
import torch.distributed as dist

def exchange(sends, peers, shape):
    received = []
    ops = []
    for peer, send in zip(peers, sends):
        recv = torch.empty(shape, device="cuda")
        received.append(recv)
        ops.append(dist.P2POp(dist.isend, send, peer))
        ops.append(dist.P2POp(dist.irecv, recv, peer))
    reqs = dist.batch_isend_irecv(ops)
    return torch.cat(received)  # expect: SC105
""",
        # The function returns while the caller's buffer is still being received (a synchronous wrapper whose
        # wait went missing): nothing can wait for it any more.
        """
import torch.distributed as dist

def recv_from_prev(recv_buffer, prev_rank):
    op = dist.P2POp(dist.irecv, recv_buffer, prev_rank)
    reqs = dist.batch_isend_irecv([op])  # expect: SC105
    for req in reqs:
        pass
""",
        # Handles and buffers queued together as one tuple, taken out and used before the handles are waited.
        """
import torch
import torch.distributed as dist
from collections import deque

class Stage:
    def __init__(self):
        self.pending = deque()

    def post(self, shapes, src):
        works, bufs = [], []
        for shape in shapes:
            buf = torch.empty(shape, device="cuda")
            works.append(dist.irecv(buf, src=src))
            bufs.append(buf)
        self.pending.append((works, bufs))

    def take(self):
        works, bufs = self.pending.popleft()
        return torch.cat(bufs)  # expect: SC105
""",
        # The previous iteration's all-reduce is still running when the next one reads its tensor.
        """
import torch.distributed as dist

def forward(layers, hidden, n, group):
    handle = None
    for i in range(n):
        if i > 0:
            hidden = layers[i - 1].residual(hidden)  # expect: SC105
        hidden = layers[i].mlp(hidden)
        handle = dist.all_reduce(hidden, group=group, async_op=True)
    handle.wait()
    return hidden
""",
        # A single receive, read before its handle is waited.
        """
import torch.distributed as dist

def receive(buf, src):
    req = dist.irecv(buf, src=src)
    shape = buf.tolist()  # expect: SC105
    req.wait()
    return shape
""",
        # Through the list the reduced tensors were appended to (FSDP's sharded grad scaler, less its wait).
        """
import torch
import torch.distributed as dist

def unscale(found_infs, group):
    works = []
    on_device = []
    for found in found_infs:
        dev = found.to("cuda")
        on_device.append(dev)
        works.append(dist.all_reduce(dev, async_op=True, group=group))
    torch._foreach_copy_(found_infs, on_device)  # expect: SC105
    for work in works:
        work.wait()
""",
        """
import torch.distributed as dist

def reduce(t):
    work = dist.all_reduce(t, async_op=True)
    total = t.sum()  # expect: SC105
    work.wait()
    return total
""",
        """
import torch.distributed as dist

def reduce_all(tensors, world):
    handles = []
    for t in tensors:
        handles.append(dist.all_reduce(t, async_op=True))
        t.div_(world)  # expect: SC105
    for h in handles:
        h.wait()
""",
        """
import torch.distributed as dist

def gather(out, shard, group):
    handle = dist.all_gather_into_tensor(out, shard, group=group, async_op=True)
    shard.zero_()  # expect: SC105
    if handle is not None:
        handle.wait()
""",
        # A handle object whose wait() produces the output, built and left behind on the synchronous path.
        """
import torch
import torch.distributed as dist

class Fp32ReduceScatterHandle:
    def __init__(self, work, gathered, output):
        self.work = work
        self.gathered = gathered
        self.output = output

    def wait(self):
        if self.work is not None:
            self.work.wait()
        self.output.copy_(self.gathered.sum(dim=0))

def reduce_scatter_fp32(output, tensor, group, async_op):
    gathered = torch.empty_like(tensor)
    work = dist.all_to_all_single(gathered, tensor, group=group, async_op=async_op)
    handle = Fp32ReduceScatterHandle(work, gathered, output)  # expect: SC105
    if async_op:
        return handle
    return None
""",
        # ... the same without the wait in the loop: the drain after it reads the last buffer still in flight.
        """
import torch
import torch.distributed as dist

def drain(chunks, out, group, size):
    bufs = [None, None]
    for i in range(len(chunks)):
        buf = torch.empty(size, device="cuda")
        handle = dist.all_gather_into_tensor(buf, chunks[i], group=group, async_op=True)
        bufs[(i + 1) % 2] = buf
        buf = None
        torch.matmul(bufs[i % 2], bufs[i % 2], out=out)
        last = (i + 1) % 2
    torch.matmul(bufs[last], bufs[last], out=out)  # expect: SC105
""",
        # The event that came with the tensor (FSDP2's AllGatherResult) is not waited before the tensor is read.
        """
import torch

def gather(out, stream, comm):
    with torch.cuda.stream(stream):
        out.copy_(comm(out))
        event = stream.record_event()
        return out, event

def copy_out(result, dst):
    out, event = result
    dst.copy_(out)  # expect: SC105
""",
        # ... the same with the wait gone: clearing the handle (and calling a helper that waits only when forced)
        # orders nothing (Megatron's finish_param_sync).
        """
import torch.distributed as dist
from torch.distributed import _coalescing_manager

class BucketGroup:
    def __init__(self, buckets, group):
        self.buckets = buckets
        self.group = group
        self.gather_handle = None
        self.dispatched = False

    def start_gather(self, overlap, force_sync=False):
        if force_sync and self.gather_handle is not None:
            self.gather_handle.wait()
        async_op = overlap
        with _coalescing_manager(self.group, async_ops=async_op) as cm:
            for bucket in self.buckets:
                dist.all_gather_into_tensor(bucket.param_data, bucket.shard, group=self.group, async_op=async_op)
        self.gather_handle = cm if async_op else None
        self.dispatched = True

    def finish_gather(self, params):
        if not self.dispatched:
            self.start_gather(True)
        if self.gather_handle is not None:
            self.gather_handle = None
            for bucket in self.buckets:
                params.copy_(bucket.param_data)  # expect: SC105
""",
        # The same queue of receive handles, one taken out and dropped without a wait.
        """
import torch
import torch.distributed as dist

def _ops(send, recv, peer):
    reqs = {}
    if send is not None:
        reqs["send"] = dist.isend(send, peer)
    req = dist.irecv(recv, peer)
    reqs["recv"] = req
    return reqs

def exchange(send, shape, peer):
    recv = torch.empty(shape, device="cuda")
    handles = {}
    handles.update(_ops(send, recv, peer))
    return recv, handles

def schedule(model, x, n, shape):
    pending = []
    inputs = [x]
    for k in range(n):
        if k > 0:
            h = pending.pop(0)  # expect: SC105
        y = model(inputs[-1])
        buf, handles = exchange(y, shape, 1)
        pending.append(handles.pop("recv"))
        inputs.append(buf)
""",
    ]

    def check(self, program: Program) -> Iterable[Finding]:
        reported = set()  # (function, launch line): one finding per unwaited launch is enough
        for function in program.functions.values():
            for work in function.facts.async_works:
                for tensor in work.tensors:
                    finding = self._first_touch(program, function, work, tensor)
                    if finding is None and work.op != EVENT_RECORD:
                        carried = carried_touch(program, function, work, tensor, _waited_by_call)
                        finding = carried and self._carried(function, work, tensor, carried)
                    if finding is not None:
                        reported.add((function.id, work.line))
                        yield finding
        for touch in travelling_touches(program):
            # (a helper that waits only under a condition, `if force_sync: self._work.wait()`, orders nothing the
            # caller can count on: the handle travels to be waited here)
            if not _waited_by_call(program, touch.function, touch.function.facts.line, touch.use.line, True):
                yield self._travelling(touch)
        for left in left_in_flight(program, _waited_by_call):
            if (left.function.id, left.work.line) not in reported:  # (a batch's sends after its receives)
                reported.add((left.function.id, left.work.line))
                yield left_in_flight_finding(self.id, left)
        for dropped in dropped_handles(program):
            yield dropped_finding(self.id, program, dropped)

    def _returned(self, function: Function, work: AsyncWork, tensor: str, use) -> Finding:
        facts = function.facts
        return Finding(
            rule=self.id,
            message=(f"`{tensor}` is returned while the async `{work.op}` (line {work.line}) may still be using it: "
                     f"`{work.handle}` is not waited before, and it does not go along with the tensor"),
            primary=location(function, use.line, use.column, ROLE_READ, f"returned from {facts.qualname}"),
            related=(location(function, work.line, work.column, ROLE_CALL, work.launch_text),),
            fix=f"{wait_text(facts, work)} before line {use.line}, or return the handle with the tensor.",
            kind="RAW",
            symbol=facts.qualname,
            extra={"path": tensor, "handle": single_handle(facts, work), "collective": work.op},
        )

    def _carried(self, function: Function, work: AsyncWork, tensor: str, use) -> Finding:
        facts = function.facts
        verb = "written" if use.how == "write" else "read"
        return Finding(
            rule=self.id,
            message=(f"`{tensor}` is {verb} in the loop's next iteration while the async `{work.op}` that the "
                     f"previous one launched (line {work.line}) may still be using it: `{work.handle}` is not "
                     f"waited before"),
            primary=location(function, use.line, use.column, ROLE_WRITE if use.how == "write" else ROLE_READ,
                             f"{use.arg or 'use'} in {facts.qualname}, next iteration"),
            related=(location(function, work.line, work.column, ROLE_CALL, work.launch_text),),
            fix=f"{wait_text(facts, work)} before line {use.line} (the handle of the previous iteration).",
            kind="WAR" if use.how == "write" else "RAW",
            symbol=facts.qualname,
            extra={"path": tensor, "handle": single_handle(facts, work), "collective": work.op},
        )

    def _travelling(self, touch: TravellingTouch) -> Finding:
        use, work, facts = touch.use, touch.travel.work, touch.function.facts
        verb = "written" if use.how == "write" else "read"
        launched = touch.launcher.facts.qualname
        # (a handed work's flag is a variable: async where the handle is stored, as here)
        launch = work.launch_text if work in touch.launcher.facts.async_works else \
            f"{work.op}(..., async_op=<flag>) as `{work.handle}`"
        return Finding(
            rule=self.id,
            message=(f"`{touch.buffer}` is {verb} while the async `{work.op}` that {launched} launched on it may "
                     f"still be using it: `{touch.handle}`, its handle, is not waited before"),
            primary=location(touch.function, use.line, use.column, ROLE_WRITE if use.how == "write" else ROLE_READ,
                             f"{use.arg or 'use'} of `{use.path}` in {facts.qualname}"),
            related=(location(touch.launcher, work.line, work.column, ROLE_CALL,
                              f"{launch}, stored as `.{touch.travel.handle_field}` "
                              f"beside `.{touch.travel.buffer_field}`"),),
            fix=f"Call `{touch.handle}.wait()` before line {touch.first_mention[0]}, where the handle first turns up.",
            kind="WAR" if use.how == "write" else "RAW",
            symbol=facts.qualname,
            extra={"path": touch.buffer, "handle": touch.handle, "collective": work.op,
                   "fix_edit": {"path": touch.function.file.path, "line": touch.first_mention[0],
                                "column": touch.first_mention[1], "insert": f"{touch.handle}.wait()", "safe": True,
                                "description": "insert `{statement}` before the handle is first used"}},
        )

    def _first_touch(self, program: Program, function: Function, work: AsyncWork, tensor: str) -> Finding | None:
        facts = function.facts
        # The handle and the lists it was appended to (`handles.append(work)`; waited as `for h in handles`).
        handles = {work.handle} | {u.arg for u in facts.uses if u.path == work.handle and u.how == "escape"}
        waits = [u.line for u in facts.uses if work.handle and u.path in handles and u.how == "wait"
                 and u.line >= work.line]  # a handle exists only after its call: any wait of it comes later
        handle_travels = any(u.path in handles and u.how == "escape" for u in facts.uses)
        # The tensor, and the paths that hold it (extract_handles.py): the first one's aliases at the launch.
        aliases = set(work.aliases) if tensor == work.tensors[0] else set()
        watched = {tensor} | aliases
        learned: dict[str, int] = {}  # a name bound from a watched one after the launch -> the line it was bound
        # A local container holding the tensor in one element (`bufs[(i + 1) % 2] = buf`) -> (index, line).
        elements: dict[str, list[tuple[str, int]]] = {}
        for u in facts.uses:
            if u.how == "escape" and u.index and u.path in watched and u.arg in aliases and u.line >= work.line:
                elements.setdefault(u.arg, []).append((u.index, u.line))
        uses = sorted((u for path in watched | {bound_local(u) for u in facts.uses if u.path in watched} - {None}
                       for u in uses_after(facts, path, work.line, work.end_line)), key=lambda u: (u.line, u.column))
        for use in uses:
            stored_here = any(at == use.line for c, stores in elements.items() if c in watched for _, at in stores)
            if stored_here:  # followed into the element (and only there, with the names bound from it: not the
                watched &= {tensor} | set(elements) | set(learned)  # loop's other aliases, which an escape ended)
            if use.path not in watched:
                continue
            if any(wait <= use.line and not exits_before(function, wait, use.line) for wait in waits):
                continue  # waited on its way (a wait in a block that returns first is on no path to it)
            if use.how == "escape" and use.arg == RETURNED and work.handle and not handle_travels:
                return self._returned(function, work, use.path, use)  # handed to the caller, the handle stays here
            local = bound_local(use)
            if local:
                watched.add(local)  # `gathered = bufs[i]`: the name holds the buffer too
                learned[local] = use.line
                if use.index:
                    elements.setdefault(local, []).append((use.index, use.line))
                continue
            if use.how in ("rebind", "free"):
                if (use.start_line or use.line) <= learned.get(use.path, -1) <= use.line:
                    continue  # the binding that made it an alias (`out = out.view(n, -1)`: still the buffer)
                if use.path != tensor or set(elements) & watched:
                    watched.discard(use.path)  # another tensor from here on (a container's element keeps it)
                    continue
            if _other_element(facts, elements, use):
                continue  # the other half of a double buffer, in the iteration that stored this one
            if use.how == "escape" and stored_here:
                continue  # stored into a watched container's element: followed there
            if use.how in ("rebind", "escape", "free"):
                return None
            if use.how not in TOUCHES or use.arg in MENTIONS:
                continue  # iterating a container of tensors, or testing one for None, reads none of them
            if work.op == P2P_SEND and use.how != "write":
                continue  # a send only reads its tensor: reading it too is no race
            if _waited_by_call(program, function, work.end_line, use.line):
                return None
            handle = f"`{work.handle}`" if work.handle else "its handle (dropped)"
            verb = "written" if use.how == "write" else "read"
            held = f"`{use.path}` (it holds `{tensor}`)" if use.path != tensor else f"`{tensor}`"
            if work.op == EVENT_RECORD:
                return _event_finding(self.id, function, work, tensor, use, held, verb)
            return Finding(
                rule=self.id,
                message=(f"{held} is {verb} while the async `{work.op}` (line {work.line}) may still be using "
                         f"it: {handle} is not waited before"),
                primary=location(function, use.line, use.column, ROLE_WRITE if use.how == "write" else ROLE_READ,
                                 f"{use.arg or 'use'} in {facts.qualname}"),
                related=(location(function, work.line, work.column, ROLE_CALL,
                                  work.launch_text if work.op not in P2P_OPS else f"{work.op}(...)"),),
                fix=(f"{wait_text(facts, work)} before line {use.line} (it orders the current stream after "
                     f"the collective without blocking the host)."),
                kind="WAR" if use.how == "write" else "RAW",
                symbol=facts.qualname,
                extra={"path": tensor, "handle": single_handle(facts, work), "collective": work.op},
            )
        return None


def _waited_by_call(program: Program, function: Function, start: int, end: int, always: bool = False) -> bool:
    """Whether a call between lines `start` and `end` reaches a handle's wait (with `always`, one made on every
    path through the callee: not in a block under a condition)."""
    for call, edges in program.calls_of(function.id):
        if start < call.line < end and any(edge.exact and _waits_handle(program, edge.callee, always)
                                           for edge in edges):
            return True
    return False


def _waits_handle(program: Program, fid: str, always: bool = False) -> bool:
    memo = _waiting_memo.setdefault(program, {})
    key = (fid, always)
    if key not in memo:
        memo[key] = False  # cycles
        facts = program.functions[fid].facts
        memo[key] = any(u.how == "wait" and u.arg != EVENT_WAIT and not (always and _guarded(facts, u.line))
                        for u in facts.uses) or any(
            edge.exact and _waits_handle(program, edge.callee, always) for call, edges in program.calls_of(fid)
            if not (always and _guarded(facts, call.line)) for edge in edges)
    return memo[key]


def _guarded(facts, line: int) -> bool:
    return any(first <= line <= last for first, last in facts.guarded)


def _event_finding(rule_id: str, function: Function, work: AsyncWork, tensor: str, use, held: str,
                   verb: str) -> Finding:
    """A tensor handed over with the event recorded after a stream's work on it, touched before the event's wait."""
    facts = function.facts
    return Finding(
        rule=rule_id,
        message=(f"{held} is {verb} while the stream work that `{work.handle}` was recorded after may still be "
                 f"using it: the event came with the tensor (line {work.line}) and is not waited before"),
        primary=location(function, use.line, use.column, ROLE_WRITE if use.how == "write" else ROLE_READ,
                         f"{use.arg or 'use'} in {facts.qualname}"),
        related=(location(function, work.line, work.column, ROLE_CALL,
                          f"`{work.handle}` taken with `{tensor}`"),),
        fix=(f"Call `torch.cuda.current_stream().wait_event({work.handle})` before line {use.line} (it orders the "
             f"current stream after the recorded work without blocking the host)."),
        kind="WAR" if use.how == "write" else "RAW",
        symbol=facts.qualname,
        extra={"path": tensor, "handle": work.handle, "collective": EVENT_RECORD},
    )


def _other_element(facts, elements: dict[str, list[tuple[str, int]]], use) -> bool:
    """A use of another element of the local container the tensor was stored in (`bufs[i % 2]` beside
    `bufs[(i + 1) % 2] = buf`), in the loop iteration that stored it. After that loop (or in the next iteration,
    which this order of uses does not reach) an index of the loop's variables may name the stored element: Megatron's
    double-buffered all-gather reads `all_gathered_input[drain_idx]` after its loop. The store itself is no use."""
    stores = elements.get(use.path)
    if not stores or not use.index:
        return False
    if any(use.index == index for index, _ in stores):  # the store that put it there is no use of it
        return use.how == "write" and use.arg == "[]=" and any(use.line == at for _, at in stores)
    return all(loop_around(facts, at, use.line) is not None for _, at in stores)
