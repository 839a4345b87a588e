"""Collectives and record_stream decided in C++ (native_hook/collectives.h) against collectives.py feeding the Python
Detector, on random programs.

No GPU: a one-process gloo group runs the collectives on CPU tensors that stand for device tensors
(`set_cpu_as_device`, `set_test_stream`), torch's GPU trace is activated as the watch does on CUDA, and inside every
collective the test probe fires the reports ProcessGroupNCCL's would (`emit_gpu_trace`): an event recorded on the
launching stream and waited by the group's internal stream, the work's end event recorded on that stream. Programs
mix ops on four streams, async and sync all-reduces and all-gathers, `Work.wait()`, works dropped unwaited, waits on
a collective's end event from C++ (as the DDP reducer and `fut.wait()` do) and stream synchronizations. Both runs
must find the same races, field for field and in order, and count the same events; the C++ run must not have
entered collectives.py's before/after at all.
"""

from __future__ import annotations

import random
import socket

import pytest
import torch
import torch.distributed as dist

from streamcheck.instrument import collectives, cuda_trace, native
from streamcheck.instrument.dispatch import AccessCollector, byte_range
from streamcheck.instrument.native_detector import NativeDetector
from streamcheck.instrument.watch import Watch

NCCL_STREAM = 0xAB  # the group's internal stream handle, as the GPU trace reports it


@pytest.fixture(scope="module")
def module():
    m = native.load()
    if not m.collectives_in_cpp():
        pytest.skip("the hook was built without C++ collectives (STREAMCHECK_NO_CPP_COLLECTIVES)")
    return m


@pytest.fixture
def group(monkeypatch):
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    monkeypatch.setenv("MASTER_ADDR", "127.0.0.1")
    monkeypatch.setenv("MASTER_PORT", str(port))
    dist.init_process_group("gloo", rank=0, world_size=1)
    try:
        yield
    finally:
        dist.destroy_process_group()


class OnDeviceZero(AccessCollector):  # collectives.py's ranges: CPU tensors stand for cuda:0 ones
    def ranges_of(self, tensors, fresh=False):
        ranges = [byte_range(t) for t in tensors]
        if ranges:
            self.device = 0
        return [r for r in ranges if r is not None]


def program(rng: random.Random, length: int) -> list:
    steps = []
    for _ in range(length):
        draw = rng.random()
        stream = rng.choice([0, 1, 2, 3])
        if draw < 0.25:
            steps.append(("collective", stream, rng.randrange(3), rng.choice(["reduce", "gather"]),
                          rng.random() < 0.8))
        elif draw < 0.35:
            steps.append(("wait", rng.randrange(8)))
        elif draw < 0.4:
            steps.append(("drop", rng.randrange(8)))
        elif draw < 0.48:
            steps.append(("end_event_wait", stream, rng.randrange(8)))
        elif draw < 0.52:
            steps.append(("sync_comm",))
        else:
            start = rng.randrange(0, 48)
            steps.append(("op", stream, rng.randrange(3), rng.randrange(3), rng.randrange(3), start,
                          rng.randrange(start + 1, 64)))
    return steps


def run(module, tmp_path, steps: list, python_path: bool, monkeypatch) -> tuple[list, int]:
    if python_path:
        monkeypatch.setenv("STREAMCHECK_DETECTOR", "python")
    else:
        monkeypatch.delenv("STREAMCHECK_DETECTOR", raising=False)
    monkeypatch.setattr(torch._C, "_cuda_getCurrentRawStream", lambda device: 0, raising=False)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    torch._C._activate_gpu_trace()
    module.set_cpu_as_device(True)
    module.set_test_stream(0)
    watch = Watch(tmp_path, rank=0, world_size=1, echo=False, backend="native")
    watch.start()
    rec = watch.recorder
    cuda_trace.install(rec)
    current = [0]
    rec.current_raw_stream = lambda device: current[0]  # collectives.py's launching stream: the test stream
    hooks = next(h for h in watch._hooks if isinstance(h, collectives.CollectiveHooks))
    python_calls = []  # collectives.py's before() asks for a collector once per collective
    hooks.collector_factory = lambda: python_calls.append(1) or OnDeviceZero(watch._pinned)
    ends: list = []  # per collective: its end event
    works: list = []
    inside: list = []  # the reports the probe fires inside the running collective

    def probe():
        for kind, event, stream in inside:
            module.emit_gpu_trace(kind, event, stream)

    module.set_collective_probe(probe)
    try:
        assert isinstance(watch.detector, NativeDetector) != python_path
        tensors = [torch.zeros(64) for _ in range(3)]
        outs = [torch.zeros(64) for _ in range(3)]
        kept = list(tensors)
        for step in steps:
            if step[0] == "op":
                _, stream, kind, a, b, start, end = step
                module.set_test_stream(stream)
                x, y = tensors[a], tensors[b]
                if kind == 0:
                    x.add_(y)
                elif kind == 1:
                    x[start:end].mul_(2.0)
                else:
                    kept.append(x[start:end].sum())
            elif step[0] == "collective":
                _, stream, a, kind, async_op = step
                module.set_test_stream(stream)
                current[0] = stream
                start_event, end_event = 0x1000 + 2 * len(ends), 0x1001 + 2 * len(ends)
                ends.append(end_event)
                inside[:] = [("record", start_event, stream), ("wait", start_event, NCCL_STREAM),
                             ("record", end_event, NCCL_STREAM)]
                if kind == "reduce":
                    work = dist.all_reduce(tensors[a], async_op=async_op)
                else:
                    work = dist.all_gather_into_tensor(outs[a], tensors[a], async_op=async_op)
                works.append(work)
            elif step[0] == "wait":
                if step[1] < len(works) and works[step[1]] is not None:
                    works[step[1]].wait()
            elif step[0] == "drop":
                if step[1] < len(works):
                    works[step[1]] = None
            elif step[0] == "end_event_wait":
                if step[2] < len(ends):
                    assert module.emit_gpu_trace("wait", ends[step[2]], step[1])
            else:
                assert module.emit_gpu_trace("sync_stream", NCCL_STREAM, 0)
    finally:
        module.set_collective_probe(None)
        cuda_trace.uninstall()
        module.set_test_stream(0)
        module.set_cpu_as_device(False)
        watch.stop()
    assert not watch.errors
    if python_path:
        assert len(python_calls) == sum(step[0] == "collective" for step in steps)
    else:
        assert python_calls == []  # every collective decided in C++

    def access(a):
        return None if a is None else (a.actor, a.thread, a.is_write, a.site, a.op, a.seq, a.clock, a.stream)

    races = [(r.kind, r.start, r.end, access(r.earlier), access(r.later)) for r in watch.detector.races]
    return races, watch.detector.seq


