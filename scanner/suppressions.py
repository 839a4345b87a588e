"""Inline suppressions.

    # streamcheck: ignore[SC101]            this finding (codes comma-separated); bare `# streamcheck: ignore`: all
    # noqa: SC101                           the same, in flake8/ruff spelling (only SC codes count: a `# noqa: E501`
                                            or a bare `# noqa` belongs to other linters)
    # streamcheck: ignore-file[SC104]       every SC104 finding of the file; bare `ignore-file`: every rule

A line comment covers a finding when it stands on any line the finding names: its primary location or one of its
related locations (the write, the read, the `with` of the stream context...), so the comment can go where the
reader of the code looks. Only real comments count (a string that contains the text does not), so the source is
tokenized, but only when a marker occurs at all. With --report-unused-ignores, a comment (or a code in it) that
suppressed nothing is an SC002 finding.
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
FILE_LEVEL = 0  # the key of a file's file-level suppression in find_suppressions' result (lines start at 1)
_COMMENT = re.compile(r"#\s*streamcheck:\s*(?P<what>ignore-file|ignore)\b(?:\[(?P<codes>[^\]]*)\])?", re.IGNORECASE)
_NOQA = re.compile(r"#\s*noqa\s*:\s*(?P<codes>[A-Za-z0-9_, ]+)", re.IGNORECASE)
_SC_CODE = re.compile(r"^SC\d+$")
# A noqa naming an SC code on its line, searched in the lowered text (a case-blind search would be 100x slower):
# files with neither this nor the marker (most files, many with a `# noqa: E501`) are not tokenized.
_NOQA_SC = re.compile(r"noqa\s*:[^\n]*?sc\d")


@dataclass
class Suppression:
    """One comment. `codes` is None for the bare form (all rules). `used` collects the codes it suppressed."""

    line: int
    column: int
    codes: tuple[str, ...] | None
    snippet: str = ""  # the line's text, so an SC002 finding's fingerprint survives moves
    used: set[str] = field(default_factory=set)
    file_level: bool = False

    def covers(self, rule_id: str) -> bool:
        return self.codes is None or rule_id in self.codes


def find_suppressions(text: str) -> dict[int, Suppression]:
    """line -> the suppression comment on that line; FILE_LEVEL -> the file-level one, if any."""
    lowered = text.lower()
    if MARKER not in lowered and ("noqa" not in lowered or not _NOQA_SC.search(lowered)):
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
        snippet = lines[line - 1].strip() if line <= len(lines) else ""
        for match in _COMMENT.finditer(comment):
            codes = match.group("codes")
            parsed = None if codes is None else tuple(c.strip().upper() for c in codes.split(",") if c.strip())
            file_level = match.group("what").lower() == "ignore-file"
            _merge(found, FILE_LEVEL if file_level else line,
                   Suppression(line=line, column=col + 1 + match.start(), codes=parsed, snippet=snippet,
                               file_level=file_level))
        for match in _NOQA.finditer(comment):
            codes = tuple(c.strip().upper() for c in match.group("codes").split(",") if c.strip())
            ours = tuple(c for c in codes if _SC_CODE.match(c))
            if ours:
                _merge(found, line, Suppression(line=line, column=col + 1 + match.start(), codes=ours,
                                                snippet=snippet))
    return found


def _merge(found: dict[int, Suppression], key: int, new: Suppression) -> None:
    old = found.get(key)
    if old is None:
        found[key] = new
    elif old.codes is not None:  # two comments for one key: the union of what they cover
        found[key].codes = None if new.codes is None else tuple(dict.fromkeys(old.codes + new.codes))


def apply_suppressions(findings: Iterable[Finding], suppressions: dict[str, dict[int, Suppression]],
                       never: tuple[str, ...] = ()) -> tuple[list[Finding], int]:
    """(findings no comment covers, how many were suppressed); marks each comment's used codes.

    Rules in `never` cannot be suppressed inline (SC001: a file that does not parse has no trustworthy comments)."""
    kept: list[Finding] = []
    suppressed = 0
    for finding in findings:
        comment = None if finding.rule in never else _covering(finding, suppressions)
        if comment is not None:
            comment.used.add(finding.rule)
            suppressed += 1
        else:
            kept.append(finding)
    return kept, suppressed


def _covering(finding: Finding, suppressions: dict[str, dict[int, Suppression]]) -> Suppression | None:
    by_line = suppressions.get(finding.primary.path, {})
    places: list[tuple[dict[int, Suppression], int]] = [(by_line, finding.primary.line), (by_line, FILE_LEVEL)]
    places += [(suppressions.get(loc.path, {}), loc.line) for loc in finding.related]
    for comments, line in places:
        comment = comments.get(line)
        if comment is not None and comment.covers(finding.rule):
            return comment
    return None


def unused_suppressions(path: str, by_line: dict[int, Suppression], known: set[str],
                        enabled: Callable[[str], bool]) -> Iterator[Finding]:
    """SC002 findings for `path`'s comments: bare ones that covered nothing, unknown codes, and codes of enabled
    rules that had no finding on the line (a disabled rule's code is not "unused": it may fire when enabled)."""
    for comment in sorted(by_line.values(), key=lambda c: c.line):
        where = "in this file" if comment.file_level else "on this line"
        if comment.codes is None:
            if not comment.used:
                yield _sc002(path, comment, f"unused suppression: no finding {where}")
            continue
        for code in comment.codes:
            if code not in known:
                yield _sc002(path, comment, f"unused suppression: {code} is not a streamcheck rule")
            elif code not in comment.used and enabled(code):
                yield _sc002(path, comment, f"unused suppression: no {code} finding {where}")


def _sc002(path: str, comment: Suppression, message: str) -> Finding:
    return Finding(
        rule=SC002,
        message=message,
        primary=Location(path=path, line=comment.line, column=comment.column, snippet=comment.snippet),
        fix="Delete the comment, or name the rule that is reported on this line.",
        severity="warning",
    )
