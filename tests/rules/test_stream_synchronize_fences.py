"""A stream's `synchronize()` as the host fence after a side stream's writes (issue 14, session 11).

Reduced from DeepSpeed 0.19.8 ZeRO-3 (stage3.py): the gradient hooks reduce on `reduce_and_partition_stream` and
write each parameter's grad partition through a view of an element of `self.__param_id_to_grad_partition`; after
the writes an event is recorded and kept in `self.param_reduce_events`, which only the host waits for (the oldest,
as back-pressure); the backward's epilogue ends with `self.reduce_and_partition_stream.synchronize()`, the only
ordering before the step reads the partitions on the current stream. Without it the step's read races the reduce
stream's writes. Exact outcomes: (rule, path, line, kind) and the streams the finding names."""

from __future__ import annotations

import textwrap

from static_helpers import facts_of, findings_of, line_of, summary_of

ZERO3 = """
import collections

import torch


class Stage3:
    def __init__(self, params, flat):
        self.reduce_and_partition_stream = torch.cuda.Stream()
        self.param_reduce_events = collections.deque()
        self.grad_partitions = {}
        for p in params:
            self.grad_partitions[p.ds_id] = flat.narrow(0, p.offset, p.numel())

    def partition_grads(self, params, grad_partitions):
        for param, grad_partition in zip(params, grad_partitions):
            grad_buffer = self.grad_partitions[param.ds_id].narrow(0, 0, grad_partition.numel())
            grad_buffer.copy_(grad_partition, non_blocking=True)

    def reduce_bucket(self, params, grads):
        if len(self.param_reduce_events) > 4:
            self.param_reduce_events.popleft().synchronize()
        with torch.cuda.stream(self.reduce_and_partition_stream):
            self.partition_grads(params, grads)
            event = torch.cuda.Event()
            event.record()
            self.param_reduce_events.append(event)

    def epilogue(self, params, grads):
        self.reduce_bucket(params, grads)
        SYNC

    def finalize(self, params, out):
        for param in params:
            grad_buffer = self.grad_partitions[param.ds_id]
            out[param.ds_id] = grad_buffer.to("cuda", non_blocking=True)
"""


def _variant(sync: str) -> str:
    return textwrap.dedent(ZERO3).replace("SYNC", sync)


def test_a_view_of_an_attribute_containers_element_is_taken_out_of_it():
    [facts] = facts_of({"stage3.py": _variant("pass")})
    [partition_grads] = [f for f in facts.functions if f.name == "partition_grads"]
    assert ("grad_buffer", "self.grad_partitions", line_of(ZERO3, "grad_buffer = self.grad_partitions[param.ds_id]"
                                                                   ".narrow")) in partition_grads.taken
    [write] = [a for a in partition_grads.accesses if a.kind == "write"]
    assert (write.path, write.op) == ("self.grad_partitions", "copy_")


def test_side_stream_writes_read_after_the_epilogue_without_its_synchronize():
    racy = _variant("pass")
    findings = findings_of({"stage3.py": racy}, {"SC101"})
    assert summary_of(findings) == [("SC101", "stage3.py", line_of(racy, "grad_buffer.copy_(grad_partition"), "RAW")]
    [finding] = findings
    assert finding.extra["path"] == "self.grad_partitions"
    assert finding.extra["writer_stream"] == "self.reduce_and_partition_stream"
    assert finding.extra["reader_stream"] == ""  # the current stream
    assert ("read", line_of(racy, 'out[param.ds_id] = grad_buffer.to("cuda"')) in [
        (r.role, r.line) for r in finding.related]


def test_the_epilogues_stream_synchronize_orders_the_step_after_the_writes():
    assert findings_of({"stage3.py": _variant("self.reduce_and_partition_stream.synchronize()")}, {"SC101"}) == []
    assert findings_of({"stage3.py": _variant("torch.cuda.synchronize()")}, {"SC101"}) == []


def test_an_event_the_reader_waits_for_still_hands_the_writes_over():
    waited = _variant("pass").replace(
        "        for param in params:\n            grad_buffer",
        "        torch.cuda.current_stream().wait_event(self.param_reduce_events[-1])\n"
        "        for param in params:\n            grad_buffer")
    assert findings_of({"stage3.py": waited}, {"SC101"}) == []

