"""Events handed over with their buffers, and dtype conversions as producers (issue 14, session 8).

Each racy source is reduced from the real function less its wait (FSDP2's `foreach_all_gather_copy_out`, DeepSpeed
ZeRO-3's `has_overflow`); its twin with the wait gives no finding. Exact outcomes: (rule, path, line, kind) and the
streams or the event the finding names."""

from __future__ import annotations

import textwrap

from static_helpers import findings_of, line_of, summary_of

# --- FSDP2: an event recorded after the all-gather travels in AllGatherResult with its output ------------------
ALL_GATHER = """
from typing import NamedTuple

import torch


class AllGatherResult(NamedTuple):
    all_gather_output: torch.Tensor
    all_gather_event: torch.Event | None
    sizes: list


def foreach_all_gather(inputs, group, all_gather_copy_in_stream, all_gather_stream, all_gather_comm, rank):
    with torch.cuda.stream(all_gather_copy_in_stream):
        all_gather_input, all_gather_output = torch.ops.fsdp.all_gather_copy_in(inputs, rank)
    all_gather_stream.wait_stream(all_gather_copy_in_stream)
    with torch.cuda.stream(all_gather_stream):
        all_gather_comm(output_tensor=all_gather_output, input_tensor=all_gather_input, group=group)
        all_gather_event = all_gather_stream.record_event()
        return AllGatherResult(all_gather_output, all_gather_event, [rank])


def foreach_all_gather_copy_out(all_gather_result, out, world_size):
    (all_gather_output, all_gather_event, sizes) = all_gather_result
    device = all_gather_output.device
    if all_gather_event is not None:
        WAIT
    all_gather_output = all_gather_output.view(world_size, -1)
    torch.ops.fsdp.split_with_sizes_copy(all_gather_output, sizes, dim=1, out=out)
"""

# --- Megatron FSDP: an event queued with a bucket id (no tensor) and a closure ----------------------------------
QUEUED_WITH_ID = """
import torch


class Buffer:
    def __init__(self):
        self.grad_reduce_queue = []
        self.rs_stream = torch.cuda.Stream()

    def reduce(self, bucket_id, grad, group):
        with torch.cuda.stream(self.rs_stream):
            self.bucket_status[bucket_id] = 1
            torch.distributed.all_reduce(grad, group=group)
            event = self.rs_stream.record_event()
        self.grad_reduce_queue.append((event, self.free_bucket, bucket_id))

    def wait_previous(self):
        while self.grad_reduce_queue:
            event, free, bucket_id = self.grad_reduce_queue.pop(0)
            size = self.sizes[bucket_id]
            event.wait()
            free()
"""

# --- DeepSpeed ZeRO-3 has_overflow: a dtype conversion on the side stream, all-reduced on the current one -----
OVERFLOW = """
import torch
import torch.distributed as dist


class Optimizer:
    def __init__(self):
        self.reduce_and_partition_stream = torch.cuda.Stream()
        self.inf_or_nan_tracker = torch.zeros(1, dtype=torch.bool, device="cuda")

    def has_overflow(self, flat, group):
        with torch.cuda.stream(self.reduce_and_partition_stream):
            self.inf_or_nan_tracker.logical_or_(torch.isinf(flat).any())
            overflow_gpu = self.inf_or_nan_tracker.clone().to(torch.uint8)
            self.inf_or_nan_tracker.zero_()
        WAIT
        dist.all_reduce(overflow_gpu, op=dist.ReduceOp.MAX, group=group)
        return overflow_gpu.item() > 0
"""


def _variant(source: str, wait: str) -> str:
    return textwrap.dedent(source).replace("WAIT", wait)


def test_output_read_before_the_event_it_came_with_is_waited():
    racy = _variant(ALL_GATHER, "pass")
    findings = findings_of({"collectives.py": racy}, {"SC105"})
    assert summary_of(findings) == [
        ("SC105", "collectives.py", line_of(racy, "torch.ops.fsdp.split_with_sizes_copy"), "RAW")]
    [finding] = findings
    assert finding.extra["path"] == "all_gather_output"
    assert finding.extra["handle"] == "all_gather_event"
    assert [(r.role, r.line) for r in finding.related] == [
        ("call", line_of(racy, "(all_gather_output, all_gather_event, sizes) = all_gather_result"))]
    assert "wait_event(all_gather_event)" in finding.fix


def test_output_read_after_the_event_is_waited_is_no_finding():
    fixed = _variant(ALL_GATHER, "torch.cuda.current_stream().wait_event(all_gather_event)")
    assert findings_of({"collectives.py": fixed}, {"SC105"}) == []
    synchronized = _variant(ALL_GATHER, "all_gather_event.synchronize()")
    assert findings_of({"collectives.py": synchronized}, {"SC105"}) == []


def test_an_event_queued_with_an_index_hands_over_no_tensor():
    assert findings_of({"buffer.py": textwrap.dedent(QUEUED_WITH_ID)}, {"SC105"}) == []


def test_dtype_conversion_on_a_side_stream_is_a_write_the_collective_reads():
    racy = _variant(OVERFLOW, "pass")
    findings = [f for f in findings_of({"stage3.py": racy}, {"SC101"}) if f.extra["path"] == "overflow_gpu"]
    assert summary_of(findings) == [("SC101", "stage3.py", line_of(racy, "overflow_gpu = self.inf"), "RAW")]
    [finding] = findings
    assert finding.extra["writer_stream"] == "self.reduce_and_partition_stream"
    assert finding.extra["reader_stream"] == ""  # the current stream
    assert finding.extra["consumer"] == "collective"
    assert ("read", line_of(racy, "dist.all_reduce(overflow_gpu")) in [(r.role, r.line) for r in finding.related]


def test_dtype_conversion_waited_for_is_no_finding():
    fixed = _variant(OVERFLOW, "torch.cuda.current_stream().wait_stream(self.reduce_and_partition_stream)")
    assert [f for f in findings_of({"stage3.py": fixed}, {"SC101"}) if f.extra["path"] == "overflow_gpu"] == []


def test_block_made_on_a_side_stream_is_kept_alive_by_a_later_host_read():
    # The all-reduce reads it on the current stream; `.item()` then blocks the host until the current stream is
    # done, so the block can only go back to the side stream's pool after that read.
    fixed = _variant(OVERFLOW, "torch.cuda.current_stream().wait_stream(self.reduce_and_partition_stream)")
    assert [f for f in findings_of({"stage3.py": fixed}, {"SC104"}) if f.extra["path"] == "overflow_gpu"] == []
    returned = fixed.replace("return overflow_gpu.item() > 0", "return overflow_gpu")
    findings = [f for f in findings_of({"stage3.py": returned}, {"SC104"}) if f.extra["path"] == "overflow_gpu"]
    assert summary_of(findings) == [("SC104", "stage3.py", line_of(returned, "dist.all_reduce(overflow_gpu"), "FREE")]
    assert findings[0].extra["allocated_on"] == "self.reduce_and_partition_stream"
