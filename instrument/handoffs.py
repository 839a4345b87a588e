"""Host-thread handoffs: `queue.Queue` put -> get, `threading.Event` set -> wait, `Condition` notify -> wait,
`Barrier` wait, as happens-before edges between host threads (as ThreadSanitizer treats them).

Each release is an event recorded on the releasing thread's clock; each acquire synchronizes with it (the detector's
`event_record(T, key, T)` and `sync_event(T, key)`, so traces and the HB oracle need nothing new). Keys are negative,
so they never meet a CUDA event handle:
- a queue: one key per (queue, item) put, synchronized by the get that returns that item and then destroyed (a get
  is ordered after the put of its own item, not after later puts);
- an Event or a Condition: one key per object, re-recorded by every set / notify and, for a Condition, by every
  `with condition:` block's exit and synchronized at its entry (the lock it holds; a Queue's mutex is one);
- a Barrier: one key per (barrier, thread) of the current round; leaving it synchronizes with every thread's arrival.

The DataLoader's pin-memory thread hands each pinned batch over through a `queue.Queue`: the batch's pinning on
that thread is ordered before the main thread's H2D copy from it. Not covered: `threading.Lock` / `RLock` (C types
whose methods cannot be wrapped; Condition and Queue are covered above them), `multiprocessing` queues (other
processes are not watched), `queue.SimpleQueue` (a C type).
"""

from __future__ import annotations

import queue
import threading
from typing import Any, Callable

from .recorder import Recorder

_MASK = (1 << 62) - 1
OWN_THREAD_PREFIX = "streamcheck-"  # threads streamcheck starts are named so (trace.py's flusher)


def host_event_key(*parts: Any) -> int:
    """A detector event key for an edge the host makes (never a CUDA event handle: those are not negative)."""
    return -1 - (hash(tuple(id(part) for part in parts)) & _MASK)


def install_handoffs(rec: Recorder, patch: Callable[[Any, str, Any], None]) -> None:
    """Wrap the handoff points; `patch(owner, name, replacement)` remembers the original for uninstall."""

    active = threading._active  # ident -> Thread; not current_thread(): a thread still starting (its
    # _started.set() runs before it is registered) would get a dummy Thread made, whose own Event we wrap too

    def ours() -> bool:  # streamcheck's own threads (the trace flusher) order nothing of the program's
        thread = active.get(threading.get_ident())
        return thread is not None and thread.name.startswith(OWN_THREAD_PREFIX)

    def release(key: int) -> None:
        if rec.active and not ours():
            thread = rec.thread_actor()
            rec.emit("event_record", thread, key, thread)

    def acquire(key: int, destroy: bool = False) -> None:
        if rec.active and not ours():
            rec.emit("sync_event", rec.thread_actor(), key)
            if destroy:
                rec.emit("event_destroy", key)

    put, get = queue.Queue.put, queue.Queue.get

    def queue_put(self, item, block=True, timeout=None):
        release(host_event_key(self, item))
        return put(self, item, block, timeout)

    def queue_get(self, block=True, timeout=None):
        item = get(self, block, timeout)
        acquire(host_event_key(self, item), destroy=True)
        return item

    patch(queue.Queue, "put", queue_put)
    patch(queue.Queue, "get", queue_get)

    event_set, event_wait = threading.Event.set, threading.Event.wait

    def set_(self):
        release(host_event_key(self))
        return event_set(self)

    def wait(self, timeout=None):
        done = event_wait(self, timeout)
        if done:
            acquire(host_event_key(self))
        return done

    patch(threading.Event, "set", set_)
    patch(threading.Event, "wait", wait)

    notify, condition_wait = threading.Condition.notify, threading.Condition.wait

    def notify_(self, n=1):
        release(host_event_key(self))
        return notify(self, n)

    def condition_wait_(self, timeout=None):
        done = condition_wait(self, timeout)
        if done:
            acquire(host_event_key(self))
        return done

    patch(threading.Condition, "notify", notify_)  # notify_all calls notify
    patch(threading.Condition, "wait", condition_wait_)

    enter, leave = threading.Condition.__enter__, threading.Condition.__exit__

    def enter_(self):  # `with condition:` takes its lock: ordered after the last thread that left it
        held = enter(self)
        acquire(host_event_key(self))
        return held

    def exit_(self, *exc):
        release(host_event_key(self))
        return leave(self, *exc)

    patch(threading.Condition, "__enter__", enter_)
    patch(threading.Condition, "__exit__", exit_)

    barrier_wait = threading.Barrier.wait
    arrivals: dict[int, list[int]] = {}  # id(barrier) -> keys of the latest arrivals (one round: `parties` keys)
    lock = threading.Lock()

    def barrier_wait_(self, timeout=None):
        key = host_event_key(self, threading.current_thread())
        release(key)
        with lock:
            keys = arrivals.setdefault(id(self), [])
            if key in keys:
                keys.remove(key)
            keys.append(key)
            del keys[:-self.parties]
        index = barrier_wait(self, timeout)
        with lock:
            round_keys = list(arrivals.get(id(self), ()))
        for other in round_keys:
            acquire(other)
        return index

    patch(threading.Barrier, "wait", barrier_wait_)
