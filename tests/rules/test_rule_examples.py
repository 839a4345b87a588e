"""Every rule's own VALID and INVALID examples, and the shape of its documentation."""

from __future__ import annotations

import pytest

from streamcheck.rules.engine import analyze
from streamcheck.rules.facts import extract_facts
from streamcheck.rules.options import StaticOptions
from streamcheck.rules.registry import all_rules

RULES = all_rules()
SECTIONS = ("What it does:", "Why it is bad:", "Example:", "Fix:")


def _cases(kind: str):
    return [
        pytest.param(rule, index, snippet, id=f"{rule.id}-{kind}-{index}")
        for rule in RULES for index, snippet in enumerate(getattr(rule, kind))
    ]


def _lines(rule, snippet: str) -> list[int]:
    options = StaticOptions()
    facts = extract_facts(snippet, f"{rule.id.lower()}_example.py", options)
    return [f.primary.line for f in analyze([facts], options, {rule.id})]


def test_the_registry_finds_sc101():
    assert "SC101" in [rule.id for rule in RULES]


@pytest.mark.parametrize("rule", RULES, ids=[r.id for r in RULES])
def test_rule_has_examples_and_documentation(rule):
    assert rule.VALID and rule.INVALID, f"{rule.id} needs VALID and INVALID examples"
    doc = rule.documentation()
    assert doc.startswith(f"{rule.id}: {rule.summary}\n")
    positions = [doc.find(section) for section in SECTIONS]
    assert all(p >= 0 for p in positions) and positions == sorted(positions), positions
    for snippet in rule.INVALID:
        assert rule.expected_lines(snippet), f"an INVALID example of {rule.id} marks no line"


@pytest.mark.parametrize("rule,index,snippet", _cases("VALID"))
def test_valid_example_has_no_finding(rule, index, snippet):
    assert _lines(rule, snippet) == []


@pytest.mark.parametrize("rule,index,snippet", _cases("INVALID"))
def test_invalid_example_is_found_where_marked(rule, index, snippet):
    assert _lines(rule, snippet) == rule.expected_lines(snippet)
