"""The triage file of the real-code benchmark: one row per finding, judged by reading the scanned code.

benchmarks/triage/real_code.tsv is tab-separated, one header line, then one row per finding:

    package  version  rule  kind  path  line  detail  other  verdict  reason

A finding is identified by (package, version, rule, kind, path, line, detail, other): for a pinned release the
primary location does not move; `detail` (the finding's accessed path, `extra["path"]`, e.g. "param.ds_tensor")
and `other` (path:line of its first related read, write or free) tell apart findings on one line; findings that
still share a key need one row each. `verdict` is one of VERDICTS; `todo` marks a row written by --write-missing
that nobody has judged yet. Lines starting with "#" are comments.
"""

from __future__ import annotations

import csv
from collections import Counter
from dataclasses import dataclass, fields
from pathlib import Path

from streamcheck.findings import Finding

VERDICTS = ("real", "hazard", "unclear", "false", "todo")
GOOD_VERDICTS = ("real", "hazard")  # what counts for precision
COLUMNS = ("package", "version", "rule", "kind", "path", "line", "detail", "other", "verdict", "reason")
OTHER_ROLES = ("read", "write", "free")

Key = tuple[str, str, str, str, str, int, str, str]


@dataclass(frozen=True)
class TriageRow:
    package: str
    version: str
    rule: str
    kind: str
    path: str
    line: int
    detail: str
    other: str
    verdict: str
    reason: str

    @property
    def key(self) -> Key:
        return (self.package, self.version, self.rule, self.kind, self.path, self.line, self.detail, self.other)


def finding_key(package: str, version: str, finding: Finding) -> Key:
    detail = str(finding.extra.get("path", ""))
    others = [f"{loc.path}:{loc.line}" for loc in finding.related if loc.role in OTHER_ROLES]
    other = others[0] if others else ""
    return (package, version, finding.rule, finding.kind, finding.primary.path, finding.primary.line, detail, other)


def format_key(key: Key) -> str:
    package, version, rule, kind, path, line, detail, other = key
    return f"{package} {version} {rule} {kind or '-'} {path}:{line} {detail or '-'} (with {other or '-'})"


def load_triage(path: Path) -> list[TriageRow]:
    """The rows of the triage file ([] when it does not exist). A malformed row raises ValueError naming its line."""
    if not path.exists():
        return []
    rows = []
    with open(path, newline="", encoding="utf-8") as handle:
        for number, cells in enumerate(csv.reader(handle, delimiter="\t", quoting=csv.QUOTE_NONE), 1):
            if number == 1 or not cells or cells[0].startswith("#"):
                continue
            if len(cells) != len(COLUMNS):
                raise ValueError(f"{path}:{number}: {len(cells)} columns, expected {len(COLUMNS)}")
            row = TriageRow(*cells[:5], int(cells[5]), *cells[6:])
            if row.verdict not in VERDICTS:
                raise ValueError(f"{path}:{number}: verdict {row.verdict!r} is not one of {', '.join(VERDICTS)}")
            rows.append(row)
    return rows


@dataclass
class Matching:
    verdicts: Counter  # verdict -> findings
    missing: list[Key]  # findings with no row
    stale: list[TriageRow]  # rows of the scanned packages whose finding is gone

    @property
    def findings(self) -> int:
        return sum(self.verdicts.values()) + len(self.missing)

    @property
    def good(self) -> int:
        return sum(self.verdicts[v] for v in GOOD_VERDICTS)


def match(keys: list[Key], rows: list[TriageRow], scanned: set[tuple[str, str]]) -> Matching:
    """Judge every finding key by a row of the same key, each row judging one finding (findings that differ only
    in what the key leaves out, e.g. their stream context, need as many rows as there are findings). Rows left
    over are stale when they belong to one of the `scanned` (package, version) pairs."""
    unused: dict[Key, list[TriageRow]] = {}
    for row in rows:
        unused.setdefault(row.key, []).append(row)
    verdicts: Counter = Counter()
    missing = []
    for key in keys:
        if unused.get(key):
            verdicts[unused[key].pop(0).verdict] += 1
        else:
            missing.append(key)
    stale = [row for left in unused.values() for row in left if (row.package, row.version) in scanned]
    return Matching(verdicts, missing, stale)


def append_rows(path: Path, keys: list[Key]) -> None:
    """Append a `todo` row for each key (the header first, when the file is new)."""
    new = not path.exists()
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle, delimiter="\t", lineterminator="\n", quoting=csv.QUOTE_NONE,
                            escapechar="\\")
        if new:
            writer.writerow(COLUMNS)
        for key in keys:
            writer.writerow([*key, "todo", ""])


assert tuple(f.name for f in fields(TriageRow)) == COLUMNS
