"""A prefetch buffer filled on a side stream by one method and read on the current stream by another (vLLM 0.33.0's
Qwen4Exp PLE embedding, models/qwen4_exp/common/ngram_embedding.py): the fill goes through a method of an object
the constructor keeps (`self.embedding_method.lookup_from_pinned(...)`, a Triton kernel), into a view of a lazily
allocated buffer (`buffer = torch.empty(...)`, `self._prefetch_buffer = buffer`, `active = buffer[:n]`), and the
reader gets the buffer from its caller under a local name (`buffer = self._prefetch_buffer`,
`self._finalize_prefetch(buffer, out)`)."""

from __future__ import annotations

from static_helpers import findings_of, line_of, program_of

PREFETCH = """
    import torch
    import triton
    import triton.language as tl

    @triton.jit
    def _lookup_kernel(weight_ptr, ids_ptr, out_ptr, row, BLOCK: tl.constexpr):
        i = tl.program_id(0)
        idx = tl.load(ids_ptr + i)
        offs = tl.arange(0, BLOCK)
        tl.store(out_ptr + i * row + offs, tl.load(weight_ptr + idx * row + offs))

    class LookupMethod:
        def lookup_from_pinned(self, layer, ids: torch.Tensor, output: torch.Tensor) -> None:
            _lookup_kernel[(ids.numel(),)](layer.weight, ids, output, 64, BLOCK=64)

    class QuantizedLookupMethod(LookupMethod):
        def lookup_from_pinned(self, layer, ids: torch.Tensor, output: torch.Tensor) -> None:
            _lookup_kernel[(ids.numel(),)](layer.qweight, ids, output, 32, BLOCK=32)

    class PinnedEmbedding:
        def __init__(self, embedding_method: "LookupMethod") -> None:
            self.embedding_method = embedding_method
            self._prefetch_stream = None
            self._prefetch_buffer = None

        def _lookup(self, ids: torch.Tensor, output: torch.Tensor) -> torch.Tensor:
            self.embedding_method.lookup_from_pinned(self, ids.reshape(-1), output)
            return output

        def start_prefetch(self, ids: torch.Tensor) -> None:
            buffer = self._prefetch_buffer
            if buffer is None:
                self._prefetch_stream = torch.cuda.Stream()
                buffer = torch.empty(1024, 64)
                self._prefetch_buffer = buffer
            prefetch_stream = self._prefetch_stream
            active_output = buffer[: ids.shape[0]]
            prefetch_stream.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(prefetch_stream):
                self._lookup(ids, output=active_output)

        def _finalize_prefetch(self, prefetch_output: torch.Tensor, output: torch.Tensor) -> None:
            {wait}
            embeddings = prefetch_output[: output.shape[0]]
            output.copy_(embeddings)

        def finalize_prefetch(self, total_tokens: int) -> torch.Tensor:
            buffer = self._prefetch_buffer
            output = buffer.new_empty((total_tokens, 64))
            self._finalize_prefetch(buffer, output)
            return output
"""


def test_the_prefetch_buffer_read_without_joining_the_prefetch_stream():
    racy = PREFETCH.replace("{wait}", "pass")
    found = findings_of({"m.py": racy}, {"SC101"})
    # one finding per lookup method the kept object may be (the base's and the override's kernel launch)
    assert sorted((f.rule, f.kind, f.primary.line, f.extra["path"], f.related[0].line, f.message.split("`")[3])
                  for f in found) == [
        ("SC101", "RAW", line_of(racy, "self._lookup(ids, output=active_output)"), "active_output",
         line_of(racy, "output.copy_(embeddings)"), f"_lookup_kernel[] in {cls}.lookup_from_pinned")
        for cls in ("LookupMethod", "QuantizedLookupMethod")]


def test_the_reader_joins_the_prefetch_stream_first():
    fixed = PREFETCH.replace("{wait}", "torch.cuda.current_stream().wait_stream(self._prefetch_stream)")
    assert findings_of({"m.py": fixed}, {"SC101"}) == []


def test_a_method_of_an_annotated_constructor_parameter_kept_on_self_is_an_exact_call():
    program = program_of({"m.py": PREFETCH.replace("{wait}", "pass")})
    [(call, edges)] = [(c, e) for c, e in program.calls_of("m.py::PinnedEmbedding._lookup")
                       if c.callee == "self.embedding_method.lookup_from_pinned"]
    assert sorted((e.callee, e.exact) for e in edges) == [
        ("m.py::LookupMethod.lookup_from_pinned", True), ("m.py::QuantizedLookupMethod.lookup_from_pinned", True)]
