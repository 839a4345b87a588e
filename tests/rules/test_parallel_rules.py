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


def _by_id(*ids):
    rules = {rule.id: rule for rule in all_rules()}
    return [rules[rule_id] for rule_id in ids]


@pytest.mark.parametrize("ids", [
    ("SC101", "SC102", "SC103", "SC104", "SC105", "SC106", "SC107"),
    ("SC107", "SC104", "SC102", "SC101"),  # (not in id order: the findings come in the order given)
    ("SC102", "SC105", "SC107"),  # only rules that read no index: none built
    ("SC104", "SC101"),
    ("SC101", "SC105"),
])
def test_every_split_gives_every_rules_findings_in_rule_order(ids):
    rules = _by_id(*ids)
    serial = run_rules(rules, program_of(_sources()), jobs=1)
    assert [f.rule for f in serial] == sorted([f.rule for f in serial], key=ids.index)
    assert _keys(run_rules(rules, program_of(_sources()), jobs=2, min_functions=0)) == _keys(serial)


def test_who_takes_what(monkeypatch):
    """Every rule in the queue, heaviest first. No fork here: this process empties the queue alone."""
    queued = []
    real_take = parallel_rules._take
    forks = []

    def no_fork(work):  # (no child: everything in this process)
        forks.append(work)
        return None

    monkeypatch.setattr(parallel_rules, "_fork", no_fork)
    monkeypatch.setattr(parallel_rules, "_take", lambda queue, rules, program: queued.append(
        [r.id for r in rules]) or real_take(queue, rules, program))
    rules = _by_id("SC101", "SC102", "SC103", "SC104", "SC105", "SC106", "SC107")
    serial = run_rules(rules, program_of(_sources()), jobs=2, min_functions=10 ** 9)  # (too small: serial)
    assert forks == [] and queued == []
    found = run_rules(rules, program_of(_sources()), jobs=2, min_functions=0)
    assert _keys(found) == _keys(serial)
    assert len(forks) == 1
    assert queued == [["SC101", "SC104", "SC107", "SC106", "SC105", "SC102", "SC103"]]


def test_a_child_dying_after_taking_a_rule_leaves_its_rules_to_the_parent(monkeypatch):
    """The queue's child takes a rule and dies without handing it back: that rule runs here."""
    parent = os.getpid()
    real = parallel_rules._take

    def fails_in_a_child(queue, *args):
        if os.getpid() != parent:
            os.read(queue, 1)  # (a rule taken, never handed back)
            os._exit(3)
        return real(queue, *args)

    serial = run_rules(all_rules(), program_of(_sources()), jobs=1)
    monkeypatch.setattr(parallel_rules, "_take", fails_in_a_child)
    forked = run_rules(all_rules(), program_of(_sources()), jobs=2, min_functions=0)
    assert _keys(forked) == _keys(serial)


def test_the_queue_hands_each_rule_to_one_process_only():
    queue = parallel_rules._queue(3)
    rules = _by_id("SC102", "SC103", "SC105")
    pid = os.fork()
    if pid == 0:
        try:
            os._exit(len(parallel_rules._take(queue, rules, program_of(_sources()))))
        finally:
            os._exit(99)
    here = parallel_rules._take(queue, rules, program_of(_sources()))
    _, status = os.waitpid(pid, 0)
    os.close(queue)
    assert len(here) + os.WEXITSTATUS(status) == 3
