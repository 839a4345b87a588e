"""Detector behaviour beyond the scenarios: bounded memory, callbacks, odd input; Race -> Finding conversion."""

from __future__ import annotations

from streamcheck.instrument.detector import Detector
from streamcheck.instrument.races import Names, race_finding

S0, S1 = "cuda:0/s0", "cuda:0/s1"


def test_freed_storage_state_is_dropped():
    d = Detector()
    for step in range(1000):
        storage = 1000 + step % 7
        d.alloc(storage, 64, S0)
        d.kernel("T", S0, writes=[(storage, 0, 64)])
        d.kernel("T", S0, reads=[(storage, 0, 32)])
        d.record_stream(storage, S1)
        d.free("T", storage)
        d.event_record("T", step, S0)
        d.event_destroy(step)
    assert d.races == []
    assert d.shadows == {} and d.allocations == {} and d.clocks.of_event == {}


def test_on_race_sees_every_race_as_it_is_found():
    seen = []
    d = Detector(on_race=seen.append)
    d.kernel("T", S0, writes=[(1, 0, 8), (2, 0, 8)])
    d.kernel("T", S1, writes=[(1, 4, 12), (2, 0, 8)])
    assert [(r.kind, r.storage, r.start, r.end) for r in seen] == [("WAW", 1, 4, 8), ("WAW", 2, 0, 8)]
    assert seen == d.races


def test_odd_input_creates_state_lazily():
    d = Detector()
    d.event_wait("T", 12345, "cuda:3/s9")  # never recorded
    d.sync_event("T", 999)
    d.sync_stream("T", "cuda:7/s1")
    d.sync_device("T", 42)
    d.work_wait("T", S0, 777, blocking=True)  # unknown work
    d.free("T", 31337)  # never allocated, never touched
    d.record_stream(5, S1)  # before its alloc
    d.free("T2", 5)
    d.thread_join("T", "never started")
    d.kernel("T", S0, reads=[(1, 8, 8)], writes=[(1, 5, 3)])  # empty ranges touch nothing
    assert d.races == [] and d.shadows == {}


def test_free_of_an_unseen_allocation_is_not_checked():
    d = Detector()
    d.kernel("T", S1, reads=[(1, 0, 8)])
    d.free("T", 1)
    assert d.races == [] and d.shadows == {}


def _finding(build):
    d = Detector()
    d.site(1, [["/src/model.py", 10, "forward"]])
    d.site(2, [["/src/model.py", 20, "backward"], ["/src/train.py", 5, "main"]])
    d.site(3, [["/src/model.py", 30, "step"]])
    d.stream_name(S1, "side stream")
    build(d)
    (race,) = d.races
    return race_finding(race, Names.of(d))


def test_stream_race_is_sc201():
    finding = _finding(lambda d: (d.kernel("T", S0, writes=[(1, 0, 8)], site=1, op="add_"),
                                  d.kernel("T", S1, reads=[(1, 0, 8)], site=2, op="mul")))
    assert (finding.rule, finding.kind, finding.symbol) == ("SC201", "RAW", "backward")
    assert (finding.primary.path, finding.primary.line, finding.primary.role) == ("/src/model.py", 20, "read")
    assert [(r.role, r.line) for r in finding.related] == [("write", 10), ("sync", 10)]
    assert finding.fix.startswith("cuda:0/s1 (side stream) waits for cuda:0/s0 after model.py:10, before "
                                  "model.py:20")


def test_free_race_is_sc202():
    def build(d):
        d.alloc(1, 8, S0, site=1)
        d.kernel("T", S1, reads=[(1, 0, 8)], site=1, op="mul")
        d.free("T", 1, site=2)
        d.kernel("T", S0, writes=[(2, 0, 8)], site=3, op="add")  # the pool stream's next work: the reuse

    finding = _finding(build)
    assert (finding.rule, finding.kind, finding.primary.role, finding.primary.line) == ("SC202", "FREE", "write", 30)
    assert [(loc.role, loc.line) for loc in finding.related] == [("free", 20), ("read", 10), ("sync", 10)]
    assert finding.message.startswith("reuse of storage 0x1 bytes [0, 8) by cuda:0/s0 at model.py:30 (add, the "
                                      "pool stream's next work after the free at model.py:20) is not ordered after "
                                      "the read by cuda:0/s1 (side stream) at model.py:10")
    assert finding.fix.startswith("call record_stream(cuda:0/s1) on the tensor before it is freed at model.py:20")


