"""Allocations and frees reported by the allocator, inside an op and outside one, taken in C++ while the fast path runs
(native_hook/gpu_trace.h) against cuda_trace.py's handlers feeding the Python Detector.

No GPU: CPU tensors stand for device tensors (`set_cpu_as_device`, `set_test_stream`), torch's GPU trace is activated
as the watch does on CUDA, and two test ops of the hook (`register_test_ops`) report to it from inside their C++
kernels as the caching allocator does inside a CUDA op: `fresh_like` an allocation of its output's block,
`free_during` a free of a block the program names. A free inside an op is queued without the GIL and taken after
the op, under the hook's own GIL section (`lazy_frees`, on by default), or taken at once (`lazy_frees` off, the way
before); both must find what the Python Detector finds, race for race (the free's site included) and in order.
"""

from __future__ import annotations

import random
from collections import Counter

import pytest
import torch

from streamcheck.instrument import cuda_trace, native
from streamcheck.instrument.native_detector import NativeDetector
from streamcheck.instrument.watch import Watch


@pytest.fixture(scope="module")
def module():
    module = native.load()
    module.register_test_ops()
    return module


def program(rng: random.Random, length: int) -> list:
    steps = []
    for _ in range(length):
        stream, roll = rng.choice([0, 1, 2]), rng.random()
        if roll < 0.2:
            steps.append(("make", stream, rng.randrange(8)))
        elif roll < 0.35:
            steps.append(("free_in_op", stream, rng.randrange(8), rng.randrange(8)))
        elif roll < 0.42:
            steps.append(("free", rng.randrange(8)))
        elif roll < 0.55:
            steps.append(("report", rng.choice(["record", "wait"]), rng.choice([0xE1, 0xE2]), stream))
        else:
            start = rng.randrange(0, 48)
            steps.append(("op", stream, rng.randrange(3), rng.randrange(8), rng.randrange(8), start,
                          rng.randrange(start + 1, 64)))
    return steps


def run(module, tmp_path, steps: list, path: str, monkeypatch) -> tuple[list, int, Counter]:
    if path == "python":
        monkeypatch.setenv("STREAMCHECK_DETECTOR", "python")
    else:
        monkeypatch.delenv("STREAMCHECK_DETECTOR", raising=False)
    module.set_tuning("lazy_frees", path != "eager")
    monkeypatch.setattr(torch._C, "_cuda_getCurrentRawStream", lambda device: 0, raising=False)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    torch._C._activate_gpu_trace()  # before the watch starts, as on CUDA: the hook then takes the trace's reports
    module.set_cpu_as_device(True)
    module.set_test_stream(0)
    watch = Watch(tmp_path, rank=0, world_size=1, echo=False, backend="native")
    watch.start()
    cuda_trace.install(watch.recorder)  # the watch installs it only where CUDA is available
    ops = torch.ops.streamcheck_test
    made = Counter()
    try:
        assert isinstance(watch.detector, NativeDetector) == (path != "python")
        base = [torch.zeros(64) for _ in range(2)]  # never reported as allocated: their frees are no-ops
        live = list(base)
        kept = list(base)  # no address handed out again while the program runs
        for step in steps:
            if step[0] == "make":
                module.set_test_stream(step[1])
                live.append(ops.fresh_like(live[step[2] % len(live)]))
                kept.append(live[-1])
                made["make"] += 1
                continue
            if step[0] in ("free_in_op", "free"):
                if len(live) == len(base):
                    continue
                victim = live.pop(len(base) + step[-1] % (len(live) - len(base)))
                block = victim.untyped_storage().data_ptr()
                if step[0] == "free":
                    assert module.emit_gpu_trace("free", block, 0)
                else:
                    module.set_test_stream(step[1])
                    ops.free_during(live[step[2] % len(live)], block)
                made[step[0]] += 1
                continue
            if step[0] == "report":
                _, kind, event, stream = step
                assert module.emit_gpu_trace(kind, event, stream)
                continue
            _, stream, kind, a, b, start, end = step
            module.set_test_stream(stream)
            x, y = live[a % len(live)], live[b % len(live)]
            if kind == 0:
                x.add_(y)
            elif kind == 1:
                x[start:end].mul_(2.0)
            else:
                kept.append(x[start:end].sum())
        names = {}  # storage -> the order the program made it in (addresses differ from run to run)
        for number, tensor in enumerate(kept):
            names.setdefault(tensor.untyped_storage().data_ptr(), number)
    finally:
        cuda_trace.uninstall()
        module.set_test_stream(0)
        module.set_cpu_as_device(False)
        module.set_tuning("lazy_frees", True)
        watch.stop()
    assert not watch.errors

    def access(a):
        return None if a is None else (a.actor, a.thread, a.is_write, a.site, a.op, a.seq, a.clock, a.stream)

    races = [(r.kind, names[r.storage], r.start, r.end, access(r.earlier), access(r.later), access(r.reuse))
             for r in watch.detector.races]
    return races, watch.detector.seq, made


def test_frees_inside_and_outside_ops_taken_in_cpp_find_what_the_python_handlers_find(module, tmp_path, monkeypatch):
    rng = random.Random(2026)
    free_races = free_sites = in_op = 0
    for index in range(10):
        steps = program(rng, 90)
        slow, slow_events, made = run(module, tmp_path / f"python{index}", steps, "python", monkeypatch)
        lazy, lazy_events, _ = run(module, tmp_path / f"lazy{index}", steps, "lazy", monkeypatch)
        eager, eager_events, _ = run(module, tmp_path / f"eager{index}", steps, "eager", monkeypatch)
        assert lazy == slow, f"program {index}: {steps}"
        assert eager == slow, f"program {index}: {steps}"
        assert lazy_events == eager_events == slow_events
        frees = [race for race in slow if race[0] == "FREE"]
        free_races += len(frees)
        free_sites += sum(1 for race in frees if race[5][3] >= 0)  # the free's site: a frame of this file
        in_op += made["free_in_op"]
    # the programs free blocks inside ops, and some of those frees race with a side stream's earlier use
    assert in_op >= 60 and free_races >= 5 and free_sites == free_races
