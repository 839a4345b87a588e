"""Scenarios 1-32 of SCENARIOS.md (33: an examples/ pair) on the online detector's core: exact count, kind and
accesses of every race.

Each access carries an `op` label naming it ("read s1 t1"), so a race is asserted as (kind, earlier label, later
label). Streams are "cuda:0/s<i>", the host thread is "T0", tensors are whole 64-byte storages unless a scenario
is about views.
"""

from __future__ import annotations

import pytest

from streamcheck.instrument.detector import Detector

T0 = "T0"
SIZE = 64
NCCL = "nccl:default_pg/0"


def s(i: int) -> str:
    return f"cuda:0/s{i}"


class Program:
    """Drives a Detector with readable one-liners; tensors are storages named by small ints."""

    def __init__(self) -> None:
        self.d = Detector()
        self.next_event = 100

    def read(self, stream: int, tensor: int, start: int = 0, end: int = SIZE, thread: str = T0) -> None:
        self.d.kernel(thread, s(stream), reads=[(tensor, start, end)], op=f"read s{stream} t{tensor}")

    def write(self, stream: int, tensor: int, start: int = 0, end: int = SIZE, thread: str = T0) -> None:
        self.d.kernel(thread, s(stream), writes=[(tensor, start, end)], op=f"write s{stream} t{tensor}")

    def record(self, event: int, stream: int, thread: str = T0) -> None:
        self.d.event_record(thread, event, s(stream))

    def wait(self, stream: int, event: int, thread: str = T0) -> None:
        self.d.event_wait(thread, event, s(stream))

    def wait_stream(self, waiter: int, waited: int, thread: str = T0) -> None:
        """waiter.wait_stream(waited): a record on `waited` then a wait on `waiter` (how torch does it)."""
        self.next_event += 1
        self.record(self.next_event, waited, thread)
        self.wait(waiter, self.next_event, thread)

    def races(self) -> list[tuple[str, str, str]]:
        return sorted((r.kind, r.earlier.op, r.later.op) for r in self.d.races)


# ---- core happens-before semantics (1-19) ------------------------------------------------------------------------
def test_01_kernel_touching_nothing():
    p = Program()
    p.d.kernel(T0, s(1), op="empty")
    p.d.kernel(T0, s(2), reads=[], writes=[], op="empty")
    assert p.races() == []


def test_02_two_reads_never_race():
    p = Program()
    p.read(1, 1)
    p.read(2, 1)
    assert p.races() == []


def test_03_read_then_unordered_write_is_war():
    p = Program()
    p.read(1, 1)
    p.write(2, 1)
    assert p.races() == [("WAR", "read s1 t1", "write s2 t1")]


def test_04_event_orders_read_before_write():
    p = Program()
    p.read(1, 1)
    p.record(1, 1)
    p.wait(2, 1)
    p.write(2, 1)
    assert p.races() == []


def test_05_waiting_stream_is_ordered_the_other_is_not():
    p = Program()
    p.write(1, 1)
    p.record(1, 1)
    p.wait(2, 1)
    p.read(2, 1)
    assert p.races() == []
    p.read(3, 1)
    assert p.races() == [("RAW", "write s1 t1", "read s3 t1")]


def test_06_one_of_two_waiting_readers_is_unordered_with_the_write():
    p = Program()
    p.write(1, 1)
    p.record(1, 1)
    p.wait(2, 1)
    p.wait(3, 1)
    p.read(2, 1)
    p.read(3, 1)
    p.write(2, 1)
    assert p.races() == [("WAR", "read s3 t1", "write s2 t1")]


def test_07_chain_of_waits_is_transitive():
    p = Program()
    p.read(0, 1)
    for i in range(10):
        p.record(i + 1, i)
        p.wait(i + 1, i + 1)
    p.write(10, 1)
    assert p.races() == []


def test_08_event_recorded_before_the_second_read():
    p = Program()
    p.read(1, 1)
    p.record(1, 1)
    p.d.kernel(T0, s(1), reads=[(1, 0, SIZE)], op="second read s1 t1")
    p.wait(2, 1)
    p.write(2, 1)
    assert p.races() == [("WAR", "second read s1 t1", "write s2 t1")]


