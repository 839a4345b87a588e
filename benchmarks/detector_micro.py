"""Microbenchmark of the online detector: cost per access check and per sync event, side by side with the cost of
an empty Python call taking the same arguments (the floor any hook pays).

    python benchmarks/detector_micro.py [--n 100000] [--repeat 3]

Access checks are timed on tensors whose history holds one write and one read (the goal: < 10 µs per check):
each of n storages is first written on s0 and read on s1, then one kernel per storage accesses it from s2, so
every timed call does the full check (a bisect, the last write, the reads since it) and the update. Sync events are
timed in a clock state with 4 streams, 2 host threads and an NCCL stream. Medians of `--repeat` runs, each once
with Python's cyclic garbage collector on (as in a real run) and once with it off: with n storages of live shadow
state, the collector's passes over it are a visible share of the allocating paths (splits, races).
"""

from __future__ import annotations

import argparse
import gc
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing

from streamcheck.instrument.detector import Detector  # noqa: E402

T, T2 = "T1", "T2"
S0, S1, S2, S3 = "cuda:0/s0", "cuda:0/s1", "cuda:0/s2", "cuda:0/s3"
NCCL = "nccl:0/0"
NBYTES = 1 << 20


def _empty(*args, **kwargs) -> None:
    return None


def _prepared(n: int, ordered: bool) -> Detector:
    """n storages, each written on s0 and read on s1; s2 ordered after both (or not: every check then races)."""
    d = Detector(on_race=None)
    d.thread_start(T, T2)
    d.collective(T, S3, NCCL, reads=[(10**9, 0, 64)], writes=[(10**9, 0, 64)])
    for storage in range(n):
        d.kernel(T, S0, writes=[(storage, 0, NBYTES)], site=1, op="write")
        d.kernel(T, S1, reads=[(storage, 0, NBYTES)], site=2, op="read")
    if ordered:
        d.event_record(T, 1, S0)
        d.event_wait(T, 1, S2)
        d.event_record(T, 2, S1)
        d.event_wait(T, 2, S2)
    return d


def _time(fn, n: int) -> float:
    start = time.perf_counter_ns()
    fn()
    return (time.perf_counter_ns() - start) / n / 1000.0  # µs per call


def bench_accesses(n: int) -> dict[str, float]:
    results = {}
    for ordered in (True, False):
        label = "ordered" if ordered else "racing"
        d = _prepared(n, ordered)
        kernel = d.kernel
        results[f"kernel write, 1 range ({label})"] = _time(
            lambda: [kernel(T, S2, (), ((s, 0, NBYTES),), 3, "w") for s in range(n)], n)
        d = _prepared(n, ordered)
        kernel = d.kernel
        results[f"kernel read, 1 range ({label})"] = _time(
            lambda: [kernel(T, S2, ((s, 0, NBYTES),), (), 3, "r") for s in range(n)], n)
        d = _prepared(n, ordered)
        kernel = d.kernel
        results[f"kernel read+write, 2 ranges ({label})"] = _time(
            lambda: [kernel(T, S2, ((s, 0, NBYTES),), ((s, 0, NBYTES),), 3, "rw") for s in range(n)], n)
    d = _prepared(n, True)
    kernel = d.kernel
    results["kernel read of a view (splits a segment)"] = _time(
        lambda: [kernel(T, S2, ((s, 4096, 8192),), (), 3, "v") for s in range(n)], n)
    d = _prepared(n // 5, True)
    kernel = d.kernel
    quarter = NBYTES // 4

    def whole_write_then_four_view_reads():
        for s in range(n // 5):
            kernel(T, S2, (), ((s, 0, NBYTES),), 3, "w")
            for q in range(4):
                kernel(T, S2, ((s, q * quarter, (q + 1) * quarter),), (), 3, "v")

    results["whole write, then 4 view reads (per kernel)"] = _time(whole_write_then_four_view_reads, n // 5 * 5)
    results["empty call, same arguments (floor)"] = _time(
        lambda: [_empty(T, S2, (), ((s, 0, NBYTES),), 3, "w") for s in range(n)], n)
    return results


def bench_syncs(n: int) -> dict[str, float]:
    d = _prepared(16, True)
    d.kernel(T2, S3, op="x")
    results = {
        "event_record + event_wait (wait_stream)": _time(
            lambda: [(d.event_record(T, 7, S0), d.event_wait(T, 7, S1)) for _ in range(n)], n),
        "sync_stream": _time(lambda: [d.sync_stream(T, S0) for _ in range(n)], n),
        "sync_event": _time(lambda: [d.sync_event(T, 7) for _ in range(n)], n),
        "sync_device (5 streams)": _time(lambda: [d.sync_device(T, 0) for _ in range(n)], n),
        "collective async + work_wait": _time(
            lambda: [(d.collective(T, S0, NCCL, (), (), True, 5, 4, "c"), d.work_wait(T, S0, 5)) for _ in range(n)],
            n),
        "empty call, 3 arguments (floor)": _time(lambda: [_empty(T, 7, S0) for _ in range(n)], n),
    }
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=100_000, help="calls per measurement (default 100000)")
    parser.add_argument("--repeat", type=int, default=3, help="runs per measurement; the median is printed")
    args = parser.parse_args(argv)
    runs: dict[str, list[float]] = {}
    runs_gc_off: dict[str, list[float]] = {}
    for _ in range(args.repeat):
        for sink, gc_on in ((runs, True), (runs_gc_off, False)):
            if not gc_on:
                gc.disable()
            try:
                for name, value in {**bench_accesses(args.n), **bench_syncs(args.n)}.items():
                    sink.setdefault(name, []).append(value)
            finally:
                gc.enable()
                gc.collect()
    access_floor = statistics.median(runs["empty call, same arguments (floor)"])
    sync_floor = statistics.median(runs["empty call, 3 arguments (floor)"])
    print(f"streamcheck detector microbenchmark: python {sys.version.split()[0]}, n={args.n}, "
          f"median of {args.repeat}")
    print(f"{'operation':<48} {'µs/call':>9} {'x empty call':>13} {'µs, gc off':>11}")
    for name, values in runs.items():
        median = statistics.median(values)
        floor = access_floor if name.startswith(("kernel", "whole", "empty call, same")) else sync_floor
        print(f"{name:<48} {median:>9.3f} {median / floor:>13.1f} {statistics.median(runs_gc_off[name]):>11.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
