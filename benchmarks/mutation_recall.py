"""Recall of the static rules on real orderings: delete one ordering statement, rescan, is the hole found?

    python benchmarks/mutation_recall.py --list-sites       write benchmarks/triage/mutation_sites.tsv
    python benchmarks/mutation_recall.py [--package NAME] [--limit N]

THE FIXED RULE (decided before any measurement or tuning; implemented in corpus_sites.py):

Sites. In the .py files under a target's site folders (TARGETS below), leaving out every file below a folder named
tests, test, benchmarks, benchmark, examples or example, a site is an expression statement (a call whose result is dropped) whose callee is
an attribute call `R.m(...)` with
  - m one of wait_stream, wait_event, record_stream, synchronize (any receiver: streams, events, devices,
    torch.cuda.synchronize(), get_accelerator().synchronize(), ...), or
  - m == wait and the receiver R is a call (`dist.all_reduce(t, async_op=True).wait()`) or R's last name
    (handle for `handle`, `self.handles[i]`, `self._handle`) contains event, handle, work, req or fut
    (case-insensitive), or is exactly h, w, e or ev;
and whose innermost enclosing function (nested defs, lambdas and classes are not part of a function) also makes a
tensor access outside the site statements: a call of a method named in corpus_sites.TENSOR_METHODS or of any
public method whose name ends in "_", a call of torch.* or dist.* outside torch.cuda/npu/xpu/mps/accelerator.*
and outside the stream API (synchronize, wait_stream, record, current_stream, Stream, Event, ...), or a load of
`.data` / `.grad`. Statements at module level or in a class body are not sites.

Mutation. The statement is replaced by `pass` (backslash continuations keep every line number), the file's facts are
extracted again, and the rules run over the program (the target's program folders, all files) once more.

Flagged. The deletion counts as flagged when some finding of the mutated program is absent from the unmodified
program's findings (compared by rule, kind, primary location and the (role, path, line) of its related locations)
and its primary or one of its related locations lies, by line span, in a "near" function: the function F that held
the statement, a function whose name is the last name of a callee called in F's body (any file of the program),
or a function whose body calls a callee whose last name is F's name.

Harmless. A deletion that protects nothing (timing code, a host-only wait, a wait right before the same stream's
next use) is listed with a reason in benchmarks/triage/mutation_harmless.tsv (package, version, path, line, reason).
recall = flagged / (sites - harmless), where flagged counts only the sites not listed as harmless.
Per shape: a flagged line ends in the rule and kind of its near findings (`[SC101 RAW]`); at the end the harmful
sites are counted by that, and the missed ones by the shape of their row in triage/mutation_misses_*.tsv.
"""

from __future__ import annotations

import argparse
import csv
import sys
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from corpus import CACHE, Package, find_package, unpacked  # noqa: E402
from corpus_sites import Function, Site, delete_statement, functions_of, python_files, sites_of  # noqa: E402

TRIAGE = Path(__file__).resolve().parent / "triage"
SITES_FILE = TRIAGE / "mutation_sites.tsv"
HARMLESS_FILE = TRIAGE / "mutation_harmless.tsv"


@dataclass(frozen=True)
class Target:
    name: str  # the label in the tables
    package: Package
    program: tuple[str, ...]  # folders the rules see
    sites: tuple[str, ...]  # folders the sites come from


TARGETS = (
    Target("deepspeed", find_package("deepspeed", "0.19.8"), ("deepspeed",), ("deepspeed",)),
    Target("megatron-core", find_package("megatron-core", "0.16.1"), ("megatron",), ("megatron",)),
    Target("vllm", find_package("vllm", "0.33.0"), ("vllm",), ("vllm",)),
    Target("torchrec", find_package("torchrec", "1.9.2"), ("torchrec",), ("torchrec",)),
    Target("torch-fsdp", find_package("torch", "2.13.0"), ("torch/distributed",), ("torch/distributed/fsdp",)),
)


def static_engine():
    """(extract(text, path) -> facts or None, analyze(facts list) -> findings): the only use of the rules' API."""
    from streamcheck.rules.engine import analyze
    from streamcheck.rules.facts import extract_facts
    from streamcheck.rules.options import StaticOptions

    options = StaticOptions()

    def extract(text: str, path: str):
        try:
            return extract_facts(text, path, options)
        except Exception:  # a file the rules cannot read is simply not part of the program (SC001 in a scan)
            return None

    return extract, lambda facts: analyze([f for f in facts if f is not None], options, None)


def finding_id(finding) -> tuple:
    """A finding as the same one before and after a deletion: its place, its related places and the tensor it is
    about (two findings at one line about two tensors are two findings: the copy service's source and target)."""
    related = tuple((loc.role, loc.path, loc.line) for loc in finding.related)
    return (finding.rule, finding.kind, finding.primary.path, finding.primary.line, related,
            (finding.extra or {}).get("path", ""))


def locations(finding):
    yield finding.primary.path, finding.primary.line
    for loc in finding.related:
        yield loc.path, loc.line


# -- the site list --------------------------------------------------------------------------------------------------

