"""SC105 on handles that travel, reduced from the real code each shape was built for (issue 14, shape 5).

Each racy source is the real function less its wait; its twin with the wait gives no finding. Exact outcomes:
(rule, path, line, kind), the message's words where they say which handle and tensor."""

from __future__ import annotations

import textwrap

from static_helpers import findings_of, line_of, summary_of

# --- point-to-point: Megatron's bridge communicator and p2p shape exchange --------------------------------------
BRIDGE = """
import torch

def send_forward_recv_backward(splits, received, ranks):
    ops = []
    for dest_rank, split, grad_tensor in zip(ranks, splits, received):
        ops.append(torch.distributed.P2POp(torch.distributed.isend, split, dest_rank))
        ops.append(torch.distributed.P2POp(torch.distributed.irecv, grad_tensor, dest_rank))
    reqs = torch.distributed.batch_isend_irecv(ops)
    for req in reqs:
        WAIT
    aggregated = torch.cat(received, dim=0)
    return aggregated

def shapes(recv_prev, prev_rank, group):
    recv_prev_shape = torch.empty((3,), device="cuda", dtype=torch.int64)
    ops = []
    recv_prev_op = torch.distributed.P2POp(torch.distributed.irecv, recv_prev_shape, prev_rank, group)
    ops.append(recv_prev_op)
    if len(ops) > 0:
        reqs = torch.distributed.batch_isend_irecv(ops)
        for req in reqs:
            WAIT
    torch.cuda.synchronize()
    return recv_prev_shape.tolist()

def send_only(split, dest_rank):
    req = torch.distributed.isend(split, dest_rank)
    total = split.sum()
    req.wait()
    return total
"""


def _variant(source: str, wait: str) -> str:
    return textwrap.dedent(source).replace("WAIT", wait)


def test_batch_receives_read_before_their_handles_are_waited():
    racy = _variant(BRIDGE, "pass")
    findings = findings_of({"bridge.py": racy}, {"SC105"})
    assert summary_of(findings) == [
        ("SC105", "bridge.py", line_of(racy, "aggregated = torch.cat"), "RAW"),
        ("SC105", "bridge.py", line_of(racy, "return recv_prev_shape.tolist()"), "RAW"),
    ]
    assert findings[0].message.startswith("`received` (it holds `grad_tensor`) is read while the async "
                                          "`batch_isend_irecv`")
    batches = [n for n, line in enumerate(racy.splitlines(), 1) if "batch_isend_irecv(ops)" in line]
    assert [f.related[0].line for f in findings] == batches  # each at its own batch launch
    # reading what an isend sends is no race (send_only): nothing there
    assert findings_of({"bridge.py": _variant(BRIDGE, "req.wait()")}, {"SC105"}) == []


# --- ProcessGroup methods: vLLM's gloo cpu_all_reduce_ (no async_op flag: they always return a work) ------------
GROUP_METHODS = """
import torch
from torch.distributed import ProcessGroup

def cpu_all_reduce_(tensor: torch.Tensor, group: ProcessGroup, peer: int, tag: int) -> torch.Tensor:
    scratch = torch.empty_like(tensor)
    recv_work = group.recv([scratch], peer, tag)
    send_work = group.send([tensor], peer, tag)
    RECV_WAIT
    SEND_WAIT
    tensor.add_(scratch)
    return tensor

def exchange(tensor: torch.Tensor, group: ProcessGroup, lanes: int, tag: int) -> torch.Tensor:
    block_sums = [tensor if b == 0 else torch.empty_like(tensor) for b in range(lanes)]
    works = []
    for b, buf in enumerate(block_sums):
        if b != 0:
            works.append(group.recv([buf], b, tag))
    for work in works:
        WORKS_WAIT
    total = block_sums[0]
    for buf in block_sums[1:]:
        total.add_(buf)
    return total

def not_a_group(tensor: torch.Tensor, queue) -> torch.Tensor:
    queue.send([tensor], 1, 0)
    tensor.add_(1)
    return tensor
"""


