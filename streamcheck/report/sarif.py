"""`--format sarif`: SARIF 2.1.0, as GitHub code scanning and other viewers read it.

One run; the tool's rules carry each rule's summary and documentation; each result carries the primary location
(with the enclosing function as a logical location), the related locations (role and note as their message), the
fingerprint as a partial fingerprint (so viewers track a finding across commits that move it), and the race kind,
runtime count, fix hint and `extra` data as properties.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, TextIO
from urllib.parse import quote

from streamcheck.findings import Finding, Location
from streamcheck.report import ReportContext

SCHEMA_URI = "https://json.schemastore.org/sarif-2.1.0.json"
INFORMATION_URI = "https://github.com/streamcheck/streamcheck"
SRCROOT = "%SRCROOT%"
_LEVELS = {"error": "error", "warning": "warning"}


def write(findings: list[Finding], out: TextIO, context: ReportContext) -> None:
    json.dump(document(findings, context), out, indent=2)
    out.write("\n")


def document(findings: list[Finding], context: ReportContext) -> dict[str, Any]:
    rule_ids = sorted({f.rule for f in findings} | set(context.rules))
    index = {rule_id: i for i, rule_id in enumerate(rule_ids)}
    run: dict[str, Any] = {
        "tool": {
            "driver": {
                "name": "streamcheck",
                "version": context.tool_version,
                "informationUri": INFORMATION_URI,
                "rules": [_rule(context, rule_id) for rule_id in rule_ids],
            }
        },
        "originalUriBaseIds": {SRCROOT: {"uri": Path(os.getcwd()).as_uri().rstrip("/") + "/"}},
        "columnKind": "unicodeCodePoints",
        "results": [_result(f, index[f.rule]) for f in findings],
        "invocations": [
            {
                "executionSuccessful": True,
                "toolExecutionNotifications": [
                    {"level": "note", "message": {"text": f"skipped {reason}"}} for reason in context.skipped
                ],
            }
        ],
    }
    return {"$schema": SCHEMA_URI, "version": "2.1.0", "runs": [run]}


def _rule(context: ReportContext, rule_id: str) -> dict[str, Any]:
    info = context.rule(rule_id)
    rule: dict[str, Any] = {"id": rule_id, "shortDescription": {"text": info.summary or rule_id}}
    if info.documentation:
        # The paragraph after the title line: "What it does: ..." in the rules' docstring layout.
        paragraphs = [p.strip() for p in info.documentation.split("\n\n") if p.strip()]
        rule["fullDescription"] = {"text": " ".join((paragraphs[1] if len(paragraphs) > 1 else paragraphs[0]).split())}
        rule["help"] = {"text": info.documentation}
    rule["defaultConfiguration"] = {"level": "warning" if rule_id == "SC002" else "error"}
    return rule


def _result(finding: Finding, rule_index: int) -> dict[str, Any]:
    text = finding.message + (f" Fix: {finding.fix}" if finding.fix else "")
    location: dict[str, Any] = {"physicalLocation": _physical(finding.primary)}
    if finding.symbol:
        location["logicalLocations"] = [{"fullyQualifiedName": finding.symbol, "kind": "function"}]
    result: dict[str, Any] = {
        "ruleId": finding.rule,
        "ruleIndex": rule_index,
        "level": _LEVELS.get(finding.severity, "note"),
        "message": {"text": text},
        "locations": [location],
        "partialFingerprints": {"streamcheck/v1": finding.fingerprint},
    }
    if finding.related:
        result["relatedLocations"] = [
            {"id": i, "physicalLocation": _physical(loc),
             "message": {"text": " ".join(p for p in (loc.role, loc.note) if p) or "related"}}
            for i, loc in enumerate(finding.related, 1)
        ]
    if finding.count > 1:
        result["occurrenceCount"] = finding.count
    properties: dict[str, Any] = {}
    if finding.kind:
        properties["kind"] = finding.kind
    if finding.fix:
        properties["fix"] = finding.fix
    if finding.extra:
        properties["extra"] = finding.extra
    if properties:
        result["properties"] = properties
    return result


def _physical(loc: Location) -> dict[str, Any]:
    if os.path.isabs(loc.path):
        artifact = {"uri": Path(loc.path).as_uri()}
    else:
        artifact = {"uri": quote(loc.path.replace(os.sep, "/")), "uriBaseId": SRCROOT}
    region: dict[str, Any] = {"startLine": max(1, loc.line), "startColumn": max(1, loc.column)}
    if loc.end_line:
        region["endLine"] = loc.end_line
        if loc.end_column:
            region["endColumn"] = loc.end_column
    if loc.snippet:
        region["snippet"] = {"text": loc.snippet}
    return {"artifactLocation": artifact, "region": region}
