"""The trace of examples/hpz_race/racy.py recorded on an H200 (`streamcheck run --trace`), replayed on CPU.

examples/traces/hpz_race.jsonl is the runtime's own output, with one edit: the checkout prefix of the example's
path (/work/main/) was dropped so that paths resolve from the repository root. It must keep showing the real race:
the all-gather side stream's `torch.cat` reads the secondary shards that `copy_` wrote on the compute stream,
20 steps x 2 parameters.
"""

from __future__ import annotations

import json
from pathlib import Path

from streamcheck.cli import main
from streamcheck.instrument.detector import Detector
from streamcheck.instrument.trace import read_trace, replay

ROOT = Path(__file__).resolve().parents[2]
TRACE = ROOT / "examples" / "traces" / "hpz_race.jsonl"
RACY = ROOT / "examples" / "hpz_race" / "racy.py"


def line_containing(text: str) -> int:
    (line,) = [n for n, source in enumerate(RACY.read_text().splitlines(), 1) if text in source]
    return line


def test_analyze_reports_the_recorded_hpz_race(capsys, monkeypatch):
    monkeypatch.chdir(ROOT)
    assert main(["analyze", str(TRACE.relative_to(ROOT)), "--format", "json"]) == 1
    (finding,) = json.loads(capsys.readouterr().out)["findings"]
    assert (finding["rule"], finding["kind"], finding["count"]) == ("SC201", "RAW", 40)
    read, write = finding["primary"], finding["related"][0]
    assert (read["path"], read["line"], read["role"]) == (
        "examples/hpz_race/racy.py", line_containing("flat = torch.cat([p.secondary_shard"), "read")
    assert (write["path"], write["line"], write["role"]) == (
        "examples/hpz_race/racy.py", line_containing("param.secondary_shard.copy_("), "write")
    assert finding["extra"]["earlier"]["actor"] == "cuda:0/s0"  # the copy ran on the compute stream
    assert finding["extra"]["later"]["op"] == "aten::cat"  # read on the all-gather side stream


def test_the_trace_holds_a_real_run():
    events = list(read_trace(TRACE))
    header = events[0]
    assert (header["format"], header["rank"], header["world_size"]) == ("streamcheck-trace", 0, 1)
    kinds = {event["e"] for event in events}
    assert {"kernel", "collective", "work_wait", "event_record", "event_wait", "alloc", "free"} <= kinds
    detector = Detector()
    replay(events, detector)
    assert {(race.kind, race.earlier.op, race.later.op) for race in detector.races} == {
        ("RAW", "aten::copy_", "aten::cat")}
    assert len(detector.races) == 40
