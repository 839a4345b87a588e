"""How fast `streamcheck scan` is on a real code base, next to the floors it cannot beat, measured in one run.

    python benchmarks/scan_speed.py [--jobs N] [--timeout S]

On the DeepSpeed 0.13.4 package (the sdist is downloaded once into .cache/sdists/ by the tests' helper; the
benchmark scans a scratch copy of it), it prints:

- cold scan: `streamcheck scan` as a fresh process with an empty Facts cache (what CI pays on a new runner);
- warm scan: the same command again, nothing changed (what a developer pays on the next commit);
- one file changed: the same command after an edit of one file (its Facts are re-extracted, the rest come from the
  cache, and the rules run again over all of them);
- the libcst-parse-only floor: `libcst.parse_module` of every scanned file, in one process and in N processes;
- `ast.parse` of the same files, in one process;

and the ratios between them. Scan times are wall times of the whole command, interpreter start included.
Goals (2 cores): cold <= 8 s and <= 1.5x the libcst floor; warm < 1 s.
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))  # the sdist download/unpack helper the tests use (streamcheck: installed)

from conftest import unpacked_sdist  # noqa: E402
from streamcheck.scanner.config import ScanConfig  # noqa: E402
from streamcheck.scanner.driver import default_jobs  # noqa: E402
from streamcheck.scanner.sources import Source, discover, read_source  # noqa: E402

PACKAGE, VERSION = "deepspeed", "0.13.4"


def private_copy(package: str = PACKAGE, version: str = VERSION) -> Path:
    """A scratch copy of `package==version`'s sdist tree (the shared one under .cache/sdists/ is never edited)."""
    shared = unpacked_sdist(package, version)  # downloads once; shared with tests/test_deepspeed_sc101.py
    scratch = Path(tempfile.mkdtemp(prefix=f"scan-speed-{package}-"))
    shutil.copytree(shared / package, scratch / package)
    return scratch


def _parse_cst(text: str) -> None:
    import libcst

    libcst.parse_module(text)


def _time(fn) -> float:
    started = time.perf_counter()
    fn()
    return time.perf_counter() - started


def scan_once(root: Path, cache: Path, jobs: int, timeout: float) -> tuple[float, dict | None, str]:
    command = [sys.executable, "-m", "streamcheck.cli", "scan", "--format", "json", "--no-progress",
               "--cache-dir", str(cache), "--jobs", str(jobs), PACKAGE]
    started = time.perf_counter()
    try:
        done = subprocess.run(command, cwd=root, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return time.perf_counter() - started, None, f"did not finish within {timeout:.0f} s"
    seconds = time.perf_counter() - started
    if done.returncode not in (0, 1):
        return seconds, None, f"exit {done.returncode}: {done.stderr.strip()[-500:]}"
    return seconds, json.loads(done.stdout), ""


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=default_jobs(), help="scan and parallel-parse processes")
    parser.add_argument("--timeout", type=float, default=300, help="give up on a scan after this many seconds")
    args = parser.parse_args()

    root = private_copy()
    try:
        return measure(root, args)
    finally:
        shutil.rmtree(root, ignore_errors=True)


def measure(root: Path, args: argparse.Namespace) -> int:
    config = ScanConfig(root=root)
    files = discover([str(root / PACKAGE)], config)
    sources = [s for s in (read_source(f.disk_path, 1 << 30) for f in files) if isinstance(s, Source)]
    texts = [s.text for s in sources]
    lines = sum(t.count("\n") for t in texts)
    print(f"{PACKAGE} {VERSION}: {len(texts)} files, {lines / 1000:.1f} k lines; {args.jobs} jobs, "
          f"{os.cpu_count()} cores; python {sys.version.split()[0]}")

    ast_s = _time(lambda: [ast.parse(t) for t in texts])
    try:
        import libcst  # noqa: F401  (imported before timing: the floor is parsing, not importing)
    except ImportError:
        print("scan_speed: libcst is the reference parser of this benchmark: pip install -e '.[bench]'", file=sys.stderr)
        return 2

    cst_1 = _time(lambda: [_parse_cst(t) for t in texts])
    with ProcessPoolExecutor(args.jobs) as pool:
        cst_n = _time(lambda: list(pool.map(_parse_cst, texts, chunksize=8)))

    edited = root / PACKAGE / "runtime" / "zero" / "partition_parameters.py"
    original = edited.read_bytes()
    with tempfile.TemporaryDirectory() as cache_dir:
        cold_s, cold_doc, cold_err = scan_once(root, Path(cache_dir), args.jobs, args.timeout)
        warm_s, warm_doc, warm_err = scan_once(root, Path(cache_dir), args.jobs, args.timeout)
        try:
            edited.write_bytes(original + b"\n# edited by benchmarks/scan_speed.py\n")
            edit_s, edit_doc, edit_err = scan_once(root, Path(cache_dir), args.jobs, args.timeout)
        finally:
            edited.write_bytes(original)

    def show(name: str, seconds: float, note: str = "") -> None:
        print(f"  {name:<34} {seconds:8.2f} s  {note}")

    show("ast.parse, 1 process", ast_s)
    show("libcst parse only, 1 process", cst_1)
    show(f"libcst parse only, {args.jobs} processes", cst_n, "(pool start included)")
    for name, seconds, doc, err in (("scan, cold (empty cache)", cold_s, cold_doc, cold_err),
                                    ("scan, warm (nothing changed)", warm_s, warm_doc, warm_err),
                                    ("scan, warm (one file changed)", edit_s, edit_doc, edit_err)):
        note = err or f"{doc['summary']['files']} files ({doc['summary']['parsed']} parsed), " \
                      f"{doc['summary']['findings']} findings {doc['summary']['by_rule']}"
        show(name, seconds, note)
    print("ratios:")
    print(f"  cold / libcst parse (1 process)      {cold_s / cst_1:6.2f}x   (goal <= 1.5x)")
    print(f"  cold / libcst parse ({args.jobs} processes)    {cold_s / cst_n:6.2f}x")
    print(f"  cold / ast.parse                     {cold_s / ast_s:6.2f}x")
    print(f"  libcst parse / ast.parse (1 process) {cst_1 / ast_s:6.2f}x")
    print(f"  warm / cold                          {warm_s / cold_s:6.2f}x")
    print(f"  one file changed / cold              {edit_s / cold_s:6.2f}x")
    goals = [("cold <= 8 s", cold_s <= 8 and not cold_err), ("cold <= 1.5x libcst floor", cold_s <= 1.5 * cst_1),
             ("warm < 1 s", warm_s < 1 and not warm_err)]
    print("goals: " + ", ".join(f"{name}: {'met' if ok else 'MISSED'}" for name, ok in goals))
    return 0 if not (cold_err or warm_err or edit_err) else 1


if __name__ == "__main__":
    sys.exit(main())
