"""The native per-op hook (instrument/native_hook/ + native.py), on CPU tensors standing in for device tensors.

`set_cpu_as_device(True)` makes the hook report CPU tensors as tensors of device 0 and take the current stream from
`set_test_stream`, so the C++ half (plans, byte ranges, fresh outputs, copies behind aliasing returns, threads) and
the Python half (recorder events, the detector's verdicts) run here exactly as they do on a GPU, minus the CUDA
stream query. The extension is built on first use (a C++ compiler and ninja are in the test extra's reach).
"""

from __future__ import annotations

import sys
import threading

import pytest
import torch

from streamcheck.instrument import native
from streamcheck.instrument.watch import Watch


@pytest.fixture(scope="module")
def module():
    return native.load()


@pytest.fixture
def calls(module):
    """The hook's raw calls, (op name, device, stream, reads, writes, fresh), while the fixture is active."""
    seen: list = []

    def on_access(op, device, stream, reads, writes, fresh, site):
        seen.append((module.op_name(op)[0], device, stream, reads, writes, fresh))

    module.install(on_access, lambda op, args: None, lambda token, outs: None, lambda message: seen.append(message))
    module.set_cpu_as_device(True)
    module.set_test_stream(7)
    module.set_active(True)
    module.watch_this_thread(True)
    try:
        yield seen
    finally:
        module.watch_this_thread(False)
        module.set_active(False)
        module.set_cpu_as_device(False)
        module.install(native._ignore, native._ignore, native._ignore, native._ignore)


def base_of(t: torch.Tensor) -> int:
    return t.untyped_storage().data_ptr()


def test_in_place_op_on_a_view_writes_its_byte_range_and_reads_its_other_tensor(module, calls):
    x = torch.zeros(4, 4)
    y = torch.ones(2, 4)
    calls.clear()
    x[1:3].add_(y)
    name, device, stream, reads, writes, fresh = calls[-1]
    assert (name, device, stream) == ("aten::add_", 0, 7)
    assert reads == [(base_of(y), 0, 32)]
    assert writes == [(base_of(x), 16, 48)]
    assert fresh is None


def test_fresh_output_reports_its_storage_size_and_scalars_are_not_tensors_to_track(module, calls):
    x = torch.ones(8)
    calls.clear()
    out = x * 2
    name, _, _, reads, writes, fresh = calls[-1]
    assert name == "aten::mul"
    assert reads == [(base_of(x), 0, 32)]  # the wrapped scalar 2 is not a tensor the program holds
    assert writes == []
    assert fresh == [(base_of(out), 0, 32, 32, True)]


def test_reshape_that_views_touches_nothing_and_reshape_that_copies_reads_and_writes(module, calls):
    x = torch.arange(16.0).reshape(4, 4)
    calls.clear()
    x.reshape(16)
    assert calls == []  # a real view: no data moved, no call
    copied = x.t().reshape(16)
    name, _, _, reads, writes, fresh = calls[-1]
    assert name == "aten::reshape"
    assert reads == [(base_of(x), 0, 64)]
    assert fresh == [(base_of(copied), 0, 64, 64, True)]


def test_metadata_only_ops_and_views_make_no_call(module, calls):
    x = torch.ones(4, 4)
    calls.clear()
    x.t()
    x.view(16)
    x.size()
    x.resize_(4, 4)
    assert calls == []


def test_metadata_only_arguments_are_not_reads(module, calls):
    """Scenario 33 on the hook: view_as / expand_as / reshape_as / type_as's other, *_like and new_* inputs, queries
    and `x.data = y` read no data of the tensor that only lends its shape."""
    x, y, z, row = torch.ones(4, 4), torch.ones(16), torch.zeros(4, 4), torch.ones(1, 4)
    calls.clear()
    y.view_as(z)
    row.expand_as(z)
    y.reshape_as(z)
    x.type_as(z)  # same dtype: x itself comes back
    x.to(z)
    z.size(), z.stride(), z.dim(), z.is_floating_point(), z.is_contiguous()
    x.data = y.data.view_as(z)
    assert calls == []
    like = torch.empty_like(z)
    new = z.new_zeros(3)
    assert [(c[0], c[3], c[4]) for c in calls] == [("aten::empty_like", [], []), ("aten::new_zeros", [], [])]
    assert [c[5] for c in calls] == [[(base_of(like), 0, 64, 64, True)], [(base_of(new), 0, 12, 12, True)]]
    calls.clear()
    x.double().type_as(z)  # a real conversion: reads its self, writes a new tensor; z only lends its dtype
    _, _, _, reads, _, fresh = calls[-1]
    assert (calls[-1][0], len(reads), len(fresh)) == ("aten::type_as", 1, 1)
    assert base_of(z) not in [r[0] for r in reads]


