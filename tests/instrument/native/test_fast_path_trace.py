"""The GPU trace's reports taken in C++ while the fast path runs (native_hook/gpu_trace.h: event records, waits and
destroys, stream, event and device synchronizations) against cuda_trace.py's handlers feeding the Python Detector.

No GPU: CPU tensors stand for device tensors (`set_cpu_as_device`, `set_test_stream`), torch's GPU trace is
activated as the watch does on CUDA, and the reports are made the way torch's CUDA code makes them (the hook's
`emit_gpu_trace` test call, into whatever interpreter the trace holds). Random programs mix ops on four streams with
reports on those streams and on a few events. Both runs must find the same races, field for field and in order,
and count the same events; the fast run must have handled in C++ exactly the reports it can: every report on a
stream some op already ran on, every event and device synchronization and event destroy.
"""

from __future__ import annotations

import random
from collections import Counter

import pytest
import torch

from streamcheck.instrument import cuda_trace, native
from streamcheck.instrument.native_detector import NativeDetector
from streamcheck.instrument.watch import Watch

STREAM_REPORTS = {"record": "event_record", "wait": "event_wait", "sync_stream": "sync_stream"}
OTHER_REPORTS = {"sync_event": "sync_event", "sync_device": "sync_device", "destroy": "event_destroy"}


@pytest.fixture(scope="module")
def module():
    return native.load()


def program(rng: random.Random, length: int) -> list:
    steps = []
    for _ in range(length):
        stream, event = rng.choice([0, 1, 2, 3]), rng.choice([0xE1, 0xE2, 0xE3])
        if rng.random() < 0.45:
            kind = rng.choice(["record", "record", "wait", "wait", "sync_stream", "sync_event", "sync_device",
                               "destroy", "create"])
            steps.append(("report", kind, event, stream))
        else:
            start = rng.randrange(0, 48)
            steps.append(("op", stream, rng.randrange(4), rng.randrange(3), rng.randrange(3), start,
                          rng.randrange(start + 1, 64)))
    return steps


def expected_python_reports(steps: list) -> Counter:
    """What the fast run leaves to Python: stream reports on a stream no op ran on yet (the C++ side has no name).
    Stream 0 has: the program's tensors are made there."""
    seen, left = {0}, Counter()
    for step in steps:
        if step[0] == "op":
            seen.add(step[1])
        elif step[1] in STREAM_REPORTS and step[3] not in seen:
            left[STREAM_REPORTS[step[1]]] += 1
    return left


def run(module, tmp_path, steps: list, python_detector: bool, monkeypatch) -> tuple[list, int, Counter]:
    if python_detector:
        monkeypatch.setenv("STREAMCHECK_DETECTOR", "python")
    else:
        monkeypatch.delenv("STREAMCHECK_DETECTOR", raising=False)
    # what cuda_trace.install reads of CUDA, answered as on device 0 (the test streams' device)
    monkeypatch.setattr(torch._C, "_cuda_getCurrentRawStream", lambda device: 0, raising=False)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    torch._C._activate_gpu_trace()  # before the watch starts, as on CUDA: the hook then takes the trace's reports
    module.set_cpu_as_device(True)
    module.set_test_stream(0)
    watch = Watch(tmp_path, rank=0, world_size=1, echo=False, backend="native")
    watch.start()
    rec = watch.recorder
    cuda_trace.install(rec)  # the watch installs it only where CUDA is available
    in_python: Counter = Counter()
    emit = rec.emit

    def counting_emit(method, *args):
        in_python[method] += 1
        emit(method, *args)

    rec.emit = counting_emit
    try:
        assert isinstance(watch.detector, NativeDetector) != python_detector
        tensors = [torch.zeros(64) for _ in range(3)]
        kept = list(tensors)  # no address handed out again (on CPU no free reaches the detector)
        for step in steps:
            if step[0] == "report":
                _, kind, event, stream = step
                assert module.emit_gpu_trace(kind, stream if kind == "sync_stream" else event, stream)
                continue
            _, stream, kind, a, b, start, end = step
            module.set_test_stream(stream)
            x, y = tensors[a], tensors[b]
            if kind == 0:
                x.add_(y)
            elif kind == 1:
                x[start:end].mul_(2.0)
            elif kind == 2:
                kept.append(x[start:end].sum())
            else:
                x[start:end].fill_(1.0)
    finally:
        rec.emit = emit
        cuda_trace.uninstall()
        module.set_test_stream(0)
        module.set_cpu_as_device(False)
        watch.stop()
    assert not watch.errors

    def access(a):
        return None if a is None else (a.actor, a.thread, a.is_write, a.site, a.op, a.seq, a.clock, a.stream)

    races = [(r.kind, r.start, r.end, access(r.earlier), access(r.later)) for r in watch.detector.races]
    reports = Counter({m: n for m, n in in_python.items() if m in {**STREAM_REPORTS, **OTHER_REPORTS}.values()})
    return races, watch.detector.seq, reports


