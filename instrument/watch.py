"""`streamcheck.watch()`: run the race detector inside a real program, report, and keep going.

    with streamcheck.watch():          # or: w = streamcheck.watch(); w.start(); ...; w.stop()
        train()

Started by `streamcheck run` through the environment (STREAMCHECK=1, see launch.py) in every rank.

- Report-and-continue: a race becomes a finding in the JSONL file and is echoed once to stderr; the program is
  never interrupted, unless `fail_fast=True`, which raises RaceError at the first race (finding_sink.py: dedupe,
  counts, the file).
- Any exception inside streamcheck is caught, reported once, and instrumentation switches itself off; the program
  runs on unobserved.
- The backend: the C++ hook (native.py; with the C++ detector, native_detector.py, unless a trace is written) or
  the Python dispatch mode (dispatch.py), chosen by `backend=` / STREAMCHECK_BACKEND.
- `trace=PATH` also records every event into a trace that `streamcheck analyze` replays offline.
- `steps=(first, last)` (or STREAMCHECK_STEPS=first:last) instruments only those optimizer steps, for always-on
  use; its blind spots are listed in sampling.py.
"""

from __future__ import annotations

import atexit
import os
import sys
import threading
from pathlib import Path
from typing import Any

from streamcheck.findings import Finding

from .detector import Detector
from .finding_sink import FindingSink, findings_path  # noqa: F401 - findings_path: the file's name, for callers
from .races import Names
from .recorder import RaceError, Recorder, Tee
from .sites import SiteTable

_current: "Watch | None" = None


class SiteFrames:
    """The Mapping races.Names wants (site id -> frames), resolved from the SiteTable only when asked."""

    def __init__(self, table: SiteTable) -> None:
        self.table = table

    def get(self, site: int, default: Any = None) -> Any:
        frames = self.table.frames(site)
        return frames or default

    def __getitem__(self, site: int) -> list:
        frames = self.table.frames(site)
        if not frames:
            raise KeyError(site)
        return frames


def rank_path(path: str | os.PathLike, rank: int, world_size: int) -> Path:
    """`path` with "{rank}" replaced; in a job of several ranks without "{rank}", "-rank<R>" goes before the suffix."""
    text = str(path)
    if "{rank}" in text:
        return Path(text.replace("{rank}", str(rank)))
    path = Path(text)
    if world_size > 1:
        return path.with_name(f"{path.stem}-rank{rank}{path.suffix}")
    return path