def test_composite_op_is_seen_once_before_it_decomposes(module, calls):
    linear = torch.nn.Linear(4, 3)
    x = torch.ones(2, 4)
    calls.clear()
    y = linear(x)
    names = [c[0] for c in calls]
    assert names == ["aten::linear"]
    _, _, _, reads, _, fresh = calls[0]
    assert reads == [(base_of(x), 0, 32), (base_of(linear.weight), 0, 48), (base_of(linear.bias), 0, 12)]
    assert fresh == [(base_of(y), 0, 24, 24, True)]


def test_backward_ops_and_user_threads_that_enter_are_seen(module, calls):
    w = torch.ones(3, requires_grad=True)
    (w * 2).sum().backward()
    assert "aten::ones_like" in [c[0] for c in calls]  # the engine's first op of this backward
    calls.clear()

    def work():
        module.set_test_stream(9)
        with native.ThreadEntry(module):
            torch.ones(2).add_(1)
        torch.ones(2).add_(1)  # after leaving: unseen

    thread = threading.Thread(target=work)
    thread.start()
    thread.join()
    assert [(c[0], c[2]) for c in calls] == [("aten::ones", 9), ("aten::add_", 9)]


def test_inactive_hook_and_unwatched_threads_cost_no_call(module, calls):
    module.set_active(False)
    torch.ones(3).add_(1)
    module.set_active(True)
    module.watch_this_thread(False)
    torch.ones(3).add_(1)
    module.watch_this_thread(True)
    assert calls == []


def test_an_error_in_the_python_half_reaches_on_error_not_the_program(module):
    errors: list = []

    def broken(*args):
        raise ValueError("bug in streamcheck")

    # the Python half catches its own errors (NativeHooks); a raw callback that raises propagates like RaceError does
    module.install(broken, lambda op, args: None, lambda token, outs: None, errors.append)
    module.set_cpu_as_device(True)
    module.set_active(True)
    module.watch_this_thread(True)
    try:
        with pytest.raises(ValueError, match="bug in streamcheck"):
            torch.ones(2).add_(1)
    finally:
        module.watch_this_thread(False)
        module.set_active(False)
        module.set_cpu_as_device(False)
        module.install(native._ignore, native._ignore, native._ignore, native._ignore)


# ---- the whole watch on the native backend --------------------------------------------------------------------------
@pytest.fixture
def native_watch(module, tmp_path):
    watch = Watch(tmp_path, rank=0, world_size=1, echo=False, backend="native")
    watch.start()
    assert watch.backend == "native" and watch.recorder.active
    module.set_cpu_as_device(True)
    module.set_test_stream(0)
    try:
        yield watch
    finally:
        module.set_cpu_as_device(False)
        module.set_test_stream(0)
        watch.stop()


def test_watch_on_native_backend_reports_a_raw_race_between_two_streams(module, native_watch):
    module.set_test_stream(1)
    x = torch.zeros(1024)
    x.fill_(1.0)
    module.set_test_stream(2)
    x.sum()  # the read: stream 2 never waited for stream 1
    module.set_test_stream(0)
    races = native_watch.detector.races
    assert [(r.kind, r.earlier.actor, r.later.actor, r.earlier.op, r.later.op) for r in races] == [
        ("RAW", "cuda:0/s1", "cuda:0/s2", "aten::fill_", "aten::sum")]
    assert (races[0].start, races[0].end) == (0, 4096)
    frames = native_watch.recorder.sites.frames(races[0].later.site)
    assert frames[0][0] == __file__ and frames[0][2] == "test_watch_on_native_backend_reports_a_raw_race_between_two_streams"