@pytest.mark.parametrize("how", ["destroyed", "never recorded"])
def test_09_waiting_on_a_dead_or_unrecorded_event_orders_nothing(how):
    """A re-created event is a destroy followed by a fresh handle (maybe the same int): the "destroyed" case."""
    p = Program()
    p.read(1, 1)
    if how == "destroyed":
        p.record(1, 1)
        p.d.event_destroy(1)
    p.wait(2, 1)
    p.write(2, 1)
    assert p.races() == [("WAR", "read s1 t1", "write s2 t1")]


@pytest.mark.parametrize("with_s10", [True, False])
def test_10_every_read_since_the_last_write_is_checked(with_s10):
    p = Program()
    for i in range(1, 10):
        p.read(i, 1)
        p.record(i, i)
        p.wait(0, i)
    if with_s10:
        p.read(10, 1)
    p.write(0, 1)
    assert p.races() == ([("WAR", "read s10 t1", "write s0 t1")] if with_s10 else [])


def test_11_one_race_per_tensor():
    p = Program()
    for t in range(1, 11):
        p.write(0, t)
    for t in range(1, 11):
        p.write(1, t)
    assert p.races() == sorted(("WAW", f"write s0 t{t}", f"write s1 t{t}") for t in range(1, 11))
    assert sorted(r.storage for r in p.d.races) == list(range(1, 11))


def test_12_clocks_merge_pointwise():
    p = Program()
    p.write(1, 1)
    p.write(2, 2)
    p.wait_stream(1, 2)
    p.wait_stream(2, 1)
    p.record(3, 2)
    p.wait(1, 3)
    p.write(1, 1)
    p.write(1, 2)
    assert p.races() == []


def test_13_a_second_record_replaces_the_first():
    p = Program()
    p.read(1, 1)
    p.record(1, 1)
    p.record(1, 2)
    p.wait(3, 1)
    p.write(3, 1)
    assert p.races() == [("WAR", "read s1 t1", "write s3 t1")]


def test_14_one_event_waited_by_two_streams():
    p = Program()
    p.write(1, 1)
    p.record(1, 1)
    p.wait(2, 1)
    p.wait(3, 1)
    p.read(2, 1)
    p.read(3, 1)
    assert p.races() == []


def test_15_device_synchronize_orders_every_stream_of_the_device():
    p = Program()
    for i in range(1, 10):
        p.write(i, i)
    p.d.sync_device(T0, 0)
    for i in range(1, 10):
        p.write(0, i)
    assert p.races() == []


def test_15b_device_synchronize_is_per_device():
    p = Program()
    p.d.kernel(T0, "cuda:1/s1", writes=[(1, 0, SIZE)], op="write cuda:1/s1 t1")
    p.d.sync_device(T0, 0)
    p.write(0, 1)
    assert p.races() == [("WAW", "write cuda:1/s1 t1", "write s0 t1")]


def test_16_a_sync_covers_only_earlier_work():
    p = Program()
    p.write(1, 1)
    p.d.sync_device(T0, 0)
    p.d.kernel(T0, s(1), writes=[(1, 0, SIZE)], op="second write s1 t1")
    p.write(2, 1)
    assert p.races() == [("WAW", "second write s1 t1", "write s2 t1")]


def test_17_a_new_stream_starts_after_what_the_host_saw():
    p = Program()
    p.write(1, 1)
    p.d.sync_device(T0, 0)
    p.d.stream_created(T0, s(2))
    p.write(2, 1)
    assert p.races() == []


def test_18_stream_synchronize_orders_only_that_stream():
    p = Program()
    p.write(0, 1)
    p.write(1, 2)
    p.d.sync_stream(T0, s(0))
    p.read(2, 1)
    p.read(3, 1)
    assert p.races() == []
    p.read(4, 2)
    assert p.races() == [("RAW", "write s1 t2", "read s4 t2")]


def test_19_event_synchronize_covers_work_before_the_record():
    p = Program()
    p.write(1, 1)
    p.record(1, 1)
    p.write(1, 2)
    p.d.sync_event(T0, 1)
    p.write(2, 1)
    assert p.races() == []
    p.write(2, 2)
    assert p.races() == [("WAW", "write s1 t2", "write s2 t2")]


