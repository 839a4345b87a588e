"""`streamcheck run [--out DIR] -- CMD ...`: run CMD with the runtime detector in every rank, then report.

CMD may be `python train.py`, `torchrun --nproc_per_node 2 train.py`, `deepspeed train.py`, or anything that
starts Python processes: instrumentation travels through the environment (instrument/launch.py). The program is
never stopped by a finding (unless --fail-fast); when it ends (also after Ctrl-C, or when a rank was killed: findings
are flushed as they are found), the per-rank findings are merged and printed.
Exit: 1 when anything was found, 2 when the command could not run or failed without findings, 0 otherwise.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--out", default="streamcheck-out", help="directory for the per-rank findings (JSONL)")
    parser.add_argument("--format", default="text", choices=["text", "json", "sarif", "github"],
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
    from streamcheck.merge import MergeError, merge

    cmd = list(args.cmd)
    if cmd and cmd[0] == "--":
        cmd = cmd[1:]
    if not cmd:
        print("streamcheck run: no command given; usage: streamcheck run [--out DIR] -- CMD ...", file=sys.stderr)
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
        print(f"streamcheck run: no process was instrumented (is the command a Python program?); command exit code "
              f"{returncode}", file=sys.stderr)
        return 2 if returncode else 0
    for warning in merged.warnings:
        print(f"streamcheck run: warning: {warning}", file=sys.stderr)
    for error in merged.errors:
        print(f"streamcheck run: instrumentation error on {error}", file=sys.stderr)
    findings = enriched_findings(merged)
    write_merged(findings, merged, args.format, sys.stdout)
    total = sum(f.count for f in findings)
    ranks = ", ".join(str(r) for r in sorted(merged.ranks)) or "none"
    print(f"streamcheck run: {len(findings)} finding(s), {total} occurrence(s); instrumented ranks: {ranks}; "
          f"command exit code {returncode}; per-rank files in {out_dir}", file=sys.stderr)
    if findings:
        return 1
    return 2 if returncode else 0
