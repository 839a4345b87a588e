"""The facts pass alone, in one process: dump every file's facts (to prove a speed change extracts the same), time
it per kind of file in CPU seconds, or profile it.

    python benchmarks/extraction_facts.py dump FOLDER OUT.jsonl       # FileFacts.to_dict of each file, in path order
    python benchmarks/extraction_facts.py time FOLDER [--repeat N]     # CPU s: prefilter, detailed, plain (median)
    python benchmarks/extraction_facts.py profile FOLDER [--top N]     # cProfile, by tottime and by cumtime
    python benchmarks/extraction_facts.py parse FOLDER [--repeat N]    # CPU s: ast.parse alone, per kind of file
                                                                     # (the floor of the facts pass: no visitor)
    python benchmarks/extraction_facts.py floor FOLDER --what parse|plain [--jobs N]
                                                                     # wall: every file read and parsed (parse), or
                                                                     # through the plain pass (plain), in N processes
    python benchmarks/extraction_facts.py ab FOLDER BASE_RULES [--repeat N] [--only plain|detailed]
                                                                     # CPU s: another checkout's rules/ vs these,
                                                                     # file by file in one process

Two dumps of the same folder made before and after a change must be byte-identical (`cmp`). CPU time
(time.process_time) is used since the machine may be shared; compare medians of alternating runs. `ab` is the
steadier comparison on a shared machine: it imports BASE_RULES (e.g. /work/main/rules) as a second package and
extracts each file with both, in alternating order, so both see the same load (run to run spread ~1-2 %, against
~15 % between separate runs).
"""

from __future__ import annotations

import argparse
import cProfile
import gc
import json
import pstats
import statistics
import sys
import time
import warnings
from pathlib import Path

from streamcheck.rules.extract import extract
from streamcheck.rules.facts import ParseFailure, needs_detail
from streamcheck.rules.options import StaticOptions


def sources(folder: Path) -> list[tuple[str, str]]:
    found = []
    for path in sorted(folder.rglob("*.py")):
        try:
            found.append((str(path.relative_to(folder.parent)), path.read_text(encoding="utf-8")))
        except (UnicodeDecodeError, OSError):
            continue
    return found


def one(text: str, path: str, options: StaticOptions, detailed: bool):
    try:
        return extract(text, path, options, detailed)
    except (ParseFailure, RecursionError) as exc:
        return exc


def dump(folder: Path, out: Path) -> None:
    options = StaticOptions()
    with out.open("w") as stream:
        for path, text in sources(folder):
            facts = one(text, path, options, needs_detail(text, options))
            row = facts.to_dict() if not isinstance(facts, BaseException) else {"failure": repr(facts)}
            stream.write(json.dumps({"path": path, "facts": row}) + "\n")


def timings(folder: Path, repeat: int) -> None:
    options = StaticOptions()
    files = sources(folder)
    runs: dict[str, list[float]] = {"prefilter": [], "detailed": [], "plain": [], "total": []}
    counts = {}
    for _ in range(repeat):
        spent = {"prefilter": 0.0, "detailed": 0.0, "plain": 0.0}
        counts = {"detailed": 0, "plain": 0}
        for path, text in files:
            started = time.process_time()
            detailed = needs_detail(text, options)
            middle = time.process_time()
            one(text, path, options, detailed)
            kind = "detailed" if detailed else "plain"
            spent["prefilter"] += middle - started
            spent[kind] += time.process_time() - middle
            counts[kind] += 1
        for key, value in spent.items():
            runs[key].append(value)
        runs["total"].append(sum(spent.values()))
    print(f"{folder}: {len(files)} files, {counts['detailed']} detailed, {counts['plain']} plain; CPU s, "
          f"{repeat} runs")
    for key, values in runs.items():
        print(f"  {key:<10} median {statistics.median(values):6.3f}   runs " + " ".join(f"{v:.3f}" for v in values))


def parse_only(folder: Path, repeat: int) -> None:
    """What ast.parse alone costs, per kind of file, against the whole pass: the part no visitor change can cut."""
    import ast

    options = StaticOptions()
    files = [(path, text, needs_detail(text, options)) for path, text in sources(folder)]
    runs: dict[str, list[float]] = {"parse detailed": [], "parse plain": [], "extract detailed": [],
                                    "extract plain": []}
    for _ in range(repeat):
        spent = dict.fromkeys(runs, 0.0)
        for path, text, detailed in files:
            kind = "detailed" if detailed else "plain"
            started = time.process_time()
            try:
                ast.parse(text, filename=path)
            except (SyntaxError, ValueError):
                pass
            middle = time.process_time()
            one(text, path, options, detailed)
            spent["parse " + kind] += middle - started
            spent["extract " + kind] += time.process_time() - middle
        for key, value in spent.items():
            runs[key].append(value)
    print(f"{folder}: {len(files)} files; CPU s, median of {repeat} (parse: ast.parse alone, the tree dropped; "
          f"extract: the whole facts pass, its parse included)")
    for key, values in runs.items():
        print(f"  {key:<17} median {statistics.median(values):6.3f}   runs " + " ".join(f"{v:.3f}" for v in values))


