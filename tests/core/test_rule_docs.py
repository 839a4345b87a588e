"""docs/rules/SCxxx.md are generated from the rules' docstrings and must be current; `explain` points to them."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from streamcheck.cli import main
from streamcheck.docs import expected_pages, main as docs_main, to_markdown

ROOT = Path(__file__).resolve().parents[2]


def test_rule_pages_are_current():
    """If this fails, a rule's docstring changed: run `python -m streamcheck.docs` and commit docs/rules."""
    folder = ROOT / "docs" / "rules"
    pages = expected_pages()
    assert sorted(pages) == sorted(p.name for p in folder.glob("*.md"))
    stale = [name for name, text in pages.items() if (folder / name).read_text(encoding="utf-8") != text]
    assert stale == [], "stale rule pages; regenerate with: python -m streamcheck.docs"


def test_check_mode_names_a_stale_page(tmp_path, capsys):
    assert docs_main(["--out", str(tmp_path)]) == 0
    assert docs_main(["--check", "--out", str(tmp_path)]) == 0
    (tmp_path / "SC104.md").write_text("old\n", encoding="utf-8")
    (tmp_path / "SC999.md").write_text("gone\n", encoding="utf-8")
    capsys.readouterr()
    assert docs_main(["--check", "--out", str(tmp_path)]) == 1
    assert capsys.readouterr().err == (
        f"{tmp_path / 'SC104.md'}: stale; run `python -m streamcheck.docs`\n"
        f"{tmp_path / 'SC999.md'}: no such rule; delete it or run `python -m streamcheck.docs`\n")


def test_markdown_layout():
    doc = "SC9: title\n\nWhat it does:\n    Finds a\n    thing.\n\nExample:\n    x = 1\n        y\n\nFix:\n    Do it.\n"
    assert to_markdown(doc) == ("# SC9: title\n\n## What it does\n\nFinds a thing.\n\n## Example\n\n```python\n"
                                "x = 1\n    y\n```\n\n## Fix\n\nDo it.\n")


def test_explain_points_to_the_page(capsys):
    assert main(["explain", "SC104"]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == (
        "Online: https://github.com/streamcheck/streamcheck/blob/main/docs/rules/SC104.md")


def test_regenerate_command_runs():
    done = subprocess.run([sys.executable, "-m", "streamcheck.docs", "--check"], capture_output=True, text=True,
                          cwd=ROOT, timeout=60)
    assert (done.returncode, done.stderr) == (0, "")
