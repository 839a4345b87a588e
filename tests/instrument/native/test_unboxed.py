"""The common ops' unboxed kernels (native_hook/unboxed.h) against the boxed fallback of the same hook, on random
torch programs: the same races, field for field, in the same order, and the same number of events, with the
kernels on (`set_tuning("unboxed", True)`) and off (every op boxed), on the fast path and on the Python path.

CPU tensors stand for device tensors (`set_cpu_as_device`) on streams drawn at random (`set_test_stream`). The ops
cover each way an op can touch memory: in place, out of place, views that stay views, views that had to copy
(reshape and contiguous of a transposed tensor, `to` another dtype), lists of tensors (cat, stack, DeepSpeed's flatten
and unflatten of a bucket, the foreach ops), checks and norms (isfinite, logical ops, vector_norm, amax), an
optional tensor (linear's bias), a list of optional tensors (index's indices), fresh tensors (*_like), and an op that
is not listed (it stays boxed).
"""

from __future__ import annotations

import random

import pytest
import torch

from streamcheck.instrument import native

KINDS = 20


@pytest.fixture(scope="module")
def module():
    loaded = native.load()
    if not loaded.unboxed_built():
        pytest.skip("the hook was built without unboxed kernels (STREAMCHECK_NO_UNBOXED)")
    return loaded


def program(rng: random.Random, length: int) -> list:
    ops = []
    for _ in range(length):
        start = rng.randrange(0, 24)
        ops.append((rng.choice([0, 1, 2]), rng.randrange(KINDS), rng.randrange(3), rng.randrange(3), start,
                    rng.randrange(start + 1, 32)))
    return ops


def apply(kind: int, tensors: list, a: int, b: int, start: int, end: int, kept: list) -> None:
    x, y = tensors[a], tensors[b]
    if kind == 0:
        x.add_(y, alpha=0.5)
    elif kind == 1:
        x[start:end].mul_(2.0)  # slice, then mul_.Scalar
    elif kind == 2:
        copied = x.view(4, 8).t().contiguous()  # a view chain, then contiguous copies (listed)
        kept.extend([copied, copied.sum()])
    elif kind == 3:
        kept.append(x.view(4, 8).t().reshape(32))  # reshape of a transposed view: a copy
    elif kind == 4:
        kept.append(x.to(torch.float64))  # to another dtype: a read and a fresh write
    elif kind == 5:
        kept.append(torch.cat([x[:start + 1], y[start:end]]))
    elif kind == 6:
        torch._foreach_add_([x, y], [y, x])
    elif kind == 7:
        torch._foreach_mul_([x], 0.5)
    elif kind == 8:
        weight = y.view(4, 8)
        kept.append(torch.nn.functional.linear(x.view(4, 8), weight, x[:4]))
    elif kind == 9:
        kept.append(torch.mm(x.view(4, 8), y.view(8, 4)))
    elif kind == 10:
        kept.append(torch.empty_like(x).copy_(y))
    elif kind == 11:
        x.narrow(0, start, end - start).zero_()
    elif kind == 12:
        kept.append(x.unsqueeze(0).expand(2, 32).clone())
    elif kind == 13:
        kept.append(x.erf())  # not listed: boxed either way
    elif kind == 14:
        tensors[a] = y * 3.0  # a new tensor: a fresh write of this stream
        kept.append(tensors[a])
    elif kind == 15:
        kept.append(x.select(0, start).item())
    elif kind == 16:  # the overflow check's ops (DeepSpeed): isfinite, logical_and / _not, any
        checks = [torch.isfinite(x[start:end]), torch.isfinite(y[start:end])]
        finite = checks[0].logical_and(checks[1])
        not_finite = finite.logical_not()
        kept.extend([*checks, finite, not_finite, not_finite.any()])  # kept: no freed block's address comes back
    elif kind == 17:  # norms and extrema (clip_grad_norm_, amax / amin scaling)
        kept.extend([torch.linalg.vector_norm(x[start:end]), y.amax(0), x.amin(0)])
    elif kind == 18:  # stack, and DeepSpeed's flatten / unflatten of a bucket
        flat = torch._utils._flatten_dense_tensors([x[start:end], y])
        kept.extend([torch.stack([x, y]), flat, *torch._utils._unflatten_dense_tensors(flat, [x[start:end], y])])
    else:  # index and index_put_: a list of optional tensors (the indices), read
        index = torch.arange(start, end)
        values = y[:end - start] * 2.0
        kept.extend([index, values, x[index]])
        x.index_put_((index,), values, accumulate=True)


