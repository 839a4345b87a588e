"""The rules in two processes (parallel_rules.py) find exactly what they find in one, also when the child fails."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from streamcheck.rules import parallel_rules
from streamcheck.rules.parallel_rules import run_rules
from streamcheck.rules.registry import all_rules

from static_helpers import program_of

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")


def _sources() -> dict[str, str]:
    return {f"{case.name}/racy.py": (case / "racy.py").read_text() for case in sorted(EXAMPLES.iterdir())
            if (case / "racy.py").is_file()}


def _keys(findings) -> list:
    return [(f.rule, f.primary.path, f.primary.line, f.primary.column, f.kind, f.message) for f in findings]


def test_two_processes_find_what_one_finds():
    serial = run_rules(all_rules(), program_of(_sources()), jobs=1)
    assert {f.rule for f in serial} >= {"SC101", "SC104"}  # both sides of the split have something to find
    forked = run_rules(all_rules(), program_of(_sources()), jobs=2, min_functions=0)
    assert _keys(forked) == _keys(serial)


def test_a_failing_child_leaves_its_rule_to_the_parent(monkeypatch):
    serial = run_rules(all_rules(), program_of(_sources()), jobs=1)
    monkeypatch.setattr(parallel_rules.pickle, "dumps", lambda *a, **k: 1 / 0)  # (in the child only: the parent
    forked = run_rules(all_rules(), program_of(_sources()), jobs=2, min_functions=0)  # never pickles)
    assert _keys(forked) == _keys(serial)
