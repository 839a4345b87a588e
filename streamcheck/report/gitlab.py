"""`--format gitlab`: GitLab Code Quality (a JSON array of issues, as the `codequality` report artifact reads it).

Each issue: description, check_name (the rule id), fingerprint (the finding's, stable across moves), severity
(blocker/critical/major/minor/info: races are critical, SC001 major, SC002 minor), location.path with lines.begin.
"""

from __future__ import annotations

import json
from typing import TextIO

from streamcheck.findings import Finding
from streamcheck.report import ReportContext

_SEVERITY = {"SC001": "major", "SC002": "minor"}


def write(findings: list[Finding], out: TextIO, context: ReportContext) -> None:
    issues = []
    for finding in findings:
        lines = {"begin": finding.primary.line}
        if finding.primary.end_line:
            lines["end"] = finding.primary.end_line
        issues.append({
            "description": f"{finding.rule}{f' {finding.kind}' if finding.kind else ''}: {finding.message}",
            "check_name": finding.rule,
            "fingerprint": finding.fingerprint,
            "severity": _SEVERITY.get(finding.rule, "critical" if finding.severity == "error" else "minor"),
            "location": {"path": finding.primary.path, "lines": lines},
        })
    json.dump(issues, out, indent=2)
    out.write("\n")
