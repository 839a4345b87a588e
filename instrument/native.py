"""The native backend: instrument/native_hook/ (C++) sees every op and decides it in C++ where it can.

Same model as the dispatch mode (instrument/dispatch.py): a Python TorchDispatchMode costs about 1.5x on a
launch-bound step before doing any work (every op's arguments go to Python and back). The C++ hook reads the same
schema plans (op_table.py), computes the byte ranges and the current stream, and then:
- with the C++ detector as the watch's sink (native_detector.py; the default without a trace file), feeds the op
  to it directly (native_hook/fast_path.h) and takes the GPU trace's reports in C++ too (native_hook/gpu_trace.h:
  allocations, frees, event records / waits / destroys, synchronizations): Python is entered for a new thread,
  stream or site, a race to deliver, a report from inside an op or a collective, and the few ops below;
- otherwise (a trace is written, STREAMCHECK_DETECTOR=python, callbacks held back inside the op, a CUDA graph
  being captured), calls `NativeHooks.on_access` once per op that touched CUDA or pinned memory, with plain integers.
Collectives and `record_stream` are decided in C++ too while the fast path runs (native_hook/collectives.h: Python
names a new group's stream, and `Work.wait()` asks the hook for the work's key); otherwise they go to the same
Python code as in the mode (`on_special`, with the op's arguments as Python objects). Instrumentation off (a closed
step window) takes the hook off the thread and pauses torch's GPU trace (hook.cpp, set_active).

The extension is compiled on first use with torch's JIT builder (a C++ compiler and ninja; about a minute, cached in
torch's extension directory, rebuilt when the source changes). Where it cannot be built, `load()` raises
NativeUnavailable with the reason and the watch falls back to the dispatch mode (STREAMCHECK_BACKEND=mode forces
the mode, =native forbids the fallback).

Blind spots it shares with the mode: ops that never reach the dispatcher. Its own: inner ops of a composite op
(it sees `aten::linear`, not the `addmm` it becomes) — the composite op's schema names the same reads and writes.
"""

from __future__ import annotations

import hashlib
import os
import platform
import time
from pathlib import Path
from typing import Any

import torch

from .dispatch import report_record_stream
from .native_detector import NativeDetector
from .recorder import RaceError, Recorder

SOURCE_DIR = Path(__file__).with_name("native_hook")  # hook.cpp and the headers it includes: one translation unit
BACKENDS = ("auto", "native", "mode")

_module: Any = None
memory_reports_in_cpp = True  # False where gpu_trace.h could not be built against this torch (load() says)
tls_descriptors = False  # the hook was built with -mtls-dialect=gnu2 (load() says)
_load_error: str | None = None


class NativeUnavailable(RuntimeError):
    """The C++ hook could not be built or loaded here; the message says why."""


def backend_from_environment() -> str:
    value = os.environ.get("STREAMCHECK_BACKEND", "auto").strip().lower() or "auto"
    if value not in BACKENDS:
        raise ValueError(f"STREAMCHECK_BACKEND={value!r}: expected one of {', '.join(BACKENDS)}")
    return value


def sources_digest() -> str:
    """A digest of every file of native_hook/ (the headers too): the build's flags carry it and the module says it."""
    return hashlib.sha256(b"".join(p.read_bytes() for p in sorted(SOURCE_DIR.iterdir()))).hexdigest()[:16]


