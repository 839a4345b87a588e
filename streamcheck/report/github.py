"""`--format github`: GitHub Actions workflow commands, one `::error`/`::warning` annotation per finding.

Format: `::error file=PATH,line=L,col=C,title=TITLE::MESSAGE`. Properties escape %, CR, LF, ':' and ','; the message
escapes %, CR and LF (so a multi-line message stays one command). The related locations and the fix hint follow the
message on their own lines, because an annotation has only one position.
"""

from __future__ import annotations

from typing import TextIO

from streamcheck.findings import Finding
from streamcheck.report import ReportContext

_LEVELS = {"error": "error", "warning": "warning"}


def write(findings: list[Finding], out: TextIO, context: ReportContext) -> None:
    for finding in findings:
        out.write(annotation(finding) + "\n")


def annotation(finding: Finding) -> str:
    level = _LEVELS.get(finding.severity, "notice")
    title = finding.rule + (f" ({finding.kind})" if finding.kind else "")
    from streamcheck.report.regions import with_end

    primary = with_end(finding.primary)
    props = [f"file={_prop(primary.path)}", f"line={primary.line}", f"col={primary.column}"]
    if primary.end_line:
        props.append(f"endLine={primary.end_line}")
    if primary.end_column and primary.end_line == primary.line:
        props.append(f"endColumn={primary.end_column}")
    props.append(f"title={_prop(title)}")
    lines = [finding.message]
    for loc in finding.related:
        label = f"{loc.role}: " if loc.role else ""
        note = f" ({loc.note})" if loc.note else ""
        lines.append(f"{label}{loc.short()}{note}")
    if finding.count > 1:
        lines.append(f"seen {finding.count} times")
    if finding.fix:
        lines.append(f"fix: {finding.fix}")
    return f"::{level} {','.join(props)}::{_data(chr(10).join(lines))}"


def _data(text: str) -> str:
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def _prop(text: str) -> str:
    return _data(text).replace(":", "%3A").replace(",", "%2C")
