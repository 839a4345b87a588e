"""The dispatch mode end to end on CPU: pinned host tensors give host accesses (instrument/pinned.py), errors stay inside.

CPU builds have no pinned memory, so these tests declare every CPU tensor pinned; that makes each op an access by
the host thread, which is exactly what instrument/pinned.py says for CPU ops on pinned tensors.
"""

from __future__ import annotations

import threading

import torch

from streamcheck.instrument.dispatch import ACCESS, OpPlan, StreamcheckMode
from streamcheck.instrument.pinned import PinnedMemory
from streamcheck.instrument.recorder import Recorder


class EveryTensorPinned(PinnedMemory):
    def is_pinned(self, tensor, base, fresh=False):
        return True


class RecordingSink:
    """Records every sink call as (method, *args)."""

    def __init__(self):
        self.calls = []

    def __getattr__(self, name):
        return lambda *args: self.calls.append((name, *args))


def run_in_mode(body, sink=None, on_error=None):
    sink = sink if sink is not None else RecordingSink()
    recorder = Recorder(sink, on_error=on_error)
    mode = StreamcheckMode(recorder, {}, EveryTensorPinned(cuda_available=True))
    with mode:
        result = body()
    return sink, recorder, result


def base(tensor):
    return tensor.untyped_storage().data_ptr()


def test_in_place_op_on_a_slice_is_a_host_write_of_its_bytes():
    h = torch.zeros(8)
    sink, recorder, _ = run_in_mode(lambda: h[2:4].fill_(1.0))
    thread = f"T{threading.get_ident()}"
    assert sink.calls == [("host_access", thread, [], [(base(h), 8, 16)], sink.calls[0][4], "aten::fill_")]
    frames = recorder.sites.frames(sink.calls[0][4])
    assert frames[0][0] == __file__ and frames[0][2] == "<lambda>"


def test_fresh_pinned_output_is_an_allocation_then_a_write():
    h = torch.ones(4)

    def body():
        return torch.zeros_like(h)

    sink, _, out = run_in_mode(body)
    thread = f"T{threading.get_ident()}"
    (alloc, access) = sink.calls
    assert alloc[:4] == ("alloc", base(out), 16, thread)
    assert access[:4] == ("host_access", thread, [], [(base(out), 0, 16)])  # zeros_like reads nothing of h
    assert access[5] == "aten::zeros_like"


def test_views_report_nothing_and_reads_name_the_viewed_bytes():
    h = torch.arange(8.0)

    def body():
        v = h.view(2, 4)
        return v[1].sum()

    sink, _, total = run_in_mode(body)
    accesses = [c for c in sink.calls if c[0] == "host_access"]
    assert [(c[2], c[5]) for c in accesses] == [([(base(h), 16, 32)], "aten::sum")]
    assert total.item() == 22.0


def test_an_error_inside_streamcheck_turns_it_off_and_the_op_still_runs():
    class BrokenSink(RecordingSink):
        def host_access(self, *args):
            raise ValueError("detector bug")

    errors = []
    h = torch.zeros(4)

    def body():
        h.add_(1.0)  # the sink raises here: reported, instrumentation off
        h.add_(1.0)  # runs unobserved
        return h.clone()

    sink, recorder, out = run_in_mode(body, BrokenSink(), errors.append)
    assert torch.equal(out, torch.full((4,), 2.0))
    assert [repr(e) for e in errors] == ["ValueError('detector bug')"]
    assert recorder.active is False


def test_callbacks_fired_during_an_op_are_reported_after_the_op():
    """A synchronization fired inside an op (as `.item()` does) must reach the detector after the op's access."""
    h = torch.ones(4)
    sink = RecordingSink()
    recorder = Recorder(sink)
    plan = OpPlan("test::read_then_sync", ACCESS, reads=((0, "self"),))

    def read_then_sync(tensor):
        recorder.emit("sync_stream", "T1", "cuda:0/s0")  # what the stream-sync trace callback does
        return None

    mode = StreamcheckMode(recorder, {read_then_sync: plan}, EveryTensorPinned(cuda_available=True))
    mode.__torch_dispatch__(read_then_sync, (), (h,), {})
    assert [c[0] for c in sink.calls] == ["host_access", "sync_stream"]
    assert sink.calls[0][2] == [(base(h), 0, 16)]


def test_backward_links_engine_threads_to_the_caller():
    sink = RecordingSink()
    recorder = Recorder(sink)
    caller = recorder.thread_actor()
    recorder.backward_begin()
    seen = []
    engine = threading.Thread(target=lambda: seen.append(recorder.thread_actor()))
    engine.start()
    engine.join()
    recorder.backward_end()
    assert sink.calls == [("thread_start", caller, seen[0]), ("thread_join", caller, seen[0])]


def test_a_side_stream_is_named_after_the_first_place_that_used_it():
    sink = RecordingSink()
    recorder = Recorder(sink)
    recorder.current_raw_stream = lambda device: 0x5A5A
    recorder.current_device = lambda: 1
    assert recorder.stream_actor_of_handle(0x5A5A) == "cuda:1/s23130"  # a creation callback: no name yet
    assert sink.calls == []
    actor = recorder.stream_actor(1)  # first use
    assert actor == "cuda:1/s23130" and recorder.stream_actor(1) == actor
    line = [n for n, text in enumerate(open(__file__).read().splitlines(), 1) if text.endswith("# first use")][0]
    function = "test_a_side_stream_is_named_after_the_first_place_that_used_it"
    assert sink.calls == [("stream_name", actor, f"first used at test_runtime_mode.py:{line} in {function}")]
    assert recorder.stream_actor(1, 0) == "cuda:1/s0" and len(sink.calls) == 1  # the default stream needs no name
