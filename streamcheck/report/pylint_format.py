"""`--format pylint`: `path:line: [RULE] message`, the line format pylint's parseable output and ruff share, which
many editors and CI log matchers already read."""

from __future__ import annotations

from typing import TextIO

from streamcheck.findings import Finding
from streamcheck.report import ReportContext


def write(findings: list[Finding], out: TextIO, context: ReportContext) -> None:
    for finding in findings:
        kind = f"({finding.kind}) " if finding.kind else ""
        out.write(f"{finding.primary.path}:{finding.primary.line}: [{finding.rule}] {kind}"
                  f"{' '.join(finding.message.split())}\n")