class Watch:
    """One process's runtime detector: its life cycle, the backend's hooks, the detector and the finding sink."""

    def __init__(self, out_dir: str | os.PathLike | None = None, *, rank: int | None = None,
                 world_size: int | None = None, fail_fast: bool = False, trace: str | os.PathLike | None = None,
                 echo: bool = True, append: bool = False, steps: tuple[int, int] | None = None,
                 backend: str | None = None) -> None:
        self.out_dir = Path(out_dir if out_dir is not None else os.environ.get("STREAMCHECK_OUT", "."))
        self.rank = int(rank if rank is not None else os.environ.get("RANK", 0))
        self.world_size = int(world_size if world_size is not None else os.environ.get("WORLD_SIZE", 1))
        self.fail_fast = fail_fast
        self.trace_path = trace
        self.echo = echo
        self.append = append
        self.steps = steps  # instrument only optimizer steps [first, last) (instrument/sampling.py)
        self.backend_choice = backend  # auto | native | mode; None: STREAMCHECK_BACKEND (instrument/native.py)
        self.backend: str | None = None  # what the hooks run on, once started
        self.notes: list[str] = []  # not errors: how the watch runs (a fallback to the dispatch mode)
        self.sink = FindingSink(self.out_dir, self.rank, self.world_size, echo=echo, fail_fast=fail_fast,
                                append=append)
        self.findings, self.counts = self.sink.findings, self.sink.counts  # the sink's own dicts
        self.errors: list[str] = []
        self.detector: Detector | None = None
        self.recorder: Recorder | None = None
        self.started = False
        self._trace = None
        self._names: Names | None = None
        self._hooks: list[Any] = []
        self._pinned = None

    # ---- life cycle ---------------------------------------------------------------------------------------------
    def start(self) -> "Watch":
        global _current
        if self.started:
            return self
        if _current is not None and _current is not self:
            raise RuntimeError("streamcheck.watch(): another watch is already running in this process")
        self._native_module, self._native_error = self._load_native()
        self.detector = self._make_detector()
        sites = SiteTable()
        self._names = Names(SiteFrames(sites))
        # the Detector's own dicts (not copies): names arrive while the program runs
        self._names.stream_names = self.detector.stream_names
        self._names.storage_infos = self.detector.storage_infos
        sink: Any = self.detector
        if self.trace_path is not None:
            from .trace import TraceWriter

            trace_path = rank_path(self.trace_path, self.rank, self.world_size)
            trace_path.parent.mkdir(parents=True, exist_ok=True)
            # flushed every second, each flush with the sites it names: a SIGKILLed run's trace still names them
            self._trace = TraceWriter(trace_path, rank=self.rank, world_size=self.world_size, flush_interval=1.0,
                                      pid=os.getpid())
            self._trace.before_flush = self._trace_new_sites
            self._sites_traced, self._sites_lock = 0, threading.Lock()
            sink = Tee(self.detector, self._trace)
        self.recorder = Recorder(sink, sites, on_error=self._on_internal_error)
        self.sink.bind(self.detector, self._names, self._trace)
        self.sink.open()
        self.path = self.sink.path
        _current = self
        self.started = True
        try:
            self._install_hooks()
        except Exception as exc:  # noqa: BLE001 - the program runs on, unobserved
            self.recorder.fail(exc)
        return self

    def stop(self) -> list[Finding]:
        """Remove the hooks, write final counts, close files; returns the findings (with counts)."""
        global _current
        if not self.started:
            return self.results()
        self.started = False
        if self.recorder is not None:
            self.recorder.active = False
        self._uninstall_hooks()
        if _current is self:
            _current = None
        self.sink.close()
        if self._trace is not None:
            self._trace.close()  # its last flush writes the sites not written yet
            self._trace = None
        return self.results()

    def _trace_new_sites(self) -> None:
        """The trace's before_flush: a site event for every site captured since the last flush."""
        if self.recorder is None or self._trace is None:
            return
        sites, trace = self.recorder.sites, self._trace
        with self._sites_lock:  # its own lock: a flush can start while the watch's lock is held (storage_info)
            start = self._sites_traced
            end = self._sites_traced = len(sites)
        for site in range(start, end):
            trace.site(site, sites.frames(site))

    def __enter__(self) -> "Watch":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def results_for(self, key: tuple) -> Finding:
        return self.sink.results_for(key)

    def results(self) -> list[Finding]:
        return self.sink.results()

    # ---- hooks ---------------------------------------------------------------------------------------------------
    def _install_hooks(self) -> None:
        import torch

        from .collectives import CollectiveHooks
        from .dispatch import AccessCollector, ModeBackend
        from .pinned import PinnedMemory
        from .threads import ThreadHooks

        rec = self.recorder
        pinned = self._pinned = PinnedMemory()
        collectives = CollectiveHooks(rec, lambda: AccessCollector(pinned))
        backend = self._native_hooks(collectives) or ModeBackend(rec, pinned, collectives)

        if torch.cuda.is_available():
            from . import cuda_trace

            cuda_trace.install(rec)
            self._hooks.append(cuda_trace)
        collectives.install()
        self._hooks.append(collectives)
        threads = ThreadHooks(rec, backend.thread_entry)
        threads.install()
        self._hooks.append(threads)
        from .launches import LaunchHooks

        launches = LaunchHooks(rec)  # inductor's Triton kernels and CUDA graph replays: no dispatcher op
        launches.install()
        self._hooks.append(launches)
        from .peers import PeerHooks

        peers = PeerHooks(rec)  # memory other processes read (CUDA IPC, symmetric memory) and its hand-overs
        peers.install()
        self._hooks.append(peers)
        if self.steps is not None:
            from .sampling import StepWindow

            window = StepWindow(rec, self.detector, *self.steps)
            window.install()
            self._hooks.append(window)
        backend.install()  # last: the first op it sees is the program's
        self._hooks.append(backend)
        self.backend = backend.name

    def _load_native(self) -> tuple[Any, BaseException | None]:
        """(the C++ extension or None for the dispatch mode, the error that stops the watch or None)."""
        from . import native

        try:
            backend = self.backend_choice or native.backend_from_environment()
            if backend == "mode":
                return None, None
            return native.load(), None
        except native.NativeUnavailable as exc:
            if backend == "native":
                return None, exc
            note = f"native hook unavailable, using the dispatch mode (slower): {exc}"
            self.notes.append(note)
            if self.echo:
                print(f"streamcheck: {note}", file=sys.stderr)
            return None, None
        except Exception as exc:  # noqa: BLE001 - a bad STREAMCHECK_BACKEND: the watch reports it, the program runs
            return None, exc

    def _make_detector(self) -> Any:
        """The C++ detector when the native hook runs and no trace is written (the hook then decides ops in C++),
        else the Python Detector. STREAMCHECK_DETECTOR=python keeps the Python one (for comparisons)."""
        if self._native_module is not None and self.trace_path is None \
                and os.environ.get("STREAMCHECK_DETECTOR", "").strip().lower() != "python":
            from .native_detector import NativeDetector

            return NativeDetector(on_race=self.sink.on_race, module=self._native_module)
        return Detector(on_race=self.sink.on_race)

    def _native_hooks(self, collectives: Any) -> Any:
        """The C++ per-op hook (instrument/native.py), or None for the dispatch mode (STREAMCHECK_BACKEND)."""
        from . import native

        if self._native_error is not None:
            raise self._native_error
        if self._native_module is None:
            return None
        return native.NativeHooks(self.recorder, collectives, self._native_module)

    def _uninstall_hooks(self) -> None:
        while self._hooks:  # the backend first
            hook = self._hooks.pop()
            try:
                hook.uninstall()
            except Exception:  # noqa: BLE001
                pass

    # ---- work the dispatcher cannot see -----------------------------------------------------------------------------
    def annotate(self, reads: Any = (), writes: Any = (), op: str = "annotated") -> None:
        """Report a kernel that bypasses the dispatcher (a C++ extension, a raw Triton launch) on the current stream."""
        rec = self.recorder
        if rec is None or not rec.active or self._pinned is None:
            return
        try:
            from .dispatch import AccessCollector

            collector = AccessCollector(self._pinned)
            read_ranges = collector.ranges_of(list(reads))
            write_ranges = collector.ranges_of(list(writes))
            if not read_ranges and not write_ranges:
                return
            thread = rec.thread_actor()
            site = rec.sites.capture(3)
            if collector.device >= 0:
                rec.emit("kernel", thread, rec.stream_actor(collector.device), read_ranges, write_ranges, site, op)
            else:
                rec.emit("host_access", thread, read_ranges, write_ranges, site, op)
        except RaceError:
            raise
        except Exception as exc:  # noqa: BLE001
            rec.fail(exc)
        rec.take_pending_raise()

    def _on_internal_error(self, exc: BaseException) -> None:
        message = f"streamcheck: internal error, instrumentation switched off for the rest of the run: {exc!r}"
        self.errors.append(repr(exc))
        print(message, file=sys.stderr, flush=True)
        self.sink.error(exc)

