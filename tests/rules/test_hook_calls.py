"""Gradient-hook calls on different streams (races.py `_earlier_hook_call`): a hook copies its gradient into a shared
bucket on its current stream after reducing the bucket once it is full, so the next call's reduction reads the copy;
that call waits only for its own current stream, and autograd runs each call on its parameter's backward stream.
The shape of DeepSpeed PR #8080 (ZeRO-1/2's IPG bucket, deepspeed 0.19.2 -> 0.19.3), with the locals that reach
the bucket through `self.ipg_buckets[dtype]` and the reduction's parameter (aliasing.py `_attribute_keys_of_local`).
"""

from __future__ import annotations

import textwrap

from static_helpers import findings_of, line_of

BUCKET = """
    import torch
    import torch.distributed as dist
    from deepspeed.accelerator import get_accelerator


    class Bucket:
        def __init__(self, numel):
            self.buffer = [torch.empty(numel, device="cuda"), torch.empty(numel, device="cuda")]
            self.index = 0
            self.elements = 0
            self.copy_streams = set()


    class Optimizer:
        def __init__(self, params, size):
            self.reduction_stream = get_accelerator().Stream()
            self.ipg_buckets = {{torch.float16: Bucket(size)}}
            self.reduce_bucket_size = size
            for p in params:
                def wrapper(param):
                    def grad_hook(*unused):
                        self.reduce_grads(param)
                    register_grad_hook(param, grad_hook)
                wrapper(p)

        def reduce_grads(self, param):
            bucket = self.ipg_buckets[param.dtype]
    {reduce_first}
            new_grad_tensor = bucket.buffer[bucket.index].narrow(0, bucket.elements, param.numel())
            new_grad_tensor.copy_(param.grad.view(-1))
    {record}
            bucket.elements += param.numel()
    {reduce_last}

        def reduce_ipg_grads(self, dtype):
            bucket = self.ipg_buckets[dtype]
            self.average_tensor(bucket.buffer[bucket.index].narrow(0, 0, bucket.elements), dtype)

        def average_tensor(self, tensor, dtype):
            stream = self.reduction_stream
    {wait}
            get_accelerator().current_stream().wait_stream(stream)
            with get_accelerator().stream(stream):
                tensor.div_(2.0)
                dist.all_reduce(tensor)
            get_accelerator().current_stream().wait_stream(stream)
"""

REDUCE_FIRST = """\
        if bucket.elements + param.numel() > self.reduce_bucket_size:
            self.reduce_ipg_grads(param.dtype)"""
REDUCE_LAST = """\
        if bucket.elements >= self.reduce_bucket_size:
            self.reduce_ipg_grads(param.dtype)"""
WAIT_CURRENT = "        stream.wait_stream(get_accelerator().current_stream())"
WAIT_EVERY_PRODUCER = """\
        bucket = self.ipg_buckets[dtype]
        producer_streams = bucket.copy_streams or {get_accelerator().current_stream()}
        for producer_stream in producer_streams:
            stream.wait_stream(producer_stream)"""
RECORD = "        bucket.copy_streams.add(get_accelerator().current_stream())"


def _source(reduce_first="", reduce_last="", wait=WAIT_CURRENT, record=""):
    return textwrap.dedent(BUCKET).format(reduce_first=reduce_first, reduce_last=reduce_last, wait=wait,
                                          record=record)


def test_the_next_calls_reduction_waits_only_for_its_own_current_stream():
    source = _source(reduce_first=REDUCE_FIRST)
    [finding] = findings_of({"zero.py": source}, {"SC101"})
    assert (finding.rule, finding.kind, finding.primary.line, finding.primary.path) == (
        "SC101", "RAW", line_of(source, "new_grad_tensor.copy_(param.grad.view(-1))"), "zero.py")
    assert finding.extra == {"path": "new_grad_tensor", "writer_stream": "", "reader_stream":
                             "self.reduction_stream", "consumer": "collective", "across_hook_calls": True}
    assert [(r.line, r.role) for r in finding.related][:2] == [
        (line_of(source, "dist.all_reduce(tensor)"), "read"),
        (line_of(source, "with get_accelerator().stream(stream):"), "stream context")]
    assert "in a later call, which waits only for its own current stream" in finding.message
    assert "wait for every one of them" in finding.fix


