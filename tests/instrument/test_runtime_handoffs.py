"""Host-thread handoffs (instrument/handoffs.py): put -> get, set -> wait, notify -> wait and Barrier order threads.

Scenario 30 on the real hooks: thread T1 writes a pinned buffer on the host and hands it to the main thread, which
enqueues an H2D copy from it on cuda:0/s0 (both accesses are fed to the recorder as the op hooks would)."""

from __future__ import annotations

import queue
import threading
import time

import pytest

from streamcheck.instrument import handoffs
from streamcheck.instrument.detector import Detector
from streamcheck.instrument.recorder import Recorder
from streamcheck.instrument.threads import ThreadHooks

PINNED = 7


class _NoMode:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return None


@pytest.fixture
def rec():
    detector = Detector()
    recorder = Recorder(detector)
    hooks = ThreadHooks(recorder, _NoMode)
    hooks.install()
    try:
        yield recorder
    finally:
        hooks.uninstall()


def pin(rec: Recorder) -> None:
    rec.emit("host_access", rec.thread_actor(), [], [(PINNED, 0, 64)], -1, "pin_memory on T1")


def copy_to_device(rec: Recorder) -> None:
    rec.emit("kernel", rec.thread_actor(), "cuda:0/s0", [(PINNED, 0, 64)], [(8, 0, 64)], -1, "H2D on main")


def races(rec: Recorder) -> list:
    return [(r.kind, r.earlier.op, r.later.op) for r in rec.sink.races]


def test_a_queue_handoff_orders_the_producer_before_the_consumer(rec):
    handoff = queue.Queue()
    batch = object()

    def producer():
        pin(rec)
        handoff.put(batch)
        time.sleep(0.05)  # still alive while the consumer copies: only the queue orders the two

    worker = threading.Thread(target=producer)
    worker.start()
    assert handoff.get() is batch
    copy_to_device(rec)
    worker.join()
    assert races(rec) == []


def test_a_handoff_through_a_plain_attribute_is_a_host_race(rec):
    holder: dict = {}
    done = threading.Event()

    def producer():
        pin(rec)
        holder["batch"] = object()
        done.wait(5)  # main sets it after the copy: an edge the other way round

    worker = threading.Thread(target=producer)
    worker.start()
    while "batch" not in holder:
        time.sleep(0.001)
    copy_to_device(rec)
    done.set()
    worker.join()
    assert races(rec) == [("HOST", "pin_memory on T1", "H2D on main")]


@pytest.mark.parametrize("how", ["event", "condition", "barrier"])
def test_event_condition_and_barrier_order_the_threads(rec, how):
    ready = threading.Event()
    condition = threading.Condition()
    barrier = threading.Barrier(2)
    flag: list = []

    def producer():
        pin(rec)
        if how == "event":
            ready.set()
        elif how == "condition":
            with condition:
                flag.append(1)
                condition.notify()
        else:
            barrier.wait()
        time.sleep(0.05)

    worker = threading.Thread(target=producer)
    worker.start()
    if how == "event":
        assert ready.wait(5)
    elif how == "condition":
        with condition:
            assert condition.wait_for(lambda: flag, 5)
    else:
        barrier.wait()
    copy_to_device(rec)
    worker.join()
    assert races(rec) == []


def test_uninstall_restores_the_originals():
    original = (queue.Queue.put, queue.Queue.get, threading.Event.set, threading.Condition.wait,
                threading.Barrier.wait)
    hooks = ThreadHooks(Recorder(Detector()), _NoMode)
    hooks.install()
    assert queue.Queue.put is not original[0]
    hooks.uninstall()
    assert (queue.Queue.put, queue.Queue.get, threading.Event.set, threading.Condition.wait,
            threading.Barrier.wait) == original


def test_streamcheck_own_threads_handoffs_are_not_events(rec):
    handoff = queue.Queue()
    done = threading.Event()

    def flusher_like():
        handoff.put(1)
        done.wait(0.01)

    worker = threading.Thread(target=flusher_like, name="streamcheck-trace-flush")
    worker.start()
    worker.join()
    assert handoffs.host_event_key(handoff, 1) not in rec.sink.clocks.of_event  # its put recorded nothing
    assert handoff.get() == 1