def test_watch_on_native_backend_orders_the_read_after_an_event_wait(module, native_watch):
    rec = native_watch.recorder
    module.set_test_stream(1)
    x = torch.zeros(1024)
    x.fill_(1.0)
    rec.emit("event_record", rec.thread_actor(), 42, "cuda:0/s1")  # what the GPU trace callbacks report
    rec.emit("event_wait", rec.thread_actor(), 42, "cuda:0/s2")
    module.set_test_stream(2)
    x.sum()
    module.set_test_stream(0)
    assert native_watch.detector.races == []


def test_watch_on_native_backend_fresh_output_is_a_write_of_its_stream(module, native_watch):
    module.set_test_stream(3)
    x = torch.ones(16)
    base = base_of(x)
    # no allocation callback marked the block (there is no CUDA here): a write of the stream, not an allocation
    assert base not in native_watch.detector.allocations
    module.set_test_stream(0)
    shadow = native_watch.detector.shadows[base]
    assert shadow.actor == "cuda:0/s3"


def test_watch_falls_back_to_the_dispatch_mode_with_a_note_when_the_hook_is_unavailable(monkeypatch, tmp_path):
    def unavailable():
        raise native.NativeUnavailable("no compiler here")

    monkeypatch.setattr(native, "load", unavailable)
    watch = Watch(tmp_path, rank=0, world_size=1, echo=False, backend="auto")
    watch.start()
    try:
        assert watch.backend == "mode"
        assert watch.notes == ["native hook unavailable, using the dispatch mode (slower): no compiler here"]
        assert watch.errors == []
    finally:
        watch.stop()
    strict = Watch(tmp_path, rank=0, world_size=1, echo=False, backend="native")
    strict.start()
    try:
        assert strict.recorder.error is not None and "no compiler here" in str(strict.recorder.error)
    finally:
        strict.stop()


def test_backend_from_environment_rejects_unknown_values(monkeypatch):
    monkeypatch.setenv("STREAMCHECK_BACKEND", "fast")
    with pytest.raises(ValueError, match="STREAMCHECK_BACKEND='fast': expected one of auto, native, mode"):
        native.backend_from_environment()
    monkeypatch.setenv("STREAMCHECK_BACKEND", "Mode")
    assert native.backend_from_environment() == "mode"


# ---- callbacks fired inside an op, and collectives, through the hook -------------------------------------------------
_inside_op: list = []  # what the custom op below runs where a GPU trace callback would fire


@torch.library.custom_op("streamcheck_test::fill_then_callback", mutates_args=("x",))
def fill_then_callback(x: torch.Tensor) -> None:
    x.fill_(2.0)  # an inner op: the hook's key is excluded while the outer op runs, so it is not seen twice
    for callback in _inside_op:
        callback()


@pytest.mark.parametrize("synchronized", [True, False])
def test_a_callback_fired_inside_an_op_is_replayed_after_the_op_own_event(module, native_watch, synchronized):
    """A stream synchronization inside an op (`.item()`) comes after the op's kernel: held back, then replayed."""
    rec = native_watch.recorder
    module.set_test_stream(1)
    x = torch.zeros(256)
    if synchronized:
        _inside_op.append(lambda: rec.emit("sync_stream", rec.thread_actor(), "cuda:0/s1"))
    try:
        module.set_test_stream(1)
        fill_then_callback(x)
    finally:
        _inside_op.clear()
    module.set_test_stream(2)
    x.sum()  # the host has synchronized with stream 1 before stream 2 was given the read: ordered
    module.set_test_stream(0)
    races = native_watch.detector.races
    if synchronized:
        assert races == []
    else:
        assert [(r.kind, r.earlier.actor, r.later.actor, r.earlier.op) for r in races] == [
            ("RAW", "cuda:0/s1", "cuda:0/s2", "streamcheck_test::fill_then_callback")]


