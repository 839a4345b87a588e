"""The one object every runtime hook talks to: it names actors, captures sites and feeds the happens-before sink.

The sink is anything with the Detector's methods (instrument/detector.py): the Detector itself, a TraceWriter, or
a `Tee` of both. Hooks never call the sink directly, for three reasons that live here:

- naming: host threads are "T<ident>", device streams "cuda:<dev>/s<cudaStream_t>" (the raw handle, because that is
  what torch's GPU trace callbacks report), NCCL streams "nccl:<group>/<dev>";
- order: a callback fired while an op runs (the stream synchronization inside `.item()`, a free inside an `out=`
  resize) happened *after* that op's kernel was enqueued, but the op's accesses are only known once it returns, so
  callbacks fired during an op are held back and replayed after the op's own event;
- safety: the sink is plain Python and not thread-safe (the autograd engine's threads and user threads call in
  concurrently), and any exception inside streamcheck must switch instrumentation off instead of reaching the
  program (`fail`). Only `RaceError` (fail_fast) is allowed through.
"""

from __future__ import annotations

import threading
from typing import Any, Callable

from . import actors
from .sites import BACKWARD_NOTE, UNKNOWN_SITE, SiteTable


_NO_CALLS: list = []  # "inside an op, nothing held back yet": never appended to (emit swaps in a real list)


class RaceError(RuntimeError):
    """Raised into the program at the first race, only when the watch was started with fail_fast=True."""


class _ThreadState(threading.local):
    deferred = None  # a class default: reading it on a thread that never set it raises nothing (cheaper)
    captured = None  # a list while this thread captures a CUDA graph (instrument/launches.py)


class Tee:
    """Forwards every sink call to several sinks (a Detector and a TraceWriter), in order."""

    def __init__(self, *sinks: Any) -> None:
        self.sinks = sinks

    def __getattr__(self, name: str) -> Callable[..., None]:
        methods = [getattr(sink, name) for sink in self.sinks if hasattr(sink, name)]

        def call(*args: Any) -> None:
            for method in methods:
                method(*args)

        self.__dict__[name] = call  # later lookups skip __getattr__
        return call


