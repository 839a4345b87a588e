"""SC105 through a local container's element: an in-flight buffer stored as `bufs[k] = buf` (issue 14, session 8).

Reduced from Megatron-core 0.16.1 `utils.py` (`drain_embedding_wgrad_compute`): a double-buffered all-gather whose
handle is waited at the end of each iteration; the drain after the loop reads the last buffer. Exact outcomes:
(rule, path, line, kind), the tensor and handle the finding names."""

from __future__ import annotations

import textwrap

from static_helpers import findings_of, line_of

DRAIN = """
import torch
import torch.distributed as dist


def drain(activations, grads, weight, group, size, sequence_parallel):
    gathered = [None, None]
    for i in range(len(activations)):
        input = activations.pop(0)
        if sequence_parallel:
            buffer = torch.empty(size, device="cuda")
            handle = dist.all_gather_into_tensor(buffer, input, group=group, async_op=True)
            gathered[(i + 1) % 2] = buffer
            buffer = None
        else:
            gathered[(i + 1) % 2] = input
        grad = grads.pop(0)
        torch.matmul(gathered[i % 2], grad, out=weight)
        drain_idx = (i + 1) % 2
        input, gathered[i % 2], grad = None, None, None
        if sequence_parallel:
            WAIT
    grad = grads.pop(0)
    torch.matmul(gathered[drain_idx], grad, out=weight)
"""


def _variant(wait: str) -> str:
    return textwrap.dedent(DRAIN).replace("WAIT", wait)


def test_element_read_after_the_loop_before_the_last_wait():
    racy = _variant("pass")
    findings = findings_of({"utils.py": racy}, {"SC105"})
    assert [(f.rule, f.primary.path, f.primary.line, f.kind) for f in findings] == [
        ("SC105", "utils.py", line_of(racy, "torch.matmul(gathered[drain_idx]"), "RAW")]
    [finding] = findings
    assert finding.extra["path"] == "buffer" and finding.extra["handle"] == "handle"
    assert "`gathered` (it holds `buffer`)" in finding.message
    assert [(r.role, r.line) for r in finding.related] == [("call", line_of(racy, "handle = dist.all_gather"))]


def test_other_half_in_the_same_iteration_and_waited_drain_are_no_findings():
    # `gathered[i % 2]` in the iteration that stored `gathered[(i + 1) % 2]` is the other half of the double
    # buffer; with the wait at the end of each iteration the drain reads a gathered buffer.
    assert findings_of({"utils.py": _variant("handle.wait()")}, {"SC105"}) == []


BROADCAST_DICT = """
import torch
import torch.distributed as dist


def broadcast_tensor_dict(metadata_list, src, group):
    tensor_dict = {}
    async_handles = []
    for key, value in metadata_list:
        if isinstance(value, dict):
            tensor = torch.empty(value["size"], device="cuda")
            handle = dist.broadcast(tensor, src=src, group=group, async_op=True)
            async_handles.append(handle)
            tensor_dict[key] = tensor
        else:
            tensor_dict[key] = value
    for async_handle in async_handles:
        async_handle.wait()
    return tensor_dict
"""


def test_store_into_a_dict_by_the_loop_key_is_no_use():
    # vLLM 0.33.0's `broadcast_tensor_dict`: the store itself (and its key, a loop alias) touches nothing; the
    # handles are waited before the dict is handed back.
    assert findings_of({"parallel_state.py": textwrap.dedent(BROADCAST_DICT)}, {"SC105"}) == []
