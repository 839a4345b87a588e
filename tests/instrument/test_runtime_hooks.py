"""The GPU-trace callbacks, query() wrappers and collective hooks, driven on CPU.

The callbacks are called as torch's C++ side calls them (raw handles), the query wrappers on stand-in classes, and
the collective hooks with a real one-process gloo group whose tensors are declared to live on device 0.
"""

from __future__ import annotations

import os
import socket
import threading

import pytest
import torch
import torch.distributed as dist

from streamcheck.instrument import cuda_trace
from streamcheck.instrument.collectives import CollectiveHooks
from streamcheck.instrument.dispatch import AccessCollector, StreamcheckMode, byte_range
from streamcheck.instrument.pinned import PinnedMemory
from streamcheck.instrument.recorder import Recorder


class RecordingSink:
    def __init__(self):
        self.calls = []

    def __getattr__(self, name):
        return lambda *args: self.calls.append((name, *args))


@pytest.fixture
def recorder(monkeypatch):
    sink = RecordingSink()
    rec = Recorder(sink)
    rec.current_device = lambda: 1
    monkeypatch.setattr(cuda_trace, "_active", rec)
    return rec


def thread():
    return f"T{threading.get_ident()}"


def test_trace_callbacks_become_detector_events(recorder):
    sink = recorder.sink
    cuda_trace._guard(cuda_trace._event_recorded)(0xE1, 0x5A)
    cuda_trace._guard(cuda_trace._event_waited)(0xE1, 0x5B)
    cuda_trace._guard(cuda_trace._event_synchronized)(0xE1)
    cuda_trace._guard(cuda_trace._stream_synchronized)(0x5A)
    cuda_trace._guard(cuda_trace._device_synchronized)()
    cuda_trace._guard(cuda_trace._event_deleted)(0xE1)
    assert sink.calls == [
        ("event_record", thread(), 0xE1, "cuda:1/s90"),
        ("event_wait", thread(), 0xE1, "cuda:1/s91"),
        ("sync_event", thread(), 0xE1),
        ("sync_stream", thread(), "cuda:1/s90"),
        ("sync_device", thread(), 1),  # torch.cuda.synchronize(d) makes d current around the call
        ("event_destroy", 0xE1),
    ]


def test_allocation_marks_a_fresh_block_and_free_is_reported_with_its_site(recorder):
    cuda_trace._fresh_block(0xB000)
    assert recorder.fresh_blocks == {0xB000: True}
    cuda_trace._guard(cuda_trace._memory_freed)(0xB000)  # the free
    assert recorder.fresh_blocks == {}
    (call,) = recorder.sink.calls
    assert call[:3] == ("free", thread(), 0xB000)
    frames = recorder.sites.frames(call[3])
    assert frames[0][0] == __file__ and frames[0][2] == (
        "test_allocation_marks_a_fresh_block_and_free_is_reported_with_its_site")


def test_a_failing_callback_switches_instrumentation_off(recorder):
    recorder.stream_actor_of_handle = None  # any bug inside a handler
    cuda_trace._guard(cuda_trace._event_recorded)(1, 2)
    assert recorder.active is False
    cuda_trace._guard(cuda_trace._event_deleted)(1)
    assert recorder.sink.calls == []


def test_query_answering_true_is_a_synchronization(recorder):
    class Event:
        cuda_event = 0xE7

        def __init__(self, done):
            self.done = done

        def query(self):
            return self.done

    class Stream:
        device_index, cuda_stream = 0, 0x5C

        def query(self):
            return True

    original_event_query, original_stream_query = Event.query, Stream.query
    cuda_trace._wrap_query(Event, cuda_trace._event_query_true)
    cuda_trace._wrap_query(Stream, cuda_trace._stream_query_true)
    try:
        assert Event(False).query() is False and Event(True).query() is True and Stream().query() is True
    finally:
        cuda_trace.uninstall()
    assert Event.query is original_event_query and Stream.query is original_stream_query
    calls = [c for c in recorder.sink.calls if c[0] != "stream_name"]
    assert calls == [("sync_event", thread(), 0xE7), ("sync_stream", thread(), "cuda:0/s92")]


class OnDeviceZero(AccessCollector):
    """Treats CPU tensors as tensors of cuda:0 (the gloo group below runs on CPU)."""

    def ranges_of(self, tensors, fresh=False):
        ranges = [byte_range(t) for t in tensors]
        if ranges:
            self.device = 0
        return [r for r in ranges if r is not None]


