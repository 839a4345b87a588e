"""SC105 on P2POps a nested function builds into its enclosing function's list (rules/extract_closure_ops.py),
reduced from vLLM 0.33.0's TorchDistGlooStagedEplbCommunicator.execute (eplb_communicator.py:187-243).

Exact outcomes: (rule, path, line, kind) and the message's words."""

from __future__ import annotations

import textwrap

from static_helpers import findings_of, line_of, summary_of

EXECUTE = """
import torch
import torch.distributed
from torch.distributed import P2POp, batch_isend_irecv


class Communicator:
    def execute(self) -> None:
        p2p_ops: list[P2POp] = []
        recv_staging: list[tuple[torch.Tensor, torch.Tensor]] = []

        def build_ops() -> None:
            for op, tensor, peer_rank in self._ops:
                if op == "send":
                    cpu_tensor = tensor.to(device="cpu", non_blocking=True)
                    p2p_ops.append(P2POp(torch.distributed.isend, cpu_tensor, group=self._group, group_peer=peer_rank))
                    continue
                cpu_tensor = torch.empty_like(tensor, device="cpu", pin_memory=True)
                p2p_ops.append(P2POp(torch.distributed.irecv, cpu_tensor, group=self._group, group_peer=peer_rank))
                recv_staging.append((tensor, cpu_tensor))

        build_ops()
        torch.accelerator.current_stream().synchronize()
        reqs = batch_isend_irecv(p2p_ops)
        for req in reqs:
            WAIT
        if not recv_staging:
            return
        for dst_tensor, cpu_tensor in recv_staging:
            dst_tensor.copy_(cpu_tensor, non_blocking=True)
"""


def _variant(wait: str) -> str:
    return textwrap.dedent(EXECUTE).replace("WAIT", wait)


def test_a_closures_receives_are_the_enclosing_batchs_and_reach_it_through_the_staging_list():
    racy = _variant("pass")
    findings = findings_of({"eplb.py": racy}, {"SC105"})
    # The first use after the launch of what the closure stored the received tensors in.
    assert summary_of(findings) == [("SC105", "eplb.py", line_of(racy, "if not recv_staging"), "RAW")]
    assert findings[0].message.startswith("`recv_staging` is read while the async `batch_isend_irecv` (line "
                                          f"{line_of(racy, 'reqs = batch_isend_irecv')}) may still be using it")
    assert findings_of({"eplb.py": _variant("req.wait()")}, {"SC105"}) == []


def test_a_closures_ops_in_its_own_list_are_not_the_enclosing_functions():
    # `p2p_ops` bound inside the closure: execute's own (empty) list is launched, nothing of the closure.
    own = _variant("pass").replace("        def build_ops() -> None:\n",
                                   "        def build_ops() -> None:\n            p2p_ops = []\n")
    assert findings_of({"eplb.py": own}, {"SC105"}) == []


def test_a_sent_tensor_stored_nowhere_else_gives_the_enclosing_function_no_path():
    # Only sends: the closure's `cpu_tensor` went into `p2p_ops` alone, so execute's later uses of its own
    # `cpu_tensor` (a name of the staging loop) are not the sent tensor.
    sends_only = _variant("pass").replace("                recv_staging.append((tensor, cpu_tensor))\n", "")
    assert findings_of({"eplb.py": sends_only}, {"SC105"}) == []


def test_a_tensor_of_the_enclosing_function_used_in_the_closure_stands_for_itself():
    source = textwrap.dedent("""
    import torch
    from torch.distributed import P2POp, batch_isend_irecv, irecv

    def receive(peer):
        buf = torch.empty(8, device="cuda")
        ops = []

        def build():
            ops.append(P2POp(irecv, buf, peer))

        build()
        reqs = batch_isend_irecv(ops)
        total = buf.sum()
        for req in reqs:
            req.wait()
        return total
    """)
    findings = findings_of({"recv.py": source}, {"SC105"})
    assert summary_of(findings) == [("SC105", "recv.py", line_of(source, "total = buf.sum()"), "RAW")]
    assert findings[0].message.startswith("`buf` is read while the async `batch_isend_irecv`")
