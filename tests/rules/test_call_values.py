"""Tensors that travel through calls as values (call_values.py): a helper's result written on the caller's side
stream, kept by another object's helper in its container, taken back out by a third helper and read on the current
stream. The shape of Megatron-LM #7398 (fine-grained activation offload, megatron-core 0.16.1)."""

from __future__ import annotations

from static_helpers import findings_of, line_of, summary_of

OFFLOAD = """
    import torch

    class Group:
        def __init__(self):
            self._tensors = {{}}
            self._offload_event = torch.cuda.Event()

        def push_tensor(self, tag, tensor):
            self._tensors[tag] = tensor

        def pop_tensor(self, tag):
            return self._tensors.pop(tag)

        def record_offload_event(self, stream):
            self._offload_event.record(stream)

        def wait_offload_event(self, stream):
            stream.wait_event(self._offload_event)

    class Offloader:
        def __init__(self):
            self.d2h_stream = torch.cuda.Stream()
            self.h2d_stream = torch.cuda.Stream()
            self.groups = [Group()]

        def offload(self, x):
            cpu_backup = torch.empty(x.shape, dtype=x.dtype, device="cpu", pin_memory=True)
            cpu_backup.copy_(x, non_blocking=True)
            state = (x.device, cpu_backup)
            return state

        def bulk_offload(self, tag, x):
            group = self.groups[-1]
            self.d2h_stream.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(self.d2h_stream):
                state = self.offload(x)
                x.record_stream(self.d2h_stream)
                group.push_tensor(tag, state)
                group.record_offload_event(self.d2h_stream)

        def reload(self, state):
            device, cpu_backup = state
            gpu_tensor = torch.empty(cpu_backup.shape, dtype=cpu_backup.dtype, device=device)
            gpu_tensor.copy_(cpu_backup, non_blocking=True)
            return gpu_tensor

        def tensor_pop(self, tag):
            group = self.groups[0]
            {wait}
            tensor = group.pop_tensor(tag)
            return self.reload(tensor)
"""


def _found(source):
    return [(f.rule, f.kind, f.primary.line, f.extra["path"], f.extra["writer_stream"], f.extra["reader_stream"],
             [(r.line, r.note) for r in f.related if r.role == "read"])
            for f in findings_of({"offload.py": source})]


def test_a_reload_on_the_current_stream_with_no_edge_to_the_offload_copy():
    racy = OFFLOAD.format(wait="pass")
    assert _found(racy) == [
        ("SC101", "RAW", line_of(racy, "state = self.offload(x)"), "group._tensors", "self.d2h_stream", "",
         [(line_of(racy, "return self.reload(tensor)"), "copy_ in Offloader.reload in Offloader.tensor_pop")]),
    ]


def test_the_reload_waits_for_the_groups_offload_event_on_the_current_stream():
    fixed = OFFLOAD.format(wait="group.wait_offload_event(torch.cuda.current_stream())")
    assert _found(fixed) == []


def test_an_event_the_reader_never_waits_for_hands_nothing_over():
    # the offload event is waited by the reload stream only (Megatron's bulk reload), not by the reading stream
    source = OFFLOAD.format(wait="pass") + """
        def bulk_reload(self):
            self.groups[0].wait_offload_event(self.h2d_stream)
    """
    assert [f[:4] for f in _found(source)] == [
        ("SC101", "RAW", line_of(source, "state = self.offload(x)"), "group._tensors")]


def test_a_result_kept_in_the_callers_own_container():
    source = OFFLOAD.format(wait="pass").replace(
        "group.push_tensor(tag, state)", "self.saved[tag] = state").replace(
        "tensor = group.pop_tensor(tag)", "tensor = self.saved.pop(tag)")
    assert [f[:4] for f in _found(source)] == [
        ("SC101", "RAW", line_of(source, "state = self.offload(x)"), "self.saved")]


def test_a_parameter_kept_in_a_list_and_popped_back():
    source = OFFLOAD.format(wait="pass").replace("self._tensors = {}", "self._tensors = []").replace(
        "self._tensors[tag] = tensor", "self._tensors.append(tensor)").replace(
        "return self._tensors.pop(tag)", "return self._tensors.pop(0)")
    assert [f[:4] for f in _found(source)] == [
        ("SC101", "RAW", line_of(source, "state = self.offload(x)"), "group._tensors")]


# Megatron FSDP's gradient reduce (megatron-core 0.16.1 param_and_grad_buffer.py:3263 deleted): the reduce-scatter
# stream takes the shard of a gradient buffer through `gbuf.get_shard_from_local_buffer()` (a slice of the buffer's
# own `self.data`, after index arithmetic); the outer-DP all-reduce then overwrites `gbuf.data` on another stream.
SHARD = """
    import torch


    class Buffer:
        def __init__(self, data):
            self.data = data
            self.start = 0
            self.size = 8

        def get_shard_from_local_buffer(self):
            return self.data[self.start:self.start + self.size]


    class Reducer:
        def __init__(self, buffers):
            self.buffers = buffers
            self.rs_stream = torch.cuda.Stream()
            self.outer_stream = torch.cuda.Stream()

        def reduce(self, i, grad):
            self.rs_stream.wait_stream(torch.cuda.current_stream())
            self.outer_stream.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(self.rs_stream):
                gbuf = self.buffers[i]
                shard = gbuf.get_shard_from_local_buffer()
                torch.distributed.reduce_scatter_tensor(shard, grad)
            {wait}with torch.cuda.stream(self.outer_stream):
                torch.distributed.all_reduce(gbuf.data)
"""


def test_the_shard_an_accessor_slices_out_of_its_own_tensor_is_read_at_the_call():
    racy = SHARD.format(wait="")
    assert summary_of(findings_of({"m.py": racy})) == [
        ("SC106", "m.py", line_of(racy, "all_reduce(gbuf.data)"), "WAR")]
    [finding] = findings_of({"m.py": racy})
    assert (finding.related[0].role, finding.related[0].line) == (
        "read", line_of(racy, "shard = gbuf.get_shard_from_local_buffer()"))


def test_the_outer_stream_waiting_for_the_shard_reader_is_ordered():
    assert findings_of({"m.py": SHARD.format(wait="self.outer_stream.wait_stream(self.rs_stream)\n            ")}) == []
