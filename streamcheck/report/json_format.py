"""`--format json`: one JSON document with every finding (Finding.to_dict, fingerprint included) and a summary."""

from __future__ import annotations

import json
from typing import TextIO

from streamcheck.findings import Finding
from streamcheck.report import ReportContext, count_by_rule


def write(findings: list[Finding], out: TextIO, context: ReportContext) -> None:
    document = {
        "tool": {"name": "streamcheck", "version": context.tool_version},
        "findings": [finding.to_dict() for finding in findings],
        "summary": {
            "files": context.files,
            "findings": len(findings),
            "by_rule": count_by_rule(findings),
            "suppressed": context.suppressed,
            "baselined": context.baselined,
            "parsed": context.parsed,
            "skipped": list(context.skipped),
        },
    }
    json.dump(document, out, indent=2)
    out.write("\n")
