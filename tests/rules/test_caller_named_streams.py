"""Two facts of the engine reduced from vLLM 0.33.0 (session 12): a parameter stream is waited only through the
streams its callers pass, and a helper's result made on the current stream is written where the helper is called.

Each racy source is the real code less its wait; its twin with the wait gives no finding. Exact outcomes:
(rule, path, line, kind, streams)."""

from __future__ import annotations

import textwrap

from static_helpers import findings_of, line_of, summary_of

# vllm/v1/worker/gpu/async_utils.py:139: AsyncOutput gets the runner's output copy stream as a parameter. Two
# other classes own a `self.copy_stream` and wait it outside a region; those waits order their own streams, not
# the parameter the runner passes (`copy_stream=self.output_copy_stream`).
ASYNC_OUTPUT = """
import torch

def async_copy_to_np(x):
    return x.to("cpu", non_blocking=True).numpy()

class AsyncOutput:
    def __init__(self, num_sampled_tokens, main_stream, copy_stream):
        with torch.cuda.stream(copy_stream):
            WAIT
            self.num_sampled_np = async_copy_to_np(num_sampled_tokens)

class StructuredOutputCopier:
    def __init__(self):
        self.copy_stream = torch.cuda.Stream()

    def copy(self, bitmask):
        self.copy_stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(self.copy_stream):
            return bitmask.to("cpu", non_blocking=True)

class Runner:
    def __init__(self):
        self.output_copy_stream = torch.cuda.Stream()

    def sample(self, logits):
        num_sampled = logits.argmax(-1)
        return AsyncOutput(num_sampled, torch.cuda.current_stream(), copy_stream=self.output_copy_stream)
"""

# vllm/models/qwen4_exp/common/ngram_embedding.py:777: the ids come back from a helper that makes them on the
# current stream (an all-gather, or the input itself), outside any region, then the prefetch stream reads them.
NGRAM_PREFETCH = """
import torch

class NgramEmbedding:
    def __init__(self):
        self._prefetch_stream = torch.cuda.Stream()

    def _gather_dp_ids(self, ngram_ids, slot_size):
        padding = ngram_ids.new_zeros(slot_size - ngram_ids.shape[0], ngram_ids.shape[1])
        return torch.cat((ngram_ids, padding), dim=0)

    def _lookup(self, ids, output):
        torch.index_select(self.weight, 0, ids.flatten(), out=output)

    def start_prefetch(self, ngram_ids, buffer, slot_size):
        prefetch_stream = self._prefetch_stream
        gathered_ids = self._gather_dp_ids(ngram_ids, slot_size)
        active_output = buffer[: gathered_ids.shape[0]]
        WAIT
        gathered_ids.record_stream(prefetch_stream)
        with torch.cuda.stream(prefetch_stream):
            self._lookup(gathered_ids, output=active_output)

    def finalize_prefetch(self, prefetch_output):
        torch.cuda.current_stream().wait_stream(self._prefetch_stream)
        return prefetch_output.sum()
"""


def _variant(source: str, wait: str) -> str:
    return textwrap.dedent(source).replace("WAIT", wait)


def test_parameter_stream_is_not_waited_by_another_classes_stream_of_its_name():
    racy = _variant(ASYNC_OUTPUT, "pass")
    findings = findings_of({"async_utils.py": racy}, {"SC101"})
    assert summary_of(findings) == [
        ("SC101", "async_utils.py", line_of(racy, "self.num_sampled_np = async_copy_to_np"), "RAW")]
    assert "num_sampled_tokens" in findings[0].message


def test_parameter_stream_waited_in_its_region_gives_no_finding():
    fixed = _variant(ASYNC_OUTPUT, "copy_stream.wait_stream(main_stream)")
    assert findings_of({"async_utils.py": fixed}, {"SC101"}) == []


def test_helper_result_made_on_the_current_stream_is_written_at_the_call():
    racy = _variant(NGRAM_PREFETCH, "pass")
    findings = findings_of({"ngram_embedding.py": racy}, {"SC101"})
    # the weight, made outside the scan, is read on the prefetch stream too (the same missing wait)
    assert summary_of(findings) == [
        ("SC101", "ngram_embedding.py", line_of(racy, "torch.index_select(self.weight"), "RAW"),
        ("SC101", "ngram_embedding.py", line_of(racy, "gathered_ids = self._gather_dp_ids"), "RAW")]
    assert findings[1].message.startswith("`gathered_ids` is written by `cat in NgramEmbedding._gather_dp_ids` on "
                                          "the current stream and read by `index_select in NgramEmbedding._lookup`")
    assert findings[1].extra["reader_stream"] == "self._prefetch_stream"


def test_helper_result_waited_before_the_prefetch_gives_no_finding():
    fixed = _variant(NGRAM_PREFETCH, "prefetch_stream.wait_stream(torch.cuda.current_stream())")
    assert findings_of({"ngram_embedding.py": fixed}, {"SC101"}) == []


# vllm/models/deepseek_v41/nvidia/ops/mhc.py:180: the overlap helper gets its side stream as the parameter `stream`
# from a caller that names it; other modules' helpers wait a parameter that is also called `stream`. Those waits
# order their own callers' streams; only a caller, or a function of the helper's own module (FSDP's
# `_wait_for_computation_stream` beside `_unshard`), decides for this one.
MHC_OVERLAP = """
import torch

def pre_delayed_overlap(x, fn, stream):
    main = torch.cuda.current_stream()
    WAIT
    with torch.cuda.stream(stream):
        torch.mm(x, fn)

class Layer:
    def __init__(self):
        self.mhc_stream = torch.cuda.Stream()

    def forward(self, x, fn):
        return pre_delayed_overlap(x, fn, stream=self.mhc_stream)
"""

OTHER_MODULE = """
import torch

def stage(batch, stream):
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        return batch.sum()
"""


def test_a_parameter_of_the_same_name_waited_in_another_module_does_not_order_it():
    racy = _variant(MHC_OVERLAP, "pass")
    findings = findings_of({"mhc.py": racy, "loader.py": OTHER_MODULE}, {"SC101"})
    assert summary_of(findings) == [("SC101", "mhc.py", line_of(racy, "torch.mm(x, fn)"), "RAW")]
    assert (findings[0].extra["path"], findings[0].extra["reader_stream"]) == ("x", "stream")


def test_a_parameter_of_the_same_name_waited_in_its_own_module_orders_it():
    waits_here = _variant(MHC_OVERLAP, "pass") + textwrap.dedent(OTHER_MODULE).replace("import torch\n", "")
    assert findings_of({"mhc.py": waits_here}, {"SC101"}) == []


def test_the_wait_in_the_helper_orders_it():
    assert findings_of({"mhc.py": _variant(MHC_OVERLAP, "stream.wait_stream(main)"), "loader.py": OTHER_MODULE},
                       {"SC101"}) == []
