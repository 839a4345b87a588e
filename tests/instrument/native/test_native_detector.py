"""The C++ detector (instrument/native_hook/detector.h, through native_detector.py) against the Python Detector, the
reference: on random programs both must find the same races, field for field and in the same order.

Programs come from benchmarks/fuzz_oracle.py's generator (every event kind: kernels, host accesses, events, syncs,
threads, allocations, record_stream, frees, sync and async collectives, work waits), once with its small shape
(8-byte storages, so that views overlap) and once widened (more storages and streams, 64-byte storages, long
programs: segments split and merge). The extension is built on first use (as test_native_hook.py's).
"""

from __future__ import annotations

import importlib.util
import random
from pathlib import Path

import pytest

from streamcheck.instrument import native
from streamcheck.instrument.detector import Detector
from streamcheck.instrument.native_detector import NativeDetector
from streamcheck.instrument.shadow_size import shadow_state_size
from streamcheck.instrument.trace import replay

FUZZ = Path(__file__).resolve().parents[3] / "benchmarks" / "fuzz_oracle.py"


@pytest.fixture(scope="module")
def fuzz():
    try:
        native.load()
    except native.NativeUnavailable as exc:  # pragma: no cover - CI has a compiler; say why if not
        pytest.fail(f"the native extension must build here: {exc}")
    spec = importlib.util.spec_from_file_location("fuzz_oracle_for_native", FUZZ)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def full(race) -> tuple:
    def access(a):
        return None if a is None else (a.actor, a.thread, a.is_write, a.site, a.op, a.seq, a.clock, a.stream)

    return (race.kind, race.storage, race.start, race.end, access(race.earlier), access(race.later),
            access(race.reuse))


def both(events: list) -> tuple[list, list]:
    reference, native_one = Detector(), NativeDetector()
    seen: list = []
    native_one.on_race = seen.append
    replay(events, reference)
    replay(events, native_one)
    assert [full(r) for r in seen] == [full(r) for r in native_one.races]  # on_race saw each race as it came
    assert reference.seq == native_one.seq
    return [full(r) for r in reference.races], [full(r) for r in native_one.races]


def test_both_detectors_find_the_same_races_on_random_programs(fuzz):
    rng = random.Random(18)
    racy = 0
    for index in range(1500):
        events = fuzz.program(rng, 40)
        expected, got = both(events)
        assert got == expected, f"program {index}: {events}"
        racy += bool(expected)
    assert racy > 300  # the programs do race: the comparison is not between empty lists


def test_both_detectors_agree_on_wider_programs_with_more_storages_and_streams(fuzz, monkeypatch):
    monkeypatch.setattr(fuzz, "STORAGES", [1, 2, 3, -4])  # ids of any sign: host hand-offs use negative keys
    monkeypatch.setattr(fuzz, "EVENT_IDS", [-7, 1, 2**40 + 3])
    monkeypatch.setattr(fuzz, "WORK_IDS", [-(2**62), 5])
    monkeypatch.setattr(fuzz, "SIZE", 64)
    monkeypatch.setattr(fuzz, "STREAMS", ["cuda:0/s0", "cuda:0/s1", "cuda:0/s2", "cuda:1/s0", "cuda:1/s5"])
    monkeypatch.setattr(fuzz, "THREADS", ["T0", "T1", "T2"])
    rng = random.Random(1818)
    races = 0
    for index in range(400):
        events = fuzz.program(rng, 150)
        expected, got = both(events)
        assert got == expected, f"program {index}"
        races += len(expected)
    assert races > 1000


def test_a_free_race_names_the_freed_block_during_on_race_and_the_reuse():
    detector = NativeDetector()
    allocation_sites = []
    detector.on_race = lambda race: allocation_sites.append(detector.allocations.get(race.storage).site)
    detector.alloc(7, 64, "cuda:0/s0", site=11)
    detector.kernel("T1", "cuda:0/s1", reads=[(7, 0, 64)], site=12, op="aten::sum")
    detector.free("T1", 7, site=13)
    detector.kernel("T1", "cuda:0/s0", writes=[(9, 0, 8)], site=14, op="aten::fill_")
    (race,) = detector.races
    assert (race.kind, race.storage, race.start, race.end) == ("FREE", 7, 0, 64)
    assert (race.earlier.actor, race.earlier.site, race.earlier.op) == ("cuda:0/s1", 12, "aten::sum")
    assert (race.later.op, race.later.site, race.reuse.site, race.reuse.op) == ("free", 13, 14, "aten::fill_")
    assert allocation_sites == [11]
    assert detector.allocations.get(7) is None  # freed: gone once the race was delivered
    assert detector.state_size()["pending_frees"] == 0


def training_like_steps(d, steps: int, every: int) -> list:
    """Each step allocates blocks at addresses the allocator reuses, writes them on the compute stream, reads them on
    a side stream after an event, frees one of them at once (a pending free: the side stream read it), orders the
    compute stream after the side stream, runs an async collective and waits its work, frees the rest and
    synchronizes. Returns the state's size every `every` steps."""
    compute, side, comm, host = "cuda:0/s0", "cuda:0/s9", "nccl:0/0", "T1"
    marks = []
    for step in range(steps):
        blocks = [0x1000 * (1 + (step + k) % 7) for k in range(3)]
        for block in blocks:
            d.alloc(block, 4096, compute)
            d.kernel(host, compute, writes=[(block, 0, 4096)], site=1, op="aten::fill_")
        d.event_record(host, 10 + step % 3, compute)
        d.event_wait(host, 10 + step % 3, side)
        d.kernel(host, side, reads=[(b, 512 * (step % 4), 2048) for b in blocks], site=2, op="aten::sum")
        d.free(host, blocks[1], site=4)
        d.event_record(host, 20, side)
        d.event_wait(host, 20, compute)
        d.collective(host, compute, comm, reads=[(blocks[0], 0, 4096)], writes=[(blocks[0], 0, 4096)],
                     async_op=True, work=step, site=3, op="c10d::allreduce_")
        d.work_wait(host, compute, step, blocking=False)
        d.forget_work(step)
        d.event_destroy(10 + (step + 1) % 3)
        for block in (blocks[0], blocks[2]):
            d.free(host, block, site=4)
        d.sync_device(host, 0)
        if step % every == every - 1:
            marks.append(shadow_state_size(d))
    return marks


def test_the_state_stays_flat_over_a_thousand_training_like_steps():
    """A soak at the detector's level: the C++ state must not grow from one checkpoint to the next, and it holds
    what the Python Detector holds after the same steps."""
    d = NativeDetector()
    marks = training_like_steps(d, 1000, 100)
    assert d.races == []  # every access was ordered
    first = marks[0]
    for mark in marks[1:]:
        assert {k: v for k, v in mark.items() if k != "bytes"} == {k: v for k, v in first.items() if k != "bytes"}
        assert mark["bytes"] <= first["bytes"] * 1.05
    reference = Detector()
    (python_mark,) = training_like_steps(reference, 100, 100)
    assert reference.races == []
    for key in ("storages", "segments", "accesses", "events", "works", "allocations", "pending_frees"):
        assert (key, first[key]) == (key, python_mark[key])
