"""benchmarks/fuzz_oracle.py, the long differential fuzz, kept working: a short run agrees and says so; a broken
detector is caught and its program written out as a trace that `streamcheck analyze` replays."""

from __future__ import annotations

import importlib.util
from pathlib import Path

from streamcheck.cli import main as streamcheck_main
from streamcheck.instrument.detector import Detector
from streamcheck.instrument.trace import read_trace

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "fuzz_oracle.py"


def _load():
    spec = importlib.util.spec_from_file_location("fuzz_oracle", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_short_run_agrees(tmp_path, capsys):
    fuzz = _load()
    assert fuzz.main(["--programs", "300", "--seed", "7", "--out", str(tmp_path / "out")]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("programs: 300 (seed 7, up to 40 draws each, ")
    assert lines[1].startswith("racy programs: ")
    assert int(lines[1].split()[2].rstrip(";")) >= 30  # the generator makes races
    assert lines[2] == "disagreements: 0"
    assert not (tmp_path / "out").exists()


class _IgnoresEventWaits(Detector):
    def event_wait(self, thread, event, stream):
        self.seq += 1


def test_a_broken_detector_is_caught_and_written_out(tmp_path, capsys, monkeypatch):
    fuzz = _load()
    monkeypatch.setattr(fuzz, "Detector", _IgnoresEventWaits)
    out = tmp_path / "out"
    assert fuzz.main(["--programs", "300", "--out", str(out)]) == 1
    printed = capsys.readouterr().out.splitlines()
    count = int(printed[2].split(": ")[1])
    assert count > 0
    written = sorted(out.iterdir())
    assert len(written) == count
    events = list(read_trace(written[0]))[1:]
    detector_races, oracle_races = _load().compare(events)  # the real detector again: they agree
    assert detector_races == oracle_races
    assert streamcheck_main(["analyze", str(written[0])]) == (1 if oracle_races else 0)
    assert capsys.readouterr().err == ""
