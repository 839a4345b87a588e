"""A runtime fix names the streams as the code does when the source is at hand (issue 16, wording), and keeps
its placeholders when it is not."""

from __future__ import annotations

import json
from pathlib import Path

from streamcheck.cli import main

ROOT = Path(__file__).resolve().parents[2]
TRACE = ROOT / "examples" / "traces" / "hpz_race.jsonl"


def _fix(capsys) -> str:
    assert main(["report", "--format", "json", str(TRACE)]) == 1
    (finding,) = json.loads(capsys.readouterr().out)["findings"]
    return finding["fix"]


def test_with_the_source_the_fix_uses_the_codes_names(capsys, monkeypatch):
    monkeypatch.chdir(ROOT)
    assert _fix(capsys) == (
        "add `self.allgather_stream.wait_stream(torch.cuda.default_stream())` before the read at racy.py:35; or "
        "record an event on torch.cuda.default_stream() after racy.py:45 and call "
        "`self.allgather_stream.wait_event(event)` there")


def test_without_the_source_the_fix_keeps_placeholders(capsys, monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    assert _fix(capsys).startswith("add `side.wait_stream(compute)` before the read at racy.py:35 (side = side "
                                   "stream first used at racy.py:52 in __init__ on cuda:0, compute = compute stream "
                                   "cuda:0)")
