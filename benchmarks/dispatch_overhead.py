"""What the dispatch-mode hook costs per op on the CPU side, next to a pass-through TorchDispatchMode, in one run.

    python benchmarks/dispatch_overhead.py [--n 20000] [--repeat 3] [--workload ops|mlp]

No GPU is needed: every CPU tensor is declared pinned, so each op becomes a host access and goes through the same
per-op path a CUDA op takes (plan lookup, argument walk, byte ranges, site capture, one sink call), except the
current-stream query. Printed, in µs per op (medians of --repeat runs of 2n ops: an in-place add and a mul):

- plain: no mode;
- pass-through: a TorchDispatchMode that only calls the op (the floor of this approach);
- hooks only: StreamcheckMode feeding a sink that does nothing (what instrument/ costs);
- hooks + detector: StreamcheckMode feeding the real Detector (what a run pays);
- native hook only / + detector, kernels: the native backend (instrument/native.py), every CPU tensor standing for a
  tensor of cuda:0 (its C++ hook's test switch), so every op takes the kernel path;
- native hook, switched off: the hook installed but inactive, as outside a STREAMCHECK_STEPS window;

and the ratios to pass-through. On the seed workload (5 795 ops per step) every µs per op is about 6 ms per step.

`--workload mlp` is closer to a training step: forward and backward of a 4-block Linear/GELU/LayerNorm model (the
autograd engine's thread, views, fresh outputs) called 12 frames deep (site capture walks real stacks), `--n` steps;
"hooks + detector, kernels" treats every tensor as a tensor of cuda:0, so ops take the kernel path (current-stream
lookup, thread-to-stream clock join) instead of the host-access one. Medians are per op.
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing

import torch  # noqa: E402
from torch.utils._python_dispatch import TorchDispatchMode  # noqa: E402

from streamcheck.instrument.detector import Detector  # noqa: E402
from streamcheck.instrument.dispatch import StreamcheckMode  # noqa: E402
from streamcheck.instrument.pinned import PinnedMemory  # noqa: E402
from streamcheck.instrument.recorder import Recorder  # noqa: E402


class EveryTensorPinned(PinnedMemory):
    def is_pinned(self, tensor, base, fresh=False):
        return True


class PassThrough(TorchDispatchMode):
    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        return func(*args, **(kwargs or {}))


class NullSink:
    def __getattr__(self, name):
        def ignore(*args):
            return None

        setattr(self, name, ignore)
        return ignore


class NativeHook:
    """The native backend (instrument/native.py) as a context manager, every CPU tensor standing for a tensor of
    cuda:0 on one stream (the hook's test switch): the kernel path, C++ half and Python half, with `sink`."""

    def __init__(self, sink, active: bool = True) -> None:
        from streamcheck.instrument import native

        self.module = native.load()
        self.recorder = Recorder(sink)
        self.hooks = native.NativeHooks(self.recorder, None, self.module)
        self.active = active

    def __enter__(self):
        self.module.set_cpu_as_device(True)
        self.module.set_test_stream(1)
        self.hooks.install()
        self.recorder.active = self.active  # off: what a step outside a STREAMCHECK_STEPS window costs
        return self

    def __exit__(self, *exc) -> None:
        self.hooks.uninstall()
        self.module.set_cpu_as_device(False)


def workload(a: torch.Tensor, b: torch.Tensor, n: int) -> None:
    for _ in range(n):
        a.add_(b)
        a * b


def mlp_workload(n: int):
    """(run(n), ops per step): n forward/backward steps of a small MLP, 12 frames deep."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(*[torch.nn.Sequential(torch.nn.Linear(32, 32), torch.nn.GELU(), torch.nn.LayerNorm(32))
                                  for _ in range(4)])
    x = torch.randn(8, 32)

    def step() -> None:
        model(x).sum().backward()
        for param in model.parameters():
            param.grad = None

    def nested(depth: int) -> None:
        if depth:
            return nested(depth - 1)
        for _ in range(n):
            step()

    counter = OpCounter()
    with counter:
        step()
    return nested, counter.ops


class OpCounter(TorchDispatchMode):
    def __init__(self) -> None:
        super().__init__()
        self.ops = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.ops += 1
        return func(*args, **(kwargs or {}))


def mlp_per_op_us(make_mode, n: int) -> float:
    nested, ops = mlp_workload(n)
    mode = make_mode()
    context = mode if mode is not None else contextlib.nullcontext()
    with context:
        nested(12)  # warm-up (plans, sites)
        start = time.perf_counter()
        nested(12)
        return (time.perf_counter() - start) / (n * ops) * 1e6


def per_op_us(make_mode, n: int) -> float:
    a, b = torch.zeros(64), torch.ones(64)
    mode = make_mode()
    if mode is None:
        workload(a, b, 100)
        start = time.perf_counter()
        workload(a, b, n)
        return (time.perf_counter() - start) / (2 * n) * 1e6
    with mode:
        workload(a, b, 100)
        start = time.perf_counter()
        workload(a, b, n)
        return (time.perf_counter() - start) / (2 * n) * 1e6


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=20000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--workload", choices=("ops", "mlp"), default="ops")
    args = parser.parse_args()
    torch.set_num_threads(1)  # intra-op threads spinning would only add noise
    variants = {
        "plain": lambda: None,
        "pass-through": PassThrough,
        "hooks only": lambda: StreamcheckMode(Recorder(NullSink()), {}, EveryTensorPinned(cuda_available=True)),
        "hooks + detector": lambda: StreamcheckMode(Recorder(Detector()), {}, EveryTensorPinned(cuda_available=True)),
    }
    measure = per_op_us if args.workload == "ops" else mlp_per_op_us
    n = args.n if args.workload == "ops" else max(1, args.n // 100)
    results = {name: statistics.median(measure(make, n) for _ in range(args.repeat))
               for name, make in variants.items()}
    if args.workload == "mlp":
        original = torch.Tensor.get_device
        torch.Tensor.get_device = lambda self: 0  # every tensor "on cuda:0": the kernel path
        try:
            results["hooks + detector, kernels"] = statistics.median(
                measure(variants["hooks + detector"], n) for _ in range(args.repeat))
        finally:
            torch.Tensor.get_device = original
    for name, sink in (("native hook only, kernels", NullSink), ("native hook + detector, kernels", Detector)):
        results[name] = statistics.median(measure(lambda: NativeHook(sink()), n) for _ in range(args.repeat))
    results["native hook, switched off"] = statistics.median(
        measure(lambda: NativeHook(Detector(), active=False), n) for _ in range(args.repeat))
    floor = results["pass-through"]
    for name, us in results.items():
        print(f"{name:26s} {us:7.2f} µs/op   {us / floor:5.2f}x pass-through")
    return 0


if __name__ == "__main__":
    sys.exit(main())
