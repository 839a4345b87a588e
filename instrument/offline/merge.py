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
Findings are one when their fingerprint and their lines agree: the fingerprint alone (made to survive edits that
move code, for baselines) would fold distinct races on lines of the same text into one.

Damage is never fatal and never silent: a truncated last line (a killed job), a line that is not JSON or not a
finding (fields of the wrong type included), a trace line that cannot be replayed, a trace whose header is foreign
or too new: each is a warning naming file and line, the rest is kept, and `damaged` is set, so that the report's
exit code cannot say "clean" about input it could not fully read. Inputs of the same rank (two traces, two
findings files) are all kept and said in a warning.
"""

from __future__ import annotations

import io
import json
import zlib
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Iterable, Iterator

from streamcheck.constants import FINDINGS_FORMAT, TRACE_FORMAT, open_maybe_gzip
from streamcheck.findings import Finding



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
    damaged: bool = False  # some input of ours could not be read in full (see warnings)
    all_traces: list[TraceInput] = field(default_factory=list)  # `traces` keeps the first of each rank

    def damage(self, warning: str) -> None:
        self.warnings.append(warning)
        self.damaged = True

    def trace_for(self, finding: Finding) -> TraceInput | None:
        return self.traces.get(rank_of(finding))


def merge(inputs: Iterable[str | Path]) -> MergedReport:
    """Read every input (files and directories) and merge their findings. Raises MergeError on unusable input."""
    report = MergedReport()
    runs: list[tuple[int, dict[str, Finding]]] = []  # (rank, merge key -> last line of that run)
    findings_files: dict[int, list[Path]] = {}
    for path in _expand(inputs):
        try:
            kind = _kind(path)
        except MergeError as exc:  # one unreadable file (permissions, a folder named .jsonl) does not stop the rest
            report.damage(f"{exc}, skipped")
            continue
        if kind is None:
            report.warnings.append(f"{path}: not a streamcheck findings file or trace, skipped")
            continue
        report.files.append(path)
        if kind == FINDINGS_FORMAT:
            file_runs = _read_findings(path, report)
            runs.extend(file_runs)
            for rank in sorted({rank for rank, _ in file_runs}):
                findings_files.setdefault(rank, []).append(path)
        elif _usable_trace(path, report):
            header = _first_record(path)
            rank = int_or_zero(header.get("rank"))
            report.world_size = max(report.world_size, int_or_zero(header.get("world_size")))
            trace = TraceInput(path, rank, header)
            report.traces.setdefault(rank, trace)
            report.all_traces.append(trace)
    _say_shared_ranks(report, findings_files)
    ranks_with_findings_file = {rank for rank, _ in runs} | report.ranks
    for trace in sorted(report.all_traces, key=lambda t: t.rank):
        if trace.rank not in ranks_with_findings_file:
            runs.append((trace.rank, _findings_of_trace(trace, report)))
    report.ranks.update(t.rank for t in report.all_traces if t.rank not in ranks_with_findings_file)
    report.findings = combine(runs)
    return report


def _usable_trace(path: Path, report: MergedReport) -> bool:
    """A trace whose header this streamcheck can read (not too new, not foreign); else a damage warning."""
    from streamcheck.instrument.trace import TraceError, read_trace

    events = read_trace(path, problems=[])
    try:
        next(events)
    except TraceError as exc:
        report.damage(f"{exc}; this trace was not used")
        return False
    finally:
        events.close()
    return True


def _say_shared_ranks(report: MergedReport, findings_files: dict[int, list[Path]]) -> None:
    """Two inputs of one rank are usually two jobs' outputs mixed in one folder: keep both, but say so."""
    for rank, paths in sorted(findings_files.items()):
        if len(paths) > 1:
            report.warnings.append(f"rank {rank} is in {len(paths)} findings files ({', '.join(map(str, paths))}): "
                                   "all are kept and their counts added")
    traces: dict[int, list[Path]] = {}
    for trace in report.all_traces:
        traces.setdefault(trace.rank, []).append(trace.path)
    for rank, paths in sorted(traces.items()):
        if len(paths) > 1:
            report.warnings.append(f"rank {rank} has {len(paths)} traces ({', '.join(map(str, paths))}): all are "
                                   f"kept; names and pictures come from {paths[0]}")


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
        binary = open_maybe_gzip(path.open("rb"))
    except OSError as exc:
        raise MergeError(f"{path}: cannot read: {exc.strerror or exc}") from None
    return io.TextIOWrapper(binary, encoding="utf-8", errors="replace", newline="")


