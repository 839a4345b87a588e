"""Differential property test: the online vector-clock Detector and the networkx reachability oracle (hb.py) report
the same set of races on random programs.

"Same set of races" is defined precisely (the definition both implement; see the docstrings of detector.py and
hb.py): for every access X and every byte it touches, the candidates are the last write of that byte and, if X
is a write, the latest read of that byte by each actor since that write; each unordered, conflicting candidate by
another actor is a race, merged over bytes into one race per (later access, earlier access, storage). A race is
compared in canonical form (kind, storage, start, end, earlier (seq, is_write, actor), later (seq, is_write,
actor)) so that the oracle's independent algorithm (backward scans over the full history with interval sets, graph
reachability) must match the detector's (epochs, segments) exactly, byte ranges included.

Programs: arbitrary sequences over 2 host threads, 2 streams of device 0, one of device 1, one NCCL comm, 2 events,
2 work handles and 2 storages of 8 bytes (few names, so that accesses meet and syncs matter; small storages, so
that views overlap often): kernels (weighted up) and host accesses with 0-2 read and 0-2 write ranges, event
record/wait (also as an adjacent pair, like wait_stream) and destroy, event/stream/device synchronize, thread
start/join, stream creation, alloc/record_stream/free, sync and async collectives, work waits (blocking or not),
hand-overs to other processes.

CI runs STREAMCHECK_PROPERTY_EXAMPLES (default 3000, derandomized: about 45 s on 2 cores) programs; the long run,
without hypothesis, on the same program shape:
    python benchmarks/fuzz_oracle.py --programs 100000
"""

from __future__ import annotations

import os

import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from streamcheck.instrument.offline.hb import HappensBefore
from streamcheck.instrument.detector import Detector
from streamcheck.instrument.trace import replay

EXAMPLES = int(os.environ.get("STREAMCHECK_PROPERTY_EXAMPLES", "3000"))

THREADS = ["T0", "T1"]
STREAMS = ["cuda:0/s0", "cuda:0/s1", "cuda:1/s0"]
COMM = "nccl:pg/0"
EVENT_IDS = [1, 2]
WORK_IDS = [1, 2]
STORAGES = [1, 2]
SIZE = 8

threads = st.sampled_from(THREADS)
streams = st.sampled_from(STREAMS)
events_ = st.sampled_from(EVENT_IDS)
storages = st.sampled_from(STORAGES)


@st.composite
def byte_range(draw):
    start = draw(st.integers(0, SIZE - 1))
    end = draw(st.integers(start + 1, SIZE))
    return [draw(storages), start, end]


ranges = st.lists(byte_range(), max_size=2)


def _event(name, **fields):
    return st.fixed_dictionaries({"e": st.just(name), **fields})


kernel = _event("kernel", thread=threads, stream=streams, reads=ranges, writes=ranges, op=st.just("k"))
record_then_wait = st.tuples(
    _event("event_record", thread=threads, event=events_, stream=streams),
    _event("event_wait", thread=threads, event=events_, stream=streams),
)

program_event = st.one_of(
    kernel,
    kernel,
    kernel,
    record_then_wait,
    _event("host_access", thread=threads, reads=ranges, writes=ranges, op=st.just("h")),
    _event("event_record", thread=threads, event=events_, stream=streams),
    _event("event_wait", thread=threads, event=events_, stream=streams),
    _event("event_destroy", event=events_),
    _event("sync_event", thread=threads, event=events_),
    _event("sync_stream", thread=threads, stream=st.sampled_from(STREAMS + [COMM])),
    _event("sync_device", thread=threads, device=st.sampled_from([0, 1])),
    _event("thread_start", parent=threads, child=threads),
    _event("thread_join", parent=threads, child=threads),
    _event("stream_created", thread=threads, stream=streams),
    _event("alloc", storage=storages, size=st.just(SIZE), stream=streams),
    _event("record_stream", storage=storages, stream=streams),
    _event("free", thread=threads, storage=storages),
    _event("collective", thread=threads, stream=streams, comm=st.just(COMM), reads=ranges, writes=ranges,
           async_op=st.booleans(), work=st.sampled_from(WORK_IDS + [None]), op=st.just("c")),
    _event("work_wait", thread=threads, stream=streams, work=st.sampled_from(WORK_IDS), blocking=st.booleans()),
    _event("hand_over", thread=threads, reads=ranges, events=st.lists(events_, max_size=1), op=st.just("p")),
)

def _flatten(items) -> list:
    out = []
    for item in items:
        out.extend(item if isinstance(item, tuple) else (item,))
    return out


# Hypothesis keeps plain lists short; drawing the length first gives programs long enough for syncs to matter.
programs = st.integers(1, 40).flatmap(lambda n: st.lists(program_event, min_size=n, max_size=n)).map(_flatten)


def canonical(races) -> set:
    return {
        (r.kind, r.storage, r.start, r.end, r.earlier.seq, r.earlier.is_write, r.earlier.actor, r.later.seq,
         r.later.is_write, r.later.actor)
        for r in races
    }


def online(program, detector_class=Detector) -> set:
    detector = detector_class()
    replay(program, detector)
    return canonical(detector.races)


def oracle(program) -> set:
    return canonical(HappensBefore.from_events(program).races())


def _settings(examples: int):
    return settings(max_examples=examples, deadline=None, derandomize="STREAMCHECK_PROPERTY_EXAMPLES" not in os.environ,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large], database=None)


@_settings(EXAMPLES)
@given(programs)
def test_detector_and_oracle_report_the_same_races(program):
    assert online(program) == oracle(program)


def test_each_race_is_reported_once():
    """The Detector's list has no duplicates: canonical() would hide them, so check the count separately."""
    program = [
        {"e": "kernel", "thread": "T0", "stream": "cuda:0/s0", "writes": [[1, 0, 4], [1, 2, 8]]},
        {"e": "kernel", "thread": "T0", "stream": "cuda:0/s1", "reads": [[1, 0, 2], [1, 6, 8]]},
    ]
    detector = Detector()
    replay(program, detector)
    assert [(r.kind, r.start, r.end, r.earlier.seq, r.later.seq) for r in detector.races] == [("RAW", 0, 8, 0, 1)]
    assert oracle(program) == canonical(detector.races)


class _DetectorIgnoringWaits(Detector):
    """A deliberately broken detector: event waits order nothing."""

    def event_wait(self, thread, event, stream):
        self.seq += 1


def test_the_property_catches_a_broken_detector():
    """The property is not vacuous: it finds a program where a detector that ignores event waits disagrees."""

    @settings(max_examples=2000, deadline=None, derandomize=True, database=None, phases=[Phase.generate])
    @given(programs)
    def check(program):  # no shrinking: only whether a counterexample exists matters here
        assert online(program, _DetectorIgnoringWaits) == oracle(program)

    with pytest.raises(AssertionError):
        check()


def test_generated_programs_do_race():
    """A sanity check on the generator: a fixed sample of programs has races, and also race-free ones."""
    counts = {"racy": 0, "clean": 0}

    @settings(max_examples=200, deadline=None, derandomize=True, database=None)
    @given(programs)
    def count(program):
        counts["racy" if oracle(program) else "clean"] += 1

    count()
    assert counts["racy"] >= 20 and counts["clean"] >= 20, counts
