"""Tensors that travel through calls as values (call_values.py): a helper's result written on the caller's side
stream, kept by another object's helper in its container, taken back out by a third helper and read on the current
stream. The shape of Megatron-LM #7398 (fine-grained activation offload, megatron-core 0.16.1)."""

from __future__ import annotations

from static_helpers import findings_of, line_of

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
