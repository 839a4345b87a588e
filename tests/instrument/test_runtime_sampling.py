"""Step-window sampling (instrument/sampling.py): only optimizer steps [first, last) are instrumented, the history
from before the window is forgotten when it opens, and bad STREAMCHECK_STEPS values get a clear message."""

from __future__ import annotations

import pytest
import torch

import streamcheck
from streamcheck.instrument.sampling import parse_window

STORAGE = 0x2000


def write_then_unordered_read(rec):
    rec.emit("kernel", "T1", "cuda:0/s0", [], [(STORAGE, 0, 64)], rec.sites.capture(1), "aten::fill_")
    rec.emit("kernel", "T1", "cuda:0/s7", [(STORAGE, 0, 64)], [], rec.sites.capture(1), "aten::sum")


def test_only_the_steps_of_the_window_are_instrumented(tmp_path):
    param = torch.nn.Parameter(torch.zeros(2))
    optimizer = torch.optim.SGD([param], lr=0.1)
    with streamcheck.watch(tmp_path, echo=False, steps=(1, 2)) as w:
        rec = w.recorder
        assert not rec.active  # step 0: outside the window
        write_then_unordered_read(rec)
        assert w.detector.seq == 0
        rec.active = True  # as if an earlier window had recorded a write on s0 ...
        rec.emit("kernel", "T1", "cuda:0/s0", [], [(STORAGE, 0, 64)], -1, "aten::fill_")
        rec.active = False
        optimizer.step()  # step 1 opens the window: ... which is forgotten
        assert rec.active and w.detector.shadows == {}
        rec.emit("kernel", "T1", "cuda:0/s7", [(STORAGE, 0, 64)], [], -1, "aten::sum")
        assert w.results() == []
        write_then_unordered_read(rec)
        optimizer.step()  # step 2 closes it
        assert not rec.active
        write_then_unordered_read(rec)
    # inside the window: the s0 write after the s7 read (WAR) and the s7 read after it (RAW), once each
    found = sorted((f.rule, f.kind, f.count, f.extra["later"]["actor"]) for f in w.results())
    assert found == [("SC201", "RAW", 1, "cuda:0/s7"), ("SC201", "WAR", 1, "cuda:0/s0")]


@pytest.mark.parametrize("text", ["5", "a:b", "3:3", "-1:4", "7:2"])
def test_a_bad_window_is_a_clear_error(text):
    with pytest.raises(ValueError, match=r"expected FIRST:LAST with 0 <= FIRST < LAST"):
        parse_window(text)


def test_a_window_parses():
    assert parse_window("100:110") == (100, 110)


def test_a_bad_environment_window_instruments_every_step(tmp_path, monkeypatch, capsys):
    from streamcheck.instrument import watch as watch_module

    monkeypatch.setenv("STREAMCHECK", "1")
    monkeypatch.setenv("STREAMCHECK_OUT", str(tmp_path))
    monkeypatch.setenv("STREAMCHECK_STEPS", "ten")
    w = watch_module.start_from_environment()
    try:
        assert w.steps is None and w.recorder.active
    finally:
        w.stop()
    assert "STREAMCHECK_STEPS='ten': expected FIRST:LAST" in capsys.readouterr().err
