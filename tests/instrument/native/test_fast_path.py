"""The per-op fast path (native_hook/fast_path.h: ops decided in C++) against the Python path of the same hook (every
op through NativeHooks.on_access to the Python Detector, STREAMCHECK_DETECTOR=python), on random torch programs.

CPU tensors stand for device tensors (`set_cpu_as_device`), and each op runs on a stream drawn at random
(`set_test_stream`), so that accesses race; in-place ops, out-of-place ops, views at offsets, copies and reductions
on a few shared tensors. Both runs must find the same races, field for field (sites included: both take the
site the hook captured in C++), in the same order, and see the same number of events.
"""

from __future__ import annotations

import random

import pytest
import torch

from streamcheck.instrument import native


@pytest.fixture(scope="module")
def module():
    return native.load()


def program(rng: random.Random, length: int) -> list:
    ops = []
    for _ in range(length):
        stream = rng.choice([0, 1, 2, 3])
        a, b = rng.randrange(3), rng.randrange(3)
        start = rng.randrange(0, 48)
        ops.append((stream, rng.randrange(7), a, b, start, rng.randrange(start + 1, 64)))
    return ops


def run(module, cpu_watch, out, ops: list, python_detector: bool) -> tuple[list, int]:
    with cpu_watch(module, out, python_detector) as watch:
        tensors = [torch.zeros(64) for _ in range(3)]
        # Every result is kept: on CPU no free reaches the detector, and an address the allocator hands out again
        # would carry its old history into one run and not the other.
        kept = list(tensors)
        for stream, kind, a, b, start, end in ops:
            module.set_test_stream(stream)
            x, y = tensors[a], tensors[b]
            if kind == 0:
                x.add_(y)
            elif kind == 1:
                x[start:end].mul_(2.0)
            elif kind == 2:
                x.copy_(y)
            elif kind == 3:
                kept.append(x[start:end].sum())
            elif kind == 4:
                tensors[a] = y * 3.0  # a new tensor: a fresh write of this stream
                kept.append(tensors[a])
            elif kind == 5:
                x[start:end].fill_(1.0)
            else:
                kept.append(torch.cat([x[:start + 1], y[start:end]]))
    return cpu_watch.races(watch), watch.detector.seq


def test_the_fast_path_finds_what_the_python_path_finds_on_random_programs(module, tmp_path, cpu_watch):
    rng = random.Random(2026)
    racy = 0
    for index in range(12):
        ops = program(rng, 60)
        fast, fast_events = run(module, cpu_watch, tmp_path / f"fast{index}", ops, False)
        slow, slow_events = run(module, cpu_watch, tmp_path / f"slow{index}", ops, True)
        assert fast == slow, f"program {index}: {ops}"
        assert fast_events == slow_events
        racy += bool(fast)
    assert racy >= 10  # random streams do race