def test_host_race_is_sc203():
    def build(d):
        d.kernel("T", S0, writes=[(1, 0, 8)], site=1, op="copy_")
        d.host_access("T", reads=[(1, 0, 8)], site=2, op="numpy")

    finding = _finding(build)
    assert (finding.rule, finding.kind, finding.primary.line) == ("SC203", "HOST", 20)
    assert finding.message.startswith("read of storage 0x1 bytes [0, 8) by host thread T at model.py:20")
    assert finding.fix == ("host thread T synchronizes cuda:0/s0 (or an event recorded on it after model.py:10) "
                           "before model.py:20")


def test_unknown_sites_still_make_a_finding():
    d = Detector()
    d.kernel("T", S0, writes=[(1, 0, 8)], op="add_")
    d.kernel("T", S1, writes=[(1, 0, 8)], site=77, op="mul_")
    finding = race_finding(d.races[0], Names.of(d))
    assert (finding.primary.path, finding.primary.line, finding.primary.note) == ("<unknown>", 0, "mul_ on cuda:0/s1")
    assert "after an unknown site" in finding.fix


def test_shadow_segments_of_views():
    """A view read inside a written segment splits it into three; a whole write merges them back into one."""
    d = Detector()
    d.kernel("T", S0, writes=[(1, 0, 8)], op="w")
    d.kernel("T", S0, reads=[(1, 2, 4)], op="r")
    shadow = d.shadows[1]
    assert list(zip(shadow.starts, shadow.ends)) == [(0, 2), (2, 4), (4, 8)]
    assert [sorted(c.reads or ()) for c in shadow.cells] == [[], [S0], []]
    assert len({id(c) for c in shadow.cells}) == 3  # no two segments share a cell
    d.kernel("T", S1, reads=[(1, 6, 10)], op="r2")  # reaches past the written bytes
    assert list(zip(shadow.starts, shadow.ends)) == [(0, 2), (2, 4), (4, 6), (6, 8), (8, 10)]
    assert [(r.kind, r.start, r.end) for r in d.races] == [("RAW", 6, 8)]
    d.kernel("T", S1, writes=[(1, 0, 10)], op="w2")
    assert list(zip(shadow.starts, shadow.ends)) == [(0, 10)]
    assert [(r.kind, r.earlier.op, r.start, r.end) for r in d.races[1:]] == [
        ("WAW", "w", 0, 8), ("WAR", "r", 2, 4)]


def test_race_after_an_async_collective_asks_for_work_wait():
    def build(d):
        d.collective("T", S0, "nccl:0/0", reads=[(1, 0, 8)], writes=[(1, 0, 8)], async_op=True, work=3, site=1,
                     op="c10d::allreduce_")
        d.kernel("T", S0, reads=[(1, 0, 8)], site=2, op="aten::mul")

    finding = _finding(build)
    assert (finding.rule, finding.kind) == ("SC201", "RAW")
    assert finding.fix == ("call work.wait() on the handle of the c10d::allreduce_ launched at model.py:10 before "
                           "model.py:20, with cuda:0/s0 as the current stream (or make it wait for nccl:0/0, or "
                           "launch with async_op=False)")


def test_pending_frees_are_bounded_per_pool_stream_and_counted_in_the_shadow_state_size():
    from streamcheck.instrument import detector as detector_module
    from streamcheck.instrument.shadow_size import shadow_state_size

    d = Detector()
    for storage in range(detector_module.MAX_PENDING_FREES + 5):
        d.alloc(storage, 8, S0)
        d.kernel("T", S1, reads=[(storage, 0, 8)])
        d.free("T", storage)  # S0 never works again: nothing can reuse the blocks, nothing is reported
    assert d.races == [] and d.shadows == {}
    size = shadow_state_size(d)
    assert size["pending_frees"] == detector_module.MAX_PENDING_FREES and size["storages"] == 0
    assert size["segments"] == detector_module.MAX_PENDING_FREES
    d.kernel("T", S0, writes=[(10**6, 0, 8)])  # the pool stream's next work checks the kept ones, then drops them
    assert len(d.races) == detector_module.MAX_PENDING_FREES
    assert shadow_state_size(d)["pending_frees"] == 0
