"""Real stream-ordering fixes, before and after: the release before the fix is flagged at the fixed code, the
release with the fix is not (issue 14). Only the cases the engine gets right are here; Megatron #7398 is still
open, so only its racy release is here; the case the engine misses (vLLM #47282) is written up for issue 14 with a reduced racy/fixed pair and
what the engine lacks (benchmarks/triage/real_fixes.md). (The hpZ fix, 0.13.4 -> 0.13.5, is in
tests/rules/test_deepspeed_sc101.py.)

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


# OpenNMT-py issue #2295, fixed in 3.1.1: `all_reduce_and_rescale_tensors` launched the all-reduce of the gradient
# buffer with `async_op=True`, dropped the handle and divided the buffer in place at once (twice: the bucket and
# a tensor bigger than the bucket), so the division races the all-reduce on the same memory. 3.1.1 passes
# `async_op=False` (the current stream then waits for the collective).
ONMT_DISTRIBUTED = "onmt/utils/distributed.py"


@pytest.fixture(scope="module")
def onmt_utils_3_0_4(sdist):
    return _scan(sdist("OpenNMT-py", "3.0.4"), "onmt/utils")


@pytest.fixture(scope="module")
def onmt_utils_3_1_1(sdist):
    return _scan(sdist("OpenNMT-py", "3.1.1"), "onmt/utils")


def _in_place_after_all_reduce(findings):
    """The findings on the two divisions the fix is about (other findings in the package may come and go)."""
    return [f for f in findings if f.primary.path == ONMT_DISTRIBUTED and f.primary.snippet.endswith(
        ".div_(rescale_denom)")]


def test_onmt_division_races_its_all_reduce_in_3_0_4(onmt_utils_3_0_4):
    found = _in_place_after_all_reduce(onmt_utils_3_0_4)
    assert [(f.rule, f.kind, f.primary.line, f.primary.column, f.extra["path"], f.symbol) for f in found] == [
        ("SC105", "WAR", 56, 9, "buffer_t", "all_reduce_and_rescale_tensors.all_reduce_buffer"),
        ("SC105", "WAR", 72, 13, "t", "all_reduce_and_rescale_tensors"),
    ]
    assert [[(r.line, r.role, r.note, r.snippet) for r in f.related] for f in found] == [
        [(55, "call", "all_reduce(..., async_op=True)",
          "torch.distributed.all_reduce(buffer_t[:offset], async_op=True)")],
        [(71, "call", "all_reduce(..., async_op=True)", "torch.distributed.all_reduce(t, async_op=True)")],
    ]
    assert found[0].message == ("`buffer_t` is written while the async `all_reduce` (line 55) may still be using "
                                "it: its handle (dropped) is not waited before")
    assert all(f.extra["handle"] == "" and f.extra["collective"] == "all_reduce" for f in found)


def test_onmt_all_reduce_is_synchronous_in_3_1_1(sdist, onmt_utils_3_1_1):
    # The same two divisions follow the same all-reduces, now launched with async_op=False.
    source = (sdist("OpenNMT-py", "3.1.1") / ONMT_DISTRIBUTED).read_text(encoding="utf-8").splitlines()
    assert [source[i].strip() for i in (54, 55, 70, 71)] == [
        "torch.distributed.all_reduce(buffer_t[:offset], async_op=False)", "buffer_t.div_(rescale_denom)",
        "torch.distributed.all_reduce(t, async_op=False)", "t.div_(rescale_denom)"]
    assert _in_place_after_all_reduce(onmt_utils_3_1_1) == []


# DeepSpeed PR #7898, released in 0.18.8: ZeRO-3's `__add_grad_to_ipg_bucket` runs from the gradient hook, whose
# current stream is the backward op's (the forward's), not necessarily the default stream; 0.18.7 made the reduce
# stream wait for `default_stream()` and then copied `param.grad` into the bucket on it, 0.18.8 waits for
# `current_stream()`. The engine takes `default_stream()` as another stream than the current one inside hooks
# (rules/hooks.py).
ZERO = "deepspeed/runtime/zero"
STAGE3 = f"{ZERO}/stage3.py"


def _on_the_ipg_copy(findings):
    return [f for f in findings if f.primary.path == STAGE3 and f.symbol.endswith("__add_grad_to_ipg_bucket")]


def test_zero3_bucket_copy_waits_for_the_default_stream_in_0_18_7(sdist):
    root = sdist("deepspeed", "0.18.7")
    source = (root / STAGE3).read_text(encoding="utf-8").splitlines()
    assert source[1362].strip() == "self.reduce_and_partition_stream.wait_stream(get_accelerator().default_stream())"
    [finding] = _on_the_ipg_copy(_scan(root, ZERO))
    assert (finding.rule, finding.kind, finding.primary.line, finding.primary.column) == ("SC101", "RAW", 1374, 43)
    assert finding.primary.snippet == "new_grad_tensor.copy_(param.grad.t().contiguous(), non_blocking=True)"
    assert finding.extra == {"path": "param.grad", "writer_stream": "", "reader_stream":
                             "self.reduce_and_partition_stream", "consumer": "device op", "producer": "autograd"}
    assert [(r.line, r.role) for r in finding.related] == [(1377, "read"), (1368, "stream context")]


def test_zero3_bucket_copy_waits_for_the_current_stream_in_0_18_8(sdist):
    root = sdist("deepspeed", "0.18.8")
    source = (root / STAGE3).read_text(encoding="utf-8").splitlines()
    assert source[1362].strip() == "self.reduce_and_partition_stream.wait_stream(get_accelerator().current_stream())"
    assert _on_the_ipg_copy(_scan(root, ZERO)) == []


# DeepSpeed PR #8080 (ZeRO-1/2's IPG bucket filled from several producer streams), released in 0.19.3: in 0.19.2
# the gradient hook reduces the full bucket (`reduce_ipg_grads` -> `average_tensor`, whose reduction stream waits
# for the current stream) and then copies its own gradient into the bucket on its current stream, which the next
# call's reduction reads after waiting only for *its* current stream; autograd runs each call of the hook on its
# parameter's backward stream (several under torch.compile). 0.19.3 adds each copy's stream to
# `bucket.copy_streams` and waits for all of them.
STAGE12 = f"{ZERO}/stage_1_and_2.py"


def _on_the_bucket_copy(findings, kind="RAW"):
    """The findings of `kind` on the bucket copy: the fix is about the reduction reading it (RAW); the refill's WAR
    is another hazard, which neither release fixes (see test_ipg_bucket_refill_...)."""
    return [f for f in findings if f.primary.path == STAGE12 and f.extra.get("path") == "new_grad_tensor"
            and f.kind == kind]


def test_ipg_bucket_copy_is_waited_only_by_its_own_hook_call_in_0_19_2(sdist):
    root = sdist("deepspeed", "0.19.2")
    [finding] = _on_the_bucket_copy(_scan(root, ZERO))
    assert (finding.rule, finding.kind, finding.primary.line, finding.primary.column) == ("SC101", "RAW", 1120, 17)
    assert finding.primary.snippet == "new_grad_tensor.copy_("
    assert finding.symbol == "DeepSpeedZeroOptimizer.reduce_independent_p_g_buckets_and_remove_grads"
    assert finding.extra == {"path": "new_grad_tensor", "writer_stream": "", "reader_stream":
                             "self.reduction_stream", "consumer": "device op", "across_hook_calls": True}
    assert [(r.line, r.role) for r in finding.related] == [(1241, "read"), (1239, "stream context")]


def test_ipg_bucket_reduction_waits_for_every_copy_stream_in_0_19_3(sdist):
    root = sdist("deepspeed", "0.19.3")
    source = (root / STAGE12).read_text(encoding="utf-8").splitlines()
    assert source[1288].strip() == "stream.wait_stream(producer_stream)"
    assert _on_the_bucket_copy(_scan(root, ZERO)) == []


# The other direction on the same copy, fixed in neither release: the hook reduces the full bucket on the reduction
# stream, flips `bucket.index` and refills; the stream that refills a buffer waits for that buffer's last reduction
# only where it is the current stream of the call that reduces next (`current_stream().wait_stream(stream)` before
# the reduction), so a later call on another backward stream may overwrite it under the reduction (DeepSpeed 0.19.8
# adds a per-buffer reuse event, waited before every refill, on its offload path). The lint takes the read of its
# own call (the index is one path to it) and finds no wait between it and the refill (called_before.py).
@pytest.mark.parametrize("version,write,read,calls", [
    ("0.19.2", 1120, 1241, [1098, 1575]), ("0.19.3", 1160, 1296, [1132, 1639])])
def test_ipg_bucket_refill_waits_for_no_reduction_in_0_19_2_and_0_19_3(sdist, version, write, read, calls):
    [finding] = _on_the_bucket_copy(_scan(sdist("deepspeed", version), ZERO), "WAR")
    assert (finding.rule, finding.primary.line, finding.primary.column) == ("SC106", write, 17)
    assert finding.symbol == "DeepSpeedZeroOptimizer.reduce_independent_p_g_buckets_and_remove_grads"
    assert (finding.extra["writer_stream"], finding.extra["other_stream"]) == ("", "self.reduction_stream")
    assert [(r.line, r.role) for r in finding.related] == [(read, "read"), (read - 2, "stream context")] + [
        (line, "call") for line in calls]


# diffusers group offloading, fixed in PR #12721 (released in 0.36.0): 0.35.2's `_transfer_tensor_to_device` runs
# only inside `with ...stream(self.stream):` (from `_onload_from_memory`) and records
# `current_stream()` there, which is the transfer stream the weights were just allocated on: the compute stream
# that reads them is never recorded. 0.36.0 takes the current stream before the region and records that one.
GROUP_OFFLOADING = "diffusers/hooks/group_offloading.py"


def test_group_offloading_records_its_own_transfer_stream_in_0_35_2(sdist):
    root = sdist("diffusers", "0.35.2") / "src"
    source = (root / GROUP_OFFLOADING).read_text(encoding="utf-8").splitlines()
    assert source[158].strip() == "tensor.data.record_stream(self._torch_accelerator_module.current_stream())"
    [finding] = [f for f in _scan(root, "diffusers/hooks") if f.primary.path == GROUP_OFFLOADING]
    assert (finding.rule, finding.kind, finding.primary.line, finding.primary.column) == ("SC104", "FREE", 159, 13)
    assert finding.symbol == "ModuleGroup._transfer_tensor_to_device"
    assert finding.extra == {"path": "tensor", "allocated_on": "self.stream"}
    assert [(r.line, r.role) for r in finding.related] == [(157, "write"), (211, "stream context")]


def test_group_offloading_records_the_compute_stream_in_0_36_0(sdist):
    root = sdist("diffusers", "0.36.0") / "src"
    source = (root / GROUP_OFFLOADING).read_text(encoding="utf-8")
    assert "record_stream(default_stream)" in source
    assert [f for f in _scan(root, "diffusers/hooks") if f.primary.path == GROUP_OFFLOADING] == []


# TRL's activation offloading, fixed in PR #7195 (released in 1.14.0): 1.13.0 caches the compute stream once at
# construction as `torch.cuda.default_stream()` (line 160), and the pack hook (a saved-tensors hook, run on its
# invoker's stream) makes the offload stream wait for that cached stream (line 286) before cloning the activation
# on it (line 328; the broadcast arm reads it at 317 first). 1.14.0 asks for the current stream each time (an `s0`
# property) and clones before the wait.
# Both releases also get one SC104 (since 775eb90) that the fix does not touch: `__enter__` clears the forward stash
# of (activation, event) pairs without waiting the events (1.13.0:615, 1.14.0:618). The stash is only non-empty
# there when a forward ran without its backward, and the offloaded copies are then thrown away: a hazard, benign.
ACTIVATION_OFFLOADING = "trl/models/activation_offloading.py"


def _stash_cleared(findings, line):
    [finding] = [f for f in findings if f.rule == "SC104"]
    assert (finding.kind, finding.primary.line, finding.extra["path"]) == ("FREE", line, "self.fwd_stash")
    assert finding.primary.snippet == "self.fwd_stash.clear()"


def test_activation_offload_waits_for_the_cached_default_stream_in_1_13_0(sdist):
    root = sdist("trl", "1.13.0")
    source = (root / ACTIVATION_OFFLOADING).read_text(encoding="utf-8").splitlines()
    assert source[159].strip() == "self.s0 = torch.cuda.default_stream()"
    assert source[285].strip() == "self.s1.wait_stream(self.s0)"
    found = [f for f in _scan(root, "trl/models") if f.primary.path == ACTIVATION_OFFLOADING]
    _stash_cleared(found, 615)
    [finding] = [f for f in found if f.rule != "SC104"]
    # the first read in the region: `torch.as_strided(activation, ...)` of the broadcast arm (its argument's line),
    # then the clone of the other arm
    assert (finding.rule, finding.kind, finding.primary.line, finding.primary.column) == ("SC101", "RAW", 317, 25)
    assert source[316].strip().startswith("activation, size=(storage_size // activation.element_size(),)")
    assert finding.symbol == "OffloadActivations.__init__.pack_tensor"
    assert finding.extra == {"path": "activation", "writer_stream": "", "reader_stream": "self.s1",
                             "consumer": "device op", "producer": "outside"}
    assert [(r.line, r.column, r.role) for r in finding.related] == [(328, 42, "read"), (295, 18, "stream context")]
    assert finding.related[0].snippet == "activation = activation.clone(memory_format=torch.contiguous_format)"


def test_activation_offload_waits_for_the_current_stream_in_1_14_0(sdist):
    root = sdist("trl", "1.14.0")
    assert "return torch.cuda.current_stream()" in (root / ACTIVATION_OFFLOADING).read_text(encoding="utf-8")
    found = [f for f in _scan(root, "trl/models") if f.primary.path == ACTIVATION_OFFLOADING]
    _stash_cleared(found, 618)
    assert [f for f in found if f.rule != "SC104"] == []


# Megatron-LM issue #7398 (open in megatron-core 0.16.1): the fine-grained activation offload copies each activation
# to the host on `d2h_stream` (`bulk_offload_group` calls `offload`, which returns `(device, cpu_backup, use_pool)`,
# line 880) and keeps the tuple in the group (`push_tensor`: `self._tensors[tag] = tensor`); the group's offload
# event is waited by the reload stream only (line 907). `tensor_pop` takes the tuple back out of the group
# (`pop_tensor`: `return self._tensors.pop(tag)`) and reloads it inline on the current stream (line 856), with no
# edge to the D2H copy. The reload stream's own pushes (line 911) are waited through the group's reload event.
FINE_GRAINED_OFFLOAD = "megatron/core/pipeline_parallel/fine_grained_activation_offload.py"


def test_inline_reload_has_no_edge_to_the_offload_copy_in_0_16_1(wheel):
    root = wheel("megatron-core", "0.16.1")  # (megatron-core publishes wheels only)
    source = (root / FINE_GRAINED_OFFLOAD).read_text(encoding="utf-8").splitlines()
    assert source[855].strip() == "tensor = self.reload(tensor)"
    [finding] = [f for f in _scan(root, "megatron/core/pipeline_parallel") if f.primary.path == FINE_GRAINED_OFFLOAD]
    assert (finding.rule, finding.kind, finding.primary.line, finding.primary.column) == ("SC101", "RAW", 880, 29)
    assert finding.primary.snippet == "state = self.offload("
    assert finding.symbol == "ChunkOffloadHandler.bulk_offload_group"
    assert finding.extra == {"path": "group_to_offload._tensors", "writer_stream": "self.d2h_stream",
                             "reader_stream": "", "consumer": "device op"}
    assert [(r.line, r.role, r.note) for r in finding.related if r.role == "read"] == [
        (856, "read", "copy_ in ChunkOffloadHandler.reload in ChunkOffloadHandler.tensor_pop")]
