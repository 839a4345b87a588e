"""A stand-in for the rules package, for tests of the driver that must not depend on what the real rules find.

It reports a fake SC101 on every line that calls `.copy_(` and a fake SC104 on every `.free_(` line (with the
enclosing function as the symbol), and fails to parse what `ast.parse` rejects. End-to-end tests with the real
rules live in test_scan_e2e.py.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass

from streamcheck.findings import Finding, Location
from streamcheck.scanner.driver import RulesBackend

MARKS = {".copy_(": "SC101", ".free_(": "SC104"}
extract_calls: list[str] = []  # paths extracted in this process (in-process runs only)
analyze_calls: list[int] = []  # number of facts per analyze call


class FakeParseFailure(Exception):
    def __init__(self, message: str, line: int, column: int):
        super().__init__(message, line, column)
        self.message, self.line, self.column = message, line, column


@dataclass(frozen=True)
class FakeOptions:
    stream_contexts: tuple[str, ...] = ()

    def cache_key(self) -> str:
        return ",".join(self.stream_contexts)


@dataclass
class FakeFacts:
    path: str
    marks: list  # [rule, line, column, snippet, symbol]

    def to_dict(self) -> dict:
        return {"path": self.path, "marks": self.marks}

    @classmethod
    def from_dict(cls, data: dict) -> "FakeFacts":
        return cls(data["path"], [list(m) for m in data["marks"]])


def extract(source: str, path: str, options) -> FakeFacts:
    extract_calls.append(path)
    try:
        tree = ast.parse(source)
    except SyntaxError as exc:
        raise FakeParseFailure(exc.msg, exc.lineno or 1, exc.offset or 1) from None
    functions = {}
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            for line in range(node.lineno, (node.end_lineno or node.lineno) + 1):
                functions.setdefault(line, node.name)
    marks = []
    for number, line in enumerate(source.splitlines(), 1):
        for needle, rule in MARKS.items():
            if needle in line:
                column = len(line) - len(line.lstrip()) + 1
                marks.append([rule, number, column, line.strip(), functions.get(number, "<module>")])
    return FakeFacts(path, marks)


def analyze(facts_list, options, select=None, timings=None) -> list[Finding]:
    analyze_calls.append(len(facts_list))
    findings = []
    for facts in facts_list:
        for rule, line, column, snippet, symbol in facts.marks:
            if select is not None and rule not in select:
                continue
            findings.append(Finding(
                rule=rule, message=f"fake {rule} finding", kind="RAW" if rule == "SC101" else "FREE",
                primary=Location(facts.path, line, column, role="write", snippet=snippet), symbol=symbol,
                fix="add a wait",
            ))
    return findings


def backend(options: FakeOptions | None = None) -> RulesBackend:
    return RulesBackend(
        extract=extract,
        analyze=analyze,
        facts_to_dict=FakeFacts.to_dict,
        facts_from_dict=FakeFacts.from_dict,
        parse_failure=FakeParseFailure,
        load_rule_docs=lambda: {"SC101": ("fake cross-stream", "SC101 doc\n\nmore"),
                                "SC104": ("fake free", "SC104 doc")},
        options=options or FakeOptions(),
        stamp="fake-1",
    )
