"""`streamcheck analyze` away from where the trace was recorded still shows the source lines and names the streams
as the code does (the folders above the trace are tried as the recording's working folder)."""

from __future__ import annotations

from pathlib import Path

from streamcheck.cli import main

ROOT = Path(__file__).resolve().parents[2]
TRACE = ROOT / "examples" / "traces" / "hpz_race.jsonl"


def test_analyze_from_another_folder_shows_the_same_report(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(ROOT)
    assert main(["analyze", str(TRACE)]) == 1
    here = capsys.readouterr().out
    monkeypatch.chdir(tmp_path)
    assert main(["analyze", str(TRACE)]) == 1
    elsewhere = capsys.readouterr().out
    assert "                45 | param.secondary_shard.copy_(param.view(-1))" in elsewhere.splitlines()
    assert "                35 | flat = torch.cat([p.secondary_shard for p in params])" in elsewhere.splitlines()
    assert ("  fix: add `self.allgather_stream.wait_stream(torch.cuda.default_stream())` before the read at "
            "racy.py:35; or record an event on torch.cuda.default_stream() after racy.py:45 and call "
            "`self.allgather_stream.wait_event(event)` there") in elsewhere.splitlines()
    assert here.splitlines()[:-1] == elsewhere.splitlines()[:-1]  # the summary names the trace as it was given