def watch(out_dir: str | os.PathLike | None = None, **options: Any) -> Watch:
    """A Watch (not started): use it as a context manager, or call start() / stop()."""
    return Watch(out_dir, **options)


def annotate(reads: Any = (), writes: Any = (), op: str = "annotated") -> None:
    """Tell the running watch about a kernel it cannot see: one enqueued on the current stream by code that bypasses
    the dispatcher (DeepSpeed's fused Adam, a raw Triton launch, CuPy), reading `reads` and writing `writes`
    (tensors). Call it right after the launch. Without a running watch it does nothing.

        fused_adam(params, grads, exp_avgs)
        streamcheck.annotate(reads=grads, writes=params + exp_avgs, op="fused_adam")
    """
    w = _current
    if w is not None and w.started:
        w.annotate(reads, writes, op)


def start_from_environment() -> Watch | None:
    """STREAMCHECK=1: start a watch for this process and stop it at exit (used by launch.py's bootstrap)."""
    if os.environ.get("STREAMCHECK") != "1" or _current is not None:
        return None
    steps = None
    if os.environ.get("STREAMCHECK_STEPS"):
        from .sampling import parse_window

        try:
            steps = parse_window(os.environ["STREAMCHECK_STEPS"])
        except ValueError as exc:
            print(f"streamcheck: {exc}; instrumenting every step", file=sys.stderr, flush=True)
    from .native import backend_from_environment

    try:
        backend = backend_from_environment()
    except ValueError as exc:
        print(f"streamcheck: {exc}; using auto", file=sys.stderr, flush=True)
        backend = "auto"
    if backend == "auto" and not _has_cuda():
        # no stream can race here (the launcher says so): do not build the C++ hook for nothing, which takes
        # minutes on a busy machine
        backend = "mode"
    w = Watch(os.environ.get("STREAMCHECK_OUT", "."), fail_fast=os.environ.get("STREAMCHECK_FAIL_FAST") == "1",
              trace=os.environ.get("STREAMCHECK_TRACE") or None, append=True, steps=steps, backend=backend)
    w.start()
    atexit.register(w.stop)
    return w


def _has_cuda() -> bool:
    import torch

    return torch.cuda.is_available()
