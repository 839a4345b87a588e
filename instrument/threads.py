"""Host threads: user `threading.Thread`s enter the dispatch mode and report start/join; backward() links its engine.

A TorchDispatchMode lives on a thread-local stack, so a thread started by the program sees no ops unless it enters
a mode itself. `Thread.start` is wrapped: the new thread's `run` is replaced (on the instance, so subclasses that
override `run` are covered too) by one that waits until the parent has reported `thread_start(parent, child)` with
the child's real ident, enters its own mode, and runs. `Thread.join` reports `thread_join(parent, child)` once the
child has ended. Joining orders host work only: GPU work the child enqueued stays unordered until a stream waits.
Handoffs between running threads (queue.Queue, Event, Condition, Barrier) are edges too: instrument/handoffs.py.

The autograd engine runs backward on its own threads, which do see the mode of the thread that called backward().
`torch.autograd._engine_run_backward` is wrapped so that every engine thread first seen during a backward() starts
after the caller's state, and the caller joins them when backward() returns (Recorder.backward_begin / _end).
"""

from __future__ import annotations

import threading
from typing import Any, Callable

from . import actors
from .handoffs import install_handoffs
from .recorder import Recorder


class ThreadHooks:
    def __init__(self, recorder: Recorder, make_mode: Callable[[], Any]) -> None:
        self.recorder = recorder
        self.make_mode = make_mode
        self._saved: list[tuple[Any, str, Any]] = []

    def install(self) -> None:
        hooks = self
        rec = self.recorder
        original_start = threading.Thread.start
        original_join = threading.Thread.join

        def start(thread: threading.Thread) -> None:
            if not rec.active:
                return original_start(thread)
            parent = rec.thread_actor()
            cleared = threading.Event()
            user_run = thread.run

            def run() -> None:
                cleared.wait()
                mode = hooks.make_mode()
                entered = False
                try:
                    mode.__enter__()
                    entered = True
                except Exception as exc:  # noqa: BLE001
                    rec.fail(exc)
                try:
                    user_run()
                finally:
                    if entered:
                        mode.__exit__(None, None, None)

            thread.run = run
            try:
                original_start(thread)
            finally:
                if thread.ident is not None:
                    rec.emit("thread_start", parent, actors.host(thread.ident))
                cleared.set()

        def join(thread: threading.Thread, timeout: float | None = None) -> None:
            original_join(thread, timeout)
            if rec.active and thread.ident is not None and not thread.is_alive():
                rec.emit("thread_join", rec.thread_actor(), actors.host(thread.ident))

        self._patch(threading.Thread, "start", start)
        self._patch(threading.Thread, "join", join)
        install_handoffs(rec, self._patch)  # queues, events, conditions, barriers (instrument/handoffs.py)

        import torch.autograd

        original_backward = torch.autograd._engine_run_backward

        def engine_run_backward(*args: Any, **kwargs: Any) -> Any:
            if not rec.active:
                return original_backward(*args, **kwargs)
            rec.backward_begin()
            try:
                return original_backward(*args, **kwargs)
            finally:
                rec.backward_end()

        self._patch(torch.autograd, "_engine_run_backward", engine_run_backward)

    def _patch(self, owner: Any, name: str, replacement: Any) -> None:
        self._saved.append((owner, name, getattr(owner, name)))
        setattr(owner, name, replacement)

    def uninstall(self) -> None:
        while self._saved:
            owner, name, original = self._saved.pop()
            setattr(owner, name, original)
