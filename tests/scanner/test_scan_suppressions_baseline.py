"""Inline suppressions (used, unused, wrong code, bare) and baselines (new findings fail, moved ones do not)."""

from __future__ import annotations

import json

import pytest

from streamcheck.scanner.suppressions import find_suppressions

from .helpers import positions, scan_cli, scan_json, write_tree


@pytest.fixture
def tree(tmp_path, monkeypatch, fake_backend):
    monkeypatch.chdir(tmp_path)
    return tmp_path


def test_suppression_forms_are_parsed_from_comments_only():
    source = (
        "a.copy_(b)  # streamcheck: ignore[SC101]\n"
        "a.copy_(b)  # streamcheck: ignore[sc101, SC104]\n"
        "a.copy_(b)  # streamcheck: ignore\n"
        "s = '# streamcheck: ignore'\n"
        "a.copy_(b)  # noqa  # streamcheck:ignore[SC104]\n"
    )
    found = find_suppressions(source)
    assert {line: s.codes for line, s in found.items()} == {
        1: ("SC101",), 2: ("SC101", "SC104"), 3: None, 5: ("SC104",)}
    assert found[1].column == 13


def test_used_wrong_code_and_bare(tree, capsys):
    write_tree(tree, {"m.py": """
        def f(x, y):
            x.copy_(y)  # streamcheck: ignore[SC101]
            x.copy_(y)  # streamcheck: ignore[SC104]
            x.copy_(y)  # streamcheck: ignore
            x.copy_(y)
    """})
    code, doc, _ = scan_json(capsys, "--no-cache", ".")
    assert code == 1
    # Line 3 names the wrong rule, line 5 has no comment: both still reported.
    assert positions(doc) == [("SC101", "m.py", 3, 5), ("SC101", "m.py", 5, 5)]
    assert doc["summary"]["suppressed"] == 2


def test_report_unused_ignores(tree, capsys):
    write_tree(tree, {"m.py": """
        def f(x, y):
            x.copy_(y)  # streamcheck: ignore[SC101, SC104]
            y = 1  # streamcheck: ignore
            z = 2  # streamcheck: ignore[SC999]
            x.copy_(y)  # streamcheck: ignore[SC101]
    """})
    code, doc, _ = scan_json(capsys, "--no-cache", "--report-unused-ignores", ".")
    assert code == 1
    assert [(f["rule"], f["primary"]["line"], f["primary"]["column"], f["message"]) for f in doc["findings"]] == [
        ("SC002", 2, 17, "unused suppression: no SC104 finding on this line"),
        ("SC002", 3, 12, "unused suppression: no finding on this line"),
        ("SC002", 4, 12, "unused suppression: SC999 is not a streamcheck rule"),
    ]
    assert {f["severity"] for f in doc["findings"]} == {"warning"}
    # Without the flag the same file is clean.
    code, doc, _ = scan_json(capsys, "--no-cache", ".")
    assert (code, doc["findings"]) == (0, [])


def test_unused_ignore_of_a_rule_not_selected_is_not_reported(tree, capsys):
    write_tree(tree, {"m.py": "def f(x):\n    x.free_()  # streamcheck: ignore[SC104]\n"})
    code, doc, _ = scan_json(capsys, "--no-cache", "--report-unused-ignores", "--select", "SC101,SC002", ".")
    assert (code, doc["findings"]) == (0, [])


def test_baseline_new_finding_fails_moved_one_does_not(tree, capsys):
    original = """
        def f(x, y):
            x.copy_(y)

        def g(x):
            x.free_()
    """
    write_tree(tree, {"m.py": original})
    code, _, err = scan_cli(capsys, "--no-cache", "--write-baseline", "baseline.json", ".")
    assert (code, err) == (0, "streamcheck: wrote 2 findings to baseline.json\n")
    saved = json.loads((tree / "baseline.json").read_text())
    assert [(e["rule"], e["path"], e["line"]) for e in saved["findings"]] == [
        ("SC101", "m.py", 2), ("SC104", "m.py", 5)]

    # The same findings, ten lines further down: still excused.
    write_tree(tree, {"m.py": "import os\n" * 10 + original.replace("\n        ", "\n").lstrip("\n")})
    code, doc, _ = scan_json(capsys, "--no-cache", "--baseline", "baseline.json", ".")
    assert (code, doc["findings"], doc["summary"]["baselined"]) == (0, [], 2)

    # A new finding in another function fails, and is the only one reported.
    write_tree(tree, {"m.py": "import os\n" * 10 + original.replace("\n        ", "\n").lstrip("\n")
                      + "\ndef h(a, b):\n    a.copy_(b)\n"})
    code, doc, _ = scan_json(capsys, "--no-cache", "--baseline", "baseline.json", ".")
    assert code == 1
    assert positions(doc) == [("SC101", "m.py", 18, 5)]
    assert doc["summary"]["baselined"] == 2


def test_baseline_counts_identical_findings(tree, capsys):
    write_tree(tree, {"m.py": "def f(x, y):\n    x.copy_(y)\n"})
    scan_cli(capsys, "--no-cache", "--write-baseline", "b.json", ".")
    write_tree(tree, {"m.py": "def f(x, y):\n    x.copy_(y)\n    x.copy_(y)\n"})
    code, doc, _ = scan_json(capsys, "--no-cache", "--baseline", "b.json", ".")
    assert code == 1
    assert positions(doc) == [("SC101", "m.py", 3, 5)]


@pytest.mark.parametrize("content, message", [
    (None, "b.json: cannot read baseline: No such file or directory"),
    ("{", "b.json: not a JSON file: "),
    ('{"findings": []}', "b.json: not a streamcheck baseline (write one with --write-baseline)"),
    ('{"tool": "streamcheck", "version": 9, "findings": []}', "b.json: baseline format version 9, expected 1"),
])
def test_bad_baseline_exits_2(tree, capsys, content, message):
    write_tree(tree, {"m.py": "x = 1\n"})
    if content is not None:
        (tree / "b.json").write_text(content)
    code, out, err = scan_cli(capsys, "--baseline", "b.json", ".")
    assert code == 2 and out == ""
    assert err.startswith(f"streamcheck scan: {message}")
