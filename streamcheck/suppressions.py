"""Inline suppressions: `# streamcheck: ignore[SC101]`, `# streamcheck: ignore[SC101, SC104]`, bare `# streamcheck: ignore`.

A suppression covers findings whose primary location is on the comment's line. Only real comments count (a string
that contains the text does not), so the source is tokenized, but only when the marker text occurs at all.
"""

from __future__ import annotations

import io
import re
import tokenize
from dataclasses import dataclass, field

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