def free_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_collective_is_an_access_by_the_group_stream_and_wait_orders_it_back(monkeypatch):
    monkeypatch.setenv("MASTER_ADDR", "127.0.0.1")
    monkeypatch.setenv("MASTER_PORT", str(free_port()))
    dist.init_process_group("gloo", rank=0, world_size=1)
    sink = RecordingSink()
    rec = Recorder(sink)
    rec.current_raw_stream = lambda device: 0
    hooks = CollectiveHooks(rec, lambda: OnDeviceZero(PinnedMemory(cuda_available=False)))
    hooks.install()
    try:
        t = torch.ones(8)
        out = torch.empty(8)
        with StreamcheckMode(rec, {}, PinnedMemory(cuda_available=False), hooks):
            work = dist.all_reduce(t, async_op=True)
            gather = dist.all_gather_into_tensor(out, t, async_op=True)
        work.wait()
        gather.wait()
        work.wait()  # a second wait orders nothing new
    finally:
        hooks.uninstall()
        dist.destroy_process_group()
    base = t.untyped_storage().data_ptr()
    out_base = out.untyped_storage().data_ptr()
    group = "nccl:0/0"  # the default group is named "0"; the actor is the group's stream on device 0
    me = thread()
    assert sink.calls[0] == ("stream_name", group, "NCCL stream of group [0]")  # once, at the group's first use
    del sink.calls[0]
    assert sink.calls[0][:7] == ("collective", me, "cuda:0/s0", group, [], [(base, 0, 32)], True)
    assert sink.calls[0][9] == "c10d::allreduce_"
    assert sink.calls[1] == ("record_stream", base, group)
    assert sink.calls[2][:7] == ("collective", me, "cuda:0/s0", group, [(base, 0, 32)], [(out_base, 0, 32)], True)
    assert sink.calls[2][9] == "c10d::_allgather_base_"
    assert sorted(sink.calls[3:5]) == sorted([("record_stream", base, group), ("record_stream", out_base, group)])
    assert sink.calls[5:] == [("work_wait", me, "cuda:0/s0", sink.calls[0][7], False),
                              ("work_wait", me, "cuda:0/s0", sink.calls[2][7], False)]
    assert sink.calls[0][7] == id(work) and sink.calls[2][7] == id(gather)


def test_a_work_dropped_unwaited_is_not_kept_alive_and_its_clock_is_forgotten(monkeypatch):
    """DeepSpeed drops some Works without waiting: holding them would keep their tensors and events alive."""
    import gc
    import weakref

    from streamcheck.instrument.detector import Detector

    monkeypatch.setenv("MASTER_ADDR", "127.0.0.1")
    monkeypatch.setenv("MASTER_PORT", str(free_port()))
    dist.init_process_group("gloo", rank=0, world_size=1)
    detector = Detector()
    rec = Recorder(detector)
    rec.current_raw_stream = lambda device: 0
    hooks = CollectiveHooks(rec, lambda: OnDeviceZero(PinnedMemory(cuda_available=False)))
    hooks.install()
    try:
        t = torch.ones(8)
        with StreamcheckMode(rec, {}, PinnedMemory(cuda_available=False), hooks):
            dropped = dist.all_reduce(t, async_op=True)
            dropped_id = id(dropped)
            dropped_ref = weakref.ref(dropped)
            assert list(detector.clocks.of_work) == [dropped_id]
            for _ in range(70):  # more collectives than the hand-off holds
                dist.all_reduce(t, async_op=True).wait()
            del dropped
            gc.collect()
            assert dropped_ref() is None  # the program let it go, and so did streamcheck
            assert dropped_id not in hooks.pending
            dist.all_reduce(t, async_op=True).wait()  # the next collective tells the detector
    finally:
        hooks.uninstall()
        dist.destroy_process_group()
    assert detector.clocks.of_work == {}
    assert hooks.pending == {}


@pytest.mark.parametrize("waited", [True, False])
def test_events_on_the_group_stream_inside_a_collective_order_later_waits_after_it(monkeypatch, waited):
    """Scenarios 31-32: the NCCL stream's events fired inside the collective (its wait for the launching stream, the
    work's end event, the future's event) are the comm actor's; a C++ wait on one of them (the DDP reducer,
    `fut.wait()`) orders the waiting stream after the collective, like Work.wait(). NCCL_STREAM stands for the
    group's internal stream handle, fired as torch's GPU trace fires it."""
    from streamcheck.instrument.detector import Detector

    NCCL_STREAM, START, END = 0xAB, 11, 12
    monkeypatch.setenv("MASTER_ADDR", "127.0.0.1")
    monkeypatch.setenv("MASTER_PORT", str(free_port()))
    dist.init_process_group("gloo", rank=0, world_size=1)
    detector = Detector()
    rec = Recorder(detector)
    rec.current_raw_stream = lambda device: 0
    rec.current_device = lambda: 0
    monkeypatch.setattr(cuda_trace, "_active", rec)
    hooks = CollectiveHooks(rec, lambda: OnDeviceZero(PinnedMemory(cuda_available=False)))
    original_after = hooks.after

    def after_with_callbacks_inside(token, out):  # still inside the op: the recorder holds these back
        cuda_trace._event_recorded(rec, START, 0)
        cuda_trace._event_waited(rec, START, NCCL_STREAM)
        cuda_trace._event_recorded(rec, END, NCCL_STREAM)
        original_after(token, out)

    monkeypatch.setattr(hooks, "after", after_with_callbacks_inside)
    hooks.install()
    try:
        t = torch.ones(8)
        with StreamcheckMode(rec, {}, PinnedMemory(cuda_available=False), hooks):
            dist.all_reduce(t, async_op=True)  # the work is dropped: only the C++ side waits
        if waited:
            cuda_trace._event_waited(rec, END, 0)  # endEvent->block(currentStream), from C++
        base = t.untyped_storage().data_ptr()
        detector.kernel(thread(), "cuda:0/s0", reads=[(base, 0, 32)], op="read t on s0")
    finally:
        hooks.uninstall()
        dist.destroy_process_group()
    assert rec.stream_actor_of_handle(NCCL_STREAM) == "nccl:0/0"
    races = [(r.kind, r.earlier.op, r.later.op) for r in detector.races]
    assert races == ([] if waited else [("RAW", "c10d::allreduce_", "read t on s0")])