def test_collectives_through_the_hook_are_accesses_of_the_group_stream_and_wait_orders_them(module, monkeypatch,
                                                                                             tmp_path):
    import socket

    import torch.distributed as dist

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    monkeypatch.setenv("MASTER_ADDR", "127.0.0.1")
    monkeypatch.setenv("MASTER_PORT", str(port))
    dist.init_process_group("gloo", rank=0, world_size=1)
    watch = Watch(tmp_path, rank=0, world_size=1, echo=False, backend="native")
    watch.start()
    module.set_cpu_as_device(True)
    module.set_test_stream(0)
    try:
        from streamcheck.instrument.dispatch import AccessCollector, byte_range

        class OnDeviceZero(AccessCollector):  # the gloo group runs on CPU: its tensors stand for cuda:0 ones
            def ranges_of(self, tensors, fresh=False):
                ranges = [byte_range(t) for t in tensors]
                if ranges:
                    self.device = 0
                return [r for r in ranges if r is not None]

        collectives = next(h for h in watch._hooks if type(h).__name__ == "CollectiveHooks")
        collectives.collector_factory = lambda: OnDeviceZero(watch._pinned)
        t = torch.ones(8)
        work = dist.all_reduce(t, async_op=True)
        t.add_(1)  # touched before work.wait(): the all-reduce may still be reading and writing it
        work.wait()
        t.add_(1)  # after the wait: ordered
    finally:
        module.set_cpu_as_device(False)
        watch.stop()
        dist.destroy_process_group()
    races = watch.detector.races
    assert [(r.kind, r.earlier.actor, r.later.actor, r.earlier.op, r.later.op) for r in races] == [
        ("WAW", "nccl:0/0", "cuda:0/s0", "c10d::allreduce_", "aten::add_")]
    assert (races[0].storage, races[0].start, races[0].end) == (t.untyped_storage().data_ptr(), 0, 32)


def test_cpp_plans_read_every_aten_schema_as_dispatch_py_does(module):
    """The two halves must agree on what an op reads and writes: every registered aten/c10d overload, compared."""
    from streamcheck.instrument.dispatch import ACCESS, COLLECTIVE, RECORD_STREAM, SKIP, build_plan

    kinds = {SKIP: "skip", ACCESS: "access", COLLECTIVE: "python", RECORD_STREAM: "python"}
    compared = 0
    disagreements = []
    for schema in torch._C._jit_get_all_schemas():  # every registered overload, loaded or not
        namespace, _, packet_name = schema.name.partition("::")
        if namespace not in ("aten", "c10d"):
            continue
        try:
            packet = getattr(getattr(torch.ops, namespace), packet_name)
            func = getattr(packet, schema.overload_name or "default")
        except (AttributeError, RuntimeError):
            continue  # TorchScript-only schemas (list and dict ops) are no OpOverloads
        cpp = module.plan_of(schema.name, schema.overload_name)
        if cpp is None:
            continue
        plan = build_plan(func)
        cpp_kind, cpp_reads, cpp_writes, cpp_fresh, cpp_views = cpp
        py_reads = [position for position, _ in plan.reads]
        py_writes = [position for position, _ in plan.writes]
        kwarg_only = [i for i, arg in enumerate(schema.arguments) if arg.kwarg_only]
        # dispatch.py names keyword-only arguments by name (position -1); C++ sees every argument by position
        cpp_reads = [-1 if i in kwarg_only else i for i in cpp_reads]
        cpp_writes = [-1 if i in kwarg_only else i for i in cpp_writes]
        expected_kind = kinds[plan.kind]
        if cpp_kind == "access" and expected_kind == "skip" and cpp_views and not cpp_fresh:
            expected_kind = "access"  # C++ also watches aliasing returns (a copy behind reshape)
        if plan.kind != ACCESS:
            agree = cpp_kind == expected_kind
        else:
            agree = (cpp_kind, cpp_reads, cpp_writes, cpp_fresh) == (
                "access", py_reads, py_writes, list(plan.fresh_returns))
        compared += 1
        if not agree:
            disagreements.append((schema.name, schema.overload_name, cpp, plan))
    assert compared > 3000
    assert disagreements == []