def load() -> Any:
    """Build (first time) and import the extension; NativeUnavailable with the reason when that fails."""
    global _module, _load_error
    if _module is not None:
        return _module
    if _load_error is not None:
        raise NativeUnavailable(_load_error)
    try:
        from torch.utils.cpp_extension import load as load_extension

        # torch rebuilds when the listed source or the flags change: the digest of every file puts the headers in
        digest = sources_digest()
        # STREAMCHECK_NATIVE_CFLAGS: extra flags for a measuring build (-DSTREAMCHECK_STAGE_TIMES, stage_times.h)
        # -fvisibility=hidden: nothing but the module's init is exported, so calls between the hook's functions and
        # its thread-locals need no indirection (pybind11 asks for it too)
        flags = ["-O2", "-fvisibility=hidden", f"-DSTREAMCHECK_NATIVE_SOURCES=0x{digest}",
                 *os.environ.get("STREAMCHECK_NATIVE_CFLAGS", "").split()]

        _clear_stale_lock("streamcheck_native_hook")

        def build(extra: list[str]) -> Any:
            return load_extension("streamcheck_native_hook", [str(SOURCE_DIR / "hook.cpp")], extra_cflags=flags + extra,
                                  extra_include_paths=[str(SOURCE_DIR)], verbose=False)

        global memory_reports_in_cpp
        # Each fallback gives up one more part that follows an interface outside our control: unboxed.h's kernels
        # (ATen's generated op headers), sites.h's walk of the interpreter's frames (CPython's internal frame
        # header), collectives.h (c10d's headers), gpu_trace.h (torch's interpreter table). The next part then goes
        # through the boxed fallback, Python (or frame objects) instead.
        fallbacks = ["-DSTREAMCHECK_NO_UNBOXED", "-DSTREAMCHECK_NO_FAST_FRAMES",
                     "-DSTREAMCHECK_NO_CPP_COLLECTIVES", "-DSTREAMCHECK_NO_MEMORY_REPORTS"]
        # First, on x86-64, with TLS descriptors: the hook's thread-locals (read ~20 times per op) then cost no call
        # of __tls_get_addr where the module's TLS block fits in the static TLS surplus (the loader decides; where
        # it does not fit, the access is as before). given_up -1: that build; 0: the same without the flag.
        tls = ["-mtls-dialect=gnu2"] if platform.machine() in ("x86_64", "AMD64") else []
        for given_up in range(-1 if tls else 0, len(fallbacks) + 1):
            try:
                _module = build(tls if given_up < 0 else fallbacks[:given_up])
                break
            except Exception:  # noqa: BLE001
                if given_up == len(fallbacks):
                    raise
        built_from = getattr(_module, "source_digest", None)
        if built_from != f"0x{digest}":
            raise RuntimeError(f"the loaded hook was built from other sources ({built_from}, these are 0x{digest}): "
                               "a build left by another streamcheck; remove it from torch's extension directory")
        memory_reports_in_cpp = given_up < 4  # else the allocator's reports go through Python too
        global tls_descriptors
        tls_descriptors = given_up < 0
        from .op_table import roles_of_name

        _module.set_plan_source(roles_of_name)  # the one table of what each op touches (dispatch.py reads it too)
    except Exception as exc:  # noqa: BLE001 - no compiler, no ninja, headers that do not match...
        _module = None
        _load_error = f"{type(exc).__name__}: {str(exc).strip().splitlines()[-1] if str(exc).strip() else ''}"
        raise NativeUnavailable(_load_error) from exc
    return _module


STALE_LOCK_S = 900  # a build takes about a minute; a lock this old was left by a build that was killed


def _clear_stale_lock(name: str) -> str | None:
    """Remove torch's build lock for `name` when no build can still hold it; the path removed, else None.

    torch's JIT builder takes the lock by creating a file and waits, forever, while the file exists: a build killed
    mid-way (a timeout, ^C) leaves it, and every later build of the hook would hang on it."""
    try:
        from torch.utils.cpp_extension import _get_build_directory

        lock = Path(_get_build_directory(name, verbose=False)) / "lock"
        if lock.exists() and time.time() - lock.stat().st_mtime > STALE_LOCK_S:
            lock.unlink()
            return str(lock)
    except Exception:  # noqa: BLE001 - a private helper of torch that may move; the build then runs as before
        return None
    return None


class ThreadEntry:
    """What `ThreadHooks` enters in a user thread: the hook's key in that thread's dispatch key set."""

    def __init__(self, module: Any) -> None:
        self.module = module

    def __enter__(self) -> "ThreadEntry":
        self.module.watch_this_thread(True)
        return self

    def __exit__(self, *exc: object) -> None:
        self.module.watch_this_thread(False)


