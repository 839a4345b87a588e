"""Synchronization, events, streams and the caching allocator, from torch's GPU trace callbacks.

`torch._C._activate_gpu_trace()` makes the CUDA runtime wrappers report event creation / deletion / record / wait,
stream creation, device / stream / event synchronization and allocator malloc / free to the registries in
`torch.cuda._gpu_trace`. Callbacks are registered once per process (there is no way to unregister) and forward to
whichever Recorder is installed, so a stopped watch costs one global read per callback.

What the callbacks do not say, and how it is filled in:
- the device of a stream handle: learnt when an op runs on it (Recorder.stream_actor_of_handle), else the current
  device; `torch.cuda.synchronize(d)` enters `torch.cuda.device(d)` around the call, so the device synchronization
  callback reads the synchronized device as the current device;
- `Event.query()` / `Stream.query()` answering True: an observed completion, as good as a synchronization; the Python
  methods are wrapped.
"""

from __future__ import annotations

from typing import Callable

import torch
import torch.cuda._gpu_trace as gpu_trace

from .recorder import Recorder
from .sites import UNKNOWN_SITE

_active: Recorder | None = None
_callbacks_registered = False
_ours: list[Callable] = []  # the callbacks registered here (others_listen tells them from CSAN's)
_saved_methods: list[tuple[type, str, Callable]] = []


def _guard(handler: Callable) -> Callable:
    """Run a handler only while a recorder is active; turn any error into `Recorder.fail`."""

    def callback(*args: int) -> None:
        rec = _active
        if rec is None or not rec.active:
            return
        try:
            handler(rec, *args)
        except Exception as exc:  # noqa: BLE001
            rec.fail(exc)

    callback.__name__ = handler.__name__
    return callback


def _event_deleted(rec: Recorder, event: int) -> None:
    rec.emit("event_destroy", event)


def _event_recorded(rec: Recorder, event: int, stream: int) -> None:
    rec.emit("event_record", rec.thread_actor(), event, rec.stream_actor_of_handle(stream))


def _event_waited(rec: Recorder, event: int, stream: int) -> None:
    rec.emit("event_wait", rec.thread_actor(), event, rec.stream_actor_of_handle(stream))


def _memory_freed(rec: Recorder, ptr: int) -> None:
    rec.fresh_blocks.pop(ptr, None)
    # About one free per op: most blocks were only ever used by their allocation stream, and such a free can race
    # with nothing, so its site (a frame walk) is captured only when the detector has something to check.
    can_race = rec.free_can_race
    site = rec.sites.capture(2) if can_race is None or can_race(ptr) else UNKNOWN_SITE
    rec.emit("free", rec.thread_actor(), ptr, site)


def _stream_created(rec: Recorder, stream: int) -> None:
    rec.emit("stream_created", rec.thread_actor(), rec.stream_actor_of_handle(stream))


def _device_synchronized(rec: Recorder) -> None:
    rec.emit("sync_device", rec.thread_actor(), rec.current_device())


def _stream_synchronized(rec: Recorder, stream: int) -> None:
    rec.emit("sync_stream", rec.thread_actor(), rec.stream_actor_of_handle(stream))


def _event_synchronized(rec: Recorder, event: int) -> None:
    rec.emit("sync_event", rec.thread_actor(), event)


def _fresh_block(ptr: int) -> None:
    """The allocation callback, unguarded and inlined: it fires about once per op and only marks the block."""
    rec = _active
    if rec is not None and rec.active:
        rec.fresh_blocks[ptr] = True


_REGISTRATIONS = (
    (gpu_trace.register_callback_for_event_deletion, _event_deleted),
    (gpu_trace.register_callback_for_event_record, _event_recorded),
    (gpu_trace.register_callback_for_event_wait, _event_waited),
    (gpu_trace.register_callback_for_memory_allocation, None),  # _fresh_block, registered as is
    (gpu_trace.register_callback_for_memory_deallocation, _memory_freed),
    (gpu_trace.register_callback_for_stream_creation, _stream_created),
    (gpu_trace.register_callback_for_device_synchronization, _device_synchronized),
    (gpu_trace.register_callback_for_stream_synchronization, _stream_synchronized),
    (gpu_trace.register_callback_for_event_synchronization, _event_synchronized),
)


def _wrap_query(cls: type, observed: Callable[[Recorder, object], None]) -> None:
    original = cls.query

    def query(self):
        done = original(self)
        rec = _active
        if done and rec is not None and rec.active:
            try:
                observed(rec, self)
            except Exception as exc:  # noqa: BLE001
                rec.fail(exc)
        return done

    query.__doc__ = original.__doc__
    _saved_methods.append((cls, "query", original))
    cls.query = query


def _event_query_true(rec: Recorder, event) -> None:
    if event.cuda_event:
        rec.emit("sync_event", rec.thread_actor(), event.cuda_event)


def _stream_query_true(rec: Recorder, stream) -> None:
    rec.emit("sync_stream", rec.thread_actor(), rec.stream_actor(stream.device_index, stream.cuda_stream))


def install(recorder: Recorder) -> None:
    """Route the GPU trace callbacks to `recorder` (activating the trace on first use) and wrap query()."""
    global _active, _callbacks_registered
    recorder.current_device = torch.cuda.current_device
    recorder.current_raw_stream = torch._C._cuda_getCurrentRawStream
    if not _callbacks_registered:
        torch._C._activate_gpu_trace()
        for register, handler in _REGISTRATIONS:
            callback = _guard(handler) if handler is not None else _fresh_block
            _ours.append(callback)
            register(callback)
        _callbacks_registered = True
    from . import native

    if native._module is not None:  # a native watch that stopped left the trace paused (native.py: uninstall)
        native._module.restore_gpu_trace()
    _active = recorder
    if not _saved_methods:
        _wrap_query(torch.cuda.Event, _event_query_true)
        _wrap_query(torch.cuda.Stream, _stream_query_true)


def others_listen() -> bool:
    """Whether a callback not registered here (CSAN's, a profiler's) listens to torch's GPU trace."""
    registries = [getattr(gpu_trace, name) for name in dir(gpu_trace) if name.endswith("Callbacks")]
    return any(all(callback is not ours for ours in _ours)
               for registry in registries for callback in getattr(registry, "callback_list", ()))


def uninstall() -> None:
    global _active
    _active = None
    while _saved_methods:
        cls, name, original = _saved_methods.pop()
        setattr(cls, name, original)
