"""streamcheck on current frameworks, one GPU: step time plain vs streamcheck and every finding, per setup.

    python3 benchmarks/frameworks_gpu.py [--setups all|a,b,...] [--steps 8] [--timeout 150] [--parallel 1] [--out DIR]

Each setup (benchmarks/frameworks_workloads.py: DeepSpeed 0.19.8 ZeRO-1/2/3 with and without overlap_comm and CPU
offload, FSDP2 fully_shard with and without CPUOffloadPolicy + MixedPrecisionPolicy, plain DDP, a DataLoader with
pinned memory and two workers, Lightning's Trainer, the HF Trainer, a torch.compile'd step) runs twice, each in a
fresh process with the same seeds: once plain, once with `streamcheck.watch()` around its steps (the default
backend unless --backend says otherwise). Printed per setup: the median step time of each run (the first step
left out), their ratio, whether the losses are bit-identical, and every finding (rule, kind, where, message). The
goal is zero findings: each one is a false report to fix or a real race to prove.

One run of one setup: `--run SETUP --mode plain|streamcheck --result FILE` (what the driver starts).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def run_one(setup: str, mode: str, steps: int, result: Path, backend: str | None) -> None:
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from frameworks_workloads import SETUPS, WARMUP_OUTSIDE

    started = time.perf_counter()
    loop = SETUPS[setup](steps)
    warm = WARMUP_OUTSIDE.get(setup, 0)
    if warm:
        loop.run(warm)
    out: dict = {"setup": setup, "mode": mode, "setup_s": time.perf_counter() - started}
    if mode == "plain":
        times, losses = loop.run(steps)
    else:
        import streamcheck

        watch = streamcheck.watch(str(result.with_suffix("")) + "-findings", echo=False, backend=backend)
        watch.start()
        try:
            times, losses = loop.run(steps)
        finally:
            findings = watch.stop()
        out["backend"] = watch.backend
        out["notes"] = list(watch.notes)
        out["errors"] = list(watch.errors)
        out["findings"] = [{"rule": f.rule, "kind": f.kind, "count": f.count,
                            "where": f"{f.primary.path}:{f.primary.line}", "message": f.message,
                            "related": [f"{r.role} {r.path}:{r.line}" for r in f.related]} for f in findings]
    out["step_ms"] = times
    out["losses"] = losses
    result.write_text(json.dumps(out))


def median_after_first(times: list) -> float | None:
    rest = times[1:] if len(times) > 1 else times
    return statistics.median(rest) if rest else None


def run_setup(setup: str, args: argparse.Namespace, out_dir: Path) -> tuple[str, list]:
    """Both runs of one setup, one after the other: its table row and its report lines."""
    runs = {}
    for mode in ("plain", "streamcheck"):
        result = out_dir / f"{setup}-{mode}.json"
        command = [sys.executable, str(Path(__file__).resolve()), "--run", setup, "--mode", mode,
                   "--steps", str(args.steps), "--result", str(result)]
        if args.backend:
            command += ["--backend", args.backend]
        log = out_dir / f"{setup}-{mode}.log"
        started = time.perf_counter()
        try:
            with open(log, "w") as handle:
                done = subprocess.run(command, stdout=handle, stderr=subprocess.STDOUT, timeout=args.timeout,
                                      env=dict(os.environ, TOKENIZERS_PARALLELISM="false"))
            rc = done.returncode
        except subprocess.TimeoutExpired:
            rc = "timeout"
        wall = time.perf_counter() - started
        runs[mode] = json.loads(result.read_text()) if result.exists() else {"rc": rc}
        runs[mode]["wall_s"] = wall
        if rc != 0:
            tail = log.read_text(errors="replace").strip().splitlines()[-6:]
            runs[mode]["failure"] = f"exit {rc}: " + " | ".join(tail)
    plain, sc = runs["plain"], runs["streamcheck"]
    p_ms, s_ms = median_after_first(plain.get("step_ms", [])), median_after_first(sc.get("step_ms", []))
    ratio = f"{s_ms / p_ms:.2f}x" if p_ms and s_ms else "-"
    same = ("yes" if plain.get("losses") and plain.get("losses") == sc.get("losses") else
            "no" if plain.get("losses") and sc.get("losses") else "-")
    findings = sc.get("findings")
    row = (f"{setup:<34}{_ms(p_ms):>10}{_ms(s_ms):>10}{ratio:>8}{same:>11}"
           f"{(len(findings) if findings is not None else '-'):>10}   {sc.get('backend', '')}")
    report = []
    for mode in ("plain", "streamcheck"):
        if "failure" in runs[mode]:
            report.append(f"  {setup} {mode} FAILED ({runs[mode]['wall_s']:.0f} s): {runs[mode]['failure']}")
    for note in sc.get("notes", []) + sc.get("errors", []):
        report.append(f"  {setup}: note: {note}")
    for f in findings or []:
        report.append(f"  {setup}: {f['rule']} {f['kind']} x{f['count']} at {f['where']}: {f['message']}")
        report.extend(f"      {r}" for r in f["related"])
    return row, report


def drive(args: argparse.Namespace) -> int:
    from concurrent.futures import ThreadPoolExecutor

    sys.path.insert(0, str(ROOT / "benchmarks"))
    from frameworks_workloads import SETUPS

    setups = list(SETUPS) if args.setups == "all" else args.setups.split(",")
    out_dir = Path(args.out or tempfile.mkdtemp(prefix="frameworks-"))
    out_dir.mkdir(parents=True, exist_ok=True)
    rows, report = [], []
    with ThreadPoolExecutor(max_workers=args.parallel) as pool:
        for row, lines in pool.map(lambda setup: run_setup(setup, args, out_dir), setups):
            rows.append(row)
            report.extend(lines)
            print(row, *lines, sep="\n", flush=True)
            (out_dir / "summary.json").write_text(json.dumps({"setups": setups, "rows": rows, "report": report}))
    header = (f"{'setup':<34}{'plain ms':>10}{'sc ms':>10}{'ratio':>8}{'same loss':>11}{'findings':>10}   backend\n"
              f"(median step after the first of {args.steps} steps; one fresh process per run; "
              f"{args.parallel} setup(s) at a time)")
    text = "\n".join([header, *rows, "", "findings, failures and notes:" if report else "no findings", *report])
    print(text)
    (out_dir / "summary.txt").write_text(text + "\n")
    return 0


def _ms(value: float | None) -> str:
    return f"{value:.1f}" if value is not None else "-"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--setups", default="all")
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--timeout", type=float, default=150.0, help="seconds per run")
    parser.add_argument("--out", default=None)
    parser.add_argument("--parallel", type=int, default=1, help="setups run at the same time (timings get noisier)")
    parser.add_argument("--backend", default=None, choices=("auto", "native", "mode"))
    parser.add_argument("--run", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--mode", default="plain", choices=("plain", "streamcheck"), help=argparse.SUPPRESS)
    parser.add_argument("--result", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.run:
        run_one(args.run, args.mode, args.steps, Path(args.result), args.backend)
        return 0
    return drive(args)


if __name__ == "__main__":
    sys.exit(main())
