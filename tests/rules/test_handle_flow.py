"""Async handles that travel as values (handle_flow.py): returned in dicts and tuples through calls, queued in
lists, taken out and dropped without a wait (SC105)."""

from __future__ import annotations

import textwrap

from tests.rules.static_helpers import findings_of, line_of

# Megatron 0.16.1's shape: the p2p helper keeps its handles by direction, the communicator calls it through a local
# bound by configuration and merges the dict, the schedule queues the receive handle and waits it next iteration.
P2P = """
import torch
import torch.distributed as dist

def _p2p_ops(*, tensor_send_next, tensor_recv_prev, peer):
    reqs = {}
    if tensor_send_next is not None:
        send_next_req = dist.isend(tensor=tensor_send_next, dst=peer)
        reqs["send_next"] = send_next_req
    if tensor_recv_prev is not None:
        recv_prev_req = dist.irecv(tensor=tensor_recv_prev, src=peer)
        reqs["recv_prev"] = recv_prev_req
    return reqs

def _batched_p2p_ops(*, tensor_send_next, tensor_recv_prev, peer):
    return []

class P2PCommunicator:
    def _communicate(self, tensor_send_next, recv_prev, shape, wait_on_reqs=True):
        if self.config.batch_p2p_comm:
            p2p_func = _batched_p2p_ops
        else:
            p2p_func = _p2p_ops
        reqs = {}
        tensor_recv_prev = torch.empty(shape, device="cuda") if recv_prev else None
        p2p_reqs = p2p_func(tensor_send_next=tensor_send_next, tensor_recv_prev=tensor_recv_prev, peer=self.prev)
        reqs.update(p2p_reqs)
        if wait_on_reqs and len(reqs) > 0:
            for req in reqs.values():
                req.wait()
            reqs = None
        return tensor_recv_prev, reqs

    def send_forward_recv_forward(self, output_tensor, recv_prev, shape, overlap_p2p_comm=False):
        input_tensor, wait_handles = self._communicate(output_tensor, recv_prev, shape,
                                                       wait_on_reqs=not overlap_p2p_comm)
        if overlap_p2p_comm:
            return input_tensor, wait_handles
        return input_tensor
"""

# (a file whose code names no stream word gets no detailed facts: the drain makes this one detailed, as Megatron's
# schedules.py is)
SCHEDULE = """
import torch
from p2p import P2PCommunicator

def drain():
    torch.cuda.synchronize()

def schedule(comm: P2PCommunicator, model, n, shape):
    buffers = [None, None]
    inputs = []
    recv_handles = []
    send_handle = None
    for k in range(n):
        if k > 0:
            recv_handle = recv_handles.pop(0)
            RECV_WAIT
        output = model(inputs[-1] if inputs else None)
        buffers[k % 2], handles = comm.send_forward_recv_forward(output, True, shape, overlap_p2p_comm=True)
        if send_handle is not None:
            SEND_WAIT
        send_handle = handles.pop("send_next") if "send_next" in handles else None
        if "recv_prev" in handles:
            recv_handles.append(handles.pop("recv_prev"))
        inputs.append(buffers[k % 2])
"""


def _schedule(recv_wait: str, send_wait: str = "send_handle.wait()") -> str:
    return textwrap.dedent(SCHEDULE).replace("RECV_WAIT", recv_wait).replace("SEND_WAIT", send_wait)


def test_a_receive_handle_returned_through_three_calls_and_dropped_from_its_queue():
    schedule = _schedule("pass")
    findings = findings_of({"p2p.py": P2P, "sched.py": schedule}, {"SC105"})
    assert [(f.rule, f.kind, f.primary.path, f.primary.line) for f in findings] == [
        ("SC105", "RAW", "sched.py", line_of(schedule, "recv_handle = recv_handles.pop(0)"))]
    [finding] = findings
    assert [(r.role, r.path, r.line) for r in finding.related] == [
        ("write", "p2p.py", line_of(P2P, "recv_prev_req = dist.irecv"))]
    assert finding.extra == {"path": "recv_handles", "handle": "recv_handle", "collective": "irecv"}
    assert "`recv_handle`, taken from `recv_handles`" in finding.message
    assert "_p2p_ops launched into `tensor_recv_prev`" in finding.message


def test_waited_in_the_next_iteration_is_no_finding():
    assert findings_of({"p2p.py": P2P, "sched.py": _schedule("recv_handle.wait()")}, {"SC105"}) == []


def test_a_send_handle_taken_by_its_key_and_dropped_is_no_finding():
    # `handles.pop("send_next")` takes only the isend's handle: ProcessGroupNCCL keeps a sent tensor alive.
    schedule = _schedule("recv_handle.wait()", send_wait="pass")
    assert findings_of({"p2p.py": P2P, "sched.py": schedule}, {"SC105"}) == []


def test_one_arm_waits_the_other_drops():
    # Megatron's `if flush: h = q.pop(0); h.wait()  else: if q: h = q.pop(0); h.wait()`: the wait in one arm
    # is no wait of the handle the other arm took out.
    schedule = _schedule(
        "recv_handle.wait()\n        else:\n            if recv_handles:\n                recv_handle = recv_handles.pop(0)"
    ).replace("        if k > 0:\n            recv_handle", "        if k > 0 and shape:\n            recv_handle")
    findings = findings_of({"p2p.py": P2P, "sched.py": schedule}, {"SC105"})
    assert [(f.primary.path, f.primary.line) for f in findings] == [
        ("sched.py", line_of(schedule, "                recv_handle = recv_handles.pop(0)"))]


def test_a_local_a_nested_function_reads_is_no_finding():
    schedule = _schedule("pass").replace(
        "        output = model(", "        def finish():\n            recv_handle.wait()\n        model.hook = finish\n"
                                   "        output = model(")
    assert findings_of({"p2p.py": P2P, "sched.py": schedule}, {"SC105"}) == []


def test_a_nested_function_takes_from_the_enclosing_functions_queue():
    # Megatron's pp_pre_forward pops the closure's recv_prev_wait_handles.
    schedule = textwrap.dedent("""
        import torch
        from p2p import P2PCommunicator

        def drain():
            torch.cuda.synchronize()

        def schedule(comm: P2PCommunicator, model, n, shape):
            recv_handles = []
            for k in range(n):
                def pre_forward():
                    if recv_handles:
                        recv_handle = recv_handles.pop(0)
                model.run(pre_forward)
                buf, handles = comm.send_forward_recv_forward(None, True, shape, overlap_p2p_comm=True)
                recv_handles.append(handles.pop("recv_prev"))
    """)
    findings = findings_of({"p2p.py": P2P, "sched.py": schedule}, {"SC105"})
    assert [(f.primary.path, f.primary.line, f.symbol) for f in findings] == [
        ("sched.py", line_of(schedule, "recv_handle = recv_handles.pop(0)"), "schedule.pre_forward")]


def test_a_launch_of_the_same_function_is_left_to_the_use_before_wait_query():
    source = """
    import torch.distributed as dist

    def reduce(tensors):
        works = []
        for t in tensors:
            works.append(dist.all_reduce(t, async_op=True))
        while works:
            work = works.pop(0)
    """
    assert [f for f in findings_of({"own.py": source}, {"SC105"}) if f.extra.get("handle") == "work"] == []


def test_a_device_wide_synchronize_after_the_drop_is_no_finding():
    schedule = _schedule("torch.cuda.synchronize()")
    assert findings_of({"p2p.py": P2P, "sched.py": schedule}, {"SC105"}) == []