# ---- what CSAN misses (20-27), at the model level -----------------------------------------------------------------
N = 32


def test_20_views_are_byte_ranges():
    p = Program()
    p.d.kernel(T0, s(1), writes=[(1, 0, N)], op="write s1 buf[0:N]")
    p.d.kernel(T0, s(2), writes=[(1, N, 2 * N)], op="write s2 buf[N:2N]")
    assert p.races() == []
    p.d.kernel(T0, s(2), writes=[(1, N - 1, 2 * N)], op="write s2 buf[N-1:2N]")
    assert p.races() == [("WAW", "write s1 buf[0:N]", "write s2 buf[N-1:2N]")]
    race = p.d.races[0]
    assert (race.storage, race.start, race.end) == (1, N - 1, N)


@pytest.mark.parametrize("record_stream", [False, True])
@pytest.mark.parametrize("reused", [False, True])
def test_21_free_without_record_stream(record_stream, reused):
    p = Program()
    p.d.alloc(1, SIZE, s(0), site=-1)
    p.read(1, 1)
    if record_stream:
        p.d.record_stream(1, s(1))
    p.d.free(T0, 1, site=-1)
    assert p.races() == []  # the free alone: nothing can reuse the block yet
    if reused:  # the pool stream's next work: the caching allocator may hand the block to it
        p.d.alloc(1, SIZE, s(0), site=-1)
        p.write(0, 1)
    if record_stream or not reused:
        assert p.races() == []
    else:
        assert p.races() == [("FREE", "read s1 t1", "free")]
        race = p.d.races[0]
        assert (race.later.actor, race.later.thread, race.earlier.actor) == (s(0), T0, s(1))
        assert (race.start, race.end) == (0, SIZE)
        assert (race.reuse.actor, race.reuse.op) == (s(0), "write s0 t1")  # reported where it became real


def test_21_any_next_work_of_the_pool_stream_can_reuse_the_block():
    p = Program()
    p.d.alloc(1, SIZE, s(0))
    p.read(1, 1)
    p.d.free(T0, 1)
    p.write(0, 2)  # another tensor: the allocator may still have handed block 1 to this work's outputs
    assert p.races() == [("FREE", "read s1 t1", "free")]
    assert p.d.races[0].reuse.op == "write s0 t2"
    p.write(0, 3)  # checked once: the pending free is gone
    assert len(p.d.races) == 1


@pytest.mark.parametrize("order", ["synchronize", "device synchronize", "wait_stream"])
def test_21_free_then_ordering_then_reuse_is_clean(order):
    """free -> synchronize (or a wait of the pool stream) -> reuse: no reuse can overlap the foreign read."""
    p = Program()
    p.d.alloc(1, SIZE, s(0))
    p.read(1, 1)
    p.d.free(T0, 1)
    if order == "synchronize":
        p.d.sync_stream(T0, s(1))
    elif order == "device synchronize":
        p.d.sync_device(T0, 0)
    else:
        p.wait_stream(0, 1)  # ZeRO-2's reduction stream waits for the compute stream before its next use
    p.d.alloc(1, SIZE, s(0))
    p.write(0, 1)
    assert p.races() == []


def test_21_a_collective_launched_from_the_pool_stream_is_its_next_work():
    p = Program()
    p.d.alloc(1, SIZE, s(0))
    p.read(1, 1)
    p.d.free(T0, 1, site=-1)
    p.d.collective(T0, s(0), NCCL, reads=[(2, 0, SIZE)], op="all_reduce")
    assert p.races() == [("FREE", "read s1 t1", "free")]
    assert p.d.races[0].reuse.op == "all_reduce"


def test_21b_free_after_a_wait_is_ordered():
    p = Program()
    p.d.alloc(1, SIZE, s(0))
    p.read(1, 1)
    p.wait_stream(0, 1)
    p.d.free(T0, 1)
    assert p.races() == []
    assert 1 not in p.d.shadows  # freed state is dropped


PINNED, DEVICE = 7, 8