class NativeHooks:
    """The Python half of the native hook: turns its calls into the Recorder's events. A backend of the watch
    (dispatch.ModeBackend is the other): install(), uninstall(), thread_entry()."""

    name = "native"

    def __init__(self, recorder: Recorder, collectives: Any, module: Any) -> None:
        self.recorder = recorder
        self.collectives = collectives  # collectives.CollectiveHooks, or None
        self.module = module
        self._names: list[str] = []
        self._overloads: dict[int, Any] = {}
        self._actors: dict[int, str] = {}  # raw stream handle -> actor
        # Ops decided in C++ (native_hook/fast_path.h) when the sink is the C++ detector alone; with a trace to
        # write (a Tee) or the Python Detector as sink, every op comes to on_access.
        self.fast_path = isinstance(recorder.sink, NativeDetector)

    # ---- life cycle ------------------------------------------------------------------------------------------------
    def install(self) -> None:
        native = self.module
        rec = self.recorder
        native.install(self.on_access, self.on_special, self.after_special, self.on_error)
        sites = rec.sites
        native.set_site_table(sites._classify, sites.intern_chain, sites.depth)
        native.learn_allocators(torch.empty(1))  # no pinned probe: it would create a CUDA context here
        if self.fast_path:
            # allocations and frees no longer come to cuda_trace.py, unless gpu_trace.h could not take them
            memory_in_cpp = native.take_memory_reports(True)
            if memory_in_cpp:
                rec.fresh_block_source = native.take_fresh_block
            native.attach_fast_path(rec.sink.core, rec.deliver_races, self._named(lambda: rec.thread_actor()),
                                    self._named(lambda device, handle: rec.stream_actor(device, handle)),
                                    lambda: rec.sites.capture(2), None if memory_in_cpp else rec.fresh_blocks)
            rec.on_backward_change = native.set_backward
            rec.on_capture_change = native.set_capturing_graph
            rec.on_streams_renamed = native.forget_streams
            if self.collectives is not None and native.collectives_in_cpp():
                # collectives and record_stream decided in C++ too (native_hook/collectives.h)
                native.set_collective_callbacks(
                    self._named(self.collectives.comm_actor),
                    lambda handle, comm: rec.alias_stream(rec.stream_actor_of_handle(handle), comm, notify=False),
                    self._named(rec.stream_actor_of_handle))
                self.collectives.native_works = native.take_work
        rec.hold_callback = native.hold_callback
        rec.on_active_change = native.set_active
        native.watch_this_thread(True)
        native.set_active(rec.active)  # after: a window that starts closed takes the key out again at once

    def uninstall(self) -> None:
        native = self.module
        native.set_active(False)  # pauses torch's GPU trace, which calls into Python at every allocation and free
        from . import cuda_trace

        if cuda_trace.others_listen():
            native.restore_gpu_trace()  # CSAN reads it too: leave it running; else off, as torch starts
        native.watch_this_thread(False)
        rec = self.recorder
        rec.on_active_change = None
        rec.hold_callback = None
        rec.on_backward_change = None
        rec.on_capture_change = None
        rec.on_streams_renamed = None
        rec.fresh_block_source = None
        native.take_memory_reports(False)
        native.set_collective_callbacks(None, None, None)
        if self.collectives is not None:
            self.collectives.native_works = None
        native.attach_fast_path(None, None, None, None, None, None)
        native.install(_ignore, _ignore, _ignore, _ignore)  # drop our references; the hook stays registered
        native.set_site_table(None, None, 8)

    def _named(self, name_of: Any) -> Any:
        """A naming call for the fast path: "" after an error, which switches the Recorder off (never raises)."""
        rec = self.recorder

        def call(*args: Any) -> str:
            try:
                return name_of(*args)
            except Exception as exc:  # noqa: BLE001
                rec.fail(exc)
                return ""

        return call

    def thread_entry(self) -> ThreadEntry:
        return ThreadEntry(self.module)

    # ---- called by the hook -------------------------------------------------------------------------------------------
    def op_name(self, index: int) -> str:
        names = self._names
        while len(names) <= index:
            names.append(self.module.op_name(len(names))[0])
        return names[index]

    def on_access(self, op: int, device: int, stream: int, reads: list, writes: list, fresh: list | None,
                  site: int) -> None:
        """One op: its reads and writes as (storage, start, end), the new tensors it wrote as
        (storage, start, end, storage bytes, on the device), its site (-2: capture it here)."""
        rec = self.recorder
        deferred = rec.take_deferred()
        if not rec.active:
            return
        try:
            allocs = None
            if fresh:
                allocs = []
                for base, start, end, nbytes, on_device in fresh:
                    if not on_device or rec.take_fresh_block(base):
                        allocs.append((base, nbytes, on_device))
                    writes.append((base, start, end))
            if not reads and not writes:
                if deferred:
                    rec.emit_now(deferred)
                return
            thread = rec.thread_actor()  # a new thread (an engine thread links to backward()'s caller)
            if site == -2:
                site = rec.sites.capture(2)
            if device >= 0:
                actor = self._actors.get(stream)
                if actor is None:
                    actor = self._actors[stream] = rec.stream_actor(device, stream)
            else:
                actor = thread
            names = self._names
            name = names[op] if op < len(names) else self.op_name(op)
        except Exception as exc:  # noqa: BLE001
            rec.fail(exc)
            return
        rec.emit_access(thread, actor, reads, writes, site, name, allocs or None, deferred)

    def on_special(self, op: int, args: tuple) -> Any:
        """Before a collective or record_stream runs; returns what after_special gets."""
        rec = self.recorder
        if not rec.active:
            return None
        try:
            name = self.op_name(op)
            if name == "aten::record_stream":
                report_record_stream(rec, args)
                return None
            if not name.startswith("c10d::") or self.collectives is None:
                return None
            func = self._overload(op, name)
            return self.collectives.before(func, name, args, {})
        except RaceError:
            raise
        except Exception as exc:  # noqa: BLE001
            rec.fail(exc)
            return None

    def after_special(self, token: Any, outputs: tuple | None) -> None:
        if token is None:
            return
        out = None if outputs is None else outputs[0] if len(outputs) == 1 else outputs
        self.collectives.after(token, out)
        self.recorder.take_pending_raise()

    def on_error(self, message: str) -> None:
        self.recorder.fail(RuntimeError(message))

    def _overload(self, op: int, name: str) -> Any:
        func = self._overloads.get(op)
        if func is None:
            namespace, _, op_name = name.partition("::")
            overload = self.module.op_name(op)[1] or "default"
            func = self._overloads[op] = getattr(getattr(getattr(torch.ops, namespace), op_name), overload)
        return func


def _ignore(*args: Any) -> None:
    return None
