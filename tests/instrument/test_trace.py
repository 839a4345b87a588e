"""The trace format: TraceWriter mirrors Detector, read_trace checks its input, replay reproduces the races."""

from __future__ import annotations

import inspect
import io
import json

import pytest

from streamcheck.instrument.detector import Detector
from streamcheck.instrument.trace import EVENTS, TraceError, TraceWriter, read_trace, replay


def test_writer_has_the_detectors_methods_with_the_same_signatures():
    for name, (required, optional) in EVENTS.items():
        detector_sig = inspect.signature(getattr(Detector, name))
        writer_sig = inspect.signature(getattr(TraceWriter, name))
        shape = lambda sig: [(p.name, p.kind, p.default) for p in sig.parameters.values()]  # noqa: E731
        assert shape(writer_sig) == shape(detector_sig), name
        params = [p for p in detector_sig.parameters if p != "self"]
        if name == "storage_info":
            assert params == ["storage", "info"]
        else:
            assert params == list(required + optional), name


def _hpz(sink) -> None:
    """Scenario 26 as the runtime would emit it, with names."""
    sink.site(1, [["deepspeed/runtime/zero/partition_parameters.py", 1643, "_partition_param_sec"]])
    sink.site(2, [["deepspeed/runtime/zero/partitioned_param_coordinator.py", 360, "fetch_sub_module"]])
    sink.stream_name("cuda:0/s7", "allgather stream")
    sink.storage_info(11, shape=[4096], dtype="torch.bfloat16", name="param.ds_secondary_tensor")
    sink.kernel("T1", "cuda:0/s0", reads=[(12, 0, 8192)], writes=[(11, 0, 8192)], site=1, op="aten::copy_")
    sink.collective("T1", "cuda:0/s7", "nccl:0/0", reads=[(11, 0, 8192)], writes=[(13, 0, 16384)], async_op=True,
                    work=99, site=2, op="c10d::_allgather_base_")


def _summary(races):
    return [(r.kind, r.storage, r.start, r.end, r.earlier.seq, r.earlier.site, r.later.seq, r.later.site,
             r.later.actor, r.later.stream) for r in races]


class Tee:
    def __init__(self, *sinks):
        self.sinks = sinks

    def __getattr__(self, name):
        def call(*args, **kwargs):
            for sink in self.sinks:
                getattr(sink, name)(*args, **kwargs)
        return call


@pytest.mark.parametrize("suffix", [".jsonl", ".jsonl.gz"])
def test_round_trip_reproduces_the_races(tmp_path, suffix):
    path = tmp_path / f"rank0{suffix}"
    live = Detector()
    with TraceWriter(path, rank=0, world_size=2, batch=2, job="unit") as writer:
        _hpz(Tee(live, writer))
    events = list(read_trace(path))
    assert events[0] == {"e": "header", "format": "streamcheck-trace", "version": 1, "rank": 0, "world_size": 2,
                         "job": "unit"}
    assert [e["e"] for e in events[1:]] == ["site", "site", "stream_name", "storage_info", "kernel", "collective"]
    replayed = Detector()
    header = replay(events, replayed)
    assert header["events"] == 6 and header["skipped_events"] == 0
    assert _summary(replayed.races) == _summary(live.races) == [
        ("RAW", 11, 0, 8192, 4, 1, 5, 2, "nccl:0/0", "cuda:0/s7")]
    assert replayed.stream_names == {"cuda:0/s7": "allgather stream"}
    assert replayed.storage_infos[11]["name"] == "param.ds_secondary_tensor"


def test_unknown_events_are_skipped_and_keep_the_trace_index():
    lines = [
        {"e": "header", "format": "streamcheck-trace", "version": 1, "rank": 0, "world_size": 1},
        {"e": "kernel", "thread": "T", "stream": "cuda:0/s0", "writes": [[1, 0, 4]]},
        {"e": "from_the_future", "x": 1},
        {"e": "kernel", "thread": "T", "stream": "cuda:0/s1", "writes": [[1, 0, 4]], "new_field": 3},
    ]
    detector = Detector()
    header = replay(read_trace(io.StringIO("\n".join(json.dumps(x) for x in lines))), detector)
    assert header["skipped_events"] == 1
    assert [(r.kind, r.earlier.seq, r.later.seq) for r in detector.races] == [("WAW", 0, 2)]


@pytest.mark.parametrize("text, message", [
    ("", "empty file"),
    ("not json\n", ":1: not JSON"),
    ('{"e": "kernel"}\n', ":1: not a streamcheck trace"),
    ('{"e": "header", "format": "streamcheck-trace", "version": 99}\n', "version 99 is newer"),
    ('{"e": "header", "format": "streamcheck-trace", "version": 1}\n[1]\n', ":2: expected an object"),
])
def test_bad_traces_are_clear_errors(tmp_path, text, message):
    path = tmp_path / "t.jsonl"
    path.write_text(text)
    with pytest.raises(TraceError, match=message):
        list(read_trace(path))


def test_bad_event_arguments_name_the_event():
    events = [{"e": "kernel", "thread": "T"}]
    with pytest.raises(TraceError, match="event 0: 'kernel' lacks stream"):
        replay(events, Detector())
    events = [{"e": "kernel", "thread": "T", "stream": "cuda:0/s0", "reads": [[1, 2]]}]
    with pytest.raises(TraceError, match=r"event 0 \(kernel\): bad arguments"):
        replay(events, Detector())


def test_missing_file_is_a_clear_error(tmp_path):
    with pytest.raises(TraceError, match="cannot open"):
        list(read_trace(tmp_path / "nope.jsonl"))
