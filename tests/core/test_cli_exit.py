"""The command line's exit: a scan's process ends when its report is written (cli.entry skips the interpreter's
teardown of the scan's objects), with everything written and the exit code of the verdict; other commands exit
the ordinary way."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from streamcheck.cli import build_parser

ROOT = Path(__file__).resolve().parents[2]
RACY = ROOT / "examples" / "async_collective" / "racy.py"


def _scan(*options: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "streamcheck", "scan", "--no-cache", "--no-progress", *options,
                           str(RACY)], cwd=cwd, capture_output=True, text=True, timeout=120)


def test_only_the_scan_ends_at_once():
    parser = build_parser()
    assert parser.parse_args(["scan", "."])._exit_at_once is True
    assert parser.parse_args(["explain", "SC101"])._exit_at_once is False


def test_a_scan_that_ends_at_once_writes_its_whole_report(tmp_path):
    done = _scan("--format", "json", "--show-timings", cwd=tmp_path)
    assert done.returncode == 1  # findings
    findings = json.loads(done.stdout)["findings"]  # the whole document: stdout was flushed before the exit
    assert [f["rule"] for f in findings] and all(f["rule"].startswith("SC1") for f in findings)
    assert "total" in done.stderr  # and stderr too
    report = tmp_path / "report.json"
    done = _scan("--format", "json", "-o", str(report), cwd=tmp_path)
    assert done.returncode == 1 and done.stdout == ""
    assert json.loads(report.read_text(encoding="utf-8"))["findings"] == findings


def test_a_scan_into_a_closed_pipe_exits_without_a_traceback(tmp_path):
    scan = subprocess.Popen([sys.executable, "-m", "streamcheck", "scan", "--no-cache", "--no-progress", str(RACY)],
                            cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    scan.stdout.close()  # the reader went (`streamcheck scan | head -0`)
    stderr = scan.stderr.read().decode()
    assert scan.wait(timeout=120) in (0, 1)
    assert "Traceback" not in stderr