def _group_variant(recv: str, send: str, works: str) -> str:
    return textwrap.dedent(GROUP_METHODS).replace("RECV_WAIT", recv).replace("SEND_WAIT", send).replace(
        "WORKS_WAIT", works)


def test_process_group_methods_are_async_launches():
    waits = ("recv_work.wait()", "send_work.wait()", "work.wait()")
    assert findings_of({"utils.py": _group_variant(*waits)}, {"SC105"}) == []
    racy = _group_variant("pass", "pass", "pass")
    findings = findings_of({"utils.py": racy}, {"SC105"})
    assert summary_of(findings) == [
        ("SC105", "utils.py", line_of(racy, "    tensor.add_(scratch)"), "WAR"),
        ("SC105", "utils.py", line_of(racy, "    tensor.add_(scratch)"), "RAW"),
        ("SC105", "utils.py", line_of(racy, "total.add_(buf)"), "WAR"),
    ]
    assert findings[0].message.startswith("`tensor` is written while the async `isend`")
    assert findings[1].message.startswith("`scratch` is read while the async `recv`")
    # the launch is named as written: a ProcessGroup method takes no `async_op` flag
    assert [f.related[0].note for f in findings] == ["isend(...)", "recv(...)", "recv(...)"]
    # the send alone missing its wait: the write of what it still reads (a method of an unannotated receiver
    # such as `queue.send` is no launch)
    only_send = findings_of({"utils.py": _group_variant(waits[0], "pass", waits[2])}, {"SC105"})
    assert summary_of(only_send) == [("SC105", "utils.py", line_of(racy, "    tensor.add_(scratch)"), "WAR")]


# --- a work's tensors through what holds them: FSDP's sharded grad scaler, ZeRO-3's gather into views ----------
HOLDERS = """
import torch
import torch.distributed as dist

def unscale(found_infs, group):
    works = []
    on_devices = []
    for found_inf in found_infs:
        on_device = found_inf.to("cuda")
        on_devices.append(on_device)
        works.append(dist.all_reduce(on_device, async_op=True, group=group))
    for work in works:
        WAIT
    torch._foreach_copy_(found_infs, on_devices)

def allgather(params, allgather_params, input_tensor, world):
    launch_handles = []
    for param_idx, param in enumerate(params):
        output_list = []
        for i in range(world):
            partition = allgather_params[param_idx].narrow(0, i, 1)
            output_list.append(partition)
        h = dist.all_gather(output_list, input_tensor, async_op=True)
        launch_handles.append(h)
    for handle in launch_handles:
        WAIT
    for i, param in enumerate(params):
        gathered_tensor = allgather_params[i]
        gathered_tensor = dequantize(gathered_tensor)
        param.data = gathered_tensor.data
"""


def test_tensors_touched_through_lists_and_views_that_hold_them():
    racy = _variant(HOLDERS, "pass")
    findings = findings_of({"holders.py": racy}, {"SC105"})
    assert summary_of(findings) == [
        ("SC105", "holders.py", line_of(racy, "torch._foreach_copy_"), "RAW"),
        ("SC105", "holders.py", line_of(racy, "gathered_tensor = dequantize"), "RAW"),
    ]
    assert "`on_devices` (it holds `on_device`)" in findings[0].message
    assert "`gathered_tensor` (it holds `output_list`)" in findings[1].message
    fixed = {"holders.py": _variant(HOLDERS, "work.wait()").replace("    for handle in launch_handles:\n        work",
                                                                    "    for handle in launch_handles:\n        handle")}
    assert findings_of(fixed, {"SC105"}) == []


