"""`--format junit`: JUnit XML, for CI systems that show test reports (Jenkins, GitLab, Azure, CircleCI).

One testsuite per file with findings, one failing testcase per finding (classname the path, name the rule and
position); with no findings a single passing testcase, so the report never reads as "no tests ran".
"""

from __future__ import annotations

from typing import TextIO
from xml.etree import ElementTree as ET

from streamcheck.findings import Finding
from streamcheck.report import ReportContext


def write(findings: list[Finding], out: TextIO, context: ReportContext) -> None:
    root = ET.Element("testsuites", name="streamcheck", tests=str(max(1, len(findings))),
                      failures=str(len(findings)))
    by_file: dict[str, list[Finding]] = {}
    for finding in findings:
        by_file.setdefault(finding.primary.path, []).append(finding)
    if not by_file:
        suite = ET.SubElement(root, "testsuite", name="streamcheck", tests="1", failures="0")
        ET.SubElement(suite, "testcase", name="no findings", classname="streamcheck")
    for path, file_findings in sorted(by_file.items()):
        suite = ET.SubElement(root, "testsuite", name=path, tests=str(len(file_findings)),
                              failures=str(len(file_findings)))
        for finding in file_findings:
            case = ET.SubElement(suite, "testcase", classname=path,
                                 name=f"{finding.rule} at {finding.primary.line}:{finding.primary.column}")
            failure = ET.SubElement(case, "failure", type=finding.rule, message=" ".join(finding.message.split()))
            details = [f"{finding.primary.short()}: {finding.rule}{f' {finding.kind}' if finding.kind else ''} "
                       f"{finding.message}"]
            details += [f"{loc.role or 'see'}: {loc.short()}{f' ({loc.note})' if loc.note else ''}"
                        for loc in finding.related]
            if finding.fix:
                details.append(f"fix: {finding.fix}")
            failure.text = "\n".join(details)
    ET.indent(root)
    out.write('<?xml version="1.0" encoding="UTF-8"?>\n')
    out.write(ET.tostring(root, encoding="unicode"))
    out.write("\n")
