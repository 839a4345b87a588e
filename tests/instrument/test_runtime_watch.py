"""streamcheck.watch(): report-and-continue with the real Detector, dedupe with counts, JSONL sink, fail_fast,
internal errors, and the recorded trace (events fed through the watch's recorder, as the hooks do)."""

from __future__ import annotations

import json

import pytest

import streamcheck
from streamcheck.instrument.detector import Detector
from streamcheck.instrument.recorder import RaceError
from streamcheck.instrument.trace import read_trace, replay

STORAGE = 0x1000


def kernel(recorder, stream, *, write):
    """Enqueue a kernel on `stream` that writes or reads STORAGE, blamed on the caller's line."""
    site = recorder.sites.capture(2)
    ranges = [(STORAGE, 0, 64)]
    recorder.emit("kernel", "T1", stream, [] if write else ranges, ranges if write else [], site,
                  "aten::copy_" if write else "aten::sum")


def line_of(text):
    source = open(__file__).read().splitlines()
    return [n for n, line in enumerate(source, 1) if text in line][0]


def read_jsonl(path):
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_the_same_race_three_times_is_one_finding_with_count_three(tmp_path):
    with streamcheck.watch(tmp_path, rank=3, echo=False) as w:
        rec = w.recorder
        for _ in range(3):
            kernel(rec, "cuda:0/s0", write=True)  # the write
            kernel(rec, "cuda:0/s7", write=False)  # the unordered read
            rec.emit("sync_device", "T1", 0)
            rec.emit("event_record", "T1", 1, "cuda:0/s0")
            rec.emit("event_wait", "T1", 1, "cuda:0/s7")
    (finding,) = w.results()
    assert (finding.rule, finding.kind, finding.count) == ("SC201", "RAW", 3)
    assert (finding.primary.path, finding.primary.line) == (__file__, line_of("# the unordered read"))
    assert (finding.related[0].path, finding.related[0].line) == (__file__, line_of("# the write"))
    assert finding.extra["rank"] == 3
    lines = read_jsonl(tmp_path / "streamcheck-rank3.jsonl")
    assert lines[0]["e"] == "header" and lines[0]["rank"] == 3
    # flushed at first sight (count 1), the final count appended by stop()
    assert [(line["kind"], line["count"]) for line in lines[1:]] == [("RAW", 1), ("RAW", 3)]
    assert lines[1]["fingerprint"] == lines[2]["fingerprint"]


def test_different_read_sites_are_different_findings(tmp_path):
    with streamcheck.watch(tmp_path, echo=False) as w:
        rec = w.recorder
        kernel(rec, "cuda:0/s0", write=True)
        kernel(rec, "cuda:0/s1", write=False)  # first reader
        kernel(rec, "cuda:0/s2", write=False)  # second reader
    lines = sorted(f.primary.line for f in w.results())
    assert lines == [line_of("# first reader"), line_of("# second reader")]
    assert all(f.count == 1 for f in w.results())


def test_fail_fast_raises_the_race_into_the_program(tmp_path):
    w = streamcheck.watch(tmp_path, fail_fast=True, echo=False).start()
    try:
        rec = w.recorder
        kernel(rec, "cuda:0/s0", write=True)
        kernel(rec, "cuda:0/s1", write=False)
        with pytest.raises(RaceError, match=r"cuda:0/s1 at test_runtime_watch.py:\d+ is not ordered after the write"):
            rec.take_pending_raise()
    finally:
        w.stop()


def test_an_internal_error_is_reported_once_and_switches_instrumentation_off(tmp_path, capsys):
    w = streamcheck.watch(tmp_path, echo=False).start()
    try:
        def broken(*args):
            raise KeyError("shadow state")

        w.detector.kernel = broken
        kernel(w.recorder, "cuda:0/s0", write=True)
        kernel(w.recorder, "cuda:0/s1", write=False)
        assert w.recorder.active is False
    finally:
        w.stop()
    err = capsys.readouterr().err
    assert err.count("internal error") == 1 and "KeyError('shadow state')" in err
    lines = read_jsonl(tmp_path / "streamcheck-rank0.jsonl")
    assert [line.get("e") for line in lines] == ["header", "error"]
    assert w.results() == []


