"""`streamcheck run [--out DIR] -- CMD ...`: run CMD with the runtime detector in every rank, then report.

CMD may be `python train.py`, `torchrun --nproc_per_node 2 train.py`, `deepspeed train.py`, or anything that
starts Python processes: instrumentation travels through the environment (instrument/launch.py). The program is
never stopped by a finding (unless --fail-fast); when it ends (also after Ctrl-C, or when a rank was killed: findings
are flushed as they are found), the per-rank findings are merged and printed.
Exit: 1 when anything was found; else the command's own status (128+N when a signal N killed it), so a crash is not
mistaken for a usage error and a clean run of a clean program is 0; 2 for a usage error, when torch is not installed, when the command cannot start, or when no
process was instrumented (nothing was checked).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

from streamcheck.report import FORMATS


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--out", default="streamcheck-out", help="directory for the per-rank findings (JSONL)")
    parser.add_argument("--format", default="text", choices=list(FORMATS),
                        help="report format (default: text)")
    parser.add_argument("--fail-fast", action="store_true", help="stop the program at the first race")
    parser.add_argument("--trace", default=None,
                        help="also record every event into this trace file ({rank} is replaced by the rank)")
    parser.add_argument("--backend", default=None, choices=["auto", "native", "mode"],
                        help="what sees each op: the native C++ hook, the Python dispatch mode, or auto (native where "
                             "it builds; the default, also STREAMCHECK_BACKEND)")
    parser.add_argument("cmd", nargs=argparse.REMAINDER, help="the command, after --")


def run(args: argparse.Namespace) -> int:
    from streamcheck.commands.report import enriched_findings, write_merged
    from streamcheck.instrument.launch import clear_rank_files, prepare_environment
    from streamcheck.instrument.offline.merge import MergeError, merge

    cmd = list(args.cmd)
    if cmd and cmd[0] == "--":
        cmd = cmd[1:]
    if not cmd:
        print("streamcheck run: no command given; usage: streamcheck run [--out DIR] -- CMD ...", file=sys.stderr)
        return 2
    if not torch_installed():
        print(f"streamcheck run: the runtime detector needs PyTorch, which is not installed for {sys.executable}; "
              "install the torch build for your CUDA version (https://pytorch.org/get-started/locally/) or "
              "`pip install 'streamcheck[torch]'`; the static lint (`streamcheck scan`) works without it",
              file=sys.stderr)
        return 2
    out_dir = Path(args.out)
    try:
        env = prepare_environment(out_dir, fail_fast=args.fail_fast, trace=args.trace, backend=args.backend)
        clear_rank_files(out_dir)
    except OSError as exc:
        print(f"streamcheck run: cannot use output directory {out_dir}: {exc.strerror or exc}", file=sys.stderr)
        return 2
    try:
        process = subprocess.Popen(cmd, env=env)
    except OSError as exc:
        print(f"streamcheck run: cannot start {cmd[0]!r}: {exc.strerror or exc}", file=sys.stderr)
        return 2
    try:
        returncode = process.wait()
    except KeyboardInterrupt:
        # Ctrl-C reached the command too: let it end, then report what the ranks had found (flushed per finding).
        print("streamcheck run: interrupted; waiting for the command to end", file=sys.stderr)
        returncode = process.wait()
    try:
        merged = merge([out_dir])
    except MergeError:
        print(f"streamcheck run: no process was instrumented, nothing was checked (is the command a Python program, "
              f"with torch importable? see any 'instrumentation not started' line above); command exit code "
              f"{returncode}", file=sys.stderr)
        return returncode if returncode > 0 else 2
    for warning in merged.warnings:
        print(f"streamcheck run: warning: {warning}", file=sys.stderr)
    for error in merged.errors:
        print(f"streamcheck run: instrumentation error on {error}", file=sys.stderr)
    no_cuda = ranks_without_cuda(out_dir)
    if no_cuda:
        listed = ", ".join(str(rank) for rank in no_cuda)
        print(f"streamcheck run: warning: CUDA is not available in rank{'s' if len(no_cuda) > 1 else ''} {listed} "
              "(torch.cuda.is_available() is False): no CUDA stream ran there, so no stream race could be seen; "
              "run on a machine with a GPU and a CUDA build of torch", file=sys.stderr)
    findings = enriched_findings(merged)
    write_merged(findings, merged, args.format, sys.stdout)
    total = sum(f.count for f in findings)
    ranks = ", ".join(str(r) for r in sorted(merged.ranks)) or "none"
    print(f"streamcheck run: {len(findings)} finding(s), {total} occurrence(s); instrumented ranks: {ranks}; "
          f"command exit code {returncode}; per-rank files in {out_dir}", file=sys.stderr)
    if findings:
        return 1
    if returncode < 0:  # killed by a signal: the shell's convention
        return 128 - returncode
    return returncode


def torch_installed() -> bool:
    import importlib.util

    try:
        return importlib.util.find_spec("torch") is not None
    except (ImportError, ValueError):
        return False


def ranks_without_cuda(out_dir: Path) -> list[int]:
    """Ranks whose every process said in its header that CUDA was not available."""
    from streamcheck.instrument.launch import RANK_FILE_GLOB

    cuda: dict[int, bool] = {}
    for path in sorted(out_dir.glob(RANK_FILE_GLOB)):
        try:
            with open(path, encoding="utf-8", errors="replace") as handle:
                for line in handle:
                    if '"header"' not in line:
                        continue
                    try:
                        header = json.loads(line)
                    except (ValueError, RecursionError):
                        continue
                    if isinstance(header, dict) and header.get("e") == "header" and "cuda" in header:
                        rank = header.get("rank") if isinstance(header.get("rank"), int) else 0
                        cuda[rank] = cuda.get(rank, False) or header["cuda"] is not False
        except OSError:
            continue
    return sorted(rank for rank, available in cuda.items() if not available)