def test_waiting_for_every_stream_the_copies_ran_on_orders_them():
    # DeepSpeed 0.19.3: each copy adds its stream, the reduction waits for all of them (streams the lint cannot
    # name: a wait for any of them orders everything before it)
    assert findings_of({"zero.py": _source(reduce_first=REDUCE_FIRST, wait=WAIT_EVERY_PRODUCER, record=RECORD)},
                       {"SC101"}) == []


def test_a_reduction_in_the_call_that_made_the_copy_waits_for_its_stream():
    # the copy, then the reduction in the same call: its current stream is the copy's
    assert findings_of({"zero.py": _source(reduce_last=REDUCE_LAST)}, {"SC101"}) == []


def test_outside_a_hook_one_current_stream_runs_every_call():
    source = _source(reduce_first=REDUCE_FIRST).replace("register_grad_hook(param, grad_hook)",
                                                        "self.hooks.append(grad_hook)")
    assert findings_of({"zero.py": source}, {"SC101"}) == []


def test_no_autofix_inserts_the_wait_that_is_already_there():
    from streamcheck.fixes import derive_fix

    [finding] = findings_of({"zero.py": _source(reduce_first=REDUCE_FIRST)}, {"SC101"})
    assert derive_fix(finding) is None


DIRECT = """
    import torch


    class Bucket:
        def __init__(self, params, numel):
            self.reduction_stream = torch.cuda.Stream()
            self.buffer = torch.zeros(numel, device="cuda")
            self.reduced = torch.zeros(1, device="cuda")
            self.elements = 0
            self.numel = numel
            for p in params:
                p.register_post_accumulate_grad_hook(self.add_grad)

        def add_grad(self, param):
            if self.elements + param.numel() > self.numel:
                self.reduce_bucket()
            self.buffer[self.elements:self.elements + param.numel()].copy_(param.grad.view(-1))
            self.elements += param.numel()

        def reduce_bucket(self):
            stream = self.reduction_stream
            stream.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(stream):
                torch.sum(self.buffer, 0, keepdim=True, out=self.reduced)
            torch.cuda.current_stream().wait_stream(stream)
            self.elements = 0
"""


def test_a_reduction_the_hook_calls_itself_before_its_copy_is_a_later_calls():
    # reduce_bucket runs only from add_grad, before the copy: in one call the read comes first (races.py
    # `_only_called_before`), but the next call's reduction reads this call's copy, on another current stream
    source = textwrap.dedent(DIRECT)
    [finding] = findings_of({"bucket.py": source}, {"SC101"})
    assert (finding.rule, finding.kind, finding.primary.line, finding.primary.path) == (
        "SC101", "RAW", line_of(source, ".copy_(param.grad.view(-1))"), "bucket.py")
    assert finding.extra == {"path": "self.buffer", "writer_stream": "", "reader_stream": "self.reduction_stream",
                             "consumer": "device op", "across_hook_calls": True}
    assert [(r.line, r.role) for r in finding.related][:2] == [
        (line_of(source, "torch.sum(self.buffer"), "read"), (line_of(source, "with torch.cuda.stream(stream):"),
                                                               "stream context")]


def test_the_same_shape_outside_a_hook_reads_before_it_writes():
    # no hook: one current stream runs every call of add_grad, and in each the read comes before the copy
    source = textwrap.dedent(DIRECT).replace(
        "p.register_post_accumulate_grad_hook(self.add_grad)", "self.params = params")
    assert findings_of({"bucket.py": source}, {"SC101"}) == []


def test_waiting_for_the_streams_each_call_copied_on_orders_the_direct_reduction():
    source = textwrap.dedent(DIRECT).replace(
        "stream.wait_stream(torch.cuda.current_stream())",
        "for copy_stream in self.copy_streams:\n            stream.wait_stream(copy_stream)").replace(
        ".copy_(param.grad.view(-1))",
        ".copy_(param.grad.view(-1))\n        self.copy_streams.add(torch.cuda.current_stream())")
    assert "for copy_stream in self.copy_streams:" in source and "self.copy_streams.add(" in source
    assert findings_of({"bucket.py": source}, {"SC101"}) == []