def test_the_recorded_trace_replays_to_the_same_race(tmp_path):
    trace = tmp_path / "trace-{rank}.jsonl"
    with streamcheck.watch(tmp_path, trace=trace, rank=1, echo=False) as w:
        kernel(w.recorder, "cuda:0/s0", write=True)
        kernel(w.recorder, "cuda:0/s1", write=False)
    events = list(read_trace(tmp_path / "trace-1.jsonl"))
    assert events[0]["e"] == "header" and events[0]["rank"] == 1
    assert [e["e"] for e in events[1:]] == ["kernel", "kernel", "site", "site"]
    detector = Detector()
    replay(events, detector)
    (race,) = detector.races
    assert (race.kind, race.earlier.actor, race.later.actor) == ("RAW", "cuda:0/s0", "cuda:0/s1")
    assert detector.sites[race.later.site][0][:2] == [__file__, w.results()[0].primary.line]


def test_only_one_watch_runs_at_a_time(tmp_path):
    with streamcheck.watch(tmp_path / "a", echo=False):
        with pytest.raises(RuntimeError, match="already running"):
            streamcheck.watch(tmp_path / "b").start()


def test_annotate_reports_work_the_dispatcher_cannot_see(tmp_path):
    """An extension kernel announced with streamcheck.annotate() is checked like any op (host side on CPU)."""
    import torch

    from streamcheck.instrument.pinned import PinnedMemory

    class EveryTensorPinned(PinnedMemory):
        def is_pinned(self, tensor, base, fresh=False):
            return True

    buf = torch.zeros(16)
    with streamcheck.watch(tmp_path, echo=False) as w:
        w._pinned = EveryTensorPinned(cuda_available=True)
        rec = w.recorder
        site = rec.sites.capture(1)
        rec.emit("kernel", "T1", "cuda:0/s3", [], [(buf.untyped_storage().data_ptr(), 0, 64)], site, "aten::copy_")
        streamcheck.annotate(reads=[buf[4:8]], op="my_extension")  # the extension's read
    (finding,) = w.results()
    assert (finding.rule, finding.kind, finding.primary.line) == ("SC203", "HOST", line_of("# the extension's read"))
    assert finding.extra["later"]["op"] == "my_extension"
    assert (finding.extra["start"], finding.extra["end"]) == (16, 32)


def test_trace_paths_are_per_rank():
    from streamcheck.instrument.watch import rank_path

    assert str(rank_path("out/trace-{rank}.jsonl", 3, 8)) == "out/trace-3.jsonl"
    assert str(rank_path("out/trace.jsonl", 3, 8)) == "out/trace-rank3.jsonl"
    assert str(rank_path("out/trace.jsonl", 0, 1)) == "out/trace.jsonl"


def test_a_finding_names_the_module_parameter_its_streams_and_the_world_size(tmp_path):
    import torch

    layer = torch.nn.Linear(4, 8)
    weight = layer.weight
    weight.ds_id = 17  # as DeepSpeed tags a ZeRO-3 parameter
    weight.ds_secondary_tensor = torch.zeros(16)  # and its hpZ secondary shard
    base = weight.untyped_storage().data_ptr()
    secondary = weight.ds_secondary_tensor.untyped_storage().data_ptr()
    with streamcheck.watch(tmp_path, rank=1, world_size=2, echo=False) as w:
        rec = w.recorder
        rec.emit("alloc", secondary, 64, "cuda:0/s0", rec.sites.capture(1))  # the allocation
        rec.emit("stream_name", "cuda:0/s7", "first used at train.py:3 in step")
        rec.emit("kernel", "T1", "cuda:0/s0", [], [(base, 0, 128)], rec.sites.capture(1), "aten::copy_")
        rec.emit("kernel", "T1", "cuda:0/s7", [(base, 32, 64)], [], rec.sites.capture(1), "aten::sum")
        rec.emit("kernel", "T1", "cuda:0/s0", [], [(secondary, 0, 64)], rec.sites.capture(1), "aten::copy_")
        rec.emit("kernel", "T1", "cuda:0/s7", [(secondary, 0, 64)], [], rec.sites.capture(1), "aten::sum")
    weight_race, secondary_race = sorted(w.results(), key=lambda f: f.extra["storage"] != base)
    assert weight_race.extra["tensor"] == {"name": "weight", "shape": [8, 4], "dtype": "torch.float32", "ds_id": 17}
    assert weight_race.extra["streams"] == {"cuda:0/s7": "first used at train.py:3 in step"}
    assert weight_race.extra["world_size"] == 2
    assert weight_race.message.startswith("read of weight torch.float32[8, 4] bytes [32, 64) by cuda:0/s7")
    assert secondary_race.extra["tensor"] == {
        "name": "weight.ds_secondary_tensor", "shape": [16], "dtype": "torch.float32", "ds_id": 17,
        "alloc_site": f"test_runtime_watch.py:{line_of('# the allocation')}"}
