"""`--format azure`: Azure Pipelines logging commands, one `##vso[task.logissue ...]` line per finding.

Format: `##vso[task.logissue type=error;sourcepath=PATH;linenumber=L;columnnumber=C;code=RULE]MESSAGE`; the fix hint
follows the message. Properties escape ';' and ']', and both escape %, CR and LF (Azure's own escapes).
"""

from __future__ import annotations

from typing import TextIO

from streamcheck.findings import Finding
from streamcheck.report import ReportContext

_TYPES = {"error": "error", "warning": "warning"}


def write(findings: list[Finding], out: TextIO, context: ReportContext) -> None:
    for finding in findings:
        out.write(command(finding) + "\n")


def command(finding: Finding) -> str:
    primary = finding.primary
    props = [f"type={_TYPES.get(finding.severity, 'warning')}", f"sourcepath={_prop(primary.path)}",
             f"linenumber={primary.line}", f"columnnumber={primary.column}", f"code={finding.rule}"]
    text = f"{finding.rule}{f' {finding.kind}' if finding.kind else ''} {finding.message}"
    if finding.fix:
        text += f" fix: {finding.fix}"
    return f"##vso[task.logissue {';'.join(props)}]{_data(text)}"


def _data(text: str) -> str:
    return text.replace("%", "%AZP25").replace("\r", "%AZP0D").replace("\n", "%AZP0A")


def _prop(text: str) -> str:
    return _data(text).replace(";", "%AZP3B").replace("]", "%AZP5D")
