"""The per-op cost of the native backend on CPU, where no GPU is needed: µs per op, plain vs each path.

    python benchmarks/fast_path_micro.py [--ops 20000] [--repeat 5]

CPU tensors stand for device tensors (the native hook's test switch `set_cpu_as_device`), on two streams that
order nothing, so the detector does its full work per op (clocks, shadow segments; the tensors are touched by both
streams, so their history is mixed). One loop of in-place adds and a view's fill alternating between two streams
(each op races: the detector also builds and delivers races, deduplicated by the watch) and one loop on a single
stream (no race: the common case), then the single-stream loop's ops made under 12 Python frames, the innermost 3 in
a file of torch's (what a model's forward looks like to the site capture). Printed per path, the best of `--repeat`
runs (the paths in turn, `--repeat` times): plain (no watch), the fast path (ops decided in C++), the fast path with
the frame walk of frame objects (`set_tuning("fast_frames", False)`: sites.h before the interpreter's own frames were
walked), the fast path with every op boxed (`set_tuning("unboxed", False)`: unboxed.h's ops through the boxed
fallback too), the Python path of the same hook (STREAMCHECK_DETECTOR=python: every op through on_access to the
Python Detector). (The dispatch mode is left out: it does not take CPU tensors for device tensors.)
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


def _chain(frames: int, filename: str, innermost):
    """A function that calls `innermost` through `frames` Python frames of code compiled as `filename`."""
    inner = innermost
    for level in range(frames):
        scope = {"inner": inner}
        exec(compile(f"def level{level}(*args):\n    return inner(*args)\n", filename, "exec"), scope)
        inner = scope[f"level{level}"]
    return inner


def _ops(module, streams, i, x, y):
    module.set_test_stream(streams[i % len(streams)])
    x.add_(y)
    x[16:128].fill_(2.0)


def deep_loop(module, ops: int, streams: tuple) -> float:
    """loop()'s ops, made in 3 frames of a file of torch's under 9 frames of this one (a model's forward as the
    site capture sees it: library frames to skip, then the 8 frames of the site's key)."""
    torch_file = os.path.join(os.path.dirname(torch.__file__), "_streamcheck_micro.py")
    step = _chain(3, torch_file, _ops)

    def run():
        module.set_test_stream(streams[0])
        x, y = torch.zeros(256), torch.ones(256)
        started = time.perf_counter()
        for i in range(ops // 2):
            step(module, streams, i, x, y)
        return time.perf_counter() - started

    return _chain(9, __file__, run)()


PATHS = ("plain", "fast", "boxed", "slow_frames", "python")


def timed(module, ops: int, repeat: int, streams: tuple, path: str, run=loop) -> float:
    best = float("inf")
    module.set_tuning("fast_frames", path != "slow_frames")
    module.set_tuning("unboxed", path != "boxed")
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
            best = min(best, run(module, ops, streams))
        finally:
            module.set_test_stream(0)
            module.set_cpu_as_device(False)
            if watch is not None:
                watch.stop()
    os.environ.pop("STREAMCHECK_DETECTOR", None)
    module.set_tuning("fast_frames", True)
    module.set_tuning("unboxed", True)
    return best


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ops", type=int, default=20000)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--paths", default=",".join(PATHS), help=f"some of {', '.join(PATHS)}")
    args = parser.parse_args()
    paths = args.paths.split(",")
    module = native.load()
    print(f"torch {torch.__version__}, {args.ops} ops per run, best of {args.repeat}; CPU tensors as device tensors")
    cases = (("one stream (no race)", (1,), loop), ("two streams (every op races)", (1, 2), loop),
             ("one stream, ops under 12 frames (3 in torch)", (1,), deep_loop))
    for label, streams, run in cases:
        times = {path: float("inf") for path in paths}
        for _ in range(args.repeat):  # paths in turn, the best run of each: a busy machine disturbs them alike
            for path in paths:
                times[path] = min(times[path], timed(module, args.ops, 1, streams, path, run))
        plain = times["plain"]
        print(f"{label}:")
        for path, seconds in times.items():
            over = (seconds - plain) / args.ops * 1e6
            print(f"  {path:<12} {seconds / args.ops * 1e6:7.2f} µs/op  ({over:+7.2f} µs/op over plain, "
                  f"{seconds / plain:5.2f}x)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
