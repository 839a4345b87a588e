"""The facts pass alone, in one process: dump every file's facts (to prove a speed change extracts the same), time
it per kind of file in CPU seconds, or profile it.

    python benchmarks/extraction_facts.py dump FOLDER OUT.jsonl       # FileFacts.to_dict of each file, in path order
    python benchmarks/extraction_facts.py time FOLDER [--repeat N]     # CPU s: prefilter, detailed, plain (median)
    python benchmarks/extraction_facts.py profile FOLDER [--top N]     # cProfile, by tottime and by cumtime

Two dumps of the same folder made before and after a change must be byte-identical (`cmp`). CPU time
(time.process_time) is used since the machine may be shared; compare medians of alternating runs.
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("command", choices=("dump", "time", "profile"))
    parser.add_argument("folder", type=Path)
    parser.add_argument("out", type=Path, nargs="?")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--top", type=int, default=40)
    args = parser.parse_args()
    warnings.simplefilter("ignore")  # the parser's warnings about the scanned code
    sys.setrecursionlimit(max(sys.getrecursionlimit(), 20_000))
    gc.disable()  # as the scan does while it extracts (scanner/extraction.py paused_collector)
    if args.command == "dump":
        dump(args.folder, args.out)
    elif args.command == "time":
        timings(args.folder, args.repeat)
    else:
        profile(args.folder, args.top)


if __name__ == "__main__":
    main()
