"""`--format sarif`: SARIF 2.1.0, as GitHub code scanning and other viewers read it.

One run. The tool's rules carry what code scanning shows and filters by: `name`, short and full description,
`help` (text and markdown), `helpUri` (the rule's page in docs/rules), `defaultConfiguration.level`, and the
properties `tags`, `precision` and `problem.severity`. Each result carries:

- the primary location (region with endLine/endColumn where known; the enclosing function as a logical location),
  its URI relative to the repository root (`%SRCROOT%`), whatever the current folder was;
- the related locations, each linked from the message (`[read](2)`, code scanning's link syntax);
- for a runtime race, a `codeFlows` entry: one thread flow per access (the earlier and the later), each its call
  stack from the outermost frame to the access;
- the fingerprint as a partial fingerprint, so a finding is tracked across commits that move it;
- `fixes` when the fix can be derived (streamcheck/fixes.py): an insertion at the start of a line; the fix hint
  stays a property and is not glued onto the message.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any, TextIO
from urllib.parse import quote

from streamcheck.catalogue import RUNTIME
from streamcheck.constants import PROJECT_URL
from streamcheck.findings import Finding, Location, parse_frame
from streamcheck.report import ReportContext

SCHEMA_URI = "https://json.schemastore.org/sarif-2.1.0.json"
SRCROOT = "%SRCROOT%"
_LEVELS = {"error": "error", "warning": "warning"}


def write(findings: list[Finding], out: TextIO, context: ReportContext) -> None:
    json.dump(document(findings, context), out, indent=2)
    out.write("\n")


def document(findings: list[Finding], context: ReportContext) -> dict[str, Any]:
    root = Path(context.root or repository_root(os.getcwd()))
    rule_ids = sorted({f.rule for f in findings} | set(context.rules))
    index = {rule_id: i for i, rule_id in enumerate(rule_ids)}
    run: dict[str, Any] = {
        "tool": {
            "driver": {
                "name": "streamcheck",
                "version": context.tool_version,
                "semanticVersion": context.tool_version if re.fullmatch(r"\d+\.\d+\.\d+", context.tool_version)
                else None,
                "informationUri": PROJECT_URL,
                "rules": [_rule(context, rule_id) for rule_id in rule_ids],
            }
        },
        "originalUriBaseIds": {SRCROOT: {"uri": root.as_uri().rstrip("/") + "/"}},
        "columnKind": "unicodeCodePoints",
        "results": [_result(f, index[f.rule], root) for f in findings],
        "invocations": [
            {
                "executionSuccessful": True,
                "toolExecutionNotifications": [
                    {"level": "note", "message": {"text": f"skipped {reason}"}} for reason in context.skipped
                ],
            }
        ],
    }
    if run["tool"]["driver"]["semanticVersion"] is None:
        del run["tool"]["driver"]["semanticVersion"]
    return {"$schema": SCHEMA_URI, "version": "2.1.0", "runs": [run]}


def repository_root(start: str) -> str:
    """The nearest folder at or above `start` holding .git (a folder, or a file in a worktree); else `start`."""
    folder = Path(os.path.abspath(start))
    for candidate in [folder, *folder.parents]:
        if (candidate / ".git").exists():
            return str(candidate)
    return str(folder)


def _rule(context: ReportContext, rule_id: str) -> dict[str, Any]:
    info = context.rule(rule_id)
    rule: dict[str, Any] = {"id": rule_id, "name": info.name or rule_id,
                            "shortDescription": {"text": info.summary or rule_id}}
    if info.documentation:
        # The paragraph after the title line: "What it does: ..." in the rules' docstring layout.
        paragraphs = [p.strip() for p in info.documentation.split("\n\n") if p.strip()]
        rule["fullDescription"] = {"text": " ".join((paragraphs[1] if len(paragraphs) > 1 else paragraphs[0]).split())}
        rule["help"] = {"text": info.documentation, "markdown": info.markdown}
    rule["helpUri"] = info.help_uri
    rule["defaultConfiguration"] = {"level": info.level}
    rule["properties"] = {
        "tags": ["correctness", "concurrency", "cuda", "pytorch", "runtime" if info.origin == RUNTIME else "static"],
        "precision": info.precision,
        "problem.severity": info.level,
    }
    return rule


def _result(finding: Finding, rule_index: int, root: Path) -> dict[str, Any]:
    location: dict[str, Any] = {"physicalLocation": _physical(finding.primary, root)}
    if finding.symbol:
        location["logicalLocations"] = [{"fullyQualifiedName": finding.symbol, "kind": "function"}]
    result: dict[str, Any] = {
        "ruleId": finding.rule,
        "ruleIndex": rule_index,
        "level": _LEVELS.get(finding.severity, "note"),
        "message": {"text": _message(finding)},
        "locations": [location],
        "partialFingerprints": {"streamcheck/v1": finding.fingerprint},
    }
    if finding.related:
        result["relatedLocations"] = [
            {"id": i, "physicalLocation": _physical(loc, root), "message": {"text": _label(loc, full=True)}}
            for i, loc in enumerate(finding.related, 1)
        ]
    flows = _code_flows(finding, root)
    if flows:
        result["codeFlows"] = flows
    fixes = _fixes(finding, root)
    if fixes:
        result["fixes"] = fixes
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


def _message(finding: Finding) -> str:
    """The message, then a link to each related location (code scanning renders `[text](id)` as a link)."""
    text = finding.message
    if finding.related:
        links = ", ".join(f"[{_escape(_label(loc, full=False))}]({i})" for i, loc in enumerate(finding.related, 1))
        text = f"{_escape(text)} (see {links})"
    return text


def _label(loc: Location, full: bool) -> str:
    if full:
        return " ".join(p for p in (loc.role, loc.note) if p) or "related"
    return f"{loc.role or 'related'} at line {loc.line}"


def _escape(text: str) -> str:
    """Square brackets are link syntax in a SARIF message: the message's own are escaped."""
    return text.replace("\\", "\\\\").replace("[", "\\[").replace("]", "\\]")


