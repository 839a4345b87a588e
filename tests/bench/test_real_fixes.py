"""Real stream-ordering fixes, before and after: the release before the fix is flagged at the fixed code, the
release with the fix is not (issue 14). Only the cases the engine gets right are here; the cases it misses
(DeepSpeed #8080 and #7898, Megatron #7398, vLLM #47282, TRL #7195, diffusers #12721) are written up for issue 14
with a reduced racy/fixed pair each and what the engine lacks. (The hpZ fix, 0.13.4 -> 0.13.5, is in
tests/test_deepspeed_sc101.py.)

The source distributions come from the package index (cached under .cache/sdists/); they are read as text only.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from streamcheck.rules.engine import analyze
from streamcheck.rules.facts import extract_facts
from streamcheck.rules.options import StaticOptions

pytestmark = pytest.mark.network

# DeepSpeed Domino (tensor-parallel overlap), fixed in the transformer layer's rewrite released in 0.16.6:
# 0.16.5 launches the in-place async all-reduce of the second micro-batch's attention output (line 371), then adds
# the bias and the residual to that very tensor (line 399) and only waits for the all-reduce afterwards (line
# 417), so the sum may read a half-reduced tensor. 0.16.6 waits (`fwd_handle1.wait()`) before the same sum.
DOMINO = "deepspeed/runtime/domino"
DOMINO_LAYER = f"{DOMINO}/transformer.py"


def _scan(root: Path, folder: str):
    """Every rule's findings on the Python files under `root/folder`, paths relative to `root`."""
    options = StaticOptions()
    facts = [extract_facts(path.read_text(encoding="utf-8"), path.relative_to(root).as_posix(), options)
             for path in sorted((root / folder).rglob("*.py"))]
    assert facts, f"no Python files under {root / folder}"
    return analyze(facts, options)


def _on_attention_output1(findings):
    """The findings in the layer's file about the tensor the fix is about (other findings may come and go)."""
    return [f for f in findings if f.primary.path == DOMINO_LAYER and f.extra.get("path") == "attention_output1"]


@pytest.fixture(scope="module")
def domino_0_16_5(sdist):
    return _scan(sdist("deepspeed", "0.16.5"), DOMINO)


@pytest.fixture(scope="module")
def domino_0_16_6(sdist):
    return _scan(sdist("deepspeed", "0.16.6"), DOMINO)


def test_domino_use_before_all_reduce_wait_in_0_16_5(domino_0_16_5):
    [finding] = _on_attention_output1(domino_0_16_5)
    assert (finding.rule, finding.kind, finding.symbol) == ("SC105", "RAW", "DominoTransformerLayer.forward")
    assert (finding.primary.line, finding.primary.column) == (399, 50)
    assert finding.primary.snippet == ("layernorm_input1 = bias_dropout_add_func(attention_output1, attention_bias1,"
                                       " residual1, self.hidden_dropout)")
    assert finding.extra == {"path": "attention_output1", "handle": "handle1", "collective": "all_reduce"}
    [launch] = finding.related
    assert (launch.path, launch.line, launch.role, launch.note) == (
        DOMINO_LAYER, 371, "call", "all_reduce(..., async_op=True)")
    assert launch.snippet.startswith("handle1 = dist.all_reduce(attention_output1,")
    assert finding.message == ("`attention_output1` is read while the async `all_reduce` (line 371) may still be "
                               "using it: `handle1` is not waited before")


def test_domino_waits_before_the_sum_in_0_16_6(sdist, domino_0_16_6):
    # The same sum is still there, now after the wait for its all-reduce.
    source = (sdist("deepspeed", "0.16.6") / DOMINO_LAYER).read_text(encoding="utf-8").splitlines()
    assert source[343].strip() == ("fwd_handle1 = dist.all_reduce(attention_output1, group=self.TP_group,"
                                   " async_op=True)")
    assert source[369].strip() == "fwd_handle1.wait()"
    assert source[375].strip() == ("layernorm_input1 = self.bias_dropout_add_func(attention_output1, attention_bias1,"
                                   " residual1)")
    assert _on_attention_output1(domino_0_16_6) == []
