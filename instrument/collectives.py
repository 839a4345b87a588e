"""c10d collectives as accesses by the process group's NCCL stream, and `Work.wait()` as the edge back.

Collectives reach the dispatcher as `c10d::*` ops (`c10d::_allgather_base_` from `all_gather_into_tensor`,
`c10d::allreduce_` from `all_reduce`, ...). ProcessGroupNCCL runs each on an internal stream per (group, device)
after making it wait for the *current* stream only; that stream is the actor "nccl:<group name>/<device>". The op's
schema carries no alias annotations, so the argument names say what is read and written: `output*` written,
`input*` read, in-place `tensors` written (`send` only reads them).

The op returns a Work object. `Work.wait()` is a plain method, not an op: it is wrapped, and the Work seen in the
dispatcher (a ScriptObject) is matched to the Python Work the program holds by unboxing it into the same pybind
instance. That instance is held strongly only until the program has received it (the last few collectives), then
weakly: a Work the program drops without waiting (DeepSpeed drops some) must die when the program lets it go,
since it holds the collective's tensors and CUDA events; its clock is then forgotten. A collective called with
`async_op=False` is ordered before the current stream at once (torch waits for it before returning). The group
also keeps the collective's tensors from being reused while its stream may still use them, so each of their blocks
gets the NCCL stream as a recorded stream (freeing an all-gather input right after the call is safe).

Waits done without `Work.wait()` in Python (the DDP reducer in C++, CUDA futures from `work.get_future()`, their
`.then()` callbacks) block on CUDA events recorded on the group's internal stream inside the collective op; the
GPU trace reports those events with the raw stream handle, which `_on_comm_stream` ties to the comm actor.
"""

from __future__ import annotations

import collections
import os
import weakref
from typing import Any

import torch

from . import op_table
from .actors import nccl_stream
from .dispatch import collect_tensors
from .recorder import Recorder

_MAX_PENDING_WORKS = 65536  # a bound for Works that cannot be weakly referenced
_HANDOFF = 64  # Works held strongly until the program's own reference exists (one collective call needs one)


def _target(ref: Any) -> Any:
    """The Work behind a pending entry (None once a weakly held Work died)."""
    return ref() if isinstance(ref, weakref.ref) else ref