# --- a function returning with its caller's tensor in flight: DeepSpeed's coalesced gather, Megatron's recv ----
AT_EXIT = """
import torch

class TorchBackend:
    def all_gather_coalesced(self, output_tensors, input_tensors, group=None, async_op=False):
        reqs = []
        with get_coalescing_manager(group, input_tensors[0].device, reqs, async_op):
            for output, input in zip(output_tensors, input_tensors):
                handle = torch.distributed.all_gather_into_tensor(output, input, group=group, async_op=True)
                reqs.append(handle)
        if async_op:
            return reqs[-1]
        else:
            WAIT_LAST

def recv_from_prev_pipeline_rank_(recv_buffer, prev_rank):
    recv_prev_op = torch.distributed.P2POp(torch.distributed.irecv, recv_buffer, prev_rank)
    reqs = torch.distributed.batch_isend_irecv([recv_prev_op])
    for req in reqs:
        WAIT
    torch.cuda.synchronize()

class Schedule:
    def _queue_p2p(self, op, tensors, peer):
        for tensor in tensors:
            self._p2p_ops.append(torch.distributed.P2POp(op, tensor, peer))

    def _exec_commit_p2p(self):
        if not self._p2p_ops:
            return
        for req in torch.distributed.batch_isend_irecv(self._p2p_ops):
            WAIT
        self._p2p_ops = []
"""


def test_returning_with_the_callers_tensor_in_flight():
    racy = _variant(AT_EXIT.replace("WAIT_LAST", "pass"), "pass")
    findings = findings_of({"exit.py": racy}, {"SC105"})
    assert summary_of(findings) == [
        ("SC105", "exit.py", line_of(racy, "handle = torch.distributed.all_gather_into_tensor"), "RAW"),
        ("SC105", "exit.py", line_of(racy, "reqs = torch.distributed.batch_isend_irecv([recv_prev_op])"), "RAW"),
        ("SC105", "exit.py", line_of(racy, "for req in torch.distributed.batch_isend_irecv(self._p2p_ops)"),
         "RAW"),
    ]
    assert findings[0].message.startswith("TorchBackend.all_gather_coalesced returns while the async "
                                          "`all_gather_into_tensor`")
    assert "`output_tensors`, which its caller holds: `handle` is neither waited nor handed on" in \
        findings[0].message
    assert "the tensors of the ops in `self._p2p_ops`" in findings[2].message
    fixed = _variant(AT_EXIT.replace("WAIT_LAST", "reqs[-1].wait()"), "req.wait()")
    assert findings_of({"exit.py": fixed}, {"SC105"}) == []


# --- a handle and its buffer in one tuple, taken apart elsewhere: ZeRO-3, torchrec's PEC and maglev ------------
PAIRS = """
import torch
import torch.distributed as dist
from collections import deque

class Init:
    def _reduce_scatter_gradients(self, param_list):
        handles_and_partitions = []
        for param in param_list:
            handles_and_partitions.append(self._reduce_scatter_gradient(param))
        for param, (handle, reduced_partition) in zip(param_list, handles_and_partitions):
            if handle is not None:
                WAIT_HANDLE
            param.grad.narrow(0, 0, 4).copy_(reduced_partition.narrow(0, 0, 4))

    def _reduce_scatter_gradient(self, param):
        input_list = [param.grad.view(-1).narrow(0, i, 4) for i in range(4)]
        handle = dist.reduce_scatter(input_list[0], input_list, async_op=True)
        return handle, input_list[0]

def _grad_dist(grad, pg, async_op: bool = True):
    output_buffer = torch.empty(grad.numel(), device=grad.device)
    req = dist.all_to_all_single(output_buffer, grad.contiguous().view(-1), group=pg, async_op=async_op)
    return req, output_buffer

class PECGradientApply:
    def dist(self):
        self._work, self._grad_buffer = _grad_dist(self._grad, self._pg)
        self._grad = None

    def apply(self, embs, dim):
        assert self._work is not None
        assert self._grad_buffer is not None
        WAIT_WORK
        embs.backward(self._grad_buffer.view(-1, dim))
        self._work = None

class Stage:
    def __init__(self):
        self._recv_act = deque()

    def start_recv_act(self, src):
        works = []
        tensors = []
        for spec in self._in_specs:
            tensor = torch.empty(spec.shape, device="cuda")
            works.append(dist.irecv(tensor, src=src))
            tensors.append(tensor)
        self._recv_act.append((works, tensors))

    def wait_for_act(self):
        works, tensors = self._recv_act.popleft()
        for work in works:
            WAIT
        return tuple(tensors)
"""


