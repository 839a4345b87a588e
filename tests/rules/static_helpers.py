"""Run the static half on in-memory sources: {path: source} -> findings, facts or the program view."""

from __future__ import annotations

import textwrap

from streamcheck.rules.engine import analyze
from streamcheck.rules.facts import FileFacts, extract_facts
from streamcheck.rules.options import StaticOptions
from streamcheck.rules.program import Program


def facts_of(sources: dict[str, str], options: StaticOptions | None = None) -> list[FileFacts]:
    options = options or StaticOptions()
    return [extract_facts(textwrap.dedent(src), path, options) for path, src in sources.items()]


def findings_of(sources: dict[str, str], select: set[str] | None = None, options: StaticOptions | None = None):
    options = options or StaticOptions()
    return analyze(facts_of(sources, options), options, select)


def program_of(sources: dict[str, str], options: StaticOptions | None = None) -> Program:
    options = options or StaticOptions()
    return Program(facts_of(sources, options), options)


def summary_of(findings) -> list[tuple[str, str, int, str]]:
    """(rule, path, line, kind) of each finding: what most tests assert exactly."""
    return [(f.rule, f.primary.path, f.primary.line, f.kind) for f in findings]


def line_of(source: str, text: str) -> int:
    """1-based line of the only line of (dedented) `source` containing `text`."""
    lines = [n for n, line in enumerate(textwrap.dedent(source).splitlines(), 1) if text in line]
    assert len(lines) == 1, (text, lines)
    return lines[0]


def split_outside_reads(findings) -> tuple[list, list[tuple[str, int]]]:
    """(findings of pairs of accesses, [(path, line)] of the reads of tensors made outside the scan): the second
    kind is what outside_producers.py adds to any source whose side stream reads an input without a wait."""
    outside = [f for f in findings if f.extra.get("producer") == "outside"]
    return [f for f in findings if f not in outside], [(f.extra["path"], f.primary.line) for f in outside]
