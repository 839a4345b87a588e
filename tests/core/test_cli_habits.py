"""CLI habits of ruff-style linters: --statistics, -q, --show-settings, --show-files, more output formats, stdin,
suppression comments on any line of a finding, `# noqa: SC104`, file-level suppression; packaging."""

from __future__ import annotations

import json
import subprocess
import sys
import tomllib
from pathlib import Path
from xml.etree import ElementTree as ET

import pytest

from streamcheck.cli import main

from .test_fix import FREE_SOURCE

ROOT = Path(__file__).resolve().parents[2]
MESSAGE = ("`t1` is used on stream `side` and released by `del` with no `record_stream(side)` and no wait for `side`: "
           "the allocator may hand its memory to new work while the side stream still uses it")
SUMMARY = "tensor used on a side stream is freed without record_stream or a wait"


@pytest.fixture
def tree(tmp_path, monkeypatch):
    (tmp_path / "a.py").write_text(FREE_SOURCE, encoding="utf-8")
    (tmp_path / "b.py").write_text(FREE_SOURCE, encoding="utf-8")
    (tmp_path / "ok.py").write_text("x = 1\n", encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    return tmp_path


def scan(capsys, *args):
    code = main(["scan", "--no-progress", "--no-cache", *args])
    out, err = capsys.readouterr()
    return code, out, err


def test_statistics(tree, capsys):
    assert scan(capsys, "--statistics", ".") == (1, f"2\tSC104\t[*] {SUMMARY}\n", "")


def test_quiet_prints_findings_only(tree, capsys):
    code, out, err = scan(capsys, "-q", "--format", "concise", ".")
    assert (code, out, err) == (1, f"a.py:8:9: SC104 [FREE] {MESSAGE}\nb.py:8:9: SC104 [FREE] {MESSAGE}\n", "")
    (tree / "a.py").write_text("x = 1\n")
    (tree / "b.py").write_text("x = 1\n")
    assert scan(capsys, "-q", ".") == (0, "", "")


def test_show_settings_and_files(tree, capsys):
    (tree / "pyproject.toml").write_text('[tool.streamcheck]\nignore = ["SC102"]\nextend-exclude = ["b.py"]\n'
                                         'per-file-ignores = { "tests/*" = ["SC101"] }\n', encoding="utf-8")
    code, out, _ = scan(capsys, "--show-settings", "--select", "SC1")
    assert code == 0
    assert out.splitlines()[:6] == [
        f"# configuration file: {tree / 'pyproject.toml'}", f"# root: {tree}", 'select = ["SC1"]',
        'ignore = ["SC102"]', 'per-file-ignores = { "tests/*" = ["SC101"] }',
        'exclude = [".git", ".hg", ".svn", ".venv", "venv", ".tox", ".nox", "__pycache__", ".mypy_cache", '
        '".pytest_cache", ".ruff_cache", ".streamcheck_cache", ".cache", ".eggs", "*.egg-info", "build", "dist", '
        '"node_modules", "site-packages"]']
    assert out.splitlines()[6:] == ['extend-exclude = ["b.py"]', "stream-contexts = []", "collectives = []",
                                    "sync-callables = []", "generic-attributes = []", "max-file-size-kb = 1024",
                                    "respect-gitignore = true", "force-exclude = false"]
    assert scan(capsys, "--show-files", ".") == (0, "a.py\nok.py\n", "")


def test_concise_pylint_gitlab_junit(tree, capsys):
    assert scan(capsys, "--format", "pylint", "a.py")[:2] == (1, f"a.py:8: [SC104] (FREE) {MESSAGE}\n")
    code, out, _ = scan(capsys, "--format", "gitlab", "a.py")
    (issue,) = json.loads(out)
    assert issue == {"description": f"SC104 FREE: {MESSAGE}", "check_name": "SC104",
                     "fingerprint": issue["fingerprint"], "severity": "critical",
                     "location": {"path": "a.py", "lines": {"begin": 8}}}
    assert len(issue["fingerprint"]) == 20
    code, out, _ = scan(capsys, "--format", "junit", "a.py", "ok.py")
    suites = ET.fromstring(out)
    assert (suites.tag, suites.get("tests"), suites.get("failures")) == ("testsuites", "1", "1")
    (case,) = suites.iter("testcase")
    assert (case.get("classname"), case.get("name")) == ("a.py", "SC104 at 8:9")
    failure = case.find("failure")
    assert (failure.get("type"), failure.get("message")) == ("SC104", MESSAGE)
    assert failure.text.splitlines()[1:] == ["read: a.py:7:17 (used on `side`)",
                                             "stream context: a.py:6:10 (switches to `side`)",
                                             failure.text.splitlines()[3]]
    clean = ET.fromstring(scan(capsys, "--format", "junit", "ok.py")[1])
    assert [(c.get("name"), c.find("failure")) for c in clean.iter("testcase")] == [("no findings", None)]


def test_stdin_with_a_filename(tree):
    (tree / "pyproject.toml").write_text('[tool.streamcheck]\nper-file-ignores = { "gen/*" = ["SC104"] }\n')
    run = lambda *args: subprocess.run(  # noqa: E731
        [sys.executable, "-m", "streamcheck", "scan", "--no-cache", "--format", "concise", *args],
        input=FREE_SOURCE, capture_output=True, text=True, cwd=tree, timeout=60)
    done = run("--stdin-filename", "pkg/x.py", "-")
    assert (done.returncode, done.stdout, done.stderr) == (1, f"pkg/x.py:8:9: SC104 [FREE] {MESSAGE}\nFound 1 "
                                                              "finding.\n", "")
    done = run("--stdin-filename", "gen/x.py", "-")  # per-file-ignores apply to the name given
    assert (done.returncode, done.stdout) == (0, "No findings.\n")
    done = run("--diff", "-")
    assert done.returncode == 1
    assert done.stdout.splitlines()[:2] == ["--- a/stdin.py", "+++ b/stdin.py"]
    assert "+    t1.record_stream(side)" in done.stdout.splitlines()
    done = run("--fix", "-")
    assert (done.returncode, done.stderr) == (
        2, "streamcheck scan: '-' (stdin) is scanned alone, without --project or --fix (use --diff)\n")


@pytest.mark.parametrize("edit", [
    ("        total = t1.sum()  # the use on the side stream\n",
     "        total = t1.sum()  # streamcheck: ignore[SC104]\n"),                     # the related read line
    ("    with torch.cuda.stream(side):\n", "    with torch.cuda.stream(side):  # streamcheck: ignore\n"),
    ("    del t1\n", "    del t1  # noqa: E501, SC104\n"),                           # flake8/ruff spelling
    ("import torch\n", "import torch\n# streamcheck: ignore-file[SC104]\n"),          # file level
])
def test_suppression_on_any_line_of_the_finding(tree, capsys, edit):
    (tree / "a.py").write_text(FREE_SOURCE.replace(*edit), encoding="utf-8")
    assert scan(capsys, "--report-unused-ignores", "a.py") == (0, "No findings in 1 file (1 suppressed inline).\n",
                                                               "")


def test_noqa_of_other_linters_and_unused_file_level(tree, capsys):
    (tree / "a.py").write_text(FREE_SOURCE.replace("    del t1\n", "    del t1  # noqa\n"), encoding="utf-8")
    assert scan(capsys, "--format", "concise", "a.py")[:2] == (1, f"a.py:8:9: SC104 [FREE] {MESSAGE}\n"
                                                                  "Found 1 finding.\n")
    (tree / "ok.py").write_text("# streamcheck: ignore-file[SC101]\nx = 1\n", encoding="utf-8")
    assert scan(capsys, "--format", "concise", "--report-unused-ignores", "ok.py")[:2] == (
        1, "ok.py:1:1: SC002 unused suppression: no SC101 finding in this file\nFound 1 finding.\n")


def test_license_and_packaging_metadata():
    license_text = (ROOT / "LICENSE").read_text(encoding="utf-8")
    assert license_text.splitlines()[1:3] == ["                                 Apache License",
                                              "                           Version 2.0, January 2004"]
    assert "END OF TERMS AND CONDITIONS" in license_text and len(license_text.splitlines()) == 202
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    assert (project["project"]["license"], project["project"]["license-files"]) == ("Apache-2.0", ["LICENSE"])
    assert "libcst>=1.1" in project["project"]["dependencies"]
    setuptools = project["tool"]["setuptools"]
    assert set(setuptools["package-data"]) <= set(setuptools["packages"])  # no data-only package warning
    from streamcheck.docs import PROJECT_URL

    # SARIF's informationUri and every helpUri come from the same address as the package's Homepage.
    assert project["project"]["urls"]["Homepage"] == PROJECT_URL == "https://github.com/streamcheck/streamcheck"


@pytest.mark.network
def test_building_the_wheel_prints_no_setuptools_warning(tmp_path):
    """With the installed setuptools when it is new enough (offline); else pip fetches the one pyproject asks for."""
    try:
        import setuptools

        offline = int(setuptools.__version__.split(".")[0]) >= 77
    except ImportError:
        offline = False
    isolation = ["--no-build-isolation"] if offline else []
    done = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", *isolation, "-q",
                           "-w", str(tmp_path), str(ROOT)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "Warning" not in done.stderr and "deprecated" not in done.stderr


def test_the_readme_github_actions_workflow_uses_real_options():
    import re

    import yaml

    from streamcheck.cli import build_parser

    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    (block,) = re.findall(r"```yaml\n(# \.github/workflows/streamcheck\.yml\n.*?)```", readme, re.S)
    workflow = yaml.safe_load(block)
    steps = workflow["jobs"]["scan"]["steps"]
    assert workflow["permissions"] == {"contents": "read", "security-events": "write"}
    assert [s.get("uses", "").split("@")[0] for s in steps if "uses" in s] == [
        "actions/checkout", "actions/setup-python", "github/codeql-action/upload-sarif"]
    commands = [s["run"] for s in steps if s.get("run", "").startswith("streamcheck ")]
    assert len(commands) == 2
    parser = build_parser()
    for command in commands:
        argv = command.replace("${{ github.base_ref }}", "main").split()[1:]
        parser.parse_args(argv)  # exits 2 (SystemExit) on an option that does not exist


def test_text_on_a_terminal_wraps_at_word_boundaries():
    import io

    from streamcheck.findings import Finding, Location
    from streamcheck.report import ReportContext, write_report

    words = ["stream-ordering", "hazard", "between", "`self.allgather_stream`", "and", "the", "current", "stream"] * 4
    finding = Finding(rule="SC101", message=" ".join(words), primary=Location("x.py", 1, 1))
    out = io.StringIO()
    write_report("text", [finding], out, ReportContext(width=60))
    lines = out.getvalue().splitlines()[:-2]
    assert all(len(line) <= 60 for line in lines)
    assert " ".join(" ".join(lines).split()) == "x.py:1:1: SC101 " + " ".join(words)  # no word cut in two
    wide = io.StringIO()
    write_report("text", [finding], wide, ReportContext())  # a file or a pipe: one line, never wrapped
    assert wide.getvalue().splitlines()[0] == "x.py:1:1: SC101 " + " ".join(words)


def test_runtime_commands_offer_the_same_formats(capsys, monkeypatch):
    from streamcheck.report import FORMATS

    monkeypatch.chdir(ROOT)
    assert main(["report", "--format", "pylint", "examples/traces/hpz_race.jsonl"]) == 1
    assert capsys.readouterr().out.splitlines() == [
        "examples/hpz_race/racy.py:35: [SC201] (RAW) read-after-write race on storage 0x7f020f000000: aten::cat on "
        "side stream first used at racy.py:52 in __init__ on cuda:0 reads it at racy.py:35, not ordered after "
        "aten::copy_ on compute stream cuda:0 (write at racy.py:45)"]
    assert list(FORMATS) == ["text", "concise", "json", "sarif", "github", "gitlab", "junit", "pylint", "azure"]
    for command in ("scan", "report", "run"):
        assert main([command, "--help"]) == 0
        assert "{text,concise,json,sarif,github,gitlab,junit,pylint,azure}" in capsys.readouterr().out
