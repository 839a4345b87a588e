"""SC105 on a handle that travels on a request object beside its buffer (travelling_handles.py), reduced from
torchrec 1.9.2's comm_ops.py: `All2All_Pooled_Req.forward` launches the all-to-all into `sharded_output_embeddings`
and stores `myreq.req = req; myreq.tensor = sharded_output_embeddings`; `All2All_Pooled_Wait.forward` (the request
as a parameter) and `All2All_Pooled_Req.backward` (the request as `ctx.myreq`) wait `myreq.req` and then read
`myreq.tensor` through a local.

Exact outcomes (rule, path, line, kind, the buffer's path). The first test holds on main already (the twelve
`myreq.req.wait()` deletions of comm_ops.py are flagged); the others are the path shapes (issue 14): a wait counts
for a read only on a path to it, and a wait of a local bound to the handle is a wait of the handle."""

from __future__ import annotations

import textwrap

from static_helpers import findings_of, line_of

COMM_OPS = """
import torch
import torch.distributed as dist
from torch.autograd import Function


class Request:
    def __init__(self, pg):
        self.pg = pg
        self.req = None
        self.tensor = None
        self.a2ai = None
        self.dummy_tensor = torch.empty(1, requires_grad=True)


class All2All_Pooled_Req(Function):
    @staticmethod
    def forward(ctx, pg, myreq, a2ai, input_embeddings, all_to_all_single_comm):
        sharded_input_embeddings = input_embeddings.view(-1)
        sharded_output_embeddings = all_to_all_single_comm.allocate(
            (sum(a2ai.output_split_sizes),),
            dtype=sharded_input_embeddings.dtype,
            device=sharded_input_embeddings.device,
        )
        req = all_to_all_single_comm(
            output_tensor=sharded_output_embeddings,
            input_tensor=sharded_input_embeddings,
            output_split_sizes=a2ai.output_split_sizes,
            input_split_sizes=a2ai.input_split_sizes,
            group=pg,
            async_op=True,
        )
        myreq.req = req
        myreq.tensor = sharded_output_embeddings
        myreq.a2ai = a2ai
        ctx.myreq = myreq
        ctx.pg = pg
        return myreq.dummy_tensor

    @staticmethod
    def backward(ctx, *unused):
        myreq = ctx.myreq
        a2ai = myreq.a2ai
        assert myreq.req is not None
        BACKWARD_WAIT
        myreq.req = None
        grad_output = myreq.tensor
        grad_input = grad_output.view(a2ai.B_global, a2ai.D_local_sum)
        grad_input.div_(dist.get_world_size(ctx.pg))
        myreq.tensor = None
        return (None, None, None, grad_input, None)


class All2All_Pooled_Wait(Function):
    @staticmethod
    def forward(ctx, pg, myreq: Request, *dummy_tensor):
        a2ai = myreq.a2ai
        assert myreq.req is not None
        FORWARD_WAIT
        sharded_output_embeddings = myreq.tensor
        myreq.req = None
        myreq.tensor = None
        ctx.myreq = myreq
        if a2ai.codecs is not None:
            sharded_output_embeddings = a2ai.codecs.forward.decode(sharded_output_embeddings)
        outputs_by_rank = sharded_output_embeddings.split(a2ai.output_split_sizes)
        return torch.cat([output.view(a2ai.B_local, -1) for output in outputs_by_rank], dim=1)
"""


def _variant(backward: str, forward: str) -> str:
    return textwrap.dedent(COMM_OPS).replace("BACKWARD_WAIT", backward).replace("FORWARD_WAIT", forward)


def _summary(findings):
    return [(f.rule, f.primary.path, f.primary.line, f.kind, f.extra["path"]) for f in findings]


def test_request_buffer_read_before_its_handle_is_waited():
    waited = _variant("myreq.req.wait()", "myreq.req.wait()")
    assert findings_of({"comm_ops.py": waited}, {"SC105"}) == []
    racy = _variant("pass", "pass")
    findings = findings_of({"comm_ops.py": racy}, {"SC105"})
    assert _summary(findings) == [
        ("SC105", "comm_ops.py", line_of(racy, "grad_input.div_("), "WAR", "myreq.tensor"),
        ("SC105", "comm_ops.py", line_of(racy, "forward.decode(sharded_output_embeddings)"), "RAW",
         "myreq.tensor"),
    ]
    assert all(f.related[0].line == line_of(racy, "req = all_to_all_single_comm(") for f in findings)
    assert findings[0].extra["handle"] == "myreq.req"
    # one consumer missing its wait: only that one
    only_forward = findings_of({"comm_ops.py": _variant("myreq.req.wait()", "pass")}, {"SC105"})
    assert _summary(only_forward) == [_summary(findings)[1]]


def test_wait_on_the_other_arm_orders_nothing():
    # the backward waits only on one arm of an if/else and reads the buffer on both
    arms = _variant("if a2ai.codecs is not None:\n            myreq.req.wait()\n"
                    "            grad_output = myreq.tensor\n"
                    "        else:\n"
                    "            grad_output = myreq.tensor.clone()",
                    "myreq.req.wait()")
    findings = findings_of({"comm_ops.py": arms}, {"SC105"})
    assert _summary(findings) == [
        ("SC105", "comm_ops.py", line_of(arms, "grad_output = myreq.tensor.clone()"), "RAW", "myreq.tensor"),
    ]
    # a wait under a condition with no other arm is on a path to what follows (as for SC105's own launches)
    guarded = _variant("if isinstance(myreq.req, dist.Work):\n            myreq.req.wait()", "myreq.req.wait()")
    assert findings_of({"comm_ops.py": guarded}, {"SC105"}) == []


def test_wait_in_a_block_that_returns_first_orders_nothing_after_it():
    early = _variant("if a2ai.fast:\n            myreq.req.wait()\n            return (None, None, None, None, None)",
                     "myreq.req.wait()")
    findings = findings_of({"comm_ops.py": early}, {"SC105"})
    assert _summary(findings) == [
        ("SC105", "comm_ops.py", line_of(early, "grad_input.div_("), "WAR", "myreq.tensor"),
    ]


def test_wait_through_a_local_bound_to_the_handle():
    local = _variant("work = myreq.req\n        work.wait()", "work = myreq.req\n        work.wait()")
    assert findings_of({"comm_ops.py": local}, {"SC105"}) == []
    # the local bound, but the other function's wait missing: that one only
    unwaited = _variant("work = myreq.req\n        work.wait()", "work = myreq.req")
    findings = findings_of({"comm_ops.py": unwaited}, {"SC105"})
    assert _summary(findings) == [
        ("SC105", "comm_ops.py", line_of(unwaited, "forward.decode(sharded_output_embeddings)"), "RAW",
         "myreq.tensor"),
    ]


def test_arm_where_the_handle_is_none_has_nothing_in_flight():
    # the `else` of a presence test of the handle: no collective is in flight there
    tested = _variant("if myreq.req is not None:\n            myreq.req.wait()\n"
                      "            grad_output = myreq.tensor\n"
                      "        else:\n"
                      "            grad_output = myreq.tensor.clone()",
                      "myreq.req.wait()")
    assert findings_of({"comm_ops.py": tested}, {"SC105"}) == []
    # ... but an arm where another name was tested None still has the handle in flight
    other = tested.replace("if myreq.req is not None:", "if a2ai.codecs is not None:")
    assert _summary(findings_of({"comm_ops.py": other}, {"SC105"})) == [
        ("SC105", "comm_ops.py", line_of(other, "grad_output = myreq.tensor.clone()"), "RAW", "myreq.tensor"),
    ]
