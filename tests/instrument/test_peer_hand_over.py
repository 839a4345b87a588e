"""SC204: memory other processes read, handed over (a barrier, a queue put) before a stream's write to it finished.

The detector's `hand_over` (instrument/detector.py) in the Python reference, the C++ core and the networkx oracle,
and the hooks of instrument/peers.py that emit it, on CPU (the GPU run of examples/ipc_export_handed_early is in
tests/gpu/test_gpu_examples.py).
"""

from __future__ import annotations

import multiprocessing
import weakref

import pytest
import torch

from streamcheck.instrument import native
from streamcheck.instrument.detector import Detector
from streamcheck.instrument.offline.hb import HappensBefore
from streamcheck.instrument.peers import PeerHooks, on_device
from streamcheck.instrument.races import Names, race_finding
from streamcheck.instrument.recorder import Recorder
from streamcheck.instrument.trace import replay

S0, S1 = "cuda:0/s0", "cuda:0/s1"
EXPORT = -7  # the event of the IPC export, recorded on the current stream S0


def _detectors() -> list:
    found = [Detector]
    try:
        native.load()
    except native.NativeUnavailable:  # pragma: no cover - CI builds it (test_native_detector.py fails without)
        return found
    from streamcheck.instrument.native_detector import NativeDetector

    return found + [NativeDetector]


def _races(events: list) -> list[list[tuple]]:
    """(kind, storage, start, end, earlier seq, later seq) of each race, per detector and for the oracle."""
    out = []
    for make in _detectors():
        detector = make()
        replay(events, detector)
        out.append([(r.kind, r.storage, r.start, r.end, r.earlier.seq, r.later.seq) for r in detector.races])
    oracle = HappensBefore.from_events(events).races()
    out.append([(r.kind, r.storage, r.start, r.end, r.earlier.seq, r.later.seq) for r in oracle])
    return out


def _export_then(*events: dict) -> list[dict]:
    return [{"e": "event_record", "thread": "T", "event": EXPORT, "stream": S0}, *events]


def _write(stream: str, start: int = 0, end: int = 64) -> dict:
    return {"e": "kernel", "thread": "T", "stream": stream, "writes": [[1, start, end]], "op": "aten::fill_"}


HAND_OVER = {"e": "hand_over", "thread": "T", "reads": [[1, 0, 64]], "events": [EXPORT], "op": "queue put"}


def test_a_write_after_the_export_is_a_peer_race_at_the_hand_over():
    for races in _races(_export_then(_write(S0), HAND_OVER)):
        assert races == [("PEER", 1, 0, 64, 1, 2)]


def test_the_export_event_orders_the_current_streams_earlier_writes_but_not_a_side_streams():
    events = [_write(S0, 0, 32), _write(S1, 32, 64), *_export_then(HAND_OVER)]
    for races in _races(events):
        assert races == [("PEER", 1, 32, 64, 1, 3)]


def test_a_synchronize_before_the_hand_over_orders_the_write():
    events = _export_then(_write(S1), {"e": "sync_device", "thread": "T", "device": 0}, HAND_OVER)
    for races in _races(events):
        assert races == []


def test_a_write_is_judged_at_the_first_hand_over_after_it_only():
    events = _export_then(_write(S1), HAND_OVER, HAND_OVER, _write(S1, 0, 8), HAND_OVER)
    for races in _races(events):
        assert races == [("PEER", 1, 0, 64, 1, 2), ("PEER", 1, 0, 8, 4, 5)]


def test_a_new_allocation_at_the_address_starts_a_fresh_history():
    events = _export_then(_write(S1), {"e": "alloc", "storage": 1, "size": 64, "stream": S0}, HAND_OVER)
    for races in _races(events):
        assert races == []


def test_a_hand_over_records_no_read():
    """The peers' protocol orders what they do next: a later local write is not a WAR with the hand-over."""
    events = _export_then(_write(S1), {"e": "sync_device", "thread": "T", "device": 0}, HAND_OVER, _write(S1))
    for races in _races(events):
        assert races == []


def test_the_finding_is_sc204_with_the_write_as_its_earlier_access():
    d = Detector()
    d.site(1, [["/src/producer.py", 30, "produce"]])
    d.site(2, [["/src/producer.py", 44, "main"]])
    d.event_record("T", EXPORT, S0)
    d.kernel("T", S1, writes=[(1, 0, 64)], site=1, op="aten::fill_")
    d.hand_over("T", [(1, 0, 64)], [EXPORT], site=2, op="multiprocessing queue put")
    (race,) = d.races
    finding = race_finding(race, d.names)
    assert (finding.rule, finding.kind) == ("SC204", "PEER")
    assert (finding.primary.path, finding.primary.line) == ("/src/producer.py", 44)
    assert [(loc.role, loc.line) for loc in finding.related] == [("write", 30), ("sync", 30)]
    assert finding.message.startswith("hand-over of storage 0x1 bytes [0, 64) to other processes")
    assert "synchronizes cuda:0/s1" in finding.fix