def list_sites(target: Target, tree: Path) -> list[Site]:
    found = []
    for rel in python_files(tree, target.sites, skip_test_folders=True):
        try:
            found += sites_of((tree / rel).read_text(encoding="utf-8"), rel)
        except (SyntaxError, UnicodeDecodeError, ValueError) as exc:
            print(f"  {rel}: not read ({type(exc).__name__})", file=sys.stderr)
    return found


def write_sites(rows: list[tuple[Target, Site]]) -> None:
    with open(SITES_FILE, "w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle, delimiter="\t", lineterminator="\n", quoting=csv.QUOTE_NONE, escapechar="\\")
        writer.writerow(("package", "version", "path", "line", "statement"))
        for target, site in rows:
            writer.writerow((target.name, target.package.version, site.path, site.line, site.text))


def committed(path: Path) -> set[tuple[str, str, int]]:
    """(package, path, line) of every row of a committed TSV whose columns start package, version, path, line."""
    with open(path, newline="", encoding="utf-8") as handle:
        rows = list(csv.reader(handle, delimiter="\t", quoting=csv.QUOTE_NONE))[1:]
    return {(cells[0], cells[2], int(cells[3])) for cells in rows if cells and not cells[0].startswith("#")}


# -- the measurement ------------------------------------------------------------------------------------------------

class Program:
    """The facts of every file of a target once; a mutation re-extracts only its file."""

    def __init__(self, tree: Path, folders: tuple[str, ...]):
        self.extract, self.analyze = static_engine()
        self.tree = tree
        self.paths = python_files(tree, folders, skip_test_folders=False)
        self.sources = {rel: (tree / rel).read_text(encoding="utf-8", errors="replace") for rel in self.paths}
        self.facts = {rel: self.extract(text, rel) for rel, text in self.sources.items()}
        self.base = {finding_id(f) for f in self.analyze(list(self.facts.values()))}
        self.functions = [fn for rel, text in self.sources.items() for fn in _functions_or_none(text, rel)]

    def new_findings(self, site: Site) -> list:
        mutated = delete_statement(self.sources[site.path], site)
        facts = dict(self.facts)
        facts[site.path] = self.extract(mutated, site.path)
        return [f for f in self.analyze(list(facts.values())) if finding_id(f) not in self.base]

    def near(self, site: Site) -> list[Function]:
        [holder] = [fn for fn in self.functions if fn.path == site.path and fn.qualname == site.function
                    and fn.line <= site.line <= fn.end_line] or [None]
        if holder is None:
            return []
        return [fn for fn in self.functions
                if fn is holder or fn.name in holder.calls or holder.name in fn.calls]


def _functions_or_none(text: str, rel: str) -> list[Function]:
    try:
        return functions_of(text, rel)
    except (SyntaxError, ValueError):
        return []


def near_findings(findings: list, near: list[Function]) -> list:
    """The findings with a location in one of the `near` functions (a deletion is flagged when there is one)."""
    return [finding for finding in findings
            if any(fn.path == path and fn.line <= line <= fn.end_line
                   for path, line in locations(finding) for fn in near)]


def shape_of(findings: list) -> str:
    """What a flagged deletion was found as: the rule and race kind of its near findings, e.g. `SC101 RAW`."""
    return ",".join(sorted({f"{f.rule} {f.kind}" for f in findings}))


def measure(target: Target, sites: list[tuple[str, int]], cache: Path) -> list[tuple[str, int, bool, str]]:
    """(path, line, flagged, shape_of its findings) of every committed site still found by the rule; prints one line per site."""
    tree = unpacked(target.package, cache)
    started = time.perf_counter()
    program = Program(tree, target.program)
    print(f"{target.name} {target.package.version}: {len(program.paths)} files in the program, "
          f"{len(program.base)} findings unmodified, {time.perf_counter() - started:.1f} s", flush=True)
    by_place = {(s.path, s.line): s for s in list_sites(target, tree)}
    outcomes = []
    for path, line in sites:
        site = by_place.get((path, line))
        if site is None:
            print(f"  gone    {path}:{line} (the committed site is not found by the rule any more)")
            continue
        found = near_findings(program.new_findings(site), program.near(site))
        outcomes.append((path, line, bool(found), shape_of(found)))
        shape = f"  [{shape_of(found)}]" if found else ""
        print(f"  {'flagged' if found else 'missed':7} {path}:{line}  {site.text}{shape}", flush=True)
    print(f"  ({len(outcomes)} mutations in {time.perf_counter() - started:.0f} s)", flush=True)
    return outcomes


def outcomes_of_log(log: Path) -> dict[str, list[tuple[str, int, bool, str]]]:
    """The per-site lines of a saved run's output, by target (to score it again with a newer harmless file)."""
    outcomes: dict[str, list[tuple[str, int, bool, str]]] = {}
    current = None
    for line in log.read_text(encoding="utf-8").splitlines():
        words = line.split()
        if not line.startswith(" ") and line.endswith(" s") and "files in the program" in line:
            current = outcomes.setdefault(words[0], [])
        elif current is not None and words and words[0] in ("flagged", "missed"):
            path, number = words[1].rsplit(":", 1)
            shape = line.rsplit("  [", 1)[1].rstrip("]") if line.endswith("]") and "  [" in line else ""
            current.append((path, int(number), words[0] == "flagged", shape))
    return outcomes


def summary(name: str, outcomes: list[tuple[str, int, bool, str]], harmless: set) -> tuple[int, int, int]:
    """Print and return (sites, flagged among the harmful ones, harmless)."""
    sites = len(outcomes)
    harmless_here = sum((name, path, line) in harmless for path, line, _, _ in outcomes)
    flagged = sum(hit and (name, path, line) not in harmless for path, line, hit, _ in outcomes)
    harmful = sites - harmless_here
    recall = f"{100 * flagged / harmful:.0f} %" if harmful else "n/a"
    print(f"{name}: sites {sites}, flagged {flagged}, harmless {harmless_here}, "
          f"recall {flagged}/{harmful} = {recall}", flush=True)
    return sites, flagged, harmless_here


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--list-sites", action="store_true", help=f"write {SITES_FILE.name} by the fixed rule")
    parser.add_argument("--package", action="append", help="only this target (repeatable)")
    parser.add_argument("--limit", type=int, default=0, help="only the first N sites of each target")
    parser.add_argument("--offset", type=int, default=0, help="skip the first N sites of each target (to split a run)")
    parser.add_argument("--path", action="append", help="only the sites of files whose path contains this text")
    parser.add_argument("--rescore", type=Path, help="score a saved run's output again (no scan)")
    args = parser.parse_args(argv)
    targets = [t for t in TARGETS if not args.package or t.name in args.package]
    if not targets:
        parser.error(f"unknown target; the targets are {', '.join(t.name for t in TARGETS)}")
    if args.list_sites:
        rows = [(t, s) for t in targets for s in list_sites(t, unpacked(t.package, CACHE))]
        write_sites(rows)
        for t in targets:
            print(f"{t.name}: {sum(1 for r in rows if r[0] is t)} sites")
        return 0
    listed = committed(SITES_FILE)
    harmless = committed(HARMLESS_FILE) if HARMLESS_FILE.exists() else set()
    saved = outcomes_of_log(args.rescore) if args.rescore else {}
    if args.rescore:
        targets = [t for t in targets if t.name in saved]  # a saved run scores only the targets it ran
    totals = [0, 0, 0]
    shapes: list[tuple[str, str, int, bool, str]] = []  # (target, path, line, flagged, shape) of harmful sites
    for target in targets:
        if args.rescore:
            outcomes = saved.get(target.name, [])
        else:
            sites = sorted((path, line) for name, path, line in listed if name == target.name
                           and (not args.path or any(text in path for text in args.path)))[args.offset:]
            outcomes = measure(target, sites[:args.limit] if args.limit else sites, CACHE)
        totals = [a + b for a, b in zip(totals, summary(target.name, outcomes, harmless))]
        shapes += [(target.name, path, line, hit, shape) for path, line, hit, shape in outcomes
                   if (target.name, path, line) not in harmless]
    sites, flagged, harmless_total = totals
    harmful = sites - harmless_total
    recall = f"{100 * flagged / harmful:.0f} %" if harmful else "n/a"
    print(f"total: sites {sites}, flagged {flagged}, harmless {harmless_total}, recall {flagged}/{harmful} = {recall}")
    print_shapes(shapes)
    return 0


def print_shapes(shapes: list[tuple[str, str, int, bool, str]]) -> None:
    """Flagged deletions by what they were found as; missed ones by the shape their triage row gives."""
    found = Counter(shape or "?" for _, _, _, hit, shape in shapes if hit)
    triaged = missed_shapes()
    missed = Counter(triaged.get((name, path, line), "untriaged") for name, path, line, hit, _ in shapes if not hit)
    if found:
        print("flagged, by finding: " + ", ".join(f"{shape} {n}" for shape, n in found.most_common()))
    if missed:
        print("missed, by triaged shape: " + ", ".join(f"{shape} {n}" for shape, n in missed.most_common()))
    # A misses row for a site this run flags is stale: its why_missed no longer holds, and it hides the gain.
    for name, path, line, hit, _ in shapes:
        if hit and (name, path, line) in triaged:
            print(f"stale misses row (flagged now): {name} {path}:{line}")
        elif not hit and (name, path, line) not in triaged:
            print(f"untriaged miss: {name} {path}:{line}")


def missed_shapes() -> dict[tuple[str, str, int], str]:
    """(target, path, line) -> the shape column of the committed misses files (RAW, WAR, FREE, HANDLE, ...)."""
    shapes = {}
    for path in sorted(TRIAGE.glob("mutation_misses_*.tsv")):
        with path.open(encoding="utf-8") as rows:
            for row in csv.DictReader(rows, delimiter="\t"):
                if row.get("shape") and row.get("line", "").isdigit():
                    shapes[(row["package"], row["path"], int(row["line"]))] = row["shape"]
    return shapes


if __name__ == "__main__":
    raise SystemExit(main())
