"""What both halves report: a Finding with a primary location, related locations and a fix hint.

The static scanner (rules/) and the runtime detector (instrument/) both produce Findings, so every output format
(text, json, sarif, github) and the baseline work the same for both.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import asdict, dataclass, field
from typing import Any, Iterable

# Roles a related location can play. Kept as plain strings so JSON stays readable.
ROLE_WRITE = "write"
ROLE_READ = "read"
ROLE_STREAM_CONTEXT = "stream context"
ROLE_SYNC = "sync"
ROLE_CALL = "call"
ROLE_FREE = "free"


@dataclass(frozen=True)
class Location:
    """A place in source: path (as given to the scanner, '/'-separated), 1-based line, 1-based column.

    `snippet` is the stripped source line when known; fingerprints use it instead of the line number so that
    findings survive unrelated edits that move code. `role` says what happens there (see ROLE_*), `note` is
    free text such as the enclosing function or the stream's name.
    """

    path: str
    line: int
    column: int = 1
    role: str = ""
    note: str = ""
    snippet: str = ""
    end_line: int | None = None
    end_column: int | None = None

    def short(self) -> str:
        return f"{self.path}:{self.line}:{self.column}"

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "Location":
        return cls(**{k: data[k] for k in cls.__dataclass_fields__ if k in data})


@dataclass(frozen=True)
class Finding:
    """One reported problem.

    rule:    stable id, e.g. "SC101" (static) or "SC201" (runtime race); "SC001" for unparsable input.
    kind:    for races, RAW / WAR / WAW / FREE / HOST; empty for rules where it does not apply.
    primary: where the report points (for SC101 the write).
    related: the other places that explain it, each with a role.
    fix:     one or two sentences: which edge to add, where.
    symbol:  the enclosing function's qualified name of the primary location (used by the fingerprint).
    count:   how often the runtime saw it (1 for static findings).
    extra:   structured, rule-specific data (streams, tensor description, ranks...). Must be JSON-serializable.
    """

    rule: str
    message: str
    primary: Location
    related: tuple[Location, ...] = ()
    fix: str = ""
    kind: str = ""
    symbol: str = ""
    severity: str = "error"
    count: int = 1
    extra: dict[str, Any] = field(default_factory=dict, compare=False, hash=False)

    @property
    def fingerprint(self) -> str:
        """Stable identity across edits that only move lines: rule, file, symbol, and the text of the places."""
        parts = [self.rule, self.kind, self.primary.path, self.symbol, _norm(self.primary.snippet)]
        for loc in self.related:
            if loc.role in (ROLE_READ, ROLE_WRITE, ROLE_FREE):
                parts += [loc.role, loc.path, _norm(loc.snippet)]
        if not self.primary.snippet:
            # Without source text the line is the only thing that tells two findings apart.
            parts.append(str(self.primary.line))
        return hashlib.sha256("\x1f".join(parts).encode()).hexdigest()[:20]

    def sort_key(self) -> tuple:
        return (self.primary.path, self.primary.line, self.primary.column, self.rule)

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["related"] = [asdict(loc) for loc in self.related]
        data["fingerprint"] = self.fingerprint
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "Finding":
        return cls(
            rule=data["rule"],
            message=data["message"],
            primary=Location.from_dict(data["primary"]),
            related=tuple(Location.from_dict(d) for d in data.get("related", ())),
            fix=data.get("fix", ""),
            kind=data.get("kind", ""),
            symbol=data.get("symbol", ""),
            severity=data.get("severity", "error"),
            count=data.get("count", 1),
            extra=dict(data.get("extra", {})),
        )


# A call-stack frame as runtime findings carry it in `extra` (earlier_stack / later_stack): "path:line in function".
_FRAME = re.compile(r"^(?P<path>.+):(?P<line>\d+)(?: in (?P<function>.*))?$")


def frame_text(path: str, line: int, function: str) -> str:
    return f"{path}:{line} in {function}"


def parse_frame(text: str) -> tuple[str, int, str] | None:
    """(path, line, function) of a frame_text; None for text that is not one."""
    match = _FRAME.match(text)
    return (match["path"], int(match["line"]), match["function"] or "") if match else None


def _norm(text: str) -> str:
    return " ".join(text.split())


def sorted_findings(findings: Iterable[Finding]) -> list[Finding]:
    return sorted(findings, key=Finding.sort_key)