class CollectiveHooks:
    """Feeds c10d ops and Work.wait() to the recorder."""

    def __init__(self, recorder: Recorder, collector_factory: Any) -> None:
        self.recorder = recorder
        self.collector_factory = collector_factory  # () -> dispatch.AccessCollector
        self.pending: dict[int, tuple[Any, int]] = {}  # id(Work) -> (weakref to the Work, or the Work; device)
        self._handoff: collections.deque = collections.deque(maxlen=_HANDOFF)
        self._dropped_works: list[int] = []  # died unwaited, not yet forgotten by the detector
        self._arg_roles: dict[Any, tuple] = {}
        self._saved: list[tuple[type, str, Any]] = []
        self._work_type: Any = None
        self._pg_type: Any = None
        self.blocking_wait = os.environ.get("TORCH_NCCL_BLOCKING_WAIT", "0") == "1"
        self._forgets_works = recorder.sink_has("forget_work")
        self._named_comms: set[str] = set()
        # The native hook's works (native_hook/collectives.h decides collectives in C++): Work -> (key, device) of
        # one it launched and nobody waited yet, else None; None when every collective comes through here
        self.native_works: Any = None

    # ---- the dispatcher side -------------------------------------------------------------------------------------
    def _roles(self, func: Any, name: str) -> tuple:
        roles = self._arg_roles.get(func)
        if roles is None:
            schema = func._schema
            roles = self._arg_roles[func] = tuple(
                (position, arg.name, role)
                for position, (arg, role) in enumerate(zip(schema.arguments, op_table.collective_roles(schema, name)))
                if role != op_table.NONE)
        return roles

    def dispatch(self, func: Any, plan: Any, args: tuple, kwargs: dict) -> Any:
        """The dispatch mode's path: before, the op, after."""
        token = self.before(func, plan.name, args, kwargs)
        try:
            out = func(*args, **kwargs)
        except BaseException:
            self.after(token, None)
            raise
        self.after(token, out)
        return out

    def before(self, func: Any, name: str, args: tuple, kwargs: dict) -> Any:
        """Read the collective's arguments before it runs; returns what `after` needs (None: nothing to report)."""
        rec = self.recorder
        if self._dropped_works:
            dropped, self._dropped_works = self._dropped_works, []
            if self._forgets_works:
                rec.emit_now([("forget_work", (key,)) for key in dropped])
        try:
            roles = self._roles(func, name)
            reads: list = []
            writes: list = []
            group = None
            async_op = True
            for position, arg_name, role in roles:
                value = args[position] if position < len(args) else kwargs.get(arg_name)
                if role == "group":
                    group = value
                elif role == "async":
                    async_op = True if value is None else bool(value)
                else:
                    collect_tensors(value, reads if role == "read" else writes)
            collector = self.collector_factory()
            read_ranges = collector.ranges_of(reads)
            write_ranges = collector.ranges_of(writes)
            device = collector.device
            site = rec.site_or_backward(rec.sites.capture(2))  # the DDP reducer's collectives have no Python frame
            outer = rec.begin_op()
        except Exception as exc:  # noqa: BLE001
            rec.fail(exc)
            return None
        return (name, group, async_op, read_ranges, write_ranges, device, site, outer)

    def after(self, token: Any, out: Any) -> None:
        """Report the collective once it was launched (`out` is None when the op raised)."""
        if token is None:
            return
        rec = self.recorder
        name, group, async_op, read_ranges, write_ranges, device, site, outer = token
        deferred = rec.end_op(outer)
        try:
            if device >= 0 and out is not None:
                work = self._remember_work(out, device)
                thread = rec.thread_actor()
                stream = rec.stream_actor(device)
                comm = self.comm_actor(group, device)
                calls = [("collective", (thread, stream, comm, read_ranges, write_ranges, async_op, work, site, name))]
                # ProcessGroupNCCL keeps the collective's blocks from reuse until its stream is done with them
                # (recordStream on that stream, or the tensors held by the Work until wait()): for the allocator,
                # the communication stream is a recorded user of each of them.
                for base in {rng[0] for rng in read_ranges} | {rng[0] for rng in write_ranges}:
                    calls.append(("record_stream", (base, comm)))
                if deferred:
                    calls.extend(self._on_comm_stream(deferred, stream, comm))
                rec.emit_now(calls)
            elif deferred:
                rec.emit_now(deferred)
        except Exception as exc:  # noqa: BLE001
            rec.fail(exc)

    def comm_actor(self, group: Any, device: int) -> str:
        """The actor of `group`'s NCCL stream on `device`, named for reports at its first use."""
        comm = nccl_stream(self._group_name(group), device)
        if comm not in self._named_comms:
            self._named_comms.add(comm)
            self.recorder.emit("stream_name", comm, self._comm_title(group))
        return comm

    def _on_comm_stream(self, deferred: list, stream: str, comm: str) -> list:
        """The callbacks fired inside the collective, with the group's internal stream named as the comm actor.

        An event recorded or waited inside the op on a stream other than the launching one is on the group's NCCL
        stream: its wait for the launching stream, the work's end event, the events of `work.get_future()`. Tying
        that stream's handle to the comm actor makes every later wait on those events order the waiter after the
        collective: the DDP reducer's C++ waits, `Future.wait()` / `.then()`, c10d's coalesced ops."""
        tied = []
        for method, args in deferred:
            if method in ("event_record", "event_wait") and args[2] != stream and args[2].startswith("cuda:"):
                self.recorder.alias_stream(args[2], comm)
                args = (args[0], args[1], comm)
            tied.append((method, args))
        return tied

    def _group_name(self, group: Any) -> str:
        if group is None:
            return "default"
        try:
            pg = self._pg_type.unbox(group) if isinstance(group, torch.ScriptObject) else group
            return str(pg.group_name)
        except Exception:  # noqa: BLE001 - an unnamed group still gets one actor
            return f"pg{id(group)}"

    def _comm_title(self, group: Any) -> str:
        """"NCCL stream of group [0, 1]": which ranks take part says more than a group's name."""
        try:
            import torch.distributed as dist

            pg = self._pg_type.unbox(group) if isinstance(group, torch.ScriptObject) else group
            ranks = dist.get_process_group_ranks(pg) if pg is not None else list(range(dist.get_world_size()))
            return f"NCCL stream of group {sorted(ranks)}"
        except Exception:  # noqa: BLE001 - a group torch cannot list (already destroyed, not registered)
            return f"NCCL stream of group {self._group_name(group)}"

    def _remember_work(self, out: Any, device: int) -> int:
        work = out[-1] if isinstance(out, (tuple, list)) else out
        if isinstance(work, torch.ScriptObject) and self._work_type is not None:
            work = self._work_type.unbox(work)
        key = id(work)
        try:
            ref: Any = weakref.ref(work, lambda _, key=key: self._dropped(key))
        except TypeError:  # not weakly referenceable: held, within a bound
            ref = work
            if len(self.pending) >= _MAX_PENDING_WORKS:
                self.pending.pop(next(iter(self.pending)))
        self._handoff.append(work)
        self.pending[key] = (ref, device)
        return id(work)

    # ---- the program side: Work.wait() --------------------------------------------------------------------------
    def _waited(self, work: Any, blocking: bool) -> None:
        rec = self.recorder
        if not rec.active:
            return
        entry = self.pending.get(id(work))
        if entry is not None and _target(entry[0]) is work:
            del self.pending[id(work)]
            key, device = id(work), entry[1]
        elif self.native_works is not None and (found := self.native_works(work)) is not None:
            key, device = found  # launched through the native hook (native_hook/collectives.h)
        else:
            return
        rec.emit("work_wait", rec.thread_actor(), rec.stream_actor(device), key, blocking or self.blocking_wait)
        if self._forgets_works:
            rec.emit("forget_work", key)  # waited once: its clock would only pile up in a long run

    def _dropped(self, key: int) -> None:
        """A Work died unwaited: nothing can wait for it any more, so its clock goes too."""
        entry = self.pending.get(key)
        if entry is None or _target(entry[0]) is not None:
            return  # waited already, or the id belongs to a newer live Work
        del self.pending[key]
        # Told to the detector at the next collective, not now: a garbage collection can run this callback while
        # the recorder's lock is held.
        self._dropped_works.append(key)

    def install(self) -> None:
        try:
            import torch.distributed as dist

            if not dist.is_available():
                return
            from torch._C import _distributed_c10d as c10d
        except ImportError:
            return
        self._work_type = c10d.Work
        self._pg_type = c10d.ProcessGroup
        hooks = self

        for method_name, blocking in (("wait", False), ("synchronize", False)):
            original = getattr(c10d.Work, method_name)

            def wrapped(self, *args, _original=original, _blocking=blocking, **kwargs):
                result = _original(self, *args, **kwargs)
                try:
                    hooks._waited(self, _blocking)
                except Exception as exc:  # noqa: BLE001
                    hooks.recorder.fail(exc)
                return result

            self._saved.append((c10d.Work, method_name, original))
            setattr(c10d.Work, method_name, wrapped)

    def uninstall(self) -> None:
        while self._saved:
            cls, name, original = self._saved.pop()
            setattr(cls, name, original)
        self.pending.clear()
        self._handoff.clear()