def test_handle_and_buffer_taken_apart_from_one_tuple():
    racy = textwrap.dedent(PAIRS).replace("WAIT_HANDLE", "pass").replace("WAIT_WORK", "pass").replace(
        "WAIT", "pass")
    findings = findings_of({"pairs.py": racy}, {"SC105"})
    assert summary_of(findings) == [
        ("SC105", "pairs.py", line_of(racy, "copy_(reduced_partition"), "RAW"),
        ("SC105", "pairs.py", line_of(racy, "embs.backward(self._grad_buffer"), "RAW"),
        ("SC105", "pairs.py", line_of(racy, "return tuple(tensors)"), "RAW"),
    ]
    assert "`reduced_partition` is read while the async `reduce_scatter`" in findings[0].message
    assert "`self._grad_buffer` is read while the async `all_to_all_single` that PECGradientApply.dist launched" \
        in findings[1].message
    assert "`tensors` is returned while the async `irecv`" in findings[2].message
    fixed = textwrap.dedent(PAIRS).replace("WAIT_HANDLE", "handle.wait()").replace(
        "WAIT_WORK", "self._work.wait()").replace("WAIT", "work.wait()")
    assert findings_of({"pairs.py": fixed}, {"SC105"}) == []


def test_identity_tests_iteration_and_defaults_are_no_touch():
    source = """
    import torch.distributed as dist

    def receive(bufs, src, post):
        handles = []
        for buf in bufs:
            handles.append(dist.irecv(buf, src=src))
            def later(t=buf):
                return t.sum()
            post.append(later)
        for buf in bufs:
            assert buf is not None
        for h in handles:
            h.wait()
        return bufs
    """
    assert findings_of({"f.py": source}, {"SC105"}) == []


# --- a handle carried to the loop's next iteration: DeepSpeed's Domino transformer -------------------------------
DOMINO = """
import torch.distributed as dist

class DominoTransformer:
    def inter_layer_overlap_forward(self, hidden_states0, hidden_states1):
        fwd_handle1 = None
        for index in range(self.num_layers):
            attention_output0 = self.layers[index].attention(hidden_states0)
            if index > 0:
                WAIT
                hidden_states1 = self.layers[index - 1].bias_dropout_add_func(hidden_states1, attention_output0)
            layernorm_output1 = self.layers[index].input_layernorm(hidden_states1)
            hidden_states1 = self.layers[index].linear_fc2(layernorm_output1)
            fwd_handle1 = dist.all_reduce(hidden_states1, group=self.TP_group, async_op=True)
        fwd_handle1.wait()
        return hidden_states1
"""


def test_handle_waited_only_in_the_next_iteration():
    racy = _variant(DOMINO, "pass")
    findings = findings_of({"domino.py": racy}, {"SC105"})
    assert summary_of(findings) == [("SC105", "domino.py", line_of(racy, "bias_dropout_add_func(hidden_states1"),
                                   "RAW")]
    assert findings[0].message.startswith("`hidden_states1` is read in the loop's next iteration")
    assert findings[0].related[0].line == line_of(racy, "fwd_handle1 = dist.all_reduce")
    assert findings_of({"domino.py": _variant(DOMINO, "fwd_handle1.wait()")}, {"SC105"}) == []


# --- a field of each op a loop takes from the object's own list: Megatron's NCCL copy service ------------------
COPY_SERVICE = """
import torch.distributed as dist

class NCCLCopyService:
    def run(self):
        remote_sends = [op for op in self.send_ops if op.dest_rank != self.rank]
        remote_recvs = [op for op in self.recv_ops if op.src_rank != self.rank]
        p2p_ops = []
        for op in remote_sends:
            p2p_ops.append(dist.P2POp(dist.isend, op.tensor, op.dest_rank))
        for op in remote_recvs:
            p2p_ops.append(dist.P2POp(dist.irecv, op.tensor, op.src_rank))
        if p2p_ops:
            reqs = dist.batch_isend_irecv(p2p_ops)
            for req in reqs:
                WAIT
        self.send_ops.clear()
"""