class Recorder:
    """Actor names, site capture, deferred callbacks and error containment around one sink."""

    def __init__(self, sink: Any, sites: SiteTable | None = None, on_error: Callable[[BaseException], None] | None = None):
        self.sink = sink
        self.sites = sites if sites is not None else SiteTable()
        self._active = True
        self.on_active_change: Callable[[bool], None] | None = None  # the native hook mirrors `active` in C++
        # The native hook's "is this thread inside an op?" (it then expects the callback held back): None without it
        self.hold_callback: Callable[[], bool] | None = None
        # The native fast path (native_hook/fast_path.h) decides ops in C++ and must hear what changes its caches:
        # a backward() call beginning (its site) or ending (None), a CUDA graph capture starting or ending here.
        self.on_backward_change: Callable[[int | None], None] | None = None
        self.on_capture_change: Callable[[bool], None] | None = None
        self.on_streams_renamed: Callable[[], None] | None = None  # alias_stream ran: names cached in C++ are stale
        self.on_error = on_error
        self.error: BaseException | None = None
        self.pending_raise: RaceError | None = None
        self.lock = threading.Lock()
        self._tls = _ThreadState()
        self._thread_names: dict[int, str] = {}
        self._stream_names: dict[int, dict[int, str]] = {}  # device -> raw handle -> actor
        self._device_of_handle: dict[int, int] = {}
        self.fresh_blocks: dict[int, bool] = {}  # allocated, not yet written by an op: the next output there is an alloc
        # Where the native hook takes the allocator's reports in C++ (native_hook/gpu_trace.h), its own fresh blocks
        self.fresh_block_source: Callable[[int], bool] | None = None
        self._backward_caller: str | None = None
        self.backward_site = UNKNOWN_SITE
        self._engine_threads: list[tuple[int, str]] = []
        # Detector.free_can_race when the sink is a bare Detector: a free that cannot race needs no site (a trace
        # needs every site, so a Tee gets none)
        self.free_can_race: Callable[[int], bool] | None = (
            getattr(sink, "free_can_race") if callable(getattr(type(sink), "free_can_race", None)) else None)
        self.current_device: Callable[[], int] = lambda: 0
        self.current_raw_stream: Callable[[int], int] = lambda device: 0

    @property
    def active(self) -> bool:
        return self._active

    @active.setter
    def active(self, value: bool) -> None:
        self._active = value
        if self.on_active_change is not None:
            self.on_active_change(value)

    def sink_has(self, method: str) -> bool:
        """Whether the sink (or a sink of a Tee) implements an optional method such as `forget_work`."""
        sinks = self.sink.sinks if isinstance(self.sink, Tee) else (self.sink,)
        return any(callable(getattr(type(sink), method, None)) for sink in sinks)

    # ---- naming -------------------------------------------------------------------------------------------------
    def thread_actor(self) -> str:
        ident = threading.get_ident()
        name = self._thread_names.get(ident)
        if name is None:
            name = self._new_thread(ident)
        return name

    def _new_thread(self, ident: int) -> str:
        name = actors.host(ident)
        caller = self._backward_caller
        if caller is not None and caller != name:
            # A thread first seen during backward() is one of the autograd engine's: its work follows the caller.
            self.emit("thread_start", caller, name)
            self._engine_threads.append((ident, name))
        self._thread_names[ident] = name
        return name

    def stream_actor(self, device: int, handle: int | None = None) -> str:
        """The actor of `handle` on `device`, or of the calling thread's current stream there."""
        if handle is None:
            handle = self.current_raw_stream(device)
        names = self._stream_names.get(device)
        if names is None:
            names = self._stream_names[device] = {}
        name = names.get(handle)
        if name is None:
            name = names[handle] = actors.cuda_stream(device, handle)
            if handle:
                self._device_of_handle[handle] = device
                self._name_stream(name)
        return name

    def _name_stream(self, actor: str) -> None:
        """Name a side stream after the first place that used it: raw handles mean nothing to a reader."""
        frames = self.sites.frames(self.sites.capture(3))
        if frames:
            path, line, function = frames[0]
            self.emit("stream_name", actor, f"first used at {path.rsplit('/', 1)[-1]}:{line} in {function}")

    def alias_stream(self, actor: str, alias: str, notify: bool = True) -> None:
        """From now on the raw stream behind `actor` ("cuda:<dev>/s<handle>") is `alias` (a group's NCCL stream).
        notify=False: the native hook renamed it itself (native_hook/collectives.h), its names stay valid."""
        head, _, handle = actor.partition("/s")
        device = int(head[5:])
        self._stream_names.setdefault(device, {})[int(handle)] = alias
        self._device_of_handle[int(handle)] = device
        if notify and self.on_streams_renamed is not None:
            self.on_streams_renamed()

    def stream_actor_of_handle(self, handle: int) -> str:
        """For trace callbacks, which report a raw stream handle without its device.

        Not cached: a stream that only callbacks have seen (the 32 pool streams per priority are all "created" when
        the pool starts) gets its name, and its place in the cache, from the first op that runs on it.
        """
        device = self._device_of_handle.get(handle) if handle else None
        if device is None:
            device = self.current_device()
        names = self._stream_names.get(device)
        name = names.get(handle) if names else None
        return name if name is not None else actors.cuda_stream(device, handle)

    # ---- backward(): the engine threads are ordered with the thread that called it --------------------------------
    def backward_begin(self) -> None:
        self._backward_caller = self.thread_actor()
        # Accesses with no Python frame during backward (C++ hooks, the DDP reducer) are blamed on this call.
        self.backward_site = self.sites.noted(self.sites.capture(3), BACKWARD_NOTE)
        if self.on_backward_change is not None:
            self.on_backward_change(self.backward_site)

    def site_or_backward(self, site: int) -> int:
        """A site with no frame of the program during backward() (none at all: the DDP reducer in C++; only
        library frames: the autograd engine's thread running torch's own hook wrappers) is blamed on the
        backward() call, noted as such."""
        if self._backward_caller is not None and (site < 0 or self.sites.is_library_site(site)):
            return self.backward_site
        return site

    def backward_end(self) -> None:
        caller, self._backward_caller = self._backward_caller, None
        self.backward_site = UNKNOWN_SITE
        if self.on_backward_change is not None:
            self.on_backward_change(None)
        engine, self._engine_threads = self._engine_threads, []
        for ident, name in engine:
            if caller is not None:
                self.emit("thread_join", caller, name)
            # Forget the engine thread so the next backward() links it again.
            self._thread_names.pop(ident, None)

    # ---- feeding the sink ------------------------------------------------------------------------------------------
    def begin_op(self) -> Any:
        """Hold back callbacks fired on this thread until end_op; returns what end_op must restore."""
        tls = self._tls
        outer = getattr(tls, "deferred", None)
        tls.deferred = _NO_CALLS
        return outer

    def end_op(self, outer: Any = None) -> list | None:
        """The callbacks held back since begin_op (None when there were none)."""
        tls = self._tls
        deferred = getattr(tls, "deferred", None)
        tls.deferred = outer
        return deferred if deferred is not _NO_CALLS else None

    def emit(self, method: str, *args: Any) -> None:
        """Call the sink now, or after the running op's own event when called from inside an op."""
        if not self.active:
            return
        tls = self._tls
        deferred = getattr(tls, "deferred", None)
        if deferred is not None:
            if deferred is _NO_CALLS:
                deferred = tls.deferred = []  # the list only exists for the few ops that fire callbacks
            deferred.append((method, args))
            return
        hold = self.hold_callback
        if hold is not None and hold():
            tls.deferred = [(method, args)]  # taken by the op's own event (instrument/native.py)
            return
        self.emit_now(((method, args),))

    def emit_now(self, calls) -> None:
        try:
            with self.lock:
                sink = self.sink
                for method, args in calls:
                    getattr(sink, method)(*args)
        except RaceError as exc:
            self.pending_raise = exc
        except Exception as exc:  # noqa: BLE001 - any bug of ours must not reach the program
            self.fail(exc)

    def emit_access(self, thread: str, stream: str, reads: list, writes: list, site: int, op: str,
                    allocs: list | None, deferred: list | None) -> None:
        """One op's events, in order: allocations of its fresh outputs, its kernel (or host access), the callbacks
        it fired. The per-op path: no intermediate call list."""
        if self._backward_caller is not None:
            site = self.site_or_backward(site)  # no frame of the program: blamed on the backward() call it runs in
        captured = self._tls.captured
        if captured is not None and stream is not thread:
            # Captured into a CUDA graph: nothing runs now; the graph's replays emit it (instrument/launches.py)
            captured.append((int(stream[5:].split("/", 1)[0]), tuple(reads), tuple(writes), site, op))
            if deferred:
                self.emit_now(deferred)
            return
        try:
            with self.lock:
                sink = self.sink
                if allocs:
                    for base, nbytes, on_device in allocs:
                        sink.alloc(base, nbytes, stream if on_device else thread, site)
                if stream is thread:
                    sink.host_access(thread, reads, writes, site, op)
                else:
                    sink.kernel(thread, stream, reads, writes, site, op)
                if deferred:
                    for method, args in deferred:
                        getattr(sink, method)(*args)
        except RaceError as exc:
            self.pending_raise = exc
        except Exception as exc:  # noqa: BLE001 - any bug of ours must not reach the program
            self.fail(exc)
        if self.pending_raise is not None:
            self.take_pending_raise()

    def capture_into(self, accesses: list | None) -> None:
        """This thread's device accesses go to `accesses` (a CUDA graph being captured) until called with None."""
        self._tls.captured = accesses
        if self.on_capture_change is not None:
            self.on_capture_change(accesses is not None)

    # ---- the per-op hook's calls (instrument/native.py) ---------------------------------------------------------
    def take_deferred(self) -> list | None:
        """The callbacks held back for the calling thread's running op (hold_callback), now taken."""
        tls = self._tls
        deferred = tls.deferred
        if deferred is not None:
            tls.deferred = None
        return deferred

    def take_fresh_block(self, base: int) -> bool:
        """Whether `base` is a block the allocator gave out that no op wrote yet (then it is the op's allocation)."""
        source = self.fresh_block_source
        if source is not None:
            return source(base)
        return self.fresh_blocks.pop(base, None) is not None

    def deliver_races(self) -> None:
        """The C++ detector found races during an op it decided alone: hand them to the sink's on_race (findings).
        A RaceError (fail_fast) goes on into the program; anything else switches instrumentation off."""
        try:
            with self.lock:
                self.sink.deliver()
        except RaceError:
            raise
        except Exception as exc:  # noqa: BLE001 - any bug of ours must not reach the program
            self.fail(exc)

    def emit_storage_info(self, storage: int, info: dict) -> None:
        """Names and shapes for reports (the sink's storage_info takes keyword arguments)."""
        if not self.active:
            return
        try:
            with self.lock:
                self.sink.storage_info(storage, **info)
        except Exception as exc:  # noqa: BLE001
            self.fail(exc)

    def take_pending_raise(self) -> None:
        exc = self.pending_raise
        if exc is not None:
            self.pending_raise = None
            raise exc

    def fail(self, exc: BaseException) -> None:
        """Switch instrumentation off after an internal error and report it once."""
        if not self.active:
            return
        self.active = False
        self.error = exc
        if self.on_error is not None:
            try:
                self.on_error(exc)
            except Exception:  # noqa: BLE001
                pass
