"""Hidden producers (issue 14): an out-of-place result (`y = x.to(...)`, `torch.cat(...)`) is written by a kernel on
the stream current where it is made; read on another stream, it needs the same edge as an in-place write."""

from __future__ import annotations

from static_helpers import findings_of, line_of

PREFETCH = """
    import torch

    class Loader:
        def next_batch(self, host_batch, model):
            with torch.cuda.stream(self.copy_stream):
                batch = host_batch.to("cuda", non_blocking=True)
            {wait}
            return model(batch)
"""


def test_a_batch_copied_on_the_copy_stream_and_used_on_the_current_one():
    racy = PREFETCH.replace("{wait}", "pass")
    [finding] = findings_of({"m.py": racy})
    assert (finding.rule, finding.kind, finding.primary.line) == ("SC101", "RAW", line_of(racy, "batch = host"))
    assert (finding.primary.note, finding.extra["writer_stream"], finding.extra["reader_stream"]) == (
        "to in Loader.next_batch", "self.copy_stream", "")
    assert finding.related[0].line == line_of(racy, "return model(batch)")


def test_the_current_stream_waits_for_the_copy_stream():
    kept = PREFETCH.replace("{wait}", "torch.cuda.current_stream().wait_stream(self.copy_stream)\n"
                                      "            batch.record_stream(torch.cuda.current_stream())")
    assert findings_of({"m.py": kept}) == []
    # Waited but not recorded for the current stream: the read is ordered, the block's reuse by the copy stream
    # is not (free_after_handoff.py).
    waited = PREFETCH.replace("{wait}", "torch.cuda.current_stream().wait_stream(self.copy_stream)")
    [finding] = findings_of({"m.py": waited})
    assert (finding.rule, finding.kind, finding.primary.line) == ("SC104", "FREE", line_of(waited, "return model"))
    assert [(r.role, r.line) for r in finding.related] == [
        ("write", line_of(waited, "batch = host")), ("stream context", line_of(waited, "with torch.cuda"))]
    assert {k: v for k, v in finding.extra.items() if k != "fix_edit"} == {
        "path": "batch", "stream": "self.copy_stream", "allocated_on": "self.copy_stream"}
    assert finding.extra["fix_edit"]["insert"] == "batch.record_stream(torch.cuda.current_stream())"
    # The wait in the other direction orders nothing for the read.
    backwards = PREFETCH.replace("{wait}", "self.copy_stream.wait_stream(torch.cuda.current_stream())")
    assert [f.rule for f in findings_of({"m.py": backwards})] == ["SC101"]


def test_factories_are_initialization_not_producers():
    source = """
        import torch

        def run(side, n):
            buf = torch.zeros(n, device="cuda")
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                return buf * 2
    """
    assert findings_of({"m.py": source}, {"SC101"}) == []


def test_a_helper_rebinding_its_parameter_does_not_write_the_callers_tensor():
    source = """
        import torch

        def cast(mesh, dtype):
            mesh = torch.cat([mesh, mesh])
            return mesh

        class Model:
            def shard(self):
                return cast(self.mesh, torch.float16)

            def fetch(self, side):
                with torch.cuda.stream(side):
                    return self.mesh * 2
    """
    assert findings_of({"m.py": source}) == []


GRADIENTS = """
    import torch

    class Reducer:
        def add_grad_to_bucket(self, param):
            {wait}
            with torch.cuda.stream(self.reduce_stream):
                self.bucket.narrow(0, 0, param.numel()).copy_(param.grad.view(-1))
"""