# ---- the hooks ----------------------------------------------------------------------------------------------------
class _Sink(Detector):
    """A Detector that also keeps the events it was given, by name."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[tuple] = []

    def hand_over(self, thread, reads=(), events=(), site=-1, op=""):
        self.calls.append(("hand_over", [tuple(r) for r in reads], list(events), op))
        super().hand_over(thread, reads, events, site, op)


@pytest.fixture
def hooks():
    sink = _Sink()
    peers = PeerHooks(Recorder(sink))
    peers.install()
    try:
        yield peers, sink
    finally:
        peers.uninstall()


def test_a_queue_put_hands_over_every_live_shared_storage(hooks):
    peers, sink = hooks
    storage = torch.zeros(16).untyped_storage()
    peers.shared[storage.data_ptr()] = (weakref.ref(storage), storage.nbytes(), EXPORT)
    queue = multiprocessing.get_context("spawn").SimpleQueue()
    queue.put("ready")
    assert sink.calls == [("hand_over", [(storage.data_ptr(), 0, 64)], [EXPORT], "multiprocessing queue put")]
    assert queue.get() == "ready"


def test_a_storage_that_died_is_no_longer_shared(hooks):
    peers, sink = hooks
    tensor = torch.zeros(16)
    storage = tensor.untyped_storage()
    base = storage.data_ptr()
    peers.shared[base] = (weakref.ref(storage, lambda _: peers.shared.pop(base, None)), 64, None)
    del tensor, storage
    multiprocessing.get_context("spawn").SimpleQueue().put(1)
    assert peers.shared == {} and sink.calls == []


def test_a_cpu_storage_is_never_shared_and_uninstall_restores_everything():
    sink = _Sink()
    peers = PeerHooks(Recorder(sink))
    originals = (torch.UntypedStorage.__dict__.get("_share_cuda_"), multiprocessing.queues.Queue.put,
                 multiprocessing.queues.SimpleQueue.put, multiprocessing.connection._ConnectionBase.send)
    peers.install()
    peers.share(torch.zeros(4).untyped_storage(), exported=True)
    assert peers.shared == {}
    peers.uninstall()
    assert (torch.UntypedStorage.__dict__.get("_share_cuda_"), multiprocessing.queues.Queue.put,
            multiprocessing.queues.SimpleQueue.put, multiprocessing.connection._ConnectionBase.send) == originals


def test_monitored_barrier_is_a_host_barrier():
    import torch.distributed as dist

    assert on_device(dist.monitored_barrier, (), {}) is False


def test_an_object_collective_over_gloo_hands_over_on_the_host(hooks, tmp_path):
    """A one-rank gloo group: all_gather_object (how IPC handles travel) hands the shared storages over, after the
    call, with no device ordering (gloo's object collectives run on the host)."""
    import torch.distributed as dist

    peers, sink = hooks
    storage = torch.zeros(16).untyped_storage()
    peers.shared[storage.data_ptr()] = (weakref.ref(storage), storage.nbytes(), None)
    store = dist.FileStore(str(tmp_path / "store"), 1)
    dist.init_process_group("gloo", store=store, rank=0, world_size=1)
    try:
        gathered = [None]
        dist.all_gather_object(gathered, {"handle": 1})
    finally:
        dist.destroy_process_group()
    assert gathered == [{"handle": 1}]
    assert sink.calls == [("hand_over", [(storage.data_ptr(), 0, 64)], [], "dist.all_gather_object")]


def test_a_hand_over_orders_nothing_of_this_process():
    """The peers wait for the export's event; the handing thread does not: its later access still races."""
    events = [{"e": "host_access", "thread": "T0", "writes": [[2, 0, 8]], "op": "h"},
              {"e": "event_record", "thread": "T0", "event": EXPORT, "stream": S0},
              {"e": "hand_over", "thread": "T1", "reads": [[2, 0, 8]], "events": [EXPORT], "op": "p"},
              {"e": "host_access", "thread": "T1", "writes": [[2, 0, 8]], "op": "h"}]
    for races in _races(events):
        assert races == [("HOST", 2, 0, 8, 0, 3)]
