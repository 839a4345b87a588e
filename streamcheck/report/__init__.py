"""Output formats shared by the scanner and the runtime detector: text, concise, json, sarif, github, gitlab, junit,
pylint, azure.

Every formatter takes the same inputs, a list of Findings and a ReportContext, and writes to a text stream. Nothing
here knows whether a finding came from a static rule (SC1xx) or the runtime detector (SC2xx with a race kind and
`extra` data such as the streams): they render through the same code.
"""

from __future__ import annotations

import importlib
import os
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, TextIO

from streamcheck.catalogue import RuleInfo, lookup
from streamcheck.findings import Finding

FORMATS = {"text": "text", "concise": "concise", "json": "json_format", "sarif": "sarif", "github": "github",
           "gitlab": "gitlab", "junit": "junit", "pylint": "pylint_format", "azure": "azure"}


@dataclass
class ReportContext:
    """Everything besides the findings that a report may show."""

    tool_version: str = "0+unknown"
    rules: dict[str, RuleInfo] = field(default_factory=dict)
    files: int = 0  # files scanned
    suppressed: int = 0
    baselined: int = 0
    parsed: int = 0  # files whose Facts were extracted in this run (the rest came from the cache)
    skipped: list[str] = field(default_factory=list)  # "path: why" for files left out on purpose
    color: bool = False  # text only: ANSI colours (the command decides: a terminal, no NO_COLOR)
    scope: str = ""  # what was checked, when not files (runtime reports: "2 ranks"); the text summary says it
    # text only: a command's own layout of a finding (rich Text), or None to use the common one. `streamcheck report`
    # and `analyze` lay runtime races out with instrument/offline/race_text.py's `layout`, so this package never
    # imports the runtime half.
    layout: Callable[[Finding, str], Any] | None = None
    quiet: bool = False  # text, concise: findings only, no summary line (-q)
    width: int = 0  # text: wrap at word boundaries to this many columns (a terminal's width); 0: never wrap
    root: str = ""  # sarif: the folder URIs are relative to; "" -> the git repository around the current folder

    def rule(self, rule_id: str) -> RuleInfo:
        """What the report says about a rule: the context's own entry (a scan's backend may bring rules of its own),
        else the rule catalogue's."""
        return self.rules.get(rule_id) or lookup(rule_id)


def write_report(fmt: str, findings: Iterable[Finding], out: TextIO, context: ReportContext) -> None:
    if fmt not in FORMATS:
        raise ValueError(f"unknown format {fmt!r}; known: {', '.join(FORMATS)}")
    module = importlib.import_module(f"streamcheck.report.{FORMATS[fmt]}")
    module.write(list(findings), out, context)


def wants_color(choice: str, out: TextIO, to_file: bool = False) -> bool:
    """A command's `--color auto|always|never`: auto colours a terminal (not an -o file) unless NO_COLOR is set."""
    if choice == "always":
        return True
    return choice == "auto" and not to_file and is_tty(out) and "NO_COLOR" not in os.environ


def is_tty(stream) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):  # no isatty, or closed
        return False


def count_by_rule(findings: Iterable[Finding]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for finding in findings:
        counts[finding.rule] = counts.get(finding.rule, 0) + 1
    return dict(sorted(counts.items()))