def test_received_into_fields_of_the_objects_own_ops():
    racy = _variant(COPY_SERVICE, "pass")
    findings = findings_of({"copy.py": racy}, {"SC105"})
    assert summary_of(findings) == [("SC105", "copy.py", line_of(racy, "reqs = dist.batch_isend_irecv"), "RAW")]
    assert "still writes `self.recv_ops.tensor`, which its caller holds" in findings[0].message
    assert findings_of({"copy.py": _variant(COPY_SERVICE, "req.wait()")}, {"SC105"}) == []


# --- handed to a constructor, or returned in a result tuple taken apart by the same names: Megatron's fp32
# --- reduce-scatter handle and FSDP2's AllGatherResult (both launched with `async_op=async_op`) ---------------
HANDED_OVER = """
import torch
from typing import NamedTuple

class _WorkHandle:
    def __init__(self, all_to_all_handle, all_to_all_output_tensor, output_tensor, world_size):
        self.all_to_all_handle = all_to_all_handle
        self.all_to_all_output_tensor = all_to_all_output_tensor
        self.output_tensor = output_tensor
        self.world_size = world_size

    def wait(self):
        if self.all_to_all_handle is not None:
            WAIT_A2A
        summed = torch.sum(self.all_to_all_output_tensor.view((self.world_size, -1)), dim=0)
        self.output_tensor.copy_(summed)

def reduce_scatter_fp32(output_tensor, input_tensor, group, async_op: bool):
    all_to_all_output_tensor = torch.empty_like(input_tensor)
    all_to_all_handle = torch.distributed.all_to_all_single(
        output=all_to_all_output_tensor, input=input_tensor, group=group, async_op=async_op)
    handle = _WorkHandle(all_to_all_handle, all_to_all_output_tensor, output_tensor, group.size())
    if async_op:
        return handle
    handle.wait()

class AllGatherResult(NamedTuple):
    all_gather_output: torch.Tensor
    all_gather_event: object
    all_gather_work: object

def foreach_all_gather(all_gather_input, group, async_op: bool, all_gather_comm, stream):
    all_gather_output = torch.empty(all_gather_input.numel() * group.size(), device="cuda")
    all_gather_work = all_gather_comm(output_tensor=all_gather_output, input_tensor=all_gather_input,
                                      group=group, async_op=async_op)
    all_gather_event = stream.record_event()
    return AllGatherResult(all_gather_output, all_gather_event, all_gather_work)

def foreach_all_gather_copy_out(all_gather_result, out):
    (all_gather_output, all_gather_event, all_gather_work) = all_gather_result
    if all_gather_work is not None:
        WAIT_AG
    all_gather_output = all_gather_output.view(2, -1)
    out.copy_(all_gather_output[0])
"""


def test_handles_handed_to_a_constructor_or_returned_in_a_result():
    racy = textwrap.dedent(HANDED_OVER).replace("WAIT_A2A", "pass").replace("WAIT_AG", "pass")
    findings = findings_of({"over.py": racy}, {"SC105"})
    assert summary_of(findings) == [
        ("SC105", "over.py", line_of(racy, "summed = torch.sum(self.all_to_all_output_tensor"), "RAW"),
        ("SC105", "over.py", line_of(racy, "out.copy_(all_gather_output[0])"), "RAW"),
    ]
    assert "`self.all_to_all_handle`, its handle, is not waited before" in findings[0].message
    assert findings[1].message.startswith("`all_gather_output` is read while the async `all_gather_comm`")
    fixed = textwrap.dedent(HANDED_OVER).replace("WAIT_A2A", "self.all_to_all_handle.wait()").replace(
        "WAIT_AG", "all_gather_work.wait()")
    assert findings_of({"over.py": fixed}, {"SC105"}) == []
    # where it is launched, `async_op=async_op` is not known to be async: nothing there
    assert not any(f.primary.line < line_of(racy, "class AllGatherResult") and f.symbol == "reduce_scatter_fp32"
                   for f in findings)