@pytest.mark.parametrize("sync", [None, "stream", "event"])
def test_22_host_read_after_non_blocking_d2h(sync):
    p = Program()
    p.d.kernel(T0, s(0), reads=[(DEVICE, 0, SIZE)], writes=[(PINNED, 0, SIZE)], op="h.copy_(d, non_blocking)")
    if sync == "stream":
        p.d.sync_stream(T0, s(0))
    elif sync == "event":
        p.record(1, 0)
        p.d.sync_event(T0, 1)
    p.d.host_access(T0, reads=[(PINNED, 0, SIZE)], op="h.numpy()")
    assert p.races() == ([] if sync else [("HOST", "h.copy_(d, non_blocking)", "h.numpy()")])


@pytest.mark.parametrize("sync", [False, True])
def test_23_host_overwrite_after_non_blocking_h2d(sync):
    p = Program()
    p.d.kernel(T0, s(0), reads=[(PINNED, 0, SIZE)], writes=[(DEVICE, 0, SIZE)], op="d.copy_(h, non_blocking)")
    if sync:
        p.d.sync_stream(T0, s(0))
    p.d.host_access(T0, writes=[(PINNED, 0, SIZE)], op="h.fill_()")
    assert p.races() == ([] if sync else [("HOST", "d.copy_(h, non_blocking)", "h.fill_()")])


@pytest.mark.parametrize("wait_stream", [False, True])
def test_24_joining_a_thread_orders_host_work_not_gpu_work(wait_stream):
    p = Program()
    p.d.thread_start(T0, "TA")
    p.write(1, 1, thread="TA")
    p.d.thread_join(T0, "TA")
    p.d.thread_start(T0, "TB")
    if wait_stream:
        p.wait_stream(2, 1, thread="TB")
    p.write(2, 1, thread="TB")
    assert p.races() == ([] if wait_stream else [("WAW", "write s1 t1", "write s2 t1")])


@pytest.mark.parametrize("waited", [False, True])
def test_25_async_collective_before_work_wait(waited):
    p = Program()
    p.d.collective(T0, s(0), NCCL, reads=[(1, 0, SIZE)], writes=[(1, 0, SIZE)], async_op=True, work=5,
                   op="all_reduce(t1)")
    if waited:
        p.d.work_wait(T0, s(0), 5)
    p.read(0, 1)
    assert p.races() == ([] if waited else [("RAW", "all_reduce(t1)", "read s0 t1")])


def test_25b_blocking_collective_orders_the_current_stream():
    p = Program()
    p.d.collective(T0, s(0), NCCL, reads=[(1, 0, SIZE)], writes=[(1, 0, SIZE)], async_op=False, op="all_reduce")
    p.read(0, 1)
    assert p.races() == []


SEC, SRC, OUT = 11, 12, 13


def _hpz(p: Program, fix: str | None, thread: str) -> None:
    p.d.kernel(T0, s(0), reads=[(SRC, 0, SIZE)], writes=[(SEC, 0, SIZE)], site=1, op="sec.copy_(src)")
    if fix == "wait_stream":
        p.wait_stream(1, 0, thread=T0)
    elif fix == "synchronize":
        p.d.sync_stream(T0, s(0))
    if thread != T0:  # backward: the autograd engine thread runs the hook after the caller started backward
        p.d.thread_start(T0, thread)
    p.d.collective(thread, s(1), NCCL, reads=[(SEC, 0, SIZE)], writes=[(OUT, 0, 2 * SIZE)], async_op=True,
                   work=9, site=2, op="all_gather(sec)")


@pytest.mark.parametrize("fix", [None, "wait_stream", "synchronize"])
def test_26_hpz_shape(fix):
    p = Program()
    _hpz(p, fix, T0)
    if fix:
        assert p.races() == []
    else:
        assert p.races() == [("RAW", "sec.copy_(src)", "all_gather(sec)")]
        race = p.d.races[0]
        assert (race.earlier.site, race.later.site, race.earlier.actor, race.later.actor) == (1, 2, s(0), NCCL)


@pytest.mark.parametrize("fix", [None, "synchronize"])
def test_27_hpz_read_in_a_backward_hook(fix):
    p = Program()
    _hpz(p, fix, "T_autograd")
    if fix:
        assert p.races() == []
    else:
        assert p.races() == [("RAW", "sec.copy_(src)", "all_gather(sec)")]
        assert p.d.races[0].later.thread == "T_autograd"