def _first_record(path: Path) -> dict:
    """The first non-blank line as an object ({} for anything else); MergeError if the file cannot be opened."""
    opened = _open(path)
    try:
        with opened as lines:
            for line in lines:
                if line.strip():
                    record = json.loads(line)
                    return record if isinstance(record, dict) else {}
    except (ValueError, OSError, EOFError, zlib.error, RecursionError):
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
        report.damage(f"{path}: cut short after line {len(text_lines)} ({exc}); the lines before are kept")
    for number, line in enumerate(text_lines, 1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except (ValueError, RecursionError) as exc:
            if not line.endswith("\n") and number == len(text_lines):  # the writer stopped mid-line
                report.damage(f"{path}:{number}: truncated last line (was the job killed?), ignored")
            elif isinstance(exc, RecursionError):
                report.damage(f"{path}:{number}: not JSON this reader can take (nested too deep), ignored")
            else:
                report.damage(f"{path}:{number}: not JSON, ignored")
            continue
        if not isinstance(record, dict):
            report.damage(f"{path}:{number}: not a JSON object, ignored")
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
        why = _not_a_finding(record)
        if why:
            report.damage(f"{path}:{number}: not a finding ({why}), ignored")
            continue
        finding = Finding.from_dict(record)
        if current is None:  # lines before any header: a file whose start was lost
            current = {}
            runs.append((rank, current))
        current[merge_key(finding)] = finding
    return runs


_LOCATION_TYPES = {"path": str, "line": int, "column": int, "role": str, "note": str, "snippet": str}
_FINDING_TYPES = {"rule": str, "message": str, "primary": dict, "fix": str, "kind": str, "symbol": str,
                  "severity": str, "count": int, "extra": dict, "related": list}


def _not_a_finding(record: dict) -> str:
    """Why a findings-file record cannot be a Finding ("" if it can): the fields every report reads, typed."""
    why = _mistyped(record, _FINDING_TYPES, "", required=("rule", "message", "primary"))
    if why:
        return why
    why = _mistyped(record["primary"], _LOCATION_TYPES, "primary.", required=("path", "line"))
    for k, related in enumerate(record.get("related") or ()):
        if why:
            break
        if not isinstance(related, dict):
            return f"related[{k}] must be an object, not {_json_name(related)}"
        why = _mistyped(related, _LOCATION_TYPES, f"related[{k}].", required=("path", "line"))
    return why


def _mistyped(data: dict, types: dict[str, type], prefix: str, required: tuple[str, ...]) -> str:
    for key in required:
        if key not in data:
            return f"no {prefix}{key}"
    for key, expected in types.items():
        if key in data and type(data[key]) is not expected:
            return f"{prefix}{key} must be {_NAMES[expected]}, not {_json_name(data[key])}"
    return ""


def _json_name(value: Any) -> str:
    return f"{_NAMES.get(type(value), type(value).__name__)} {json.dumps(value)[:40]}"


_NAMES = {str: "a string", int: "an integer", dict: "an object", list: "a list", bool: "a boolean",
          float: "a number", type(None): "null"}


def _findings_of_trace(trace: TraceInput, report: MergedReport) -> dict[str, Finding]:
    """Replay a trace through the online detector: its races as findings (race_findings)."""
    from streamcheck.instrument.detector import Detector
    from streamcheck.instrument.trace import TraceError, read_trace, replay

    detector = Detector()
    problems: list[str] = []
    try:
        replay(read_trace(trace.path, problems), detector, problems)
    except TraceError as exc:  # no usable header (foreign, too new): the trace cannot be replayed at all
        report.damage(f"{exc}; this trace was not replayed")
    for problem in problems:
        report.damage(problem)
    return race_findings(detector, trace.rank)


def race_findings(detector, rank: int) -> dict[str, Finding]:
    """The races a replayed detector found, as the watch reports them (instrument/races.py race_finding),
    deduplicated by merge key: the first race of each, with `count` the number of races of that key. Also for
    `streamcheck analyze`."""
    from streamcheck.instrument.races import Names, race_finding

    names = Names.of(detector)
    found: dict[str, Finding] = {}
    for race in detector.races:
        finding = race_finding(race, names, rank=rank)
        key = merge_key(finding)
        seen = found.get(key)
        found[key] = finding if seen is None else replace(seen, count=seen.count + 1)
    return found


def merge_key(finding: Finding) -> str:
    """What makes two runtime findings one: the fingerprint and the lines of the places it names (a runtime
    finding's lines are exact, and two races on lines of the same text are two races)."""
    lines = [str(finding.primary.line)] + [f"{loc.role}:{loc.path}:{loc.line}" for loc in finding.related
                                           if loc.role in ("read", "write", "free")]
    return f"{finding.fingerprint}@{','.join(lines)}"


# ---- merging ----------------------------------------------------------------------------------------------------
def combine(runs: list[tuple[int, dict[str, Finding]]]) -> list[Finding]:
    """(rank, merge key -> finding) per run -> each finding once, with ranks, counts_by_rank and steps."""
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