def run(module, cpu_watch, out, ops: list, unboxed: bool, python_detector: bool) -> tuple[list, int]:
    module.set_tuning("unboxed", unboxed)
    try:
        with cpu_watch(module, out, python_detector) as watch:
            tensors = [torch.zeros(32) for _ in range(3)]
            kept = list(tensors)  # every result kept: no address comes back with another run's history
            for stream, kind, a, b, start, end in ops:
                module.set_test_stream(stream)
                apply(kind, tensors, a, b, start, end, kept)
    finally:
        module.set_tuning("unboxed", True)
    return cpu_watch.races(watch), watch.detector.seq


def test_listed_ops_have_a_kernel_on_the_hooks_key_and_others_do_not(module):
    def on_hook_key(name: str) -> list[str]:
        return [line for line in torch._C._dispatch_dump(name).splitlines() if line.startswith("TESTING_ONLY_Generic")]

    for name in ("aten::add.Tensor", "aten::view", "aten::cat", "aten::linear", "aten::_foreach_mul_.Scalar",
                 "aten::copy_", "aten::_local_scalar_dense", "aten::isfinite", "aten::_has_compatible_shallow_copy_type",
                 "aten::flatten_dense_tensors"):
        lines = on_hook_key(name)
        assert len(lines) == 1 and "unboxed.h" in lines[0], (name, lines)
    assert on_hook_key("aten::erf") == []  # the boxed fallback takes it


@pytest.mark.parametrize("seed", range(6))
def test_unboxed_kernels_find_what_the_boxed_fallback_finds(module, tmp_path, cpu_watch, seed):
    ops = program(random.Random(seed), 60)
    found = {}
    for unboxed, python_detector in ((True, False), (False, False), (True, True)):
        found[unboxed, python_detector] = run(module, cpu_watch, tmp_path / f"{unboxed}-{python_detector}", ops,
                                              unboxed, python_detector)
    races, events = found[True, False]
    assert races, "the program must race, or the comparison shows nothing"
    assert found[False, False] == (races, events)
    assert found[True, True] == (races, events)


def test_op_counts_tell_the_boxed_ops_from_the_unboxed_ones(module, tmp_path, cpu_watch):
    """set_tuning("count_ops") counts each watched op where it reached the hook (native_profile.py --count-ops):
    add_ and view through their unboxed kernels, erf (not listed) through the boxed fallback; zeroed when read,
    and nothing counted with the switch off."""
    x = torch.zeros(32)
    with cpu_watch(module, tmp_path / "counts"):
        module.op_counts()
        module.set_tuning("count_ops", True)
        try:
            for _ in range(3):
                x.add_(1.0)
                x.view(4, 8).erf()
        finally:
            module.set_tuning("count_ops", False)
        counts = module.op_counts()
        x.add_(1.0)  # not counted: the switch is off
        after = module.op_counts()
    assert counts == {"aten::add_.Tensor": (0, 3), "aten::view": (0, 3), "aten::erf": (3, 0)}, counts
    assert after == {}


def test_unboxed_zero2_off_sends_the_ops_added_from_the_zero2_count_boxed_again(module, tmp_path, cpu_watch):
    """set_tuning("unboxed_zero2", False) (native_profile.py's watch_fewer_unboxed): isfinite, one of the kernels
    added from the ZeRO-2 count, reaches the hook boxed; mul_, listed before, still unboxed."""
    x = torch.zeros(32)
    with cpu_watch(module, tmp_path / "zero2"):
        module.op_counts()
        module.set_tuning("count_ops", True)
        try:
            kept = [torch.isfinite(x), x.mul_(2.0)]
            module.set_tuning("unboxed_zero2", False)
            kept += [torch.isfinite(x), x.mul_(2.0)]
        finally:
            module.set_tuning("unboxed_zero2", True)
            module.set_tuning("count_ops", False)
        counts = module.op_counts()
    assert counts == {"aten::isfinite": (1, 1), "aten::mul_.Tensor": (0, 2)}, counts
