"""The words of runtime reports: stream names, the tensor line, and the fix hint for every kind of race."""

from __future__ import annotations

import pytest

from streamcheck.findings import Finding, Location
from streamcheck.instrument.offline.race_view import describe, enrich, headline, stream_label


@pytest.mark.parametrize("actor, names, world, label", [
    ("cuda:0/s0", None, 0, "compute stream cuda:0"),
    ("cuda:1/s94371", None, 0, "side stream 0x170a3 on cuda:1"),
    ("cuda:0/s7", {"cuda:0/s7": "side stream created at coordinator.py:115"}, 0,
     "side stream created at coordinator.py:115 on cuda:0"),
    ("cuda:0/s7", {"cuda:0/s7": "first used at train.py:12 in step"}, 0,
     "side stream first used at train.py:12 in step on cuda:0"),
    ("cuda:0/s7", {"cuda:0/s7": "first used at test_streams.py:23 in test_side"}, 0,
     "side stream first used at test_streams.py:23 in test_side on cuda:0"),
    ("cuda:0/s0", {"cuda:0/s0": "compute stream"}, 0, "compute stream cuda:0"),
    ("nccl:0/1", None, 2, "NCCL stream of group [0, 1] on cuda:1"),
    ("nccl:3/0", None, 2, "NCCL stream of group 3 on cuda:0"),
    ("T1234", None, 0, "host thread T1234"),
])
def test_stream_label(actor, names, world, label):
    assert stream_label(actor, names, world) == label


def _finding(kind: str, earlier: dict, later: dict, rule: str = "SC201") -> Finding:
    def access(data: dict, seq: int) -> dict:
        return {"thread": "T1", "site": seq, "seq": seq, "stream": "", **data}

    return Finding(rule=rule, message="raw", kind=kind,
                   primary=Location("/src/train.py", 20, role="read", note="step"),
                   related=(Location("/src/train.py", 10, role="write", note="step"),
                            Location("/src/train.py", 10, role="sync", note="raw ids")),
                   extra={"storage": 4096, "start": 0, "end": 64, "earlier": access(earlier, 1),
                          "later": access(later, 2)})


def test_host_read_after_a_non_blocking_copy_asks_for_a_synchronize():
    finding = _finding("HOST", {"actor": "cuda:0/s0", "is_write": True, "op": "aten::copy_"},
                       {"actor": "T1", "is_write": False, "op": "aten::sum"}, rule="SC203")
    view = describe(finding)
    assert view.fix == ("call `compute.synchronize()` before the host read at train.py:20 (compute = compute stream "
                        "cuda:0), or record an event on compute after train.py:10 and call `event.synchronize()` there")
    assert view.missing == "host thread T1 never waited for compute stream cuda:0 after train.py:10"
    assert headline(view) == ("host-device race on storage 0x1000: aten::sum on host thread T1 reads it at "
                              "train.py:20, not ordered after aten::copy_ on compute stream cuda:0 (write at "
                              "train.py:10)")


def test_write_after_write_between_two_side_streams_names_them_apart():
    finding = _finding("WAW", {"actor": "cuda:0/s16", "is_write": True, "op": "aten::fill_"},
                       {"actor": "cuda:0/s32", "is_write": True, "op": "aten::add_"})
    assert describe(finding).fix.startswith("add `side_20.wait_stream(side_10)` before the write at train.py:20 "
                                            "(side_20 = side stream 0x20 on cuda:0, side_10 = side stream 0x10 on "
                                            "cuda:0)")


def test_free_asks_for_record_stream_of_the_stream_that_used_it():
    finding = _finding("FREE", {"actor": "cuda:0/s16", "is_write": False, "op": "aten::mul"},
                       {"actor": "cuda:0/s0", "is_write": True, "op": "free"}, rule="SC202")
    view = describe(finding)
    assert view.later.verb == "free"
    assert view.fix.startswith("call `t.record_stream(side)` on the tensor before the free at train.py:20 (side = "
                               "side stream 0x10 on cuda:0)")


def test_host_write_racing_with_work_another_thread_enqueued():
    finding = _finding("HOST", {"actor": "T1", "is_write": True, "op": "aten::fill_", "thread": "T1"},
                       {"actor": "cuda:0/s0", "is_write": False, "op": "aten::mul", "thread": "T2"}, rule="SC203")
    finding.extra["later"]["thread"] = "T2"
    assert describe(finding).fix == ("make the host write at train.py:10 finish before T2 enqueues the read at "
                                     "train.py:20 (join the thread or hand over through a queue first)")


def test_enrich_rewrites_message_fix_and_the_sync_note_and_keeps_the_fingerprint():
    finding = _finding("RAW", {"actor": "cuda:0/s0", "is_write": True, "op": "aten::copy_"},
                       {"actor": "cuda:0/s16", "is_write": False, "op": "aten::mul"})
    enriched = enrich(finding, None, world_size=2)
    assert enriched.fingerprint == finding.fingerprint
    assert enriched.message.startswith("read-after-write race on storage 0x1000: aten::mul on side stream 0x10 on "
                                       "cuda:0 reads it at train.py:20")
    assert enriched.related[1].note == ("the missing edge: side stream 0x10 on cuda:0 never waited for compute "
                                        "stream cuda:0 after train.py:10")
    assert enriched.extra["world_size"] == 2
    static = Finding(rule="SC101", message="static", primary=Location("a.py", 1))
    assert enrich(static) is static


def test_read_before_an_async_collective_was_waited_for_asks_for_work_wait():
    """Scenario 25: all_reduce(t, async_op=True) writes t on the NCCL stream; t is read before work.wait()."""
    finding = _finding("RAW", {"actor": "nccl:0/0", "is_write": True, "op": "c10d::allreduce_",
                               "stream": "cuda:0/s0"},
                       {"actor": "cuda:0/s0", "is_write": False, "op": "aten::mul"})
    view = describe(finding, world_size=2)
    assert view.fix == ("call `work.wait()` on the handle of the c10d::allreduce_ launched at train.py:10 before the "
                        "read at train.py:20, with compute stream cuda:0 as the current stream (or launch it with "
                        "async_op=False)")
    assert view.earlier.stream == "NCCL stream of group [0, 1] on cuda:0"
    assert view.earlier.launched_from == "compute stream cuda:0"
