"""Merge what the ranks of a job recorded into one list of findings: each finding once, with its ranks and counts.

Inputs are files or directories. A file is recognised by its first line:
- a findings file (`streamcheck-rank{R}.jsonl`, written by `streamcheck.watch()`): a header, then one
  Finding.to_dict() line per new finding; when a watch stops it appends the finding again with its final count.
  Several processes (or several watches of one process, as under `pytest --streamcheck`) may append to one file,
  each starting with its own header: such a segment is one run, and the last line of a fingerprint in a segment
  holds that run's count;
- a trace (`streamcheck run --trace`, format streamcheck-trace): kept for names and pictures (`--graph`); when no
  findings file covers its rank, it is replayed through the race detector and its races become the findings.
A directory contributes its `*.jsonl` and `*.jsonl.gz` files (not recursively).

Merged finding = the first one seen (lowest rank) with `count` summed over every run, and in `extra`: `ranks` (sorted),
`counts_by_rank` ({rank: count}) and `steps` (the union of the runs' `steps` lists, when the runtime recorded them).
A job that was killed leaves a truncated last line: it is reported as a warning and the rest is kept.
"""

from __future__ import annotations

import gzip
import io
import json
import zlib
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Iterable, Iterator

from streamcheck.findings import Finding

FINDINGS_FORMAT = "streamcheck-findings"
TRACE_FORMAT = "streamcheck-trace"


class MergeError(ValueError):
    """An input that cannot be used at all (missing, unreadable, not ours); the message names it."""


@dataclass
class TraceInput:
    """A recorded trace of one rank; read again on demand (traces can be large)."""

    path: Path
    rank: int
    header: dict


@dataclass
class MergedReport:
    findings: list[Finding] = field(default_factory=list)
    ranks: set[int] = field(default_factory=set)
    world_size: int = 0
    traces: dict[int, TraceInput] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)  # instrumentation errors the runs reported
    warnings: list[str] = field(default_factory=list)  # lines or files left out, and why
    files: list[Path] = field(default_factory=list)

    def trace_for(self, finding: Finding) -> TraceInput | None:
        return self.traces.get(rank_of(finding))


def merge(inputs: Iterable[str | Path]) -> MergedReport:
    """Read every input (files and directories) and merge their findings. Raises MergeError on unusable input."""
    report = MergedReport()
    runs: list[tuple[int, dict[str, Finding]]] = []  # (rank, fingerprint -> last line of that run)
    for path in _expand(inputs):
        kind = _kind(path)
        if kind is None:
            report.warnings.append(f"{path}: not a streamcheck findings file or trace, skipped")
            continue
        report.files.append(path)
        if kind == FINDINGS_FORMAT:
            runs.extend(_read_findings(path, report))
        else:
            header = _first_record(path)
            rank = int_or_zero(header.get("rank"))
            report.world_size = max(report.world_size, int_or_zero(header.get("world_size")))
            report.traces.setdefault(rank, TraceInput(path, rank, header))
    ranks_with_findings_file = {rank for rank, _ in runs} | report.ranks
    for rank, trace in sorted(report.traces.items()):
        if rank not in ranks_with_findings_file:
            runs.append((rank, _findings_of_trace(trace, report)))
            report.ranks.add(rank)
    report.findings = combine(runs)
    return report


# ---- reading ----------------------------------------------------------------------------------------------------
def _expand(inputs: Iterable[str | Path]) -> Iterator[Path]:
    for given in inputs:
        path = Path(given)
        if path.is_dir():
            files = sorted(p for p in path.iterdir()
                           if p.is_file() and (p.name.endswith(".jsonl") or p.name.endswith(".jsonl.gz")))
            if not files:
                raise MergeError(f"{path}: no .jsonl files in this directory")
            yield from files
        elif path.is_file():
            yield path
        else:
            raise MergeError(f"{path}: no such file or directory")


def _open(path: Path) -> io.TextIOBase:
    try:
        raw = path.open("rb")
        magic = raw.read(2)
        raw.seek(0)
    except OSError as exc:
        raise MergeError(f"{path}: cannot read: {exc.strerror or exc}") from None
    binary = gzip.GzipFile(fileobj=raw) if magic == b"\x1f\x8b" else raw
    return io.TextIOWrapper(binary, encoding="utf-8", errors="replace", newline="")


def _first_record(path: Path) -> dict:
    try:
        with _open(path) as lines:
            for line in lines:
                if line.strip():
                    record = json.loads(line)
                    return record if isinstance(record, dict) else {}
    except (ValueError, OSError, EOFError):
        return {}
    return {}


def _kind(path: Path) -> str | None:
    header = _first_record(path)
    if header.get("e") == "header" and header.get("format") in (FINDINGS_FORMAT, TRACE_FORMAT):
        return header["format"]
    return None


