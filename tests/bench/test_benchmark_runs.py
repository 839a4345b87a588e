"""The detector microbenchmark runs and prints one row per measured operation (tiny n: a smoke run, not a timing)."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "detector_micro.py"


def test_microbenchmark_prints_every_row(capsys):
    spec = importlib.util.spec_from_file_location("detector_micro", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert module.main(["--n", "200", "--repeat", "1"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "streamcheck detector microbenchmark: python " + out[0].split("python ")[1]
    rows = {m.group(1).strip(): float(m.group(2)) for m in (re.match(r"(.{48}) +([\d.]+) ", line) for line in out[2:])
            if m}
    assert set(rows) == {
        "kernel write, 1 range (ordered)", "kernel read, 1 range (ordered)", "kernel read+write, 2 ranges (ordered)",
        "kernel write, 1 range (racing)", "kernel read, 1 range (racing)", "kernel read+write, 2 ranges (racing)",
        "kernel read of a view (splits a segment)", "whole write, then 4 view reads (per kernel)",
        "empty call, same arguments (floor)", "event_record + event_wait (wait_stream)", "sync_stream", "sync_event",
        "sync_device (5 streams)", "collective async + work_wait", "empty call, 3 arguments (floor)"}
    assert all(value > 0 for value in rows.values())