def test_a_gradient_read_on_a_side_stream_before_waiting_for_the_backward():
    racy = GRADIENTS.replace("{wait}", "pass")
    # (`self.bucket`, written on reduce_stream and read by nothing in this source, is reported as handed out to
    # the current stream: outside_consumers.py, tested in test_outside_accesses.py.)
    [finding] = [f for f in findings_of({"m.py": racy}) if f.extra.get("consumer") != "outside"]
    assert (finding.rule, finding.kind, finding.primary.line) == ("SC101", "RAW", line_of(racy, "param.grad.view"))
    assert (finding.extra["path"], finding.extra["producer"], finding.extra["reader_stream"]) == (
        "param.grad", "autograd", "self.reduce_stream")
    waited = GRADIENTS.replace("{wait}", "self.reduce_stream.wait_stream(torch.cuda.current_stream())")
    assert [f.extra["consumer"] for f in findings_of({"m.py": waited})] == ["outside"]


COPY_IN = """
    import torch

    def gather(inputs, output, copy_in_stream, gather_stream, comm):
        with torch.cuda.stream(copy_in_stream):
            flat_in, flat_out = torch.ops.fsdp.all_gather_copy_in(inputs, output, 0)
        {wait}
        with torch.cuda.stream(gather_stream):
            comm(output_tensor=flat_out, input_tensor=flat_in)
"""


def test_every_result_unpacked_from_a_registered_operator_is_its_output():
    # FSDP2's foreach_all_gather: both tensors of `torch.ops.fsdp.all_gather_copy_in` are written on the copy-in
    # stream and handed to the all-gather callable on another stream.
    racy = COPY_IN.replace("{wait}", "pass")
    found = findings_of({"m.py": racy})
    assert [(f.rule, f.kind, f.primary.line, f.extra["path"], f.related[0].line) for f in found] == [
        ("SC101", "RAW", line_of(racy, "flat_in, flat_out ="), "flat_in", line_of(racy, "comm(output_tensor")),
        ("SC101", "RAW", line_of(racy, "flat_in, flat_out ="), "flat_out", line_of(racy, "comm(output_tensor")),
    ]
    assert {(f.extra["writer_stream"], f.extra["reader_stream"]) for f in found} == {
        ("copy_in_stream", "gather_stream")}
    assert [f.primary.note for f in found] == ["all_gather_copy_in in gather"] * 2
    waited = COPY_IN.replace("{wait}", "gather_stream.wait_stream(copy_in_stream)")
    assert findings_of({"m.py": waited}) == []


CHUNK = """
    import torch

    class SequenceChunk:
        def __init__(self, chunk):
            cpu_chunk = torch.empty(chunk.shape, dtype=chunk.dtype, device="cpu", pin_memory=True)
            cpu_chunk.copy_(chunk, non_blocking=True)
            self.cpu_chunk = cpu_chunk
"""

OFFLOADING_FORWARD = """
    import torch
    from chunk import SequenceChunk

    def forward(qkv, offload_stream):
        compute_stream = torch.cuda.default_stream()
        stashed = []
        for part in qkv:
            q = part.permute(1, 0, 2, 3).contiguous()
            {wait}
            with torch.cuda.stream(offload_stream):
                stashed.append(SequenceChunk(q))
        return stashed
"""


def test_a_contiguous_copy_offloaded_by_a_constructor_on_a_side_stream():
    # DeepSpeed FPDT's forward without `compute_stream.synchronize()`: `.contiguous()` of a permuted view is a new
    # tensor written on the current stream, and the chunk's constructor copies it to the host on the offload stream.
    racy = OFFLOADING_FORWARD.replace("{wait}", "pass")
    found = [(f.rule, f.kind, f.primary.path, f.primary.line, f.extra["path"], f.extra["writer_stream"],
              f.extra["reader_stream"], [(r.role, r.path, r.line) for r in f.related][:1])
             for f in findings_of({"chunk.py": CHUNK, "fpdt.py": racy})]
    assert found == [("SC101", "RAW", "fpdt.py", line_of(racy, "contiguous()"), "q", "", "offload_stream",
                      [("read", "fpdt.py", line_of(racy, "SequenceChunk(q)"))])]


def test_the_host_waits_for_the_compute_stream_before_the_offload():
    fixed = OFFLOADING_FORWARD.replace("{wait}", "compute_stream.synchronize()")
    assert findings_of({"chunk.py": CHUNK, "fpdt.py": fixed}) == []
