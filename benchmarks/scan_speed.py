"""How fast `streamcheck scan` is next to ruff, on the same real trees, measured side by side in one run.

    python benchmarks/scan_speed.py [--package NAME==VERSION ...] [--repeat N] [--jobs N] [--timeout S]

For each package (default: deepspeed 0.19.8 and vllm 0.33.0 of benchmarks/corpus.py, unpacked under
.cache/corpus/; a scratch copy is scanned, so the edit below never touches the shared tree) it runs, as fresh
processes one after the other:

- `ruff check --select ALL --no-cache` (ruff is the benchmark's yardstick, not a dependency of streamcheck:
  `pip install ruff` into the venv to run this);
- streamcheck cold (an empty facts cache) with `-j 1` and with `-j N` (N = --jobs, default 2);
- warm: the same command again, nothing changed; and once more with the text report (which underlines where each
  finding's expression ends: the cold scan kept those ends in the cache, report/regions.py);
- one file changed: a comment appended to the file that mentions streams most, then the same command;
- two floors, to tell a goal's distance from what this design can reach at all (extraction_facts.py floor): every
  file read and `ast.parse`d in N processes, and every file through the plain pass (the one the prefilter gives
  files that name no stream word) in N processes; the goals' lines then add the cold -j N row's whole-program and
  rules phases to the parse floor: what a scan would take if extracting facts cost no more than parsing;
- a control before and after: two pure-Python loops in two processes vs one after the other (about 2x on two
  free cores; near 1x when other work holds them, and then no -j row can do better);

and prints each one's wall time, the CPU seconds of its processes (user + system, workers included), the phase
times `--show-timings` reports, and the findings (every streamcheck row must find the same). With --repeat N each
row is run N times and its fastest run is shown (the machine may be shared: compare the rows of one run, as
ratios, not runs of different days). Before timing, one untimed scan fills a private bytecode cache
(PYTHONPYCACHEPREFIX) for every module a row imports (a JSON scan's, then a text scan's), as an installed package has
its .pyc files even where PYTHONDONTWRITEBYTECODE is set.

Goals (2 cores): cold <= 1.5x ruff on DeepSpeed 0.19.8; extraction with -j 2 >= 1.6x faster than with -j 1;
warm <= 0.3 s; vllm 0.33.0 cold <= 12 s.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "benchmarks"))

from corpus import find_package, unpacked  # noqa: E402

DEFAULT_PACKAGES = ("deepspeed==0.19.8", "vllm==0.33.0")
TEXT_FINDING = re.compile(r"^\S+:\d+:\d+: SC\d{3} ", re.MULTILINE)
FLOORS = {"parse": "floor: ast.parse, -j {jobs}", "plain": "floor: plain pass, -j {jobs}"}
PHASE = re.compile(r"^  (?P<phase>[a-z-]+) +(?P<seconds>\d+\.\d+) s$")


@dataclass
class Run:
    wall: float
    cpu: float  # user + system seconds of the command's processes
    phases: dict[str, float] = field(default_factory=dict)
    findings: int | None = None
    error: str = ""


def timed(command: list[str], cwd: Path, env: dict[str, str], timeout: float) -> tuple[Run, str, str]:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    try:
        done = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return Run(time.perf_counter() - started, 0.0, error=f"did not finish within {timeout:.0f} s"), "", ""
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    run = Run(wall, cpu)
    if done.returncode not in (0, 1):
        run.error = f"exit {done.returncode}: {done.stderr.strip()[-400:]}"
    return run, done.stdout, done.stderr


def streamcheck(tree: Path, folder: str, cache: Path, jobs: int, env: dict[str, str], timeout: float,
                report: str = "json") -> Run:
    command = [sys.executable, "-m", "streamcheck.cli", "scan", "--format", report, "--no-progress",
               "--show-timings", "--cache-dir", str(cache), "--jobs", str(jobs), folder]
    run, out, err = timed(command, tree, env, timeout)
    if not run.error and report == "json" and not out.lstrip().startswith("{"):
        run.error = f"no JSON report: {err.strip()[-400:]}"  # e.g. an interpreter without streamcheck
    if not run.error:
        # the text report: one `path:line:column: SCnnn ...` line per finding
        run.findings = len(json.loads(out)["findings"]) if report == "json" else len(TEXT_FINDING.findall(out))
        run.phases = {m["phase"]: float(m["seconds"]) for m in map(PHASE.match, err.splitlines()) if m}
    return run


def _burn(n: int) -> int:
    total = 0
    for i in range(n):
        total += i * i
    return total


def machine_parallelism(n: int = 10_000_000) -> float:
    """How many times faster two pure-Python loops run in two processes than one after the other, right now.

    The control for the -j rows: on a machine whose cores other work is using it falls from ~2x towards 1x,
    and no scan can be faster in parallel than this."""
    from concurrent.futures import ProcessPoolExecutor

    started = time.perf_counter()
    _burn(n), _burn(n)
    serial = time.perf_counter() - started
    with ProcessPoolExecutor(2) as pool:
        started = time.perf_counter()
        list(pool.map(_burn, [n, n]))
        parallel = time.perf_counter() - started
    return serial / parallel


def fastest(runs: list[Run]) -> Run:
    ok = [r for r in runs if not r.error]
    return min(ok, key=lambda r: r.wall) if ok else runs[0]


def most_stream_mentions(root: Path) -> Path:
    """The file a change is most likely to touch the analysis through: the one that mentions streams most."""
    return max(sorted(root.rglob("*.py")), key=lambda p: p.read_text(errors="replace").count("stream"))


def measure(spec: str, args: argparse.Namespace, env: dict[str, str]) -> dict[str, Run]:
    package = find_package(*spec.split("==", 1))
    folder = package.scan[0]
    shared = unpacked(package)
    scratch = Path(tempfile.mkdtemp(prefix=f"scan-speed-{package.label}-"))
    try:
        shutil.copytree(shared / folder, scratch / folder)
        files = sum(1 for _ in (scratch / folder).rglob("*.py"))
        print(f"\n{package.label}: {files} files; {os.cpu_count()} cores; python {sys.version.split()[0]}")
        # bytecode, untimed: a JSON scan, then a text one (the text report imports rich, which a JSON scan never
        # loads: without this the text row compiled rich's modules, 0.15 s of its 0.4 s on DeepSpeed in session 23)
        for report in ("json", "text"):
            streamcheck(scratch, folder, scratch / ".warm-up-cache", args.jobs, env, args.timeout, report=report)
        shutil.rmtree(scratch / ".warm-up-cache", ignore_errors=True)
        edited = most_stream_mentions(scratch / folder)
        original = edited.read_bytes()
        rows: dict[str, list[Run]] = {}
        controls = [machine_parallelism()]
        for attempt in range(args.repeat):
            ruff, _, _ = timed(["ruff", "check", "--select", "ALL", "--no-cache", "--exit-zero", "-q", folder],
                               scratch, env, args.timeout)
            rows.setdefault("ruff check --select ALL", []).append(ruff)
            for what in ("parse", "plain"):
                command = [sys.executable, str(REPO / "benchmarks" / "extraction_facts.py"), "floor", folder,
                           "--what", what, "--jobs", str(args.jobs)]
                rows.setdefault(FLOORS[what].format(jobs=args.jobs), []).append(
                    timed(command, scratch, env, args.timeout)[0])
            for jobs in (1, args.jobs):
                cache = scratch / f".cache-{attempt}-{jobs}"
                rows.setdefault(f"streamcheck cold -j {jobs}", []).append(
                    streamcheck(scratch, folder, cache, jobs, env, args.timeout))
            rows.setdefault("streamcheck warm", []).append(
                streamcheck(scratch, folder, cache, args.jobs, env, args.timeout))
            # the text report underlines the findings' expressions, whose ends the cold scan kept (report/regions.py)
            rows.setdefault("streamcheck warm, text format", []).append(
                streamcheck(scratch, folder, cache, args.jobs, env, args.timeout, report="text"))
            try:
                edited.write_bytes(original + f"\n# edited by scan_speed.py ({attempt})\n".encode())
                rows.setdefault("streamcheck one file changed", []).append(
                    streamcheck(scratch, folder, cache, args.jobs, env, args.timeout))
            finally:
                edited.write_bytes(original)
        controls.append(machine_parallelism())
        best = {name: fastest(runs) for name, runs in rows.items()}
        show(best, edited.relative_to(scratch))
        print(f"  control: two pure-Python loops in 2 processes vs one after the other: "
              f"{controls[0]:.2f}x before, {controls[1]:.2f}x after (2.0x = two free cores)")
        return best
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def show(rows: dict[str, Run], edited: Path) -> None:
    phases = ("discovery", "extraction", "whole-program", "rules", "report")
    print(f"  {'':<30} {'wall s':>7} {'cpu s':>7}  " + " ".join(f"{p:>13}" for p in phases) + "  findings")
    for name, run in rows.items():
        if run.error:
            print(f"  {name:<30} {run.error}")
            continue
        cells = " ".join(f"{run.phases[p]:13.3f}" if p in run.phases else f"{'-':>13}" for p in phases)
        found = "" if run.findings is None else str(run.findings)
        print(f"  {name:<30} {run.wall:7.2f} {run.cpu:7.2f}  {cells}  {found}")
    print(f"  (one file changed: {edited})")


def goals(results: dict[str, dict[str, Run]], jobs: int) -> list[tuple[str, str, bool]]:
    """(goal, what was measured, met) for each goal whose package was measured."""
    out = []
    for label, rows in results.items():
        ruff, cold_1, cold_n = rows["ruff check --select ALL"], rows["streamcheck cold -j 1"], \
            rows[f"streamcheck cold -j {jobs}"]
        warm = rows["streamcheck warm"]
        if any(r.error for r in (ruff, cold_1, cold_n, warm)):
            out.append((f"{label}: every row ran", "a row failed", False))
            continue
        parse = rows[FLOORS["parse"].format(jobs=jobs)]
        floor = None if parse.error else parse.wall + cold_n.phases["whole-program"] + cold_n.phases["rules"]
        at_floor = "" if floor is None else f" (at the parse floor: {floor:.2f} s = {floor / ruff.wall:.2f}x ruff)"
        if label == "deepspeed-0.19.8":
            ratio = cold_n.wall / ruff.wall
            out.append((f"{label}: cold -j {jobs} <= 1.5x ruff", f"{ratio:.2f}x{at_floor}", ratio <= 1.5))
        speedup = cold_1.phases["extraction"] / cold_n.phases["extraction"]
        out.append((f"{label}: extraction -j {jobs} >= 1.6x faster than -j 1", f"{speedup:.2f}x", speedup >= 1.6))
        out.append((f"{label}: warm <= 0.3 s", f"{warm.wall:.2f} s", warm.wall <= 0.3))
        text = rows["streamcheck warm, text format"]
        if not text.error:
            out.append((f"{label}: warm, text format <= 0.3 s", f"{text.wall:.2f} s", text.wall <= 0.3))
        if label == "vllm-0.33.0":
            out.append((f"{label}: cold <= 12 s", f"{cold_n.wall:.2f} s{at_floor}", cold_n.wall <= 12))
        counts = {r.findings for name, r in rows.items() if name.startswith("streamcheck")}
        out.append((f"{label}: every scan finds the same", f"{sorted(counts)} findings", len(counts) == 1))
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--package", action="append", metavar="NAME==VERSION",
                        help=f"a corpus package (repeatable; default: {', '.join(DEFAULT_PACKAGES)})")
    parser.add_argument("--jobs", type=int, default=2, help="the parallel row's -j (default 2)")
    parser.add_argument("--repeat", type=int, default=1, help="run each row N times, show the fastest")
    parser.add_argument("--timeout", type=float, default=600, help="give up on one command after this many s")
    args = parser.parse_args()
    if shutil.which("ruff") is None:
        print("scan_speed: ruff is the yardstick of this benchmark: pip install ruff", file=sys.stderr)
        return 2
    version = subprocess.run(["ruff", "--version"], capture_output=True, text=True).stdout.strip()
    with tempfile.TemporaryDirectory(prefix="scan-speed-pyc-") as pyc:
        env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
        env["PYTHONPYCACHEPREFIX"] = pyc
        print(f"{version}; load average before: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
        results = {}
        for spec in args.package or DEFAULT_PACKAGES:
            results[find_package(*spec.split("==", 1)).label] = measure(spec, args, env)
    print(f"\nload average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    print("goals:")
    verdicts = goals(results, args.jobs)
    for name, measured, met in verdicts:
        print(f"  {name}: {measured}  {'met' if met else 'MISSED'}")
    return 0 if all(r.findings is not None or name.startswith(("ruff", "floor")) for rows in results.values()
                    for name, r in rows.items()) else 1


if __name__ == "__main__":
    sys.exit(main())
