"""`--format concise`: one line per finding, `path:line:col: RULE [KIND] message`, then one summary line (for
editors, grep and terminals narrower than the text layout)."""

from __future__ import annotations

from typing import TextIO

from streamcheck.findings import Finding
from streamcheck.report import ReportContext


def write(findings: list[Finding], out: TextIO, context: ReportContext) -> None:
    for finding in findings:
        kind = f" [{finding.kind}]" if finding.kind else ""
        out.write(f"{finding.primary.short()}: {finding.rule}{kind} {' '.join(finding.message.split())}\n")
    if context.quiet:
        return
    count = len(findings)
    out.write(f"Found {count} finding{'s' if count != 1 else ''}.\n" if count else "No findings.\n")
