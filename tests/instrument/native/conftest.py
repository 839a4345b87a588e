"""Set-up shared by the native hook's CPU tests: a watch over CPU tensors that stand for device tensors."""

from __future__ import annotations

import contextlib

import pytest

from streamcheck.instrument.native_detector import NativeDetector
from streamcheck.instrument.watch import Watch


class CpuWatch:
    """`with cpu_watch(module, out, python_detector) as watch:` a native watch writing to `out`, started with CPU
    tensors standing for device 0 tensors (`set_cpu_as_device`) on test stream 0, its detector the C++ one or, with
    `python_detector`, the Python one (STREAMCHECK_DETECTOR=python). However the block ends: test stream 0 again,
    CPU tensors host tensors again, the watch stopped. `races(watch)`: its races as tuples that compare field for
    field (kind, bytes, both accesses)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.monkeypatch = monkeypatch

    @contextlib.contextmanager
    def __call__(self, module, out, python_detector: bool = False):
        if python_detector:
            self.monkeypatch.setenv("STREAMCHECK_DETECTOR", "python")
        else:
            self.monkeypatch.delenv("STREAMCHECK_DETECTOR", raising=False)
        module.set_cpu_as_device(True)
        module.set_test_stream(0)
        watch = Watch(out, rank=0, world_size=1, echo=False, backend="native")
        watch.start()
        try:
            assert isinstance(watch.detector, NativeDetector) != python_detector
            yield watch
        finally:
            module.set_test_stream(0)
            module.set_cpu_as_device(False)
            watch.stop()

    @staticmethod
    def races(watch) -> list:
        def access(a):
            return None if a is None else (a.actor, a.thread, a.is_write, a.site, a.op, a.seq, a.clock, a.stream)

        return [(r.kind, r.start, r.end, access(r.earlier), access(r.later)) for r in watch.detector.races]


@pytest.fixture
def cpu_watch(monkeypatch: pytest.MonkeyPatch) -> CpuWatch:
    return CpuWatch(monkeypatch)
