"""Where streamcheck's per-op cost goes, one GPU, one process: each layer of the native backend switched on in turn.

    python3 benchmarks/native_profile.py [--setup deepspeed-zero2-overlap] [--steps 8] [--phases a,b,...] [--profile N]

The same training loop (benchmarks/frameworks_workloads.py) runs `--steps` steps per phase, in this order, after
one unmeasured step each:
- plain: nothing installed;
- passthrough: a TorchDispatchMode that only counts ops (what any Python per-op hook costs first);
- hook_boxing: the hook's key in the thread's set, the hook not active: every op passed on unread (the floor of
  the hook before it looks at anything: boxed for every op but unboxed.h's, which are passed on unboxed);
- hook_noop: the native hook active, its Python callback a no-op (C++ plans, ranges, boxing, one Python call);
- trace_callbacks: torch's GPU trace callbacks routed to a Recorder, no per-op hook;
- watch_null_sink: a full native watch whose Recorder feeds a sink that does nothing (the Python half, no detector);
- watch: a full native watch (the default: the C++ detector, ops decided in C++);
- watch_py_detector: the same with STREAMCHECK_DETECTOR=python (every op through Python to the Python Detector);
- window_closed: a watch with `steps=(10**6, 10**6 + 1)`: installed, never instrumenting;
- window: `steps=(2, 4)` of the phase's steps (its findings are printed);
- watch_mode: a full watch on the dispatch mode;
- watch_slow_frames, watch_eager_frees, watch_boxed, watch_fewer_unboxed, watch_before: a full native watch with
  one or all of the hook's newer ways switched off (set_tuning: the frame walk of frame objects; frees inside an op
  taken under the GIL at once; every op boxed, unboxed.h's too; the unboxed kernels added from the ZeRO-2 count
  boxed again; before: also no per-thread plan cache and no recycled shadows): what each saved, beside it in one
  process;
- watch_no_memory, watch_no_gpu_trace, watch_no_sites, watch_no_detector, watch_no_gil: a full native watch with
  one source of per-op cost taken away (measurement only: what it finds changes): the allocator's reports dropped;
  torch's GPU trace stopped (no report made at all); no call site taken; the GIL and the site taken but the op
  dropped before the detector; the op dropped once its byte ranges are read (no GIL). Beside watch, each says
  what that source costs per op;
- csan: PyTorch's CUDA sanitizer (torch.cuda._sanitizer), last: it cannot be switched off.
Printed per phase: median step (ms), ratio to plain, and (for phases that count ops) µs per op over plain.
With `--rounds R` the phases take turns R times, each round in a rotated order (so no phase always follows the
same one); each phase's µs per op is then also given per round, against the plain steps of the same round: the
median over the rounds and its spread (min, quartiles, max), which is what decides a difference of a fraction of
a µs per op when step times drift by more than that between rounds.
`--profile N` then runs N steps of a full native watch under cProfile and prints the top functions by own time.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import pstats
import statistics
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))  # the workloads; streamcheck itself comes installed

PHASES = ("plain", "passthrough", "hook_boxing", "hook_noop", "trace_callbacks", "watch_null_sink", "watch",
          "watch_py_detector", "window_closed", "window", "watch_mode", "csan")
TUNED = {"watch_slow_frames": {"fast_frames": False}, "watch_eager_frees": {"lazy_frees": False},
         "watch_boxed": {"unboxed": False},
         "watch_fewer_unboxed": {"unboxed_zero2": False},  # session 9's unboxed kernels (unboxed.h kZero2) off
         "watch_before": {"fast_frames": False, "lazy_frees": False, "plan_cache": False,
                          "recycle_shadows": False, "unboxed": False},  # hook.cpp set_tuning: each switch off
         # one source of per-op cost taken away (and with it what the watch finds: measurement only, state.h)
         "watch_no_memory": {"memory_reports": False}, "watch_no_gpu_trace": {"gpu_trace": False},
         "watch_no_sites": {"sites": False}, "watch_no_detector": {"detector": False}, "watch_no_gil": {"gil": False}}
AFTER_START = {"gpu_trace"}  # switches that act on what watch.start() sets up: applied after it


class NullSink:
    """A sink that takes every Detector call and does nothing."""

    races: list = []
    stream_names: dict = {}
    storage_infos: dict = {}
    allocations: dict = {}
    seq = 0

    def __getattr__(self, name):
        return _nothing


def _nothing(*args, **kwargs):
    return None


class Phase:
    def __init__(self, name: str, steps: int) -> None:
        self.name = name
        self.steps = steps
        self.ops = 0
        self.undo = []
        self.watch = None

    def start(self) -> None:
        name = self.name
        if name == "passthrough":
            from torch.utils._python_dispatch import TorchDispatchMode

            phase = self

            class CountingMode(TorchDispatchMode):
                def __torch_dispatch__(self, func, types, args=(), kwargs=None):
                    phase.ops += 1
                    return func(*args, **(kwargs or {}))

            mode = CountingMode()
            mode.__enter__()
            self.undo.append(lambda: mode.__exit__(None, None, None))
        elif name == "hook_boxing":
            from streamcheck.instrument import native

            module = native.load()
            module.set_active(False)
            module.watch_this_thread(True)  # the hook sees every op and, inactive, only passes it on
            self.undo.append(lambda: module.watch_this_thread(False))
        elif name == "hook_noop":
            from streamcheck.instrument import native

            module = native.load()
            phase = self

            def on_access(*args):
                phase.ops += 1

            module.install(on_access, native._ignore, native._ignore, native._ignore)
            module.set_active(True)
            module.watch_this_thread(True)

            def undo():
                module.watch_this_thread(False)
                module.set_active(False)
                module.install(native._ignore, native._ignore, native._ignore, native._ignore)

            self.undo.append(undo)
        elif name == "csan":
            import torch.cuda._sanitizer as csan

            csan.enable_cuda_sanitizer()
        elif name == "trace_callbacks":
            from streamcheck.instrument import cuda_trace
            from streamcheck.instrument.detector import Detector
            from streamcheck.instrument.recorder import Recorder

            cuda_trace.install(Recorder(Detector()))
            self.undo.append(cuda_trace.uninstall)
        elif name in ("watch_null_sink", "watch", "watch_py_detector", "window_closed", "window", "watch_mode",
                      *TUNED):
            import os

            import streamcheck

            if name in TUNED:
                from streamcheck.instrument import native

                module = native.load()
                for switch, on in TUNED[name].items():
                    if switch not in AFTER_START:
                        module.set_tuning(switch, on)
                        self.undo.append(lambda switch=switch: module.set_tuning(switch, True))

            if name in ("watch_null_sink", "watch_py_detector"):
                os.environ["STREAMCHECK_DETECTOR"] = "python"
                self.undo.append(lambda: os.environ.pop("STREAMCHECK_DETECTOR", None))

            options = {"echo": False}
            if name == "window_closed":
                options["steps"] = (10**6, 10**6 + 1)
            if name == "window":
                options["steps"] = (2, 4)
            if name == "watch_mode":
                options["backend"] = "mode"
            self.watch = streamcheck.watch(f"/tmp/native-profile-{name}", **options)
            self.watch.start()
            for switch, on in TUNED.get(name, {}).items():
                if switch in AFTER_START:  # undone before the watch stops (stop() runs the undo list first)
                    module.set_tuning(switch, on)
                    self.undo.append(lambda switch=switch: module.set_tuning(switch, True))
            if name == "watch_null_sink":
                self.watch.recorder.sink = NullSink()
                self.watch.recorder.free_can_race = None

    def stop(self) -> dict:
        while self.undo:
            self.undo.pop()()
        out: dict = {}
        if self.watch is not None:
            findings = self.watch.stop()
            out["findings"] = [f"{f.rule} {f.kind} x{f.count}: {f.message[:160]}" for f in findings]
            out["errors"] = list(self.watch.errors)
            out["backend"] = self.watch.backend
            out["events"] = getattr(self.watch.detector, "seq", None)
        return out


def measure(name: str, loop, steps: int, results: dict) -> None:
    phase = Phase(name, steps)
    phase.start()
    loop.run(1)
    phase.ops = 0
    stages = _stage_times()  # a stage-times build of the hook (STREAMCHECK_NATIVE_CFLAGS): zeroed here
    times, _ = loop.run(steps)
    stages = _stage_times() if stages is not None else None
    extra = phase.stop()
    if stages and any(count for count, _ in stages.values()):
        ops = results.get("passthrough", {}).get("ops_per_step") or 0
        print(f"[{name}] hook stages over {steps} steps (count per step, µs per step, ns per call"
              + (", ns per op of the pass-through count)" if ops else ")"), flush=True)
        for stage, (count, ns) in stages.items():
            per_op = f" {ns / steps / ops:8.0f}" if ops else ""
            print(f"    {stage:<14}{count / steps:9.0f}{ns / steps / 1000:10.0f}{ns / max(count, 1):9.0f}{per_op}")
        extra["stages"] = stages
    earlier = results.get(name, {}).get("step_ms", [])  # an earlier round of the same phase: one list of steps
    every = earlier + times
    ops = phase.ops / steps if phase.ops else results.get(name, {}).get("ops_per_step", 0)
    rounds = results.get(name, {}).get("round_ms", []) + [statistics.median(times)]
    results[name] = {"median_ms": statistics.median(every), "step_ms": every, "round_ms": rounds,
                     "ops_per_step": ops, **extra}
    print(f"[{name}] median {statistics.median(times):.2f} ms; steps {' '.join(f'{t:.1f}' for t in times)}"
          + (f"; ops/step {phase.ops / steps:.0f}" if phase.ops else ""), flush=True)


def _stage_times():
    from streamcheck.instrument import native

    module = native._module
    return module.stage_times() if module is not None and hasattr(module, "stage_times") else None


def per_round(r: dict, results: dict, ops_per_step: float | None) -> str:
    """µs per op over the plain steps of the same round: median of the rounds [min, q1, q3, max] (2+ rounds)."""
    plain = results.get("plain", {}).get("round_ms", [])
    mine = r.get("round_ms", [])
    if not ops_per_step or len(plain) < 2 or len(mine) != len(plain) or r is results.get("plain"):
        return ""
    return spread([(m - p) * 1000 / ops_per_step for m, p in zip(mine, plain)])


def spread(diffs: list) -> str:
    """median [min, q1, q3, max] x rounds; mean ± its standard error"""
    diffs = sorted(diffs)
    q1, _, q3 = statistics.quantiles(diffs, n=4) if len(diffs) >= 4 else (diffs[0], 0, diffs[-1])
    sem = statistics.stdev(diffs) / len(diffs) ** 0.5 if len(diffs) > 1 else 0.0
    return (f"   per round {statistics.median(diffs):6.2f} [{diffs[0]:.2f}, {q1:.2f}, {q3:.2f}, {diffs[-1]:.2f}]"
            f" x{len(diffs)}; mean {statistics.fmean(diffs):.2f} ± {sem:.2f}")


def paired_with_watch(results: dict, ops_per_step: float | None) -> None:
    """watch minus each switched-off variant (TUNED), round by round: what each newer way saves, in µs per op."""
    watch = results.get("watch", {}).get("round_ms", [])
    for name in TUNED:
        other = results.get(name, {}).get("round_ms", [])
        if ops_per_step and len(watch) >= 2 and len(other) == len(watch):
            print(f"watch - {name:<16}" + spread([(w - o) * 1000 / ops_per_step for w, o in zip(watch, other)]))


def table(results: dict, args: argparse.Namespace) -> None:
    plain = results.get("plain", {}).get("median_ms")
    ops_per_step = results.get("passthrough", {}).get("ops_per_step")  # every op (hook_noop counts CUDA ops only)
    print(f"\nsetup {args.setup}, torch {torch.__version__}, {args.steps} steps per phase x {args.rounds} round(s), "
          "one process, this order")
    if ops_per_step:
        print(f"ops per step (pass-through mode): {ops_per_step:.0f}")
    print(f"{'phase':<18}{'median':>10}{'vs plain':>10}{'us/op over plain':>18}"
          + ("   per round: median [min, q1, q3, max] us/op over that round's plain; mean ± SEM"
             if args.rounds > 1 else ""))
    for name, r in results.items():
        if "median_ms" not in r and "raised" not in r:
            continue  # not a phase (the window run, the soak)
        if "median_ms" not in r:
            print(f"{name:<18}{'(raised)':>10}   {r.get('raised', '')}")
            continue
        ratio = f"{r['median_ms'] / plain:.2f}x" if plain else "-"
        per_op = f"{(r['median_ms'] - plain) * 1000 / ops_per_step:.2f}" if plain and ops_per_step else "-"
        print(f"{name:<18}{r['median_ms']:>8.2f}ms{ratio:>10}{per_op:>18}{per_round(r, results, ops_per_step)}")
        for finding in r.get("findings", []):
            print(f"    {finding}")
        if r.get("errors"):
            print(f"    errors: {r['errors']}")
    paired_with_watch(results, ops_per_step)


class InjectedRace:
    """Wraps a Loop's step: before it, a side stream reads a buffer the current stream has just written, unordered.

    One race per step at one site, so a watch over k steps reports it once with count k: what lets the window run
    compare the window's findings with a full watch of the same steps on a workload that really has one.
    """

    def __init__(self, loop) -> None:
        self.loop = loop
        self.step = loop._step
        self.buffer = torch.zeros(1 << 16, device="cuda")
        self.side = torch.cuda.Stream()

    def __enter__(self):
        def racy_step():
            self.buffer.fill_(1.0)
            with torch.cuda.stream(self.side):
                self.buffer.sum()
            return self.step()

        self.loop._step = racy_step
        return self

    def __exit__(self, *exc) -> None:
        self.loop._step = self.step


def _found(findings) -> list:
    return sorted((f.rule, f.kind, f.count, f"{f.primary.path.rsplit('/', 1)[-1]}:{f.primary.line}")
                  for f in findings)


def window_run(loop, n: int, results: dict, rounds: int = 1) -> None:
    """n steps plain, with watch(steps=(n/4, n/4+2)), fully watched (the timings); then, with one injected race per
    step, the window's findings next to a watch started and stopped by hand around the same two steps."""
    import streamcheck

    window = (n // 4, n // 4 + 2)
    runs: dict = {"plain": [], "window": [], "full": []}
    parts: dict = {name: [] for name in runs}  # per round: (start, the steps, stop) in s, and the step times
    for round_ in range(rounds):
        names = list(runs)
        for name in names[round_ % 3:] + names[:round_ % 3]:  # rotated, as the phases are
            watch = None
            started = time.perf_counter()  # the total includes the watch's start and stop: what a user pays
            if name != "plain":
                watch = streamcheck.watch(f"/tmp/native-profile-run-{name}", echo=False,
                                          **({"steps": window} if name == "window" else {}))
                watch.start()
            looping = time.perf_counter()
            times, _ = loop.run(n)
            stopping = time.perf_counter()
            found = watch.stop() if watch is not None else []
            total = time.perf_counter() - started
            runs[name].append((total, statistics.median(times), _found(found)))
            parts[name].append((looping - started, stopping - looping, started + total - stopping, times))
    plain_total = statistics.median(r[0] for r in runs["plain"])
    print(f"\n{n} steps per run, watch(steps={window}) for the window run, {rounds} round(s) of plain, window, "
          "full in rotated turns, one process (median of the rounds' totals; the total includes start and stop):")
    for name, done in runs.items():
        total = statistics.median(r[0] for r in done)
        print(f"{name:<8} total {total * 1000:9.1f} ms  {total / plain_total:.3f}x  rounds "
              f"{' '.join(f'{r[0] * 1000:.0f}' for r in done)} ms  median step {done[-1][1]:.2f} ms  "
              f"findings {done[-1][2]}")
    # where the window run's extra time goes, against the plain run of the same round: the watch's start, the
    # steps outside the window (the always-on cost), the window's steps, the stop
    print("window run - plain run, per round (ms): start, steps outside the window, the window's steps, stop; "
          "then the median step outside the window vs plain (ms)")
    for (start, _, stop, times), (_, _, _, plain) in zip(parts["window"], parts["plain"]):
        inside = set(range(window[0], window[1]))
        outside = sum(t for i, t in enumerate(times) if i not in inside)
        outside_plain = sum(t for i, t in enumerate(plain) if i not in inside)
        steps_in = sum(times[i] - plain[i] for i in inside)
        closed = statistics.median(t for i, t in enumerate(times) if i not in inside)
        print(f"  start {start * 1000:6.1f}  outside {outside - outside_plain:7.1f}  window {steps_in:6.1f} "
              f"(steps {' '.join(f'{times[i]:.1f}' for i in sorted(inside))} vs plain "
              f"{' '.join(f'{plain[i]:.1f}' for i in sorted(inside))})  stop {stop * 1000:6.1f}  "
              f"closed step {closed:.2f} vs plain {statistics.median(plain):.2f}")
    results["window_run"] = {name: {"total_s": [r[0] for r in done], "findings": done[-1][2],
                                    "parts": [p[:3] for p in parts[name]], "step_ms": [p[3] for p in parts[name]]}
                             for name, done in runs.items()}
    with InjectedRace(loop):
        watch = streamcheck.watch("/tmp/native-profile-run-window-race", echo=False, steps=window)
        watch.start()
        loop.run(n)
        in_window = _found(watch.stop())
        loop.run(window[0])
        watch = streamcheck.watch("/tmp/native-profile-run-two-steps", echo=False)
        watch.start()
        loop.run(window[1] - window[0])
        by_hand = _found(watch.stop())
        loop.run(n - window[1])
    same = "identical" if in_window == by_hand else "DIFFERENT"
    print(f"one injected race per step, {n} steps: watch(steps={window}) found {in_window}; a watch started "
          f"before step {window[0]} and stopped after step {window[1] - 1} found {by_hand}: {same}")
    results["window_findings"] = {"window": in_window, "by_hand": by_hand, "same": in_window == by_hand}


def count_ops(loop, steps: int, results: dict) -> None:
    """Which ops reach the hook boxed (every op unboxed.h does not list, and the listed ones whose plan is not a
    plain access) and how often per step: the list an unboxed kernel pays for first."""
    import streamcheck
    from streamcheck.instrument import native

    module = native.load()
    watch = streamcheck.watch("/tmp/native-profile-count-ops", echo=False)
    watch.start()
    loop.run(1)
    module.op_counts()  # zeroed: the warm-up step's ops left out
    module.set_tuning("count_ops", True)
    try:
        loop.run(steps)
    finally:
        module.set_tuning("count_ops", False)
        counts = module.op_counts()
        watch.stop()
    boxed = sum(b for b, _ in counts.values()) / steps
    unboxed = sum(u for _, u in counts.values()) / steps
    print(f"\nops reaching the hook per step over {steps} watched steps: {boxed + unboxed:.0f} "
          f"({boxed:.0f} boxed, {unboxed:.0f} unboxed); boxed ops by count per step:")
    for name, (b, u) in sorted(counts.items(), key=lambda item: (-item[1][0], item[0])):
        if b:
            print(f"  {b / steps:8.1f}  {name}" + (f"   (unboxed too: {u / steps:.1f})" if u else ""))
    print("unboxed ops by count per step:")
    for name, (b, u) in sorted(counts.items(), key=lambda item: (-item[1][1], item[0]))[:25]:
        if u:
            print(f"  {u / steps:8.1f}  {name}")
    results["op_counts"] = {name: [b / steps, u / steps] for name, (b, u) in counts.items()}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--setup", default="deepspeed-zero2-overlap")
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=1,
                        help="measure the phases this many times in turn; each phase's median is over all its steps")
    parser.add_argument("--phases", default=",".join(PHASES))
    parser.add_argument("--profile", type=int, default=0)
    parser.add_argument("--json", default=None)
    parser.add_argument("--soak", type=int, default=0,
                        help="then N steps under one full watch; every N/10 steps: step time, shadow state, RSS")
    parser.add_argument("--window-run", type=int, default=0,
                        help="then N steps plain, N with watch(steps=(N/4, N/4+2)), N with a full watch; then, with "
                             "one injected race per step, the window's findings vs a watch by hand of the same steps")
    parser.add_argument("--window-rounds", type=int, default=0, help="rounds of the window run (default --rounds)")
    parser.add_argument("--count-ops", type=int, default=0,
                        help="then N steps of a full watch counting the ops that reach the hook, boxed and unboxed")
    args = parser.parse_args()
    from frameworks_workloads import SETUPS

    loop = SETUPS[args.setup](args.steps)
    loop.run(2)
    results: dict = {}
    names = args.phases.split(",")
    turns = [name for name in names if name != "csan"]  # CSAN cannot be switched off: after everything else
    for round_ in range(args.rounds):  # rounds: the phases take turns, so a slow stretch of the machine hits them all
        shift = round_ % len(turns) if turns else 0
        for name in turns[shift:] + turns[:shift]:  # rotated: no phase always runs right after the same one
            measure(name, loop, args.steps, results)
    table(results, args)
    if args.profile:
        import streamcheck

        watch = streamcheck.watch("/tmp/native-profile-cprofile", echo=False)
        watch.start()
        loop.run(1)
        profiler = cProfile.Profile()
        profiler.enable()
        started = time.perf_counter()
        loop.run(args.profile)
        wall = time.perf_counter() - started
        profiler.disable()
        watch.stop()
        text = io.StringIO()
        pstats.Stats(profiler, stream=text).sort_stats("tottime").print_stats(30)
        print(f"\ncProfile of {args.profile} watched steps ({wall:.2f} s under the profiler):")
        print(text.getvalue()[-9000:])
    if args.window_run:
        window_run(loop, args.window_run, results, args.window_rounds or args.rounds)
    if args.count_ops:
        count_ops(loop, args.count_ops, results)
    if args.soak:
        import resource

        import streamcheck
        from streamcheck.instrument.shadow_size import shadow_state_size

        every = max(1, args.soak // 10)
        watch = streamcheck.watch("/tmp/native-profile-soak", echo=False)
        watch.start()
        print(f"\nsoak: {args.soak} steps under one watch (backend {watch.backend}); every {every} steps:")
        soak = []
        for done in range(every, args.soak + 1, every):
            times, _ = loop.run(every)
            size = shadow_state_size(watch.detector)
            rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024
            with open("/proc/self/status") as status:
                now = next(int(line.split()[1]) // 1024 for line in status if line.startswith("VmRSS"))
            soak.append({"step": done, "median_ms": statistics.median(times), "rss_mb": now, **size})
            print(f"  step {done:5d}: median {statistics.median(times):6.2f} ms, storages {size['storages']}, "
                  f"segments {size['segments']}, shadow {size['bytes'] / 1e6:.2f} MB, RSS {now} MB "
                  f"(peak {rss} MB)", flush=True)
        found = watch.stop()
        print(f"  findings: {[(f.rule, f.kind, f.count) for f in found]}; errors {watch.errors}")
        results["soak"] = soak
    if "csan" in names:
        try:
            measure("csan", loop, args.steps, results)
        except Exception as exc:  # noqa: BLE001 - CSAN raises at the first race it believes it saw
            results["csan"] = {"raised": f"{type(exc).__name__}: {str(exc).splitlines()[0][:200]}"}
            print(f"csan raised: {results['csan']['raised']}")
        table(results, args)
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
