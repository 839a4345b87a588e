"""What streamcheck costs on the seed workload, next to a pass-through dispatch mode and PyTorch's CSAN, in one job.

    python3 benchmarks/overhead.py [--gpus 2] [--steps 8] [--warmup 1] [--csan-continue] [--out DIR]

One `torchrun` job runs examples/deepspeed_hpz/train.py with `--phases plain,passthrough,streamcheck,streamcheck_mode,csan`: the
same process, model and data run `--steps` measured steps (after `--warmup` unmeasured ones) in each mode, in
that order (CSAN last, since it cannot be switched off). `--gpus 2` is the seed workload (ZeRO-3, hpZ 2);
`--gpus 1` a single-GPU ZeRO-3 variant (no hpZ). Printed: the median step time of each mode and its ratio to
plain, the ops per step (counted by the pass-through mode), and the analysis cost per op:
`streamcheck` is the default backend (the native C++ hook, instrument/native.py), `streamcheck_mode` the same
detector fed by the Python dispatch mode (STREAMCHECK_BACKEND=mode);
(streamcheck - pass-through) / ops — what streamcheck adds on top of seeing the ops at all — and
(streamcheck - plain) / ops. The streamcheck phase's findings (rank 0) and CSAN's error count are printed too.

CSAN raises at the first race it sees; on a racy DeepSpeed (0.13.4) that ends the job in step 1. With
`--csan-continue` CSAN's raise is turned into a count (same analysis per op), so the racy version can be timed.
Model size: `--layers/--hidden/...` are passed through (defaults: the seed workload of ../shared/GPU.md).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TRAIN = ROOT / "examples" / "deepspeed_hpz" / "train.py"
PHASES = ("plain", "passthrough", "streamcheck", "streamcheck_mode", "csan")


def command(args: argparse.Namespace, result: Path, sc_out: Path) -> list[str]:
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", str(args.gpus),
           "--master_port", str(29500 + random.randrange(1000)), str(TRAIN),
           "--phases", ",".join(args.phases), "--steps", str(args.steps), "--warmup", str(args.warmup),
           "--hpz", str(args.gpus if args.gpus > 1 else 1), "--result", str(result), "--sc-out", str(sc_out),
           "--layers", str(args.layers), "--hidden", str(args.hidden), "--intermediate", str(args.intermediate),
           "--heads", str(args.heads), "--seq", str(args.seq)]
    if args.csan_continue:
        cmd.append("--csan-continue")
    return cmd


def report(result: dict, args: argparse.Namespace) -> str:
    phases = result["phases"]
    plain = phases["plain"]["median_step_ms"] if "plain" in phases else None
    lines = [f"seed workload: DeepSpeed {result['deepspeed']}, torch {result['torch']}, {result['world_size']} GPU(s), "
             f"hpZ {result['hpz']}, {result['layers']} layers h={result['hidden']}; {args.steps} measured steps per "
             f"mode after {result['warmup']} warm-up step(s), one process, modes in this order",
             f"{'mode':<13}{'median step':>14}{'vs plain':>10}   step times (ms)"]
    for name in args.phases:
        phase = phases.get(name)
        if phase is None:
            lines.append(f"{name:<13}{'(not run)':>14}")
            continue
        median = phase["median_step_ms"]
        ratio = f"{median / plain:.2f}x" if plain else "-"
        times = " ".join(f"{t:.0f}" for t in phase["step_ms"])
        lines.append(f"{name:<13}{median:>11.1f} ms{ratio:>10}   {times}")
    ops = phases.get("passthrough", {}).get("ops_per_step")
    if ops:
        lines.append(f"ops per step (pass-through mode, rank 0): {ops:.0f}")
        if "streamcheck" in phases:
            sc = phases["streamcheck"]["median_step_ms"]
            base = phases["passthrough"]["median_step_ms"]
            lines.append(f"analysis cost per op: {(sc - base) / ops * 1000:.1f} µs over pass-through, "
                         f"{(sc - plain) / ops * 1000:.1f} µs over plain" if plain else "")
            lines.append(f"pass-through cost per op: {(base - plain) / ops * 1000:.1f} µs over plain" if plain else "")
    for name in ("streamcheck", "streamcheck_mode"):
        if name not in phases:
            continue
        sc = phases[name]
        lines.append(f"{name} (backend {sc.get('backend')}): {sc.get('events', '?')} detector events, internal errors "
                     f"{sc.get('internal_errors')}, {len(sc.get('findings', []))} finding(s) on rank 0")
        lines.extend(f"  note: {note}" for note in sc.get("notes", []))
        lines.extend(f"  - {finding}" for finding in sc.get("findings", []))
    if "csan" in phases:
        errors = phases["csan"].get("csan_errors", [0])[0]
        how = "report-and-continue (raise turned into a count)" if args.csan_continue else "as shipped (raises)"
        lines.append(f"csan: {how}, {errors} error(s) on rank 0")
    losses = {name: phases[name]["losses"] for name in phases}
    lines.append("losses per mode (steps differ between modes: each mode continues training): "
                 + "; ".join(f"{name} {[float.fromhex(v) for v in values][:3]}..." for name, values in losses.items()))
    return "\n".join(line for line in lines if line)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gpus", type=int, default=2, choices=(1, 2, 4, 8))
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument("--phases", default=",".join(PHASES), type=lambda text: text.split(","))
    parser.add_argument("--csan-continue", action="store_true")
    parser.add_argument("--layers", type=int, default=9)
    parser.add_argument("--hidden", type=int, default=4096)
    parser.add_argument("--intermediate", type=int, default=11008)
    parser.add_argument("--heads", type=int, default=32)
    parser.add_argument("--seq", type=int, default=256)
    parser.add_argument("--out", default=None, help="directory for the result JSON, findings and the job's log")
    args = parser.parse_args()
    unknown = [p for p in args.phases if p not in PHASES]
    if unknown:
        parser.error(f"unknown phase(s) {unknown}; choose from {list(PHASES)}")
    out = Path(args.out or tempfile.mkdtemp(prefix="overhead-"))
    out.mkdir(parents=True, exist_ok=True)
    result_path = out / "overhead-result.json"
    log_path = out / "overhead-job.log"
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    with open(log_path, "w") as log:
        job = subprocess.run(command(args, result_path, out / "sc-findings"), env=env, stdout=log,
                             stderr=subprocess.STDOUT, check=False)
    if not result_path.exists():
        print(f"the job exited {job.returncode} without a result; its log: {log_path}", file=sys.stderr)
        print("".join(open(log_path).readlines()[-40:]), file=sys.stderr)
        return 1
    text = report(json.loads(result_path.read_text()), args)
    print(text)
    (out / "overhead.txt").write_text(text + "\n")
    return 0 if job.returncode == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
