"""--show-timings: the time of each phase of a scan, in the order the phases ran, on stderr."""

from __future__ import annotations

import re

from .helpers import RACY, scan_cli, write_tree

PHASE = re.compile(r"^  (?P<phase>[a-z-]+) +(?P<seconds>\d+\.\d{3}) s$")


def _phases(err: str) -> list[tuple[str, float]]:
    lines = err.splitlines()
    start = lines.index("streamcheck: timings")
    return [(m["phase"], float(m["seconds"])) for m in map(PHASE.match, lines[start + 1:])]


def test_a_cold_scan_shows_every_phase_in_order_and_their_total(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    write_tree(tmp_path, {"m.py": RACY, "quiet.py": "x = 1\n"})
    code, out, err = scan_cli(capsys, "--no-cache", "--show-timings", "-j", "1", ".")
    assert code == 1 and "m.py:7:5: SC101" in out
    phases = _phases(err)
    assert [name for name, _ in phases] == [
        "discovery", "extraction", "whole-program", "rules", "filters", "report", "total"]
    total = sum(seconds for _, seconds in phases[:-1])
    assert abs(phases[-1][1] - total) <= 0.0005 * len(phases)  # each line is rounded to the millisecond


def test_a_warm_scan_with_nothing_changed_has_no_extraction_or_rules(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    write_tree(tmp_path, {"m.py": RACY})
    scan_cli(capsys, ".")
    code, out, err = scan_cli(capsys, "--show-timings", ".")
    assert code == 1 and "m.py:7:5: SC101" in out
    assert [name for name, _ in _phases(err)] == ["discovery", "filters", "report", "total"]


def test_without_the_option_no_timings_are_printed(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    write_tree(tmp_path, {"m.py": RACY})
    code, _, err = scan_cli(capsys, "--no-cache", ".")
    assert code == 1 and "timings" not in err
