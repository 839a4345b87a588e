"""Safe CI semantics: a typo in a rule id, a config file without our table, a broken pyproject.toml, a mistyped or
abbreviated option: each stops the scan with exit 2 and a message naming what is wrong (never "No findings", 0)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from streamcheck.cli import main

ROOT = Path(__file__).resolve().parents[2]
def _scan_rule_ids() -> str:
    from streamcheck.rules.registry import all_rules
    from streamcheck.scanner.driver import DRIVER_RULES

    return ", ".join(sorted({*DRIVER_RULES, *(rule.id for rule in all_rules())}))


VALID = _scan_rule_ids()  # the message lists every scan rule: SC001, SC002, SC101, ... (new rules included)
UNKNOWN = "unknown rule id {!r}; valid: " + VALID + ", a prefix of them (e.g. 'SC1'), or ALL"
RUNTIME = ("{} is a runtime rule (reported by `streamcheck run` and `streamcheck report`), not a scan rule; "
           "scan rules: " + VALID)
RACY = (ROOT / "examples" / "hpz_race" / "racy.py").read_text(encoding="utf-8")


@pytest.fixture
def project(tmp_path, monkeypatch):
    (tmp_path / "racy.py").write_text(RACY, encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    return tmp_path


def scan(capsys, *args):
    code = main(["scan", "--no-progress", "--no-cache", *args])
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.parametrize("args, message", [
    (["--select", "SC999"], "command line: --select: " + UNKNOWN.format("SC999")),
    (["--select", "SC201"], "command line: --select: " + RUNTIME.format("SC201")),
    (["--select", "SC2"], "command line: --select: " + RUNTIME.format("SC2")),
    (["--ignore", "SC9"], "command line: --ignore: " + UNKNOWN.format("SC9")),
    (["--select", "SC101,SC109"], "command line: --select: " + UNKNOWN.format("SC109")),
    (["--per-file-ignores", "tests/*:SC3"], "command line: --per-file-ignores: " + UNKNOWN.format("SC3")),
])
def test_unknown_or_runtime_rule_ids_on_the_command_line_exit_2(project, capsys, args, message):
    assert scan(capsys, *args, ".") == (2, "", f"streamcheck scan: {message}\n")


@pytest.mark.parametrize("table, key, code", [
    ('[tool.streamcheck]\nselect = ["SC999"]\n', "select", "SC999"),
    ('[tool.streamcheck]\nignore = ["sc9"]\n', "ignore", "SC9"),
    ('[tool.streamcheck.per-file-ignores]\n"tests/*" = ["SC42"]\n', "per-file-ignores.tests/*", "SC42"),
])
def test_unknown_rule_ids_in_pyproject_exit_2(project, capsys, table, key, code):
    (project / "pyproject.toml").write_text(table, encoding="utf-8")
    assert scan(capsys, ".") == (
        2, "", f"streamcheck scan: {project / 'pyproject.toml'}: [tool.streamcheck] {key}: {UNKNOWN.format(code)}\n")


def test_the_valid_ids_listed_are_the_scan_rules():
    assert VALID.startswith("SC001, SC002, SC101, SC102, SC103, SC104, SC105")
    assert "SC2" not in VALID


def test_valid_prefixes_and_all_still_scan(project, capsys):
    assert scan(capsys, "--select", "SC1", ".")[0] == 1
    assert scan(capsys, "--select", "ALL", "--ignore", "SC10", ".")[0] == 0


def test_config_file_without_our_table_exits_2(project, capsys):
    (project / "other.toml").write_text('[tool.ruff]\nselect = ["E"]\n', encoding="utf-8")
    assert scan(capsys, "--config", "other.toml", ".") == (
        2, "", "streamcheck scan: other.toml has no [tool.streamcheck] table (is it the right file?)\n")
    assert scan(capsys, "--config", "missing.toml", ".") == (
        2, "", "streamcheck scan: cannot read missing.toml (--config): no such file\n")


# issue 19, D5: a pyproject.toml that cannot be read is exit 2 with the reason, never a traceback read as "findings".
def test_pyproject_with_an_invalid_utf8_byte_exits_2(project, capsys):
    (project / "pyproject.toml").write_bytes(b'[tool.streamcheck]\nselect = ["SC1\xff"]\n')
    assert scan(capsys, ".") == (
        2, "", f"streamcheck scan: cannot read {project / 'pyproject.toml'}: not UTF-8 (byte 0xff at offset 33)\n")


def test_pyproject_nested_5000_deep_exits_2(project, capsys):
    (project / "pyproject.toml").write_text("[tool.streamcheck]\nx = " + "[" * 5000 + "]" * 5000 + "\n")
    assert scan(capsys, ".") == (
        2, "", f"streamcheck scan: cannot read {project / 'pyproject.toml'}: not valid TOML: nested too deeply to "
               "parse\n")


# issue 19, D19: the table is found however TOML lets one spell it.
@pytest.mark.parametrize("text", [
    '[tool."streamcheck"]\nignore = ["SC101"]\n',
    '[tool]\nstreamcheck = { ignore = ["SC101"] }\n',
    "[tool.'streamcheck']\nignore = ['SC101']\n",
])
def test_every_toml_spelling_of_the_table_is_read(project, capsys, text):
    assert scan(capsys, ".")[0] == 1
    (project / "pyproject.toml").write_text(text, encoding="utf-8")
    assert scan(capsys, ".") == (0, "No findings in 1 file.\n", "")


def test_a_pyproject_that_only_mentions_streamcheck_elsewhere_is_not_ours(project, capsys):
    (project / "pyproject.toml").write_text('[project]\nname = "uses-streamcheck"\n', encoding="utf-8")
    assert scan(capsys, ".")[0] == 1


@pytest.mark.parametrize("argv, message", [
    (["scan", "--sel", "SC1", "."], "streamcheck scan: error: unrecognized arguments: --sel (did you mean --select?)"),
    (["scan", "--selct", "SC1"], "streamcheck scan: error: unrecognized arguments: --selct (did you mean --select?)"),
    (["scan", "--form=json"], "streamcheck scan: error: unrecognized arguments: --form=json (did you mean --format?)"),
    (["run", "--ot", "o", "--", "true"], "streamcheck run: error: unrecognized arguments: --ot (did you mean --out?)"),
    (["scan", "--zzzz"], "streamcheck scan: error: unrecognized arguments: --zzzz"),
])
def test_abbreviations_are_refused_with_a_did_you_mean(capsys, argv, message):
    assert main(argv) == 2
    assert capsys.readouterr().err.splitlines()[-1] == message


def test_python_dash_m_streamcheck_and_help():
    done = subprocess.run([sys.executable, "-m", "streamcheck", "--help"], capture_output=True, text=True,
                          cwd=ROOT, timeout=60)
    assert done.returncode == 0
    lines = done.stdout.splitlines()
    assert lines[0] == "usage: streamcheck [-h] [--version] COMMAND ..."
    assert lines[2] == ("Find CUDA stream-ordering races in PyTorch code: a static lint (scan) and a runtime detector "
                        "(run).")
    assert lines[-2:] == [
        "exit codes: 0 nothing found, 1 findings, 2 usage or configuration error (run: the command's own failing "
        "status)",
        "a command's options: streamcheck COMMAND --help; a rule's documentation: streamcheck explain SC101"]
    bad = subprocess.run([sys.executable, "-m", "streamcheck", "scan", "--selec", "x"], capture_output=True,
                         text=True, cwd=ROOT, timeout=60)
    assert (bad.returncode, bad.stderr.splitlines()[-1]) == (
        2, "streamcheck scan: error: unrecognized arguments: --selec (did you mean --select?)")