def _floor_share(what: str, paths: list[Path], root: Path) -> int:
    """Read and parse (or put through the plain pass) each of `paths`; the count done."""
    import ast

    options = StaticOptions()
    done = 0
    for path in paths:
        try:
            text = path.read_text(encoding="utf-8")
            if what == "parse":
                ast.parse(text, filename=str(path))
            else:
                one(text, str(path.relative_to(root)), options, False)
        except (UnicodeDecodeError, OSError, SyntaxError, ValueError, RecursionError):
            continue
        done += 1
    return done


def floor(folder: Path, what: str, jobs: int) -> None:
    """The least an extraction of every file built on `ast` costs, in `jobs` processes: each file read and parsed
    (`parse`), or each file through the plain pass, the one the prefilter gives files that name no stream word
    (`plain`: definitions, imports, calls). Files are dealt out by size, largest first, to the emptiest share; no
    result is sent back (a scan also has to bring its facts home: this is a floor)."""
    from concurrent.futures import ProcessPoolExecutor
    import multiprocessing

    started = time.perf_counter()
    sized = sorted(((path.stat().st_size, path) for path in folder.rglob("*.py")), reverse=True)
    shares: list[list[Path]] = [[] for _ in range(jobs)]
    sizes = [0] * jobs
    for size, path in sized:
        emptiest = sizes.index(min(sizes))
        shares[emptiest].append(path)
        sizes[emptiest] += size
    if jobs == 1:
        done = _floor_share(what, shares[0], folder.parent)
    else:
        with ProcessPoolExecutor(jobs - 1, mp_context=multiprocessing.get_context("fork")) as pool:
            others = [pool.submit(_floor_share, what, share, folder.parent) for share in shares[1:]]
            done = _floor_share(what, shares[0], folder.parent) + sum(other.result() for other in others)
    print(f"{folder}: {done} of {len(sized)} files, {what}, {jobs} processes: {time.perf_counter() - started:.2f} s "
          f"wall")


def profile(folder: Path, top: int) -> None:
    options = StaticOptions()
    files = sources(folder)
    profiler = cProfile.Profile()
    profiler.enable()
    for path, text in files:
        one(text, path, options, needs_detail(text, options))
    profiler.disable()
    for key in ("tottime", "cumtime"):
        pstats.Stats(profiler).sort_stats(key).print_stats(top)


def ab(folder: Path, base_rules: Path, repeat: int, only: str | None = None) -> None:
    import importlib
    import shutil
    import tempfile

    scratch = Path(tempfile.mkdtemp(prefix="extraction-ab-"))
    shutil.copytree(base_rules, scratch / "base_rules", ignore=shutil.ignore_patterns("__pycache__"))
    sys.path.insert(0, str(scratch))  # (the rules import each other relatively: the copy is a package of its own)
    base_extract = importlib.import_module("base_rules.extract").extract
    base_options = importlib.import_module("base_rules.options").StaticOptions()
    options = StaticOptions()
    files = [(path, text, needs_detail(text, options)) for path, text in sources(folder)]
    if only is not None:  # one kind of file: a change to one pass is not lost in the other's time
        files = [row for row in files if row[2] == (only == "detailed")]
    runs: dict[str, list[float]] = {"base": [], "new": []}
    for round_ in range(repeat):
        spent = {"base": 0.0, "new": 0.0}
        for index, (path, text, detailed) in enumerate(files):
            order = ("base", "new") if (round_ + index) % 2 else ("new", "base")
            for which in order:
                started = time.process_time()
                try:
                    if which == "base":
                        base_extract(text, path, base_options, detailed)
                    else:
                        extract(text, path, options, detailed)
                except Exception:  # (a parse failure: both fail alike)
                    pass
                spent[which] += time.process_time() - started
        for key, value in spent.items():
            runs[key].append(value)
        print(f"  run {round_ + 1}: base {spent['base']:.3f}  new {spent['new']:.3f}  new/base "
              f"{spent['new'] / spent['base']:.3f}", flush=True)
    base, new = statistics.median(runs["base"]), statistics.median(runs["new"])
    print(f"{folder}: {len(files)} {only + ' ' if only else ''}files; extraction CPU s (median of {repeat}): base {base:.3f}, new {new:.3f}, "
          f"new/base {new / base:.3f}")
    shutil.rmtree(scratch, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("command", choices=("dump", "time", "profile", "ab", "parse", "floor"))
    parser.add_argument("folder", type=Path)
    parser.add_argument("out", type=Path, nargs="?", help="dump: the output file; ab: the base rules/ folder")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--top", type=int, default=40)
    parser.add_argument("--only", choices=("plain", "detailed"), help="ab: only the files of this kind")
    parser.add_argument("--what", choices=("parse", "plain"), default="parse", help="floor: parse, or the plain pass")
    parser.add_argument("--jobs", type=int, default=2, help="floor: processes")
    args = parser.parse_args()
    warnings.simplefilter("ignore")  # the parser's warnings about the scanned code
    sys.setrecursionlimit(max(sys.getrecursionlimit(), 20_000))
    gc.disable()  # as the scan does while it extracts (scanner/extraction.py paused_collector)
    if args.command == "dump":
        dump(args.folder, args.out)
    elif args.command == "time":
        timings(args.folder, args.repeat)
    elif args.command == "ab":
        ab(args.folder, args.out, args.repeat, args.only)
    elif args.command == "parse":
        parse_only(args.folder, args.repeat)
    elif args.command == "floor":
        floor(args.folder, args.what, args.jobs)
    else:
        profile(args.folder, args.top)


if __name__ == "__main__":
    main()
