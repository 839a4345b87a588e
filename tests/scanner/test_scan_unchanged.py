"""A warm scan in which no file's stat changed reads only the files its findings name (scanner/unchanged.py)."""

from __future__ import annotations

import os
import time

from streamcheck.report import regions
from streamcheck.scanner import driver

from .helpers import RACY, scan_cli, write_tree

OLD = time.time() - 60  # older than the record's racy window: the record trusts these files


def _tree(root, files):
    write_tree(root, files)
    for name in files:
        os.utime(root / name, (OLD, OLD))


def _reads(monkeypatch) -> list[str]:
    read: list[str] = []
    real = driver.read_source

    def counting(disk_path, max_bytes):
        read.append(os.path.basename(disk_path))
        return real(disk_path, max_bytes)

    monkeypatch.setattr(driver, "read_source", counting)
    return read


def test_nothing_changed_reads_only_the_file_with_the_finding(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    _tree(tmp_path, {"m.py": RACY, "quiet.py": "x = 1\n", "other.py": "def g():\n    return 2\n"})
    code, cold, _ = scan_cli(capsys, "--cache-dir", "cache", ".")
    read = _reads(monkeypatch)
    code_warm, warm, _ = scan_cli(capsys, "--cache-dir", "cache", ".")
    assert (code, code_warm) == (1, 1) and warm == cold and "m.py:7:5: SC101" in warm
    assert read == ["m.py"]  # for its suppression comments


def test_a_suppression_added_since_is_seen(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    _tree(tmp_path, {"m.py": RACY})
    assert "m.py:7:5: SC101" in scan_cli(capsys, "--cache-dir", "cache", ".")[1]
    (tmp_path / "m.py").write_text(RACY.replace("x.copy_(y)", "x.copy_(y)  # streamcheck: ignore[SC101]"))
    code, out, _ = scan_cli(capsys, "--cache-dir", "cache", ".")
    assert "m.py:7:5: SC101" not in out and "Found 1 finding in 1 file: SC106 x1 (1 suppressed inline)." in out


def test_a_file_changed_within_the_clock_tick_of_the_record_is_read_again(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    write_tree(tmp_path, {"m.py": RACY})  # just written: too recent for the record to trust its stat
    stat = os.stat(tmp_path / "m.py")
    assert "m.py:7:5: SC101" in scan_cli(capsys, "--cache-dir", "cache", ".")[1]
    # Same size, same mtime, other bytes: only reading the file can tell.
    (tmp_path / "m.py").write_text(RACY.replace("y.add_(x)", "y.abs()  "))
    os.utime(tmp_path / "m.py", ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert os.stat(tmp_path / "m.py").st_size == stat.st_size
    code, out, _ = scan_cli(capsys, "--cache-dir", "cache", ".")
    assert "m.py:7:5: SC101" not in out and "m.py:9:9: SC101 RAW `y`" in out and "9 | y.abs()" in out


def test_report_unused_ignores_reads_every_file(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    _tree(tmp_path, {"m.py": RACY, "quiet.py": "x = 1  # streamcheck: ignore[SC104]\n"})
    scan_cli(capsys, "--cache-dir", "cache", "--report-unused-ignores", ".")
    read = _reads(monkeypatch)
    code, out, _ = scan_cli(capsys, "--cache-dir", "cache", "--report-unused-ignores", ".")
    assert "quiet.py:1:8: SC002" in out
    assert sorted(read) == ["m.py", "quiet.py"]


# What a warm scan in which nothing changed imports of the rules: the facts' types and the rule ids, no rule.
WARM_IMPORTS = """
import contextlib, io, sys
from streamcheck.cli import main
with contextlib.redirect_stdout(io.StringIO()):
    code = main(["scan", "--no-progress", "--cache-dir", "cache", "."])
print(code, " ".join(sorted(m for m in sys.modules if m.startswith("streamcheck.rules"))))
"""


def test_a_warm_scan_imports_no_rule(tmp_path):
    import subprocess
    import sys

    _tree(tmp_path, {"m.py": RACY, "quiet.py": "x = 1\n"})
    cold = subprocess.run([sys.executable, "-c", WARM_IMPORTS], cwd=tmp_path, capture_output=True, text=True)
    warm = subprocess.run([sys.executable, "-c", WARM_IMPORTS], cwd=tmp_path, capture_output=True, text=True)
    assert cold.stdout.startswith("1 ") and "streamcheck.rules.sc101_cross_stream_consumer" in cold.stdout
    assert warm.stdout.split() == ["1", "streamcheck.rules", "streamcheck.rules.facts", "streamcheck.rules.options",
                                   "streamcheck.rules.registry", "streamcheck.rules.rule"], warm.stderr


def test_the_rule_ids_by_module_name_are_the_rules_ids():
    from streamcheck.rules.registry import all_rules, rule_ids

    assert rule_ids() == tuple(rule.id for rule in all_rules())
    assert rule_ids()[:6] == ("SC101", "SC102", "SC103", "SC104", "SC105", "SC106")


def _fresh_regions(monkeypatch) -> None:
    """report/regions.py as a new process has it: nothing parsed, nothing told."""
    regions._expression_ends.cache_clear()
    monkeypatch.setattr(regions, "_told", {})


def test_a_warm_text_report_parses_no_file_for_where_expressions_end(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    _tree(tmp_path, {"m.py": RACY, "quiet.py": "x = 1\n"})
    assert scan_cli(capsys, "--format", "json", "--cache-dir", "cache", ".")[0] == 1  # the cold scan keeps the ends
    _fresh_regions(monkeypatch)
    code, out, _ = scan_cli(capsys, "--cache-dir", "cache", ".")
    lines = out.splitlines()
    assert (code, lines[0][:15], regions._expression_ends.cache_info().misses) == (1, "m.py:7:5: SC101", 0)
    assert lines[1:3] == ["     7 | x.copy_(y)", " " * 9 + "^" * len("x.copy_(y)")]  # the whole call underlined
    # touched since (same bytes, another mtime): the kept ends are not trusted, the file is parsed again (once)
    os.utime(tmp_path / "m.py", (OLD + 1, OLD + 1))
    _fresh_regions(monkeypatch)
    code, again, _ = scan_cli(capsys, "--cache-dir", "cache", ".")
    assert (code, again, regions._expression_ends.cache_info().misses) == (1, out, 1)