def test_the_trace_reports_taken_in_cpp_order_what_the_python_handlers_order(module, tmp_path, monkeypatch):
    rng = random.Random(1812)
    racy = ordered = 0
    for index in range(12):
        steps = program(rng, 80)
        fast, fast_events, fast_python = run(module, tmp_path / f"fast{index}", steps, False, monkeypatch)
        slow, slow_events, slow_python = run(module, tmp_path / f"slow{index}", steps, True, monkeypatch)
        assert fast == slow, f"program {index}: {steps}"
        assert fast_events == slow_events
        names = {**STREAM_REPORTS, **OTHER_REPORTS}
        assert slow_python == Counter(names[s[1]] for s in steps if s[0] == "report" and s[1] in names)
        assert fast_python == expected_python_reports(steps)
        racy += bool(fast)
        ordered += sum(1 for s in steps if s[0] == "report" and s[1] == "wait")
    assert racy >= 8 and ordered >= 40  # the programs race, and their waits order some of it


def test_a_report_without_a_watch_goes_on_to_torch_and_an_unknown_one_is_refused(module):
    torch._C._activate_gpu_trace()
    module.restore_gpu_trace()  # a watch that stopped before paused it
    assert module.emit_gpu_trace("record", 0xE1, 0)  # nothing attached: torch's interpreter takes it
    with pytest.raises(ValueError, match="emit_gpu_trace: unknown report launch"):
        module.emit_gpu_trace("launch", 0, 0)


def watched_then_stopped(module, tmp_path, monkeypatch, backend: str) -> bool:
    """A watch of `backend` started and stopped with torch's GPU trace active: is the trace still reporting?"""
    monkeypatch.setattr(torch._C, "_cuda_getCurrentRawStream", lambda device: 0, raising=False)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    torch._C._activate_gpu_trace()
    watch = Watch(tmp_path, rank=0, world_size=1, echo=False, backend=backend)
    watch.start()
    cuda_trace.install(watch.recorder)  # as the watch does where CUDA is
    running_while_watched = module.gpu_trace_running()
    cuda_trace.uninstall()
    watch.stop()
    assert running_while_watched
    return module.gpu_trace_running()


def test_a_stopped_watch_leaves_the_gpu_trace_off_unless_another_callback_listens(module, tmp_path, monkeypatch):
    """torch's GPU trace, once activated, calls into Python at every allocation and free for the rest of the process
    (torch cannot deactivate it): a native watch pauses it when it stops, unless a callback not its own (CSAN's)
    listens; the next watch of either backend takes it up again."""
    assert not watched_then_stopped(module, tmp_path / "native", monkeypatch, "native")
    assert not module.gpu_trace_running()
    assert watched_then_stopped(module, tmp_path / "mode", monkeypatch, "mode")  # the mode's watch resumed it
    registry = cuda_trace.gpu_trace.EventRecordCallbacks
    monkeypatch.setattr(registry, "callback_list", [*registry.callback_list, lambda event, stream: None])
    assert cuda_trace.others_listen()
    assert watched_then_stopped(module, tmp_path / "shared", monkeypatch, "native")