def test_collectives_decided_in_cpp_find_what_collectives_py_finds(module, group, tmp_path, monkeypatch):
    rng = random.Random(1818)
    racy = compared = 0
    for index in range(30):
        steps = program(rng, 40)
        fast = run(module, tmp_path / f"cpp{index}", steps, False, monkeypatch)
        python = run(module, tmp_path / f"py{index}", steps, True, monkeypatch)
        assert fast == python, f"program {index}: {steps}"
        racy += bool(fast[0])
        compared += len(fast[0])
    assert racy >= 10 and compared >= 30  # the programs do race, in many ways


def test_a_wait_on_the_end_event_orders_like_work_wait_and_a_dropped_work_is_forgotten(module, group, tmp_path,
                                                                                       monkeypatch):
    """One program spelled out: an async all-reduce read on stream 1 before anything waits (RAW); its end event
    waited from C++ by stream 2 (as the DDP reducer does) orders stream 2's read; a second all-reduce dropped
    unwaited leaves no work behind at the next collective."""
    steps = [("collective", 0, 0, "reduce", True), ("op", 1, 2, 0, 0, 0, 64), ("end_event_wait", 2, 0),
             ("op", 2, 2, 0, 0, 0, 64), ("collective", 0, 1, "reduce", True), ("drop", 1),
             ("collective", 0, 2, "reduce", True), ("wait", 2)]
    races, _ = run(module, tmp_path / "one", steps, False, monkeypatch)
    assert [(kind, start, end, earlier[0], earlier[4], later[0], later[4])
            for kind, start, end, earlier, later in races] == [
        ("RAW", 0, 256, "nccl:0/0", "c10d::allreduce_", "cuda:0/s1", "aten::sum")]


def test_record_stream_in_cpp_names_the_stream_as_a_recorded_user_of_the_block(module, tmp_path):
    module.set_cpu_as_device(True)
    watch = Watch(tmp_path, rank=0, world_size=1, echo=False, backend="native")
    watch.start()
    try:
        x = torch.zeros(16)
        x.record_stream(torch.Stream(stream_id=5, device_index=0, device_type=0))  # device type 0: CPU
    except RuntimeError:
        pass  # the CPU kernel may refuse it; the hook saw it first
    finally:
        module.set_cpu_as_device(False)
        watch.stop()
    assert not watch.errors
    allocation = watch.detector.allocations.get(x.untyped_storage().data_ptr())
    assert allocation is not None and allocation.recorded == {"cuda:0/s5"}


def test_a_collective_that_raises_reaches_the_program_and_instrumentation_stays_on(module, group, tmp_path):
    """The group refuses the call inside the c10d op (an invalid root rank): the program sees the group's error, the
    hook reports nothing of that collective and keeps deciding what comes after."""
    module.set_cpu_as_device(True)
    module.set_test_stream(1)
    watch = Watch(tmp_path, rank=0, world_size=1, echo=False, backend="native")
    watch.start()
    try:
        t = torch.ones(16)
        options = dist.BroadcastOptions()
        options.rootRank = 3
        with pytest.raises(RuntimeError, match="invalid root rank: 3"):
            dist.distributed_c10d._get_default_group().broadcast([t], options)
        module.set_test_stream(2)
        t.add_(1)  # stream 2 after stream 1's ones(): a race, so the hook still decides ops
    finally:
        module.set_test_stream(0)
        module.set_cpu_as_device(False)
        watch.stop()
    assert not watch.errors
    assert [(r.kind, r.earlier.actor, r.later.actor, r.earlier.op, r.later.op) for r in watch.detector.races] == [
        ("WAW", "cuda:0/s1", "cuda:0/s2", "aten::ones", "aten::add_")]
