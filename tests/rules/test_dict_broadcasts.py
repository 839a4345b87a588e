"""SC105 at a function's end for vLLM's `GroupCoordinator.broadcast_tensor_dict` (parallel_state.py:1033/1066),
reduced: the source rank broadcasts the tensors a helper took out of the caller's dict, the other ranks receive
into fresh tensors put in the dict they return, and each arm waits its own handles. Without an arm's wait the
caller goes on with tensors the broadcasts still use. Exact outcomes: (rule, path, line, kind)."""

from __future__ import annotations

import textwrap

from static_helpers import findings_of, line_of, summary_of

SOURCE = """
import torch
import torch.distributed

def _split_tensor_dict(tensor_dict):
    metadata_list = []
    tensor_list = []
    for key, value in tensor_dict.items():
        if isinstance(value, torch.Tensor):
            metadata_list.append((key, value.size()))
            tensor_list.append(value)
        else:
            metadata_list.append((key, value))
    return metadata_list, tensor_list

class Coordinator:
    def broadcast_tensor_dict(self, tensors, metadata, src, group):
        if self.rank == src:
            metadata_list, tensor_list = _split_tensor_dict(tensors)
            send_handles = []
            for tensor in tensor_list:
                handle = torch.distributed.broadcast(tensor, src=src, group=group, async_op=True)
                send_handles.append(handle)
            for send_handle in send_handles:
                WAIT_SEND
        else:
            tensors = {}
            pending = []
            for key, size in metadata:
                into = torch.empty(size, device="cuda")
                pending.append(torch.distributed.broadcast(into, src=src, group=group, async_op=True))
                tensors[key] = into
            for h in pending:
                h.wait()
        return tensors

    def recv_tensor_dict(self, metadata, src, group):
        received = {}
        recv_handles = []
        for key, size in metadata:
            buf = torch.empty(size, device="cuda")
            work = torch.distributed.broadcast(buf, src=src, group=group, async_op=True)
            recv_handles.append(work)
            received[key] = buf
        for recv_handle in recv_handles:
            WAIT_RECV
        return received
"""


def _variant(send: str, recv: str) -> str:
    return textwrap.dedent(SOURCE).replace("WAIT_SEND", send).replace("WAIT_RECV", recv)


def test_receives_into_a_returned_dict_left_in_flight():
    racy = _variant("send_handle.wait()", "pass")
    findings = findings_of({"ps.py": racy}, {"SC105"})
    assert summary_of(findings) == [
        ("SC105", "ps.py", line_of(racy, "work = torch.distributed.broadcast(buf"), "RAW")]
    assert "still writes `received`, which its caller holds: `work` is neither waited nor handed on" \
        in findings[0].message


def test_sends_of_a_helpers_parts_of_the_callers_dict_left_in_flight():
    # the wait in the other arm (the receives') is on no path from these launches to the end
    racy = _variant("pass", "recv_handle.wait()")
    findings = findings_of({"ps.py": racy}, {"SC105"})
    assert summary_of(findings) == [
        ("SC105", "ps.py", line_of(racy, "handle = torch.distributed.broadcast(tensor"), "RAW")]
    assert "`tensor_list`, which its caller holds: `handle` is neither waited nor handed on" in findings[0].message


def test_both_arms_waited():
    assert findings_of({"ps.py": _variant("send_handle.wait()", "recv_handle.wait()")}, {"SC105"}) == []


EARLY = """
import torch.distributed as dist

class Handle:
    def __init__(self, handle, params):
        self.handle = handle

def all_gather_coalesced(params, flat, fetch_by_reduce, group):
    if fetch_by_reduce:
        handle = dist.all_reduce(flat, group=group, async_op=True)
        for p in params:
            p.data = flat
        return Handle(handle=handle, params=params)
    else:
        handle = dist.all_gather_into_tensor(flat, params[0], group=group, async_op=True)
        for p in params:
            p.data = flat
        return Handle(handle=handle, params=params)
"""


def test_handed_on_in_the_block_that_returns_first():
    # ZeRO-3's _all_gather_coalesced (partition_parameters.py:1463): each arm returns its own handle in a wrapper
    assert findings_of({"zero.py": EARLY}, {"SC105"}) == []
