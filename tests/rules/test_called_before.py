"""A read reached through a call the writer's function makes before its write (rules/called_before.py): DeepSpeed
0.19.8 ZeRO-1/2's IPG bucket, reduced. The gradient hook reduces the full bucket (`reduce_ipg_grads` ->
`average_tensor`, which reads it on the reduction stream) and then copies its gradient into the bucket on the
current stream; only the wait for the bucket's reuse event (recorded after the reduction, kept in
`bucket.reuse_events` of an element of `self.ipg_buckets`) orders the copy after the reduction's read
(stage_1_and_2.py:1454). The backward epilogue's synchronize after its own call of `reduce_ipg_grads` orders another
way, where no copy of this call follows.
"""

from __future__ import annotations

import textwrap

from static_helpers import findings_of, line_of, summary_of

ZERO = """
import torch
import torch.distributed as dist
from deepspeed.accelerator import get_accelerator


class Optimizer:
    def __init__(self, params, size):
        self.reduction_stream = get_accelerator().Stream()
        self.ipg_buckets = {torch.float16: Bucket(size)}
        self.reduce_bucket_size = size
        for p in params:
            p.register_post_accumulate_grad_hook(self.reduce_independent_grads)

    def reduce_independent_grads(self, param):
        bucket = self.ipg_buckets[param.dtype]
        if bucket.elements + param.numel() > self.reduce_bucket_size:
            self.reduce_ipg_grads(param.dtype)
            bucket.index = 1 - bucket.index
        if bucket.index in bucket.reuse_events:
            WAIT
        new_grad_tensor = bucket.buffer[bucket.index].narrow(0, bucket.elements, param.numel())
        new_grad_tensor.copy_(param.grad.view(-1))
        bucket.elements += param.numel()

    def reduce_ipg_grads(self, dtype):
        bucket = self.ipg_buckets[dtype]
        self.average_tensor(bucket.buffer[bucket.index].narrow(0, 0, bucket.elements))
        with get_accelerator().stream(self.reduction_stream):
            event = get_accelerator().Event()
            event.record(self.reduction_stream)
            bucket.reuse_events[bucket.index] = event
        bucket.elements = 0

    def average_tensor(self, tensor):
        stream = self.reduction_stream
        stream.wait_stream(get_accelerator().current_stream())
        with get_accelerator().stream(stream):
            tensor.div_(2.0)
            dist.all_reduce(tensor)

    def epilogue(self):
        self.reduce_ipg_grads(torch.float16)
        get_accelerator().synchronize()
"""

REUSE_WAIT = "get_accelerator().current_stream().wait_event(bucket.reuse_events[bucket.index])"


def _source(wait: str) -> str:
    return textwrap.dedent(ZERO).replace("WAIT", wait)


def test_the_refill_without_the_reuse_wait_races_with_the_reduction_it_called():
    source = _source("pass")
    [finding] = findings_of({"zero.py": source}, {"SC106"})
    assert summary_of([finding]) == [
        ("SC106", "zero.py", line_of(source, "new_grad_tensor.copy_(param.grad.view(-1))"), "WAR")]
    assert finding.extra["writer_stream"] == "" and finding.extra["other_stream"] == "self.reduction_stream"
    assert finding.extra["path"] == "new_grad_tensor"
    assert [(r.line, r.role) for r in finding.related] == [
        (line_of(source, "dist.all_reduce(tensor)"), "read"),
        (line_of(source, "with get_accelerator().stream(stream):"), "stream context"),
        (line_of(source, "            self.reduce_ipg_grads(param.dtype)"), "call"),
        (line_of(source, "self.average_tensor(bucket.buffer"), "call")]


def test_only_the_call_that_hands_over_the_bucket_is_a_way_to_its_read():
    # reduce_ipg_grads also reduces an oversized gradient that never enters the bucket: that call of
    # average_tensor reads another tensor, so the way through it needs no wait before the bucket's refill
    source = _source("pass").replace(
        "        self.average_tensor(bucket.buffer[bucket.index].narrow(0, 0, bucket.elements))\n",
        "        if self.extra_large_param is not None:\n"
        "            self.average_tensor(self.extra_large_param.grad.view(-1))\n"
        "        else:\n"
        "            self.average_tensor(bucket.buffer[bucket.index].narrow(0, 0, bucket.elements))\n"
        "            get_accelerator().current_stream().wait_stream(self.reduction_stream)\n")
    assert findings_of({"zero.py": source}, {"SC106"}) == []


def test_the_wait_for_the_buckets_reuse_event_orders_the_refill():
    # the wait names `bucket.reuse_events` of an element of `self.ipg_buckets`, the record another method's
    # `bucket.reuse_events` of an element of the same container: one event (orderings.event_id)
    assert findings_of({"zero.py": _source(REUSE_WAIT)}, {"SC106"}) == []


def test_a_wait_after_the_reduction_orders_the_refill():
    source = _source("pass").replace(
        "            dist.all_reduce(tensor)\n",
        "            dist.all_reduce(tensor)\n        get_accelerator().current_stream().wait_stream(stream)\n")
    assert findings_of({"zero.py": source}, {"SC106"}) == []


def test_a_reuse_event_nobody_waits_is_handed_to_no_one():
    # the event recorded after the reduction goes into the bucket and is waited nowhere: it does not order the
    # refill (races._kept_for_host_waits, the bucket read as an element of `self.ipg_buckets`), while another
    # event of the program is waited
    source = _source("pass").replace(
        "    def epilogue(self):",
        "    def flush(self, other):\n"
        "        get_accelerator().current_stream().wait_event(other)\n\n"
        "    def epilogue(self):")
    assert summary_of(findings_of({"zero.py": source}, {"SC106"})) == [
        ("SC106", "zero.py", line_of(source, "new_grad_tensor.copy_(param.grad.view(-1))"), "WAR")]


def test_outside_the_writers_own_calls_the_order_stays_unknown():
    # the reduction is reached only from the epilogue: the refill's function does not call it, so the pair is no
    # known order (SC101 judges a write read elsewhere)
    source = _source("pass").replace("            self.reduce_ipg_grads(param.dtype)\n", "            pass\n")
    assert findings_of({"zero.py": source}, {"SC106"}) == []