def _lines(path: Path, report: MergedReport) -> Iterator[tuple[int, dict]]:
    """(line number, record) of every JSON object line; bad lines become warnings, a truncated end included."""
    text_lines: list[str] = []
    try:
        with _open(path) as stream:
            for line in stream:
                text_lines.append(line)
    except (OSError, EOFError, zlib.error) as exc:  # a gzip file cut short: keep what came before
        report.warnings.append(f"{path}: cut short after line {len(text_lines)} ({exc}); the lines before are kept")
    for number, line in enumerate(text_lines, 1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except ValueError:
            if not line.endswith("\n") and number == len(text_lines):  # the writer stopped mid-line
                report.warnings.append(f"{path}:{number}: truncated last line (was the job killed?), ignored")
            else:
                report.warnings.append(f"{path}:{number}: not JSON, ignored")
            continue
        if not isinstance(record, dict):
            report.warnings.append(f"{path}:{number}: not a JSON object, ignored")
            continue
        yield number, record


def _read_findings(path: Path, report: MergedReport) -> list[tuple[int, dict[str, Finding]]]:
    runs: list[tuple[int, dict[str, Finding]]] = []
    current: dict[str, Finding] | None = None
    rank = 0
    for number, record in _lines(path, report):
        if record.get("e") == "header":
            rank = int_or_zero(record.get("rank"))
            report.ranks.add(rank)
            report.world_size = max(report.world_size, int_or_zero(record.get("world_size")))
            current = {}
            runs.append((rank, current))
            continue
        if record.get("e") == "error":
            report.errors.append(f"rank {record.get('rank', rank)}: {record.get('error')}")
            continue
        if "e" in record:
            continue  # a record kind a later streamcheck writes: not a finding
        try:
            finding = Finding.from_dict(record)
        except (KeyError, TypeError, ValueError) as exc:
            report.warnings.append(f"{path}:{number}: not a finding ({type(exc).__name__}: {exc}), ignored")
            continue
        if current is None:  # lines before any header: a file whose start was lost
            current = {}
            runs.append((rank, current))
        current[finding.fingerprint] = finding
    return runs


def _findings_of_trace(trace: TraceInput, report: MergedReport) -> dict[str, Finding]:
    """Replay a trace through the online detector: its races as findings (race_findings)."""
    from streamcheck.instrument.detector import Detector
    from streamcheck.instrument.trace import TraceError, read_trace, replay

    detector = Detector()
    try:
        replay(read_trace(trace.path), detector)
    except TraceError as exc:
        report.warnings.append(f"{exc} (races up to there are kept)")
    return race_findings(detector, trace.rank)


def race_findings(detector, rank: int) -> dict[str, Finding]:
    """The races a replayed detector found, as the watch reports them (rank, stacks), deduplicated by fingerprint:
    the first race of each, with `count` the number of races of that fingerprint. Also for `streamcheck analyze`."""
    from streamcheck.instrument.races import Names, race_finding

    names = Names.of(detector)
    found: dict[str, Finding] = {}
    for race in detector.races:
        finding = race_finding(race, names)
        extra = {**finding.extra, "rank": rank,
                 "earlier_stack": _stack(detector.sites, race.earlier.site),
                 "later_stack": _stack(detector.sites, race.later.site)}
        finding = replace(finding, extra=extra)
        seen = found.get(finding.fingerprint)
        found[finding.fingerprint] = finding if seen is None else replace(seen, count=seen.count + 1)
    return found


def _stack(sites: dict, site: int) -> list[str]:
    """As the watch writes it: "path:line in function", the blamed frame first."""
    return [f"{frame[0]}:{frame[1]} in {frame[2]}" for frame in sites.get(site) or () if len(frame) >= 3]


# ---- merging ----------------------------------------------------------------------------------------------------
def combine(runs: list[tuple[int, dict[str, Finding]]]) -> list[Finding]:
    """(rank, fingerprint -> finding) per run -> each finding once, with ranks, counts_by_rank and steps."""
    first: dict[str, Finding] = {}
    counts_by_rank: dict[str, dict[int, int]] = {}
    steps: dict[str, set] = {}
    for rank, findings in sorted(runs, key=lambda run: run[0]):
        for fingerprint, finding in findings.items():
            first.setdefault(fingerprint, finding)
            by_rank = counts_by_rank.setdefault(fingerprint, {})
            by_rank[rank] = by_rank.get(rank, 0) + max(1, int(finding.count))
            run_steps = finding.extra.get("steps")
            if isinstance(run_steps, list):
                steps.setdefault(fingerprint, set()).update(s for s in run_steps if isinstance(s, int))
    merged = []
    for fingerprint, finding in first.items():
        by_rank = counts_by_rank[fingerprint]
        extra: dict[str, Any] = dict(finding.extra)
        extra.pop("rank", None)  # the first run's own: the merged finding has them all in "ranks"
        extra.pop("pid", None)
        extra["ranks"] = sorted(by_rank)
        extra["counts_by_rank"] = {str(rank): n for rank, n in sorted(by_rank.items())}
        if fingerprint in steps:
            extra["steps"] = sorted(steps[fingerprint])
        merged.append(replace(finding, count=sum(by_rank.values()), extra=extra))
    merged.sort(key=Finding.sort_key)
    return merged


def rank_of(finding: Finding) -> int:
    ranks = finding.extra.get("ranks")
    if isinstance(ranks, list) and ranks:
        return int_or_zero(ranks[0])
    return int_or_zero(finding.extra.get("rank"))


def int_or_zero(value: Any) -> int:
    """A header or finding field as an int; missing or malformed is 0 (rank 0, world size unknown)."""
    try:
        return int(value)
    except (TypeError, ValueError):
        return 0
