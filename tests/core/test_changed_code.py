"""Changed-code workflows: --diff-base REF, the pre-commit hook (--project with the staged files), .gitignore, a
file named on purpose inside an excluded folder."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
import yaml

from streamcheck.cli import main

from .test_fix import FREE_SOURCE

ROOT = Path(__file__).resolve().parents[2]
FIXED_SOURCE = FREE_SOURCE.replace("    del t1\n", "    t1.record_stream(side)\n    del t1\n")


def _git(repo: Path, *args: str) -> None:
    subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *args], cwd=repo, check=True,
                   capture_output=True)


def scan(capsys, *args):
    code = main(["scan", "--no-progress", "--no-cache", "--format", "concise", *args])
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture
def repo(tmp_path, monkeypatch):
    (tmp_path / "old.py").write_text(FREE_SOURCE, encoding="utf-8")  # a race that was there before
    (tmp_path / "new.py").write_text(FIXED_SOURCE, encoding="utf-8")
    _git(tmp_path, "init", "-q")
    _git(tmp_path, "add", ".")
    _git(tmp_path, "commit", "-q", "-m", "base")
    monkeypatch.chdir(tmp_path)
    return tmp_path


def test_diff_base_reports_only_findings_on_changed_lines(repo, capsys):
    (repo / "new.py").write_text(FIXED_SOURCE.replace("    t1.record_stream(side)\n", ""), encoding="utf-8")
    assert scan(capsys, ".")[1].splitlines() == [
        "new.py:8:9: SC104 [FREE] `t1` is used on stream `side` and released by `del` with no `record_stream(side)` "
        "and no wait for `side`: the allocator may hand its memory to new work while the side stream still uses it",
        "old.py:8:9: SC104 [FREE] `t1` is used on stream `side` and released by `del` with no `record_stream(side)` "
        "and no wait for `side`: the allocator may hand its memory to new work while the side stream still uses it",
        "Found 2 findings."]
    code, out, _ = scan(capsys, "--diff-base", "HEAD", ".")
    assert (code, [line.split(":")[0] for line in out.splitlines()]) == (1, ["new.py", "Found 1 finding."])
    # An untracked file counts whole.
    (repo / "extra.py").write_text(FREE_SOURCE, encoding="utf-8")
    code, out, _ = scan(capsys, "--diff-base", "HEAD", ".")
    assert [line.split(":")[0] for line in out.splitlines()] == ["extra.py", "new.py", "Found 2 findings."]


def test_diff_base_errors_exit_2(repo, capsys, tmp_path_factory):
    assert scan(capsys, "--diff-base", "nope", ".") == (
        2, "", f"streamcheck scan: --diff-base nope: 'nope' is not a commit of the repository at {repo}\n")
    elsewhere = tmp_path_factory.mktemp("not_a_repo")
    (elsewhere / "a.py").write_text("x = 1\n", encoding="utf-8")
    code, out, err = scan(capsys, "--diff-base", "HEAD", str(elsewhere))
    assert (code, out) == (2, "")
    assert err.startswith("streamcheck scan: --diff-base HEAD: fatal: not a git repository")


def test_project_mode_reports_only_findings_touching_the_given_files(repo, capsys):
    (repo / "clean.py").write_text("x = 1\n", encoding="utf-8")
    assert scan(capsys, "--project", ".", "clean.py") == (0, "No findings.\n", "")
    code, out, _ = scan(capsys, "--project", ".", "old.py", "clean.py")
    assert (code, [line.split(":")[0] for line in out.splitlines()]) == (1, ["old.py", "Found 1 finding."])


def test_the_pre_commit_hook_passes_filenames_to_project_mode():
    (hook,) = yaml.safe_load((ROOT / ".pre-commit-hooks.yaml").read_text(encoding="utf-8"))
    assert (hook["id"], hook["entry"], hook["pass_filenames"], hook["require_serial"]) == (
        "streamcheck", "streamcheck scan --project .", True, True)


def test_gitignore_is_respected_and_explicit_files_are_scanned(repo, capsys):
    (repo / ".gitignore").write_text("gen/\n", encoding="utf-8")
    (repo / "gen").mkdir()
    (repo / "gen" / "racy.py").write_text(FREE_SOURCE, encoding="utf-8")
    (repo / "build").mkdir()
    (repo / "build" / "b.py").write_text(FREE_SOURCE, encoding="utf-8")
    files = lambda out: [line.split(":")[0] for line in out.splitlines()]  # noqa: E731
    assert files(scan(capsys, ".")[1]) == ["old.py", "Found 1 finding."]
    assert files(scan(capsys, "--no-respect-gitignore", ".")[1]) == ["gen/racy.py", "old.py", "Found 2 findings."]
    assert files(scan(capsys, "gen/racy.py")[1]) == ["gen/racy.py", "Found 1 finding."]
    # build/ is excluded by default; a file named on purpose inside it is scanned, unless --force-exclude.
    assert files(scan(capsys, "build/b.py")[1]) == ["build/b.py", "Found 1 finding."]
    assert scan(capsys, "--force-exclude", "build/b.py") == (0, "No findings.\n", "")
