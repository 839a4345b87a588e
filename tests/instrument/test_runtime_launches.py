"""Triton launches of compiled code and CUDA graph replays (instrument/launches.py), driven on CPU.

A stand-in for inductor's CachingAutotuner (the same `run(*args, stream=...)` method and `triton_meta` signature)
is patched as the real one is; CPU tensors stand for device-0 tensors. Graph capture goes through the Recorder's
capture list exactly as the wrapped CUDAGraph.capture_begin / replay drive it.
"""

from __future__ import annotations

import sys
import threading
import types

import pytest
import torch

from streamcheck.instrument import launches
from streamcheck.instrument.detector import Detector
from streamcheck.instrument.launches import LaunchHooks
from streamcheck.instrument.recorder import Recorder


def base_of(t):
    return t.untyped_storage().data_ptr()


def thread():
    return f"T{threading.get_ident()}"


class FakeAutotuner:
    def __init__(self, names, mutated=()):
        self.triton_meta = {"signature": {name: "*fp32" for name in names}}
        self.mutated_arg_names = list(mutated)
        self.fn = types.SimpleNamespace(__name__="triton_poi_fused_add_0")
        self.launched = 0

    def run(self, *args, stream, benchmark_run=False, **kwargs):
        self.launched += 1


def installed_over(monkeypatch, module: str, name: str, fake_class, current_stream: int | None = None):
    """LaunchHooks installed over a fake `module` holding `fake_class` as `name`; yields the hooks, then checks that
    uninstalling gave the class its own `run` back."""
    fake = types.ModuleType(module)
    setattr(fake, name, fake_class)
    monkeypatch.setitem(sys.modules, module, fake)
    monkeypatch.setattr(launches, "device_of", lambda tensor: 0)
    original_run = fake_class.run
    rec = Recorder(Detector())
    if current_stream is not None:
        rec.current_raw_stream = lambda device: current_stream
    hooks = LaunchHooks(rec)
    hooks.install()
    try:
        yield hooks
    finally:
        hooks.uninstall()
    assert fake_class.run is original_run


@pytest.fixture
def hooks(monkeypatch):
    yield from installed_over(monkeypatch, launches.TRITON_HEURISTICS, "CachingAutotuner", FakeAutotuner)


def test_a_compiled_kernel_writes_its_out_ptrs_and_mutated_args_and_reads_the_rest(hooks):
    x, y, out = torch.ones(4), torch.ones(4), torch.empty(4)
    kernel = FakeAutotuner(["in_ptr0", "in_out_ptr0", "out_ptr0", "xnumel"], mutated=["in_out_ptr0"])
    kernel.run(x, y, out, 4, stream=5)
    assert kernel.launched == 1  # the program keeps running its compiled kernel
    detector = hooks.recorder.sink
    detector.kernel(thread(), "cuda:0/s9", reads=[(base_of(out), 0, 16)], op="side read")
    detector.kernel(thread(), "cuda:0/s9", reads=[(base_of(x), 0, 16)], op="side read of an input")
    assert [(r.kind, r.earlier.actor, r.earlier.op, r.later.op) for r in detector.races] == [
        ("RAW", "cuda:0/s5", "triton:triton_poi_fused_add_0", "side read")]
    assert hooks.recorder.stream_actor_of_handle(5) == "cuda:0/s5"


def test_waiting_for_the_launching_stream_orders_the_read(hooks):
    out = torch.empty(4)
    FakeAutotuner(["out_ptr0", "xnumel"]).run(out, 4, stream=5)
    detector = hooks.recorder.sink
    detector.event_record(thread(), 1, "cuda:0/s5")
    detector.event_wait(thread(), 1, "cuda:0/s9")
    detector.kernel(thread(), "cuda:0/s9", reads=[(base_of(out), 0, 16)], op="side read")
    assert detector.races == []


