"""The per-op cost of the native backend on CPU, where no GPU is needed: µs per op, plain vs each path.

    python benchmarks/fast_path_micro.py [--ops 20000] [--repeat 5]

CPU tensors stand for device tensors (the native hook's test switch `set_cpu_as_device`), on two streams that
order nothing, so the detector does its full work per op (clocks, shadow segments; the tensors are touched by both
streams, so their history is mixed). One loop of in-place adds and a view's fill alternating between two streams
(each op races: the detector also builds and delivers races, deduplicated by the watch) and one loop on a single
stream (no race: the common case). Printed per path, the best of `--repeat` runs: plain (no watch), the fast path
(ops decided in C++), the Python path of the same hook (STREAMCHECK_DETECTOR=python: every op through on_access to
the Python Detector). (The dispatch mode is left out: it does not take CPU tensors for device tensors.)
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time

import torch

from streamcheck.instrument import native
from streamcheck.instrument.watch import Watch


def loop(module, ops: int, streams: tuple) -> float:
    module.set_test_stream(streams[0])  # made on the first stream: on one stream, nothing races
    x, y = torch.zeros(256), torch.ones(256)
    started = time.perf_counter()
    for i in range(ops // 2):
        module.set_test_stream(streams[i % len(streams)])
        x.add_(y)
        x[16:128].fill_(2.0)
    return time.perf_counter() - started


def timed(module, ops: int, repeat: int, streams: tuple, path: str) -> float:
    best = float("inf")
    for _ in range(repeat):
        os.environ.pop("STREAMCHECK_DETECTOR", None)
        if path == "python":
            os.environ["STREAMCHECK_DETECTOR"] = "python"
        watch = None
        module.set_cpu_as_device(True)
        if path != "plain":
            watch = Watch(tempfile.mkdtemp(prefix="fast-path-micro-"), rank=0, world_size=1, echo=False,
                          backend="native")
            watch.start()
        try:
            best = min(best, loop(module, ops, streams))
        finally:
            module.set_test_stream(0)
            module.set_cpu_as_device(False)
            if watch is not None:
                watch.stop()
    os.environ.pop("STREAMCHECK_DETECTOR", None)
    return best


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ops", type=int, default=20000)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    module = native.load()
    print(f"torch {torch.__version__}, {args.ops} ops per run, best of {args.repeat}; CPU tensors as device tensors")
    for label, streams in (("one stream (no race)", (1,)), ("two streams (every op races)", (1, 2))):
        times = {path: timed(module, args.ops, args.repeat, streams, path)
                 for path in ("plain", "fast", "python")}
        plain = times["plain"]
        print(f"{label}:")
        for path, seconds in times.items():
            over = (seconds - plain) / args.ops * 1e6
            print(f"  {path:<7} {seconds / args.ops * 1e6:7.2f} µs/op  ({over:+7.2f} µs/op over plain, "
                  f"{seconds / plain:5.2f}x)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
