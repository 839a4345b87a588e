"""`streamcheck explain`, the pre-commit hook definition, and what the scan command imports at startup."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from streamcheck.cli import main

from .helpers import write_tree

REPO = Path(__file__).resolve().parents[2]


def test_explain_lists_driver_and_registry_rules(capsys):
    assert main(["explain"]) == 0
    listing = capsys.readouterr().out.splitlines()
    ids = [line.split()[0] for line in listing]
    assert ids[:2] == ["SC001", "SC002"] and "SC101" in ids and ids == sorted(ids)


def test_explain_prints_a_rules_documentation(capsys):
    assert main(["explain", "sc001"]) == 0
    doc = capsys.readouterr().out
    assert doc.startswith("SC001: file could not be scanned")
    assert [s for s in ("What it does:", "Why it is bad:", "Example:", "Fix:") if s in doc] == [
        "What it does:", "Why it is bad:", "Example:", "Fix:"]
    assert main(["explain", "SC101"]) == 0
    assert capsys.readouterr().out.startswith("SC101: ")


@pytest.mark.parametrize("rule_id", ["SC201", "SC202", "SC203"])
def test_explain_covers_the_runtime_rules(capsys, rule_id):
    assert main(["explain", rule_id]) == 0
    doc = capsys.readouterr().out
    assert doc.startswith(f"{rule_id}: ")
    assert [s for s in ("What it does:", "Why it is bad:", "Example:", "Fix:") if s in doc] == [
        "What it does:", "Why it is bad:", "Example:", "Fix:"]
    assert main(["explain"]) == 0
    assert any(line.split()[0] == rule_id for line in capsys.readouterr().out.splitlines())


def test_explain_unknown_rule_exits_2(capsys):
    assert main(["explain", "SC999"]) == 2
    assert capsys.readouterr().err.startswith("streamcheck explain: unknown rule 'SC999'; known: SC001, SC002, ")


def test_pre_commit_hook_runs_the_scan(tmp_path, monkeypatch, capsys, fake_backend):
    hooks = yaml.safe_load((REPO / ".pre-commit-hooks.yaml").read_text())
    assert [h["id"] for h in hooks] == ["streamcheck"]
    hook = hooks[0]
    assert (hook["language"], hook["pass_filenames"], hook["types_or"]) == ("python", True, ["python", "pyi"])
    program, *args = hook["entry"].split()
    assert program == "streamcheck"  # the console script pyproject.toml installs
    monkeypatch.chdir(tmp_path)
    write_tree(tmp_path, {"m.py": "def f(x, y):\n    x.copy_(y)\n", "ok.py": "x = 1\n"})
    assert main([*args, "--no-progress", "m.py"]) == 1  # pre-commit appends the files it checks
    assert "m.py:2:5: SC101" in capsys.readouterr().out
    assert main([*args, "--no-progress", "ok.py"]) == 0  # a finding elsewhere does not fail a commit of ok.py
    (tmp_path / "m.py").write_text("x = 2\n")
    assert main([*args, "--no-progress", "m.py"]) == 0


def test_scan_and_explain_commands_start_without_libcst_or_networkx():
    code = ("import sys, streamcheck.cli as c; c.build_parser(); import streamcheck.commands.scan, "
            "streamcheck.scanner.driver, streamcheck.report.json_format, streamcheck.report.sarif; "
            "print(sorted(m for m in ('libcst', 'networkx', 'torch') if m in sys.modules))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"
