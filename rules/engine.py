"""Run the static rules over a set of files' facts."""

from __future__ import annotations

from streamcheck.findings import Finding, sorted_findings

from .facts import FileFacts
from .options import StaticOptions
from .program import Program
from .registry import all_rules


def analyze(facts: list[FileFacts], options: StaticOptions, select: set[str] | None = None) -> list[Finding]:
    """Build the whole-program view of `facts` and return the selected rules' findings (all rules if None)."""
    rules = [rule for rule in all_rules() if select is None or rule.id in select]
    if not rules:
        return []
    program = Program(facts, options)
    findings: list[Finding] = []
    for rule in rules:
        findings.extend(rule().check(program))
    return sorted_findings(findings)