@pytest.mark.parametrize("waited", [False, True])
def test_captured_accesses_happen_at_each_replay_on_the_replay_stream(hooks, waited):
    rec = hooks.recorder
    detector = rec.sink
    captured: list = []
    rec.capture_into(captured)
    rec.emit_access(thread(), "cuda:0/s3", [], [(1, 0, 64)], 7, "aten::add_", None, None)
    rec.capture_into(None)
    assert detector.shadows == {}  # nothing ran while capturing
    assert captured == [(0, (), ((1, 0, 64),), 7, "aten::add_")]
    rec.current_raw_stream = lambda device: 4
    hooks.replayed(captured)
    if waited:
        detector.event_record(thread(), 1, "cuda:0/s4")
        detector.event_wait(thread(), 1, "cuda:0/s9")
    detector.kernel(thread(), "cuda:0/s9", reads=[(1, 0, 64)], op="side read")
    races = [(r.kind, r.earlier.actor, r.earlier.op, r.earlier.site) for r in detector.races]
    assert races == ([] if waited else [("RAW", "cuda:0/s4", "aten::add_ (CUDA graph replay)", 7)])


class FakeJITFunction:
    """triton.runtime.jit.JITFunction's launch surface: `kernel[grid](...)` runs `run(*args, grid=, warmup=)`."""

    def __init__(self, source: str, globals_: dict | None = None):
        self.src = source
        self.arg_names = [a.strip().split(":")[0] for a in source[source.index("(") + 1:source.index(")")].split(",")]
        self.fn = types.SimpleNamespace(__name__=source.split()[1].split("(")[0], __globals__=globals_ or {})
        self.launched = 0

    def __getitem__(self, grid):
        return lambda *args, **kwargs: self.run(*args, grid=grid, warmup=False, **kwargs)

    def run(self, *args, grid, warmup, **kwargs):
        self.launched += 1


STORE_HELPER = """def _store(ptr, value):
    tl.store(ptr, value)
"""

SCALE = """def scale_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    _store(out_ptr + offs, tl.load(x_ptr + offs) * 2)
"""


@pytest.fixture
def jit_hooks(monkeypatch):
    yield from installed_over(monkeypatch, launches.TRITON_JIT, "JITFunction", FakeJITFunction, current_stream=6)


def test_a_jit_kernel_writes_what_its_source_stores_through_on_the_current_stream(jit_hooks):
    kernel = FakeJITFunction(SCALE, {"_store": FakeJITFunction(STORE_HELPER)})
    x, out = torch.ones(4), torch.empty(4)
    kernel[(1,)](x, out, 4, BLOCK=4)
    assert kernel.launched == 1  # the program's kernel still runs
    detector = jit_hooks.recorder.sink
    detector.kernel(thread(), "cuda:0/s9", reads=[(base_of(out), 0, 16)], op="side read of the output")
    detector.kernel(thread(), "cuda:0/s9", reads=[(base_of(x), 0, 16)], op="side read of the input")
    assert [(r.kind, r.earlier.actor, r.earlier.op, r.later.op) for r in detector.races] == [
        ("RAW", "cuda:0/s6", "triton:scale_kernel", "side read of the output")]


def test_a_side_stream_overwriting_a_jit_kernels_input_races_with_its_read(jit_hooks):
    kernel = FakeJITFunction(SCALE, {"_store": FakeJITFunction(STORE_HELPER)})
    x, out = torch.ones(4), torch.empty(4)
    kernel[(1,)](x, out, 4, BLOCK=4)
    detector = jit_hooks.recorder.sink
    detector.kernel(thread(), "cuda:0/s9", writes=[(base_of(x), 0, 16)], op="side overwrite")
    assert [(r.kind, r.earlier.op) for r in detector.races] == [("WAR", "triton:scale_kernel")]


def test_a_warmup_launch_is_no_kernel(jit_hooks):
    kernel = FakeJITFunction(SCALE)
    out = torch.empty(4)
    kernel.run(torch.ones(4), out, 4, grid=(1,), warmup=True)
    jit_hooks.recorder.sink.kernel(thread(), "cuda:0/s9", reads=[(base_of(out), 0, 16)], op="side read")
    assert jit_hooks.recorder.sink.races == []