def test_a_bug_inside_streamcheck_switches_the_hook_off_and_the_program_runs_on(module, native_watch, monkeypatch):
    def broken(*args):
        raise ZeroDivisionError("a bug in the detector")

    # what the per-op path calls first for a stream it has not seen (in C++ or in Python, whichever decides)
    monkeypatch.setattr(native_watch.recorder, "stream_actor", broken)
    module.set_test_stream(1)
    x = torch.ones(4)
    y = x + 1  # the op still runs and returns its result
    module.set_test_stream(0)
    assert torch.equal(y, torch.full((4,), 2.0))
    assert not native_watch.recorder.active
    assert [type(e) for e in [native_watch.recorder.error]] == [ZeroDivisionError]
    assert any("a bug in the detector" in error for error in native_watch.errors)
    calls_before = native_watch.detector.seq
    x.add_(1)  # switched off: nothing reaches Python any more
    assert native_watch.detector.seq == calls_before


def test_fail_fast_raises_the_race_into_the_program_at_the_racing_op(module, tmp_path):
    from streamcheck.instrument.recorder import RaceError

    watch = Watch(tmp_path, rank=0, world_size=1, echo=False, backend="native", fail_fast=True)
    watch.start()
    module.set_cpu_as_device(True)
    try:
        module.set_test_stream(1)
        x = torch.zeros(16)
        module.set_test_stream(2)
        with pytest.raises(RaceError, match=r"read of storage 0x[0-9a-f]+ bytes \[0, 64\) by cuda:0/s2 .* is not "
                                             r"ordered after the write by cuda:0/s1"):
            x.sum()
        assert watch.recorder.active  # a race is not a failure of streamcheck: it goes on watching
    finally:
        module.set_cpu_as_device(False)
        module.set_test_stream(0)
        watch.stop()


def test_ops_on_known_streams_and_sites_are_decided_in_cpp_without_a_python_call(module, native_watch):
    module.set_test_stream(5)
    x = torch.zeros(64)
    y = torch.ones(64)

    def step():
        x.add_(y)  # one site, one stream: after the first call nothing is new

    python_calls: list = []
    try:
        for i in range(101):
            if i == 1:  # the first call met a new site (Python interns it); the next 100 meet nothing new
                sys.setprofile(lambda frame, event, arg: python_calls.append(frame.f_code.co_name)
                               if event == "call" else None)
            step()
    finally:
        sys.setprofile(None)
    module.set_test_stream(0)
    assert python_calls == ["step"] * 100  # streamcheck's Python half was never entered
    assert native_watch.detector.seq >= 101  # ... and yet the C++ detector saw every one of them
    assert native_watch.detector.races == []
    assert native_watch.detector.shadows[x.untyped_storage().data_ptr()].actor == "cuda:0/s5"


def test_a_closed_step_window_takes_the_hook_off_the_thread_and_opening_it_puts_the_hook_back(module, tmp_path):
    param = torch.nn.Parameter(torch.zeros(2))
    optimizer = torch.optim.SGD([param], lr=0.1)
    with Watch(tmp_path, rank=0, world_size=1, echo=False, backend="native", steps=(1, 2)) as watch:
        assert watch.backend == "native"
        assert not module.this_thread_watched()  # step 0 is outside the window: ops are not even boxed
        optimizer.step()
        assert watch.recorder.active and module.this_thread_watched()
        optimizer.step()
        assert not watch.recorder.active and not module.this_thread_watched()
    assert not module.this_thread_watched()



def test_loaded_hook_was_built_from_these_sources(module):
    # load() refuses a module whose digest differs (a build left by another checkout or an older streamcheck)
    digest = native.sources_digest()
    assert module.source_digest == f"0x{digest}"


def test_build_lock_left_by_a_killed_build_is_removed(tmp_path, monkeypatch):
    import os
    import time

    monkeypatch.setenv("TORCH_EXTENSIONS_DIR", str(tmp_path))
    build_dir = tmp_path / "some_hook"
    build_dir.mkdir()
    lock = build_dir / "lock"
    lock.write_text("")
    assert native._clear_stale_lock("some_hook") is None  # a fresh lock: a build may hold it
    assert lock.exists()
    old = time.time() - native.STALE_LOCK_S - 60
    os.utime(lock, (old, old))
    assert native._clear_stale_lock("some_hook") == str(lock)
    assert not lock.exists()
