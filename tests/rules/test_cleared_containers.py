"""SC104 through a container of another object (cleared_containers.py): DeepSpeed ZeRO-1/2's gradients handed
down in lists rebuilt at every level (element_flow.py) to a helper that writes them on the reduction stream, then
the bucket cleared."""

from __future__ import annotations

from static_helpers import facts_of, findings_of, line_of, program_of

from streamcheck.rules.element_flow import element_parameters
from streamcheck.rules.summaries import parameter_lifetimes

RECORD = "                buf.record_stream(stream)\n"
FP32_RECORD = "                grad.record_stream(stream)\n"

REDUCER = """
import torch
import torch.distributed as dist
from dataclasses import dataclass, field
from typing import List
from torch._utils import _flatten_dense_tensors, _unflatten_dense_tensors


def split_half_float_double(tensors):
    buckets = []
    for dtype in [torch.half, torch.float]:
        bucket = [t for t in tensors if t.dtype == dtype]
        if bucket:
            buckets.append(bucket)
    return buckets


@dataclass
class IPGBucket:
    params: List[tuple] = field(default_factory=list)
    grads: List[torch.Tensor] = field(default_factory=list)

    def clear(self):
        self.params.clear()
        self.grads.clear()


class Optimizer:
    def __init__(self):
        self.reduction_stream = torch.cuda.Stream()
        self.flatten = _flatten_dense_tensors
        self.unflatten = _unflatten_dense_tensors
        self.ipg_buckets = {torch.half: IPGBucket()}

    def allreduce_and_copy(self, small_bucket):
        stream = self.reduction_stream
        with torch.cuda.stream(stream):
            allreduced = self.flatten(small_bucket)
            dist.all_reduce(allreduced)
            for buf, synced in zip(small_bucket, self.unflatten(allreduced, small_bucket)):
                buf.copy_(synced)
                buf.record_stream(stream)

    def allreduce_no_retain(self, bucket, numel_per_bucket=500000000):
        small_bucket = []
        numel = 0
        for tensor in bucket:
            small_bucket.append(tensor)
            numel = numel + tensor.numel()
            if numel > numel_per_bucket:
                self.allreduce_and_copy(small_bucket)
                small_bucket = []
                numel = 0
        if len(small_bucket) > 0:
            self.allreduce_and_copy(small_bucket)

    def buffered_reduce_fallback(self, grads):
        for bucket in split_half_float_double(grads):
            self.allreduce_no_retain(bucket)

    def allreduce_fp32(self, grads, grad_params):
        stream = self.reduction_stream
        with torch.cuda.stream(stream):
            allreduced = self.flatten(grads)
            dist.all_reduce(allreduced)
            reduced_grads = self.unflatten(allreduced, grads)
            for grad, reduced_grad, (group_idx, param_id) in zip(grads, reduced_grads, grad_params):
                grad.copy_(reduced_grad)
                grad.record_stream(stream)

    def fallback_fp32(self, grads, grad_params):
        buckets = {}
        for grad, grad_param in zip(grads, grad_params):
            dtype_bucket = buckets.setdefault(grad.dtype, [])
            dtype_bucket.append((grad, grad_param))
        for dtype_bucket in buckets.values():
            bucket_grads = []
            bucket_params = []
            for grad, grad_param in dtype_bucket:
                bucket_grads.append(grad)
                bucket_params.append(grad_param)
            self.allreduce_fp32(bucket_grads, bucket_params)

    def reduce_ipg_grads(self, compact):
        for comm_dtype in self.ipg_buckets:
            bucket = self.ipg_buckets[comm_dtype]
            if compact:
                self.fallback_fp32(bucket.grads, bucket.params)
            else:
                self.buffered_reduce_fallback(bucket.grads)
        with torch.cuda.stream(self.reduction_stream):
            for comm_dtype in self.ipg_buckets:
                bucket = self.ipg_buckets[comm_dtype]
                bucket.clear()
"""


def _sc104(sources):
    return [f for f in findings_of(sources) if f.rule == "SC104"]


def _function(program, name):
    [function] = [f for f in program.functions.values() if f.facts.name == name]
    return function


def test_helpers_that_record_the_elements_they_write_give_nothing():
    assert _sc104({"zero.py": REDUCER}) == []


def test_bucket_cleared_after_its_grads_were_written_on_the_reduction_stream_unrecorded():
    source = REDUCER.replace(RECORD, "")
    [finding] = _sc104({"zero.py": source})
    assert (finding.rule, finding.primary.path, finding.primary.line, finding.kind) == (
        "SC104", "zero.py", line_of(source, "bucket.clear()"), "FREE")
    assert finding.extra["path"] == "bucket.grads"
    assert [(r.role, r.line) for r in finding.related] == [
        ("write", line_of(source, "buf.copy_(synced)")),
        ("stream context", line_of(source, "self.buffered_reduce_fallback(bucket.grads)"))]


def test_the_other_arms_helper_records_nothing_for_this_one():
    # the fp32 helper (the `if` arm) records its grads; the other arm's helper does not
    source = REDUCER.replace(FP32_RECORD, "")
    [finding] = _sc104({"zero.py": source})
    assert (finding.primary.line, finding.extra["path"]) == (line_of(source, "bucket.clear()"), "bucket.grads")
    assert [(r.role, r.line) for r in finding.related][0] == ("write", line_of(source, "grad.copy_(reduced_grad)"))


def test_a_wait_for_the_reduction_stream_before_the_clear_gives_nothing():
    source = REDUCER.replace(RECORD, "").replace(
        "        with torch.cuda.stream(self.reduction_stream):\n            for comm_dtype",
        "        torch.cuda.current_stream().wait_stream(self.reduction_stream)\n"
        "        with torch.cuda.stream(self.reduction_stream):\n            for comm_dtype")
    assert _sc104({"zero.py": source}) == []


def test_index_tuples_iterated_beside_the_grads_are_not_reported():
    # `bucket.params` goes down with the grads and is read on the reduction stream by `zip`: no device op
    # touches its elements, so clearing it is no release of device memory
    source = REDUCER.replace(RECORD, "").replace(FP32_RECORD, "")
    assert sorted(f.extra["path"] for f in _sc104({"zero.py": source})) == ["bucket.grads"]


def test_element_rows_keep_tuple_slots():
    [file] = facts_of({"zero.py": REDUCER})
    [fallback] = [f for f in file.functions if f.name == "fallback_fp32"]
    source_line = line_of(REDUCER, "dtype_bucket.append((grad, grad_param))")
    loop_line = line_of(REDUCER, "for grad, grad_param in dtype_bucket:")
    assert ("grad", "dtype_bucket", source_line, 0) in fallback.elements
    assert ("grad_param", "dtype_bucket", source_line, 1) in fallback.elements
    assert ("grad_param", "dtype_bucket", loop_line, 1) in fallback.elements


def test_rebuilt_lists_carry_the_parameters_elements_and_their_lifetimes():
    program = program_of({"zero.py": REDUCER.replace(RECORD, "")})
    held = element_parameters(program, _function(program, "fallback_fp32"))
    assert held["bucket_grads"] == {"grads"} and held["bucket_params"] == {"grad_params"}
    # through what split_half_float_double returns
    assert element_parameters(program, _function(program, "buffered_reduce_fallback"))["bucket"] == {"grads"}
    lifetimes = parameter_lifetimes(program, _function(program, "buffered_reduce_fallback").id)
    assert {(how, param) for how, param, _ in lifetimes} == {("side", "grads")}
