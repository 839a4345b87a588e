"""Engine facts reduced from vLLM 0.33.0's DeepSeek mHC overlap (session 14): a parameter annotated as a tensor,
handed inside a stream region to a kernel wrapper in a file the prefilter passes over, is read there on the
region's stream; a caller's wait placed after its call orders nothing the callee did; and every name of a chained
assignment (`current = stream = torch.cuda.current_stream()`) is bound to the stream.

Each racy source is the real code less its wait; its twin with the wait gives no finding. Exact outcomes:
(rule, path, line, kind, streams)."""

from __future__ import annotations

import textwrap

from static_helpers import findings_of, line_of

# vllm/utils/deep_gemm.py: a wrapper around a library kernel, in a file with no stream word (plain facts only).
WRAPPER = """
def tf32_hc_prenorm_gemm(x, fn, out, sqrsum, num_split):
    return _impl(x, fn, out, sqrsum, num_split)
"""

# vllm/models/deepseek_v41/nvidia/ops/mhc.py:180 and its caller boundary.py:151 (which waits on an event for the
# same stream only after the call).
MHC = """
import torch
from deep_gemm import tf32_hc_prenorm_gemm

def mhc_pre_delayed_overlap(residual: torch.Tensor, fn: torch.Tensor, x: torch.Tensor | None = None, *,
                            stream: torch.cuda.Stream):
    if x is None:
        x = residual.view(-1)
    mix = torch.empty(4, device=residual.device)
    sqr = torch.empty(4, device=residual.device)
    main = torch.cuda.current_stream()
    WAIT
    with torch.cuda.stream(stream):
        tf32_hc_prenorm_gemm(x, fn, mix, sqr, 2)
    return mix

class Boundaries:
    def sublayer(self, layer, residual, fn):
        stream = layer.mhc_stream
        ready = torch.cuda.Event()
        ready.record()
        out = mhc_pre_delayed_overlap(residual, fn, stream=stream)
        stream.wait_event(ready)
        return out
"""

# vllm/models/deepseek_v41/common/engram.py:1698: the wait's target is named by a chained assignment.
ENGRAM = """
import torch

class Engram:
    def __init__(self):
        self._prefetch_stream = torch.cuda.Stream()

    def _start_prefetch(self, hash_ids: torch.Tensor, rows: torch.Tensor) -> None:
        current = stream = torch.cuda.current_stream()
        if hash_ids.shape[0] > 4096:
            self.embed_tokens.lookup(hash_ids, rows)
        else:
            stream = self._prefetch_stream
            WAIT
            with torch.cuda.stream(stream):
                self.embed_tokens.lookup(hash_ids, rows, background=True)
"""


def _variant(source: str, wait: str) -> str:
    return textwrap.dedent(source).replace("WAIT", wait)


def _summary(findings):
    return [(f.rule, f.primary.path, f.primary.line, f.kind, f.extra.get("reader_stream")) for f in findings]


def test_tensor_parameter_handed_to_a_plain_file_kernel_wrapper_is_read_on_the_region_stream():
    racy = _variant(MHC, "pass")
    findings = findings_of({"deep_gemm.py": WRAPPER, "mhc.py": racy}, {"SC101"})
    line = line_of(racy, "tf32_hc_prenorm_gemm(x, fn")
    # x and fn come from outside; one finding per region names its first read
    assert _summary(findings) == [("SC101", "mhc.py", line, "RAW", "stream")]
    assert findings[0].message.startswith("`x` comes from outside `mhc_pre_delayed_overlap`")


def test_tensor_parameter_read_after_the_wait_gives_no_finding():
    fixed = _variant(MHC, "stream.wait_stream(main)")
    assert findings_of({"deep_gemm.py": WRAPPER, "mhc.py": fixed}, {"SC101"}) == []


def test_chained_assignment_names_the_current_stream_for_the_wait():
    fixed = _variant(ENGRAM, "stream.wait_stream(current)")
    assert findings_of({"engram.py": fixed}, {"SC101"}) == []
    racy = _variant(ENGRAM, "pass")
    assert _summary(findings_of({"engram.py": racy}, {"SC101"})) == [
        ("SC101", "engram.py", line_of(racy, "background=True"), "RAW", "self._prefetch_stream")]