# ---- orderings real frameworks rely on (30-33), at the model level --------------------------------------------------
@pytest.mark.parametrize("handoff", [True, False])
def test_30_host_handoff_orders_the_threads(handoff):
    """T1 writes pinned h (pin_memory), hands it over; T2 enqueues the H2D copy from it. A queue's put -> get is an
    event recorded on T1's clock and synchronized by T2 (instrument/threads.py)."""
    p = Program()
    p.d.thread_start(T0, "T1")
    p.d.thread_start(T0, "T2")
    p.d.host_access("T1", writes=[(PINNED, 0, SIZE)], op="pin_memory on T1")
    if handoff:
        p.d.event_record("T1", -1, "T1")  # queue.put
        p.d.sync_event("T2", -1)  # queue.get
    p.d.kernel("T2", s(0), reads=[(PINNED, 0, SIZE)], writes=[(DEVICE, 0, SIZE)], op="H2D on T2")
    assert p.races() == ([] if handoff else [("HOST", "pin_memory on T1", "H2D on T2")])


@pytest.mark.parametrize("blocked", [True, False])
def test_31_collective_waited_through_its_end_event(blocked):
    p = Program()
    p.d.collective(T0, s(0), NCCL, writes=[(1, 0, SIZE)], async_op=True, work=1, op="allreduce")
    p.d.event_record(T0, 7, NCCL)  # the work's end event, on the group's stream (inside the op)
    if blocked:
        p.d.event_wait(T0, 7, s(0))  # the reducer blocks the current stream on it, in C++
    p.read(0, 1)
    assert p.races() == ([] if blocked else [("RAW", "allreduce", "read s0 t1")])


def test_32_future_wait_on_a_side_stream_orders_only_that_stream():
    p = Program()
    p.d.collective(T0, s(0), NCCL, writes=[(1, 0, SIZE)], async_op=True, work=1, op="allreduce")
    p.d.event_record(T0, 8, NCCL)  # the future's event, recorded when the work marked it completed
    p.d.event_wait(T0, 8, s(1))  # with side: fut.wait()
    p.read(1, 1)
    assert p.races() == []
    p.read(2, 1)
    assert p.races() == [("RAW", "allreduce", "read s2 t1")]


GRAD_A, GRAD_B, BUCKET, REDUCED = 21, 22, 23, 24


@pytest.mark.parametrize("fixed", [False, True])
def test_33_bucket_filled_by_hook_calls_on_two_streams(fixed):
    """examples/bucket_across_hook_calls, at the model level: two backward passes under s1 and s2 run the gradient
    hook on the autograd thread, once on each stream. The first call copies its gradient into bucket half 0 on s1;
    the second reduces half 0 on s3, which waits for s2 only (racy) or for every stream a copy ran on (fixed:
    s1), then copies its own gradient into half 1 on s2 after s2 waited for s3."""
    p = Program()
    autograd = "T_autograd"
    p.d.thread_start(T0, autograd)
    p.d.kernel(autograd, s(1), writes=[(GRAD_A, 0, SIZE)], op="accumulate a.grad on s1")
    p.d.kernel(autograd, s(1), reads=[(GRAD_A, 0, SIZE)], writes=[(BUCKET, 0, SIZE // 2)], op="copy a.grad on s1")
    p.d.kernel(autograd, s(2), writes=[(GRAD_B, 0, SIZE)], op="accumulate b.grad on s2")
    p.wait_stream(3, 1 if fixed else 2, thread=autograd)
    p.d.kernel(autograd, s(3), reads=[(BUCKET, 0, SIZE // 2)], writes=[(REDUCED, 0, SIZE)], op="sum half 0 on s3")
    p.wait_stream(2, 3, thread=autograd)
    p.d.kernel(autograd, s(2), reads=[(GRAD_B, 0, SIZE)], writes=[(BUCKET, SIZE // 2, SIZE)], op="copy b.grad on s2")
    assert p.races() == ([] if fixed else [("RAW", "copy a.grad on s1", "sum half 0 on s3")])
