"""One event schema (instrument/events.py): the Detector, the trace writer and the HB oracle are Sinks with the
protocol's very parameters, and a trace written by the writer replays into each of them."""

from __future__ import annotations

import inspect
import io

import pytest

from streamcheck.instrument.detector import Detector
from streamcheck.instrument.events import EVENTS, Sink
from streamcheck.instrument.native_detector import NativeDetector
from streamcheck.instrument.offline.hb import HappensBefore
from streamcheck.instrument.trace import TraceWriter, read_trace, replay


def _parameters(function) -> list[tuple[str, object]]:
    return [(p.name, p.default) for p in inspect.signature(function).parameters.values()
            if p.name != "self" and p.kind is not p.VAR_KEYWORD]


@pytest.mark.parametrize("sink", [Detector, TraceWriter, HappensBefore, NativeDetector])
def test_every_sink_has_every_event_with_the_protocols_parameters(sink):
    assert {name: _parameters(getattr(sink, name)) for name in EVENTS} == \
        {name: _parameters(getattr(Sink, name)) for name in EVENTS}


def test_a_written_trace_replays_into_the_detector_and_the_oracle_alike():
    out = io.StringIO()
    writer = TraceWriter(out)
    writer.site(1, [("/src/m.py", 3, "f")])
    writer.stream_name("cuda:0/s1", "side")
    writer.kernel("T1", "cuda:0/s0", writes=[(7, 0, 8)], site=1, op="add_")
    writer.kernel("T1", "cuda:0/s1", reads=[(7, 4, 8)], site=1, op="mul")
    writer.close()
    detector = Detector()
    replay(read_trace(io.StringIO(out.getvalue())), detector)
    oracle = HappensBefore.from_events(read_trace(io.StringIO(out.getvalue())))
    expected = [("RAW", 7, 4, 8, 2, 3)]
    for races in (detector.races, oracle.races()):
        assert [(r.kind, r.storage, r.start, r.end, r.earlier.seq, r.later.seq) for r in races] == expected
    assert detector.names.stream_names == oracle.names.stream_names == {"cuda:0/s1": "side"}
