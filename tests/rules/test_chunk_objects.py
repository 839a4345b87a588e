"""Tensors kept in attributes of small objects held in lists (DeepSpeed 0.19.8 FPDT's SequenceChunk): a method
called under a side stream fills `self.gpu_chunk` through a local (`gpu.copy_(...)` then `self.gpu_chunk = gpu`),
an accessor hands it back (`return self.gpu_chunk`), and forward and backward each make their own offload
stream (`side = torch.cuda.Stream()` in both)."""

from __future__ import annotations

from static_helpers import findings_of, line_of

CHUNK = """
    import torch

    class Chunk:
        def __init__(self, t):
            cpu = torch.empty(t.shape, dtype=t.dtype, device="cpu", pin_memory=True)
            cpu.copy_(t, non_blocking=True)
            self.cpu_chunk = cpu
            self.gpu_chunk = None

        def load(self):
            gpu = torch.empty(self.shape, device="cuda")
            gpu.copy_(self.cpu_chunk, non_blocking=True)
            self.gpu_chunk = gpu

        def get_gpu_chunk(self):
            return self.gpu_chunk
"""

ACCESSOR = CHUNK + """
    def attend(xs):
        side = torch.cuda.Stream()
        compute = torch.cuda.default_stream()
        with torch.cuda.stream(side):
            ks = [Chunk(x) for x in xs]
        out = []
        for i in range(len(ks)):
            with torch.cuda.stream(side):
                ks[i].load()
            {wait}
            out.append(torch.matmul(ks[i].get_gpu_chunk(), ks[i].get_gpu_chunk()))
        return out
"""

FORWARD_BACKWARD = CHUNK + """
    def forward(xs):
        side = torch.cuda.Stream()
        saved = []
        with torch.cuda.stream(side):
            for x in xs:
                saved.append(Chunk(x))
        with torch.cuda.stream(side):
            saved[0].load()
        torch.cuda.current_stream().wait_stream(side)
        {wait}
        return saved

    def backward(saved):
        side = torch.cuda.Stream()
        with torch.cuda.stream(side):
            saved[0].load()
        torch.cuda.current_stream().wait_stream(side)
        return saved[0].get_gpu_chunk().sum()
"""

TWO_LISTS = CHUNK + """
    def forward(xs, ys):
        general = torch.cuda.Stream()
        side = torch.cuda.Stream()
        compute = torch.cuda.current_stream()
        norms, ks = [], []
        for x, y in zip(xs, ys):
            with torch.cuda.stream(general):
                norms.append(Chunk(x))
            with torch.cuda.stream(side):
                ks.append(Chunk(y))
            compute.wait_stream(side)
            compute.synchronize()
            with torch.cuda.stream(side):
                ks[0].load()
            compute.wait_stream(side)
        compute.wait_stream(general)
        return norms, ks
"""


def _found(source):
    return [(f.rule, f.kind, f.primary.line, f.extra["path"], f.extra["writer_stream"], f.extra["reader_stream"],
             sorted({r.line for r in f.related if r.role == "read"}))
            for f in findings_of({"chunks.py": source}) if f.extra.get("producer") != "outside"]


def test_a_chunk_loaded_on_a_side_stream_read_through_its_accessor_with_no_wait():
    racy = ACCESSOR.format(wait="pass")
    assert _found(racy) == [
        ("SC101", "RAW", line_of(racy, "gpu.copy_(self.cpu_chunk"), "self.gpu_chunk", "side", "",
         [line_of(racy, "out.append(")]),
    ]


def test_the_current_stream_waits_for_the_load_before_the_accessor_reads():
    assert _found(ACCESSOR.format(wait="compute.wait_stream(side)")) == []


def test_forward_and_backward_each_make_their_own_side_stream():
    racy = FORWARD_BACKWARD.format(wait="pass")
    assert _found(racy) == [
        ("SC101", "RAW", line_of(racy, "cpu.copy_(t, non_blocking=True)"), "self.cpu_chunk", "side", "side",
         [line_of(racy, "gpu.copy_(self.cpu_chunk")]),
    ]


def test_forward_synchronizes_its_side_stream_before_backward_loads():
    # (forward's own load under its stream is not backward's: the wait after it still orders the copies)
    assert _found(FORWARD_BACKWARD.format(wait="side.synchronize()")) == []


def test_the_chunks_of_two_lists_are_two_objects():
    # norms' copies on `general` are never loaded here; `ks[0].load()` reads ks' chunks, which `side` made
    assert _found(TWO_LISTS) == []


CLOSURE = """
    import torch

    class Prefetcher:
        def run(self, host_batches):
            side = torch.cuda.Stream()

            def copy_in(batch):
                side.wait_stream(torch.cuda.current_stream())
                with torch.cuda.stream(side):
                    self.staged.copy_(batch, non_blocking=True)

            for batch in host_batches:
                copy_in(batch)
                {wait}
                self.staged.sum()
"""


def test_a_closure_uses_the_stream_its_enclosing_function_made():
    racy = CLOSURE.format(wait="pass")
    assert _found(racy) == [
        ("SC101", "RAW", line_of(racy, "self.staged.copy_(batch"), "self.staged", "side", "",
         [line_of(racy, "self.staged.sum()")]),
    ]
    assert _found(CLOSURE.format(wait="torch.cuda.current_stream().wait_stream(side)")) == []


RELEASE = CHUNK + """
        def offload(self):
            del self.gpu_chunk
            self.gpu_chunk = None

    def attend(xs):
        side = torch.cuda.Stream()
        compute = torch.cuda.default_stream()
        with torch.cuda.stream(side):
            ks = [Chunk(x) for x in xs]
        out = []
        for i in range(len(ks)):
            with torch.cuda.stream(side):
                ks[i].load()
            compute.wait_stream(side)
            with torch.cuda.stream(compute):
                out.append(torch.matmul(ks[i].get_gpu_chunk(), ks[i].get_gpu_chunk()))
            {wait}
            ks[i].offload()
        return out
"""


def _frees(source):
    return [(f.rule, f.kind, f.primary.line, f.extra["path"], f.extra["allocated_on"],
             [(r.role, r.line) for r in f.related])
            for f in findings_of({"chunks.py": source}) if f.kind == "FREE"]


def test_a_chunk_an_element_loads_on_a_side_stream_dropped_while_the_current_stream_may_read_it():
    racy = RELEASE.format(wait="pass")
    assert _frees(racy) == [
        ("SC104", "FREE", line_of(racy, "ks[i].offload()"), "ks.gpu_chunk", "side",
         [("read", line_of(racy, "out.append(")), ("write", line_of(racy, "ks[i].load()"))]),
    ]


def test_the_host_waits_for_the_current_stream_before_the_chunk_is_dropped():
    assert _frees(RELEASE.format(wait="compute.synchronize()")) == []


def test_the_side_stream_waits_for_the_current_stream_before_its_next_allocation():
    assert _frees(RELEASE.format(wait="side.wait_stream(compute)")) == []
