"""Inline suppressions: `# streamcheck: ignore[SC101]`, `# streamcheck: ignore[SC101, SC104]`, and the bare
`# streamcheck: ignore` (every rule).

A suppression covers findings whose primary location is on the comment's line. Only real comments count (a string
that contains the text does not), so the source is tokenized, but only when the marker text occurs at all.
With --report-unused-ignores, a comment (or a code in it) that suppressed nothing is an SC002 finding.
"""

from __future__ import annotations

import io
import re
import tokenize
from dataclasses import dataclass, field
from typing import Callable, Iterable, Iterator

from streamcheck.findings import Finding, Location

SC002 = "SC002"
MARKER = "streamcheck:"
_COMMENT = re.compile(r"#\s*streamcheck:\s*ignore\b(?:\[(?P<codes>[^\]]*)\])?", re.IGNORECASE)


@dataclass
class Suppression:
    """One comment. `codes` is None for the bare form (all rules). `used` collects the codes it suppressed."""

    line: int
    column: int
    codes: tuple[str, ...] | None
    snippet: str = ""  # the line's text, so an SC002 finding's fingerprint survives moves
    used: set[str] = field(default_factory=set)

    def covers(self, rule_id: str) -> bool:
        return self.codes is None or rule_id in self.codes


def find_suppressions(text: str) -> dict[int, Suppression]:
    """line -> the suppression comment on that line."""
    if MARKER not in text:
        return {}
    found: dict[int, Suppression] = {}
    try:
        comments = [
            (tok.start, tok.string)
            for tok in tokenize.generate_tokens(io.StringIO(text).readline)
            if tok.type == tokenize.COMMENT
        ]
    except (tokenize.TokenError, SyntaxError):  # unfinished source: fall back to scanning lines
        comments = [((n, line.find("#")), line[line.find("#"):]) for n, line in enumerate(text.splitlines(), 1)
                    if "#" in line]
    lines = text.splitlines()
    for (line, col), comment in comments:
        match = _COMMENT.search(comment)
        if not match:
            continue
        codes = match.group("codes")
        parsed = None if codes is None else tuple(c.strip().upper() for c in codes.split(",") if c.strip())
        found[line] = Suppression(line=line, column=col + 1 + match.start(), codes=parsed,
                                  snippet=lines[line - 1].strip() if line <= len(lines) else "")
    return found


def apply_suppressions(findings: Iterable[Finding], suppressions: dict[str, dict[int, Suppression]],
                       never: tuple[str, ...] = ()) -> tuple[list[Finding], int]:
    """(findings no comment covers, how many were suppressed); marks each comment's used codes.

    Rules in `never` cannot be suppressed inline (SC001: a file that does not parse has no trustworthy comments)."""
    kept: list[Finding] = []
    suppressed = 0
    for finding in findings:
        comment = suppressions.get(finding.primary.path, {}).get(finding.primary.line)
        if comment is not None and finding.rule not in never and comment.covers(finding.rule):
            comment.used.add(finding.rule)
            suppressed += 1
        else:
            kept.append(finding)
    return kept, suppressed


def unused_suppressions(path: str, by_line: dict[int, Suppression], known: set[str],
                        enabled: Callable[[str], bool]) -> Iterator[Finding]:
    """SC002 findings for `path`'s comments: bare ones that covered nothing, unknown codes, and codes of enabled
    rules that had no finding on the line (a disabled rule's code is not "unused": it may fire when enabled)."""
    for line, comment in sorted(by_line.items()):
        if comment.codes is None:
            if not comment.used:
                yield _sc002(path, comment, "unused suppression: no finding on this line")
            continue
        for code in comment.codes:
            if code not in known:
                yield _sc002(path, comment, f"unused suppression: {code} is not a streamcheck rule")
            elif code not in comment.used and enabled(code):
                yield _sc002(path, comment, f"unused suppression: no {code} finding on this line")


def _sc002(path: str, comment: Suppression, message: str) -> Finding:
    return Finding(
        rule=SC002,
        message=message,
        primary=Location(path=path, line=comment.line, column=comment.column, snippet=comment.snippet),
        fix="Delete the comment, or name the rule that is reported on this line.",
        severity="warning",
    )
