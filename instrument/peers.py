"""Memory other processes read, and the host steps that hand it to them (SC204; the scanner's twin is SC107).

Shared memory:
- a CUDA IPC export: `storage._share_cuda_()`, which `torch.multiprocessing.reductions.reduce_tensor` calls, whether
  the program calls it or a multiprocessing queue pickles a CUDA tensor. At a storage's first export torch records
  an event on the current stream and the importing process waits for it before it reads, so the current stream's
  work up to the export is ordered before the peers' reads; the runtime records the same event (a key of its own);
- symmetric memory: the tensor given to `torch.distributed._symmetric_memory.rendezvous`, mapped into every process
  of the group; nothing of the device is ordered by the rendezvous.
Hand-overs, the host steps after which the peers may read: `dist.barrier` and `monitored_barrier`, and the object
collectives that carry IPC handles to the peers (`all_gather_object`, `broadcast_object_list`, `gather_object`,
`scatter_object_list`, `send_object_list`), judged after they return: one that runs on the accelerator (NCCL's)
enqueues after the current stream's work and blocks the host until it completed, so the thread first synchronizes
with the current stream; a multiprocessing queue's `put` and a connection's `send`, judged before the message
leaves. Each hands over every shared storage still alive, as
one detector `hand_over` per storage with its export's event.

Not seen: hand-overs through other channels (sockets, ZMQ, files, a CPU tensor's collective), a CUDA tensor that
the queue pickles in its feeder thread after the put (judged at the next hand-over), the symmetric-memory handle's
own device barrier, and the peers' own writes.
"""

from __future__ import annotations

import inspect
import weakref
from typing import Any

import torch

from .handoffs import host_event_key
from .patching import Patches
from .recorder import RaceError, Recorder

SYMMETRIC_MEMORY = "torch.distributed._symmetric_memory"
# torch.distributed calls after which the peers may read: barriers, and the object collectives IPC handles travel by
HOST_STEPS = ("barrier", "monitored_barrier", "all_gather_object", "broadcast_object_list", "gather_object",
              "scatter_object_list", "send_object_list")


class PeerHooks:
    """Registers shared storages and emits a hand-over of each at the host steps above."""

    def __init__(self, recorder: Recorder) -> None:
        self.recorder = recorder
        # storage base pointer -> (weak reference to its UntypedStorage, its bytes, the export's event key or None)
        self.shared: dict[int, tuple[Any, int, int | None]] = {}
        self._patches = Patches()

    # ---- what is shared ---------------------------------------------------------------------------------------
    def share(self, storage: Any, exported: bool) -> None:
        """`storage` (an UntypedStorage on a CUDA device) is readable by other processes from now on."""
        rec = self.recorder
        if not rec.active or storage.device.type != "cuda" or not storage.nbytes():
            return
        base = storage.data_ptr()
        known = self.shared.get(base)
        if known is not None and known[0]() is storage:
            return  # torch records the export's event at the first export only
        event = None
        if exported:
            event = host_event_key(storage, "ipc export")
            thread = rec.thread_actor()
            rec.emit("event_record", thread, event, rec.stream_actor(storage.device.index))
        shared = self.shared
        # The storage's Python object lives as long as the storage (torch keeps it): a dead one was freed.
        ref = weakref.ref(storage, lambda _, base=base: shared.pop(base, None))
        shared[base] = (ref, storage.nbytes(), event)

    # ---- when it is handed over --------------------------------------------------------------------------------
    def hand_over(self, what: str, device_ordered: bool = False) -> None:
        rec = self.recorder
        if not rec.active or not self.shared:
            return
        thread = rec.thread_actor()
        site = rec.sites.capture(3)
        if device_ordered and torch.cuda.is_available():
            rec.emit("sync_stream", thread, rec.stream_actor(torch.cuda.current_device()))
        for base, (ref, nbytes, event) in list(self.shared.items()):
            if ref() is None:
                continue
            rec.emit("hand_over", thread, [(base, 0, nbytes)], [event] if event is not None else [], site, what)
        rec.take_pending_raise()

    def _guarded(self, step: Any) -> None:
        try:
            step()
        except RaceError:
            raise
        except Exception as exc:  # noqa: BLE001 - any bug of ours must not reach the program
            self.recorder.fail(exc)

    # ---- patches ------------------------------------------------------------------------------------------------
    def install(self) -> None:
        hooks = self
        share_cuda = torch.UntypedStorage._share_cuda_

        def share_cuda_(storage, *args, **kwargs):
            hooks._guarded(lambda: hooks.share(storage, exported=True))
            return share_cuda(storage, *args, **kwargs)

        self._patch(torch.UntypedStorage, "_share_cuda_", share_cuda_)

        import multiprocessing.connection
        import multiprocessing.queues

        for owner, name, what in ((multiprocessing.queues.Queue, "put", "multiprocessing queue put"),
                                  (multiprocessing.queues.SimpleQueue, "put", "multiprocessing queue put"),
                                  (multiprocessing.connection._ConnectionBase, "send", "multiprocessing send")):
            self._patch(owner, name, self._before(getattr(owner, name), what))

        import torch.distributed as dist

        if dist.is_available():
            from torch.distributed import distributed_c10d

            for name in HOST_STEPS:
                original = getattr(distributed_c10d, name, None)
                if original is None:
                    continue
                wrapped = self._after_barrier(original, f"dist.{name}")
                self._patch(distributed_c10d, name, wrapped)
                if getattr(dist, name, None) is original:
                    self._patch(dist, name, wrapped)
        self._patches.on_import(SYMMETRIC_MEMORY, self._patch_symmetric_memory)

    def _before(self, original: Any, what: str) -> Any:
        hooks = self

        def handing_over(*args, **kwargs):
            hooks._guarded(lambda: hooks.hand_over(what))
            return original(*args, **kwargs)

        return handing_over

    def _after_barrier(self, original: Any, what: str) -> Any:
        hooks = self

        def barrier(*args, **kwargs):
            result = original(*args, **kwargs)
            if not kwargs.get("async_op"):
                hooks._guarded(lambda: hooks.hand_over(what, on_device(original, args, kwargs)))
            return result

        return barrier

    def _patch_symmetric_memory(self, module: Any) -> None:
        original = getattr(module, "rendezvous", None)
        if original is None:
            return
        hooks = self

        def rendezvous(tensor, *args, **kwargs):
            handle = original(tensor, *args, **kwargs)
            hooks._guarded(lambda: hooks.share(tensor.untyped_storage(), exported=False))
            return handle

        self._patch(module, "rendezvous", rendezvous)

    def _patch(self, owner: Any, name: str, replacement: Any) -> None:
        self._patches.set(owner, name, replacement)

    def uninstall(self) -> None:
        self._patches.undo()
        self.shared.clear()


def on_device(step: Any, args: tuple, kwargs: dict) -> bool:
    """Whether a call of one of HOST_STEPS runs on the accelerator (NCCL's collective after the current stream's
    work), decided as torch decides it for barriers and object collectives; `monitored_barrier` is gloo's."""
    name = getattr(step, "__name__", "")
    if name == "monitored_barrier":
        return False
    try:
        from torch.distributed import distributed_c10d as c10d

        bound = inspect.signature(step).bind_partial(*args, **kwargs).arguments
        group = bound.get("group") or c10d._get_default_group()
        if name == "barrier" and (bound.get("device_ids") or getattr(group, "bound_device_id", None) is not None):
            return True
        return torch._C._get_accelerator().type != "cpu" and c10d._get_object_coll_device(group) != "cpu"
    except Exception:  # noqa: BLE001 - an unknown group: taken as the host's (the peers order nothing)
        return False