def _code_flows(finding: Finding, root: Path) -> list[dict[str, Any]]:
    """Runtime findings: the earlier and the later access, each with its call stack (outermost frame first)."""
    flows = []
    for key, what in (("earlier_stack", "earlier access"), ("later_stack", "later access")):
        stack = finding.extra.get(key)
        if not isinstance(stack, list):
            continue
        frames = [frame for frame in map(parse_frame, map(str, stack)) if frame]
        if not frames:
            continue
        locations = []
        for depth, (path, line, function) in enumerate(reversed(frames)):
            loc = Location(path, line)
            step = {"location": {"physicalLocation": _physical(loc, root),
                                 "message": {"text": f"in {function}" if function else what}},
                    "nestingLevel": depth}
            locations.append(step)
        access = (finding.extra.get(key.replace("_stack", "")) or {})
        op = access.get("op") if isinstance(access, dict) else None
        locations[-1]["location"]["message"]["text"] = f"{what}: {op}" if op else what
        flows.append({"message": {"text": what}, "locations": locations})
    return [{"message": {"text": "the two accesses that race"}, "threadFlows": flows}] if flows else []


def _fixes(finding: Finding, root: Path) -> list[dict[str, Any]]:
    from streamcheck.fixes import apply_fixes, derive_fix, inserted_lines

    fix = derive_fix(finding)
    if fix is None:
        return []
    try:
        with open(fix.path, "rb") as handle:
            before = handle.read()
    except OSError:
        return []
    after, applied = apply_fixes(before, [fix])
    if not applied:
        return []
    replacements = [{"deletedRegion": {"startLine": line, "startColumn": 1, "endLine": line, "endColumn": 1},
                     "insertedContent": {"text": text}} for line, text in inserted_lines(before, after)]
    description = applied[0].description + ("" if fix.safe else " (unsafe: it blocks the host; --unsafe-fixes)")
    return [{"description": {"text": description},
             "artifactChanges": [{"artifactLocation": _artifact(fix.path, root), "replacements": replacements}],
             "properties": {"safe": fix.safe}}]


def _artifact(path: str, root: Path) -> dict[str, Any]:
    absolute = Path(os.path.abspath(path))
    try:
        relative = absolute.relative_to(root)
    except ValueError:
        return {"uri": absolute.as_uri()}
    return {"uri": quote(relative.as_posix()), "uriBaseId": SRCROOT}


def _physical(loc: Location, root: Path) -> dict[str, Any]:
    from streamcheck.report.regions import with_end

    loc = with_end(loc)
    region: dict[str, Any] = {"startLine": max(1, loc.line), "startColumn": max(1, loc.column)}
    if loc.end_line:
        region["endLine"] = loc.end_line
        if loc.end_column:
            region["endColumn"] = loc.end_column
    if loc.snippet:
        region["snippet"] = {"text": loc.snippet}
    return {"artifactLocation": _artifact(loc.path, root), "region": region}
