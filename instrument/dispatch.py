"""Every aten op as reads and writes of byte ranges, from its schema's alias information (a TorchDispatchMode).

For each OpOverload an `OpPlan` is built once and cached, so the per-op cost is a dict lookup, a walk over the
tensor arguments the plan names, and one sink call. Which arguments are read and written, and which returns are
fresh, comes from the one table both backends read (op_table.py: schema alias annotations, metadata-only
arguments, queries, record_stream, c10d collectives handed to instrument/collectives.py).

A return the schema calls fresh that lives in the storage of an argument the op reads (`_unsafe_view`, `type_as`
to the same dtype: the op handed back its input or a view of it) is neither a write nor a read of that storage.

Attribution: an op touching any CUDA tensor is a kernel enqueued by the calling thread on its current stream of that
tensor's device; pinned host tensors in it are accessed by that stream (a non_blocking copy); an op touching only
pinned host tensors is a host access by the thread (instrument/pinned.py). Pageable host tensors are not tracked:
copies to and from them are synchronous.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor
from torch.utils._python_dispatch import TorchDispatchMode

from .pinned import PinnedMemory
from .recorder import RaceError, Recorder

# The table of what each op touches lives in op_table.py (the C++ hook reads the same one).
from .op_table import (  # noqa: E402 - re-exported: older callers import these names from here
    ACCESS,
    COLLECTIVE,
    METADATA_ONLY_OPS,
    RECORD_STREAM,
    SKIP,
    is_factory_like as _is_factory_like,
    roles_of_schema,
)
from . import op_table  # noqa: E402


@dataclass(frozen=True)
class OpPlan:
    """Which arguments of one OpOverload are read and written, and which returns are fresh tensors.

    reads / writes: ((position, name), ...); position -1 means keyword-only.
    fresh_returns: indices of returns that are newly written tensors; None when the op returns a single value.
    """

    name: str
    kind: str
    reads: tuple[tuple[int, str], ...] = ()
    writes: tuple[tuple[int, str], ...] = ()
    fresh_returns: tuple[int, ...] = ()
    single_return: bool = True


def build_plan(func: Any) -> OpPlan:
    """Read the schema of an OpOverload once, through the shared table (op_table.py)."""
    schema = func._schema
    name = schema.name
    if "::" not in name:
        name = f"{func.namespace}::{name}"
    kind, args, returns = roles_of_schema(schema, func.namespace)
    if kind != ACCESS:
        return OpPlan(name, kind)
    reads, writes = [], []
    for position, (arg, role) in enumerate(zip(schema.arguments, args)):
        where = (-1 if arg.kwarg_only else position, arg.name)
        if role == op_table.READ:
            reads.append(where)
        elif role == op_table.WRITE:
            writes.append(where)
    fresh = tuple(i for i, role in enumerate(returns) if role == op_table.FRESH)
    return OpPlan(name, ACCESS, tuple(reads), tuple(writes), fresh, len(schema.returns) == 1)


def collect_tensors(value: Any, out: list) -> None:
    """Append the tensors in `value` (a tensor, or nested lists/tuples of them) to `out`."""
    if isinstance(value, torch.Tensor):
        out.append(value)
    elif isinstance(value, (list, tuple)):
        for item in value:
            collect_tensors(item, out)


def byte_range(tensor: torch.Tensor) -> tuple[int, int, int] | None:
    """(storage base pointer, start, end) of the bytes a tensor can touch; None for empty or non-strided tensors.

    The span runs from the first to one past the last element, so a strided view covers the gaps between its
    elements too: coarse, but never smaller than the truth.
    """
    try:
        numel = tensor.numel()
        if not numel:
            return None
        size = tensor.element_size()
        start = tensor.storage_offset() * size
        base = tensor.data_ptr() - start
        if tensor.is_contiguous():
            return base, start, start + numel * size
        span = 1
        for extent, step in zip(tensor.shape, tensor.stride()):
            span += (extent - 1) * step
        return base, start, start + span * size
    except (RuntimeError, NotImplementedError, AttributeError):
        return None  # sparse, meta, fake, or other tensors without plain storage


def tensors_of(where: tuple, args: tuple, kwargs: dict) -> list:
    """The tensors in the arguments a plan names (lists and optionals walked), in schema order."""
    tensors: list = []
    n_args = len(args)
    for position, name in where:
        value = args[position] if 0 <= position < n_args else kwargs.get(name)
        if value is not None:
            collect_tensors(value, tensors)
    return tensors


def tensor_accesses(plan: OpPlan, args: tuple, kwargs: dict) -> tuple[list, list]:
    """The tensors an op reads and writes per its plan (device-agnostic)."""
    return tensors_of(plan.reads, args, kwargs), tensors_of(plan.writes, args, kwargs)


def fresh_outputs(plan: OpPlan, out: Any) -> list:
    tensors: list = []
    if not plan.fresh_returns:
        return tensors
    if plan.single_return:
        collect_tensors(out, tensors)
    else:
        for i in plan.fresh_returns:
            collect_tensors(out[i], tensors)
    return tensors


class AccessCollector:
    """Turns tensors into the (storage, start, end) ranges the sink wants, and finds the op's device."""

    __slots__ = ("pinned", "device")

    def __init__(self, pinned: PinnedMemory) -> None:
        self.pinned = pinned
        self.device = -1

    def ranges_of_arguments(self, where: tuple, args: tuple, kwargs: dict) -> list:
        return self.ranges_of(tensors_of(where, args, kwargs))

    def ranges_of(self, tensors: list, fresh: bool = False) -> list:
        ranges = []
        for tensor in tensors:
            device = tensor.get_device()
            rng = byte_range(tensor)
            if rng is None:
                continue
            if device >= 0:
                if self.device < 0:
                    self.device = device
            elif not self.pinned.is_pinned(tensor, rng[0], fresh):
                continue
            ranges.append(rng)
        return ranges


def _ranges_of_plan(where: tuple, args: tuple, kwargs: dict, pinned: PinnedMemory, out: list, device: int) -> int:
    """Append the byte ranges of the tensors a plan names to `out`; returns the op's device (or `device`).

    The per-op form of `AccessCollector.ranges_of_arguments`, without the intermediate tensor list and objects.
    """
    n_args = len(args)
    for position, name in where:
        value = args[position] if 0 <= position < n_args else kwargs.get(name)
        if value is None:
            continue
        tensors = (value,) if isinstance(value, Tensor) else value if isinstance(value, (list, tuple)) else ()
        for tensor in tensors:
            if not isinstance(tensor, Tensor):
                continue  # None in a Tensor?[] (index_put's indices)
            rng = byte_range(tensor)
            if rng is None:
                continue
            on = tensor.get_device()
            if on >= 0:
                if device < 0:
                    device = on
            elif not pinned.is_pinned(tensor, rng[0]):
                continue
            out.append(rng)
    return device


def _returned_an_input(base: int, reads: list) -> bool:
    """A "fresh" return in the storage of a read argument: the op handed back its input (or a view), so drop that
    read and write nothing."""
    kept = [rng for rng in reads if rng[0] != base]
    if len(kept) == len(reads):
        return False
    reads[:] = kept
    return True


class StreamcheckMode(TorchDispatchMode):
    """Sees every aten op of the thread that entered it (and of the autograd engine's threads) and reports it."""

    def __init__(self, recorder: Recorder, plans: dict, pinned: PinnedMemory, collectives: Any = None) -> None:
        super().__init__()
        self.recorder = recorder
        self.plans = plans
        self.pinned = pinned
        self.collectives = collectives

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if kwargs is None:
            kwargs = {}
        rec = self.recorder
        if not rec.active:
            return func(*args, **kwargs)
        if rec.pending_raise is not None:
            rec.take_pending_raise()
        plan = self.plans.get(func)
        if plan is None:
            try:
                plan = self.plans[func] = build_plan(func)
            except Exception as exc:  # noqa: BLE001
                rec.fail(exc)
                return func(*args, **kwargs)
        kind = plan.kind
        if kind is not ACCESS:
            if kind is COLLECTIVE and self.collectives is not None:
                return self.collectives.dispatch(func, plan, args, kwargs)
            if kind is RECORD_STREAM:
                self._record_stream(args)
            return func(*args, **kwargs)
        pinned = self.pinned
        try:
            reads: list = []
            writes: list = []
            device = -1
            if plan.reads:
                device = _ranges_of_plan(plan.reads, args, kwargs, pinned, reads, device)
            if plan.writes:
                device = _ranges_of_plan(plan.writes, args, kwargs, pinned, writes, device)
            outer = rec.begin_op()
        except Exception as exc:  # noqa: BLE001
            rec.fail(exc)
            return func(*args, **kwargs)
        try:
            out = func(*args, **kwargs)
        except BaseException:
            deferred = rec.end_op(outer)
            if deferred:
                rec.emit_now(deferred)
            raise
        try:
            self._finish(plan, device, reads, writes, out, outer)
        except RaceError:
            raise
        except Exception as exc:  # noqa: BLE001
            rec.end_op(outer)
            rec.fail(exc)
        return out

    def _finish(self, plan: OpPlan, device: int, reads: list, writes: list, out: Any, outer: Any) -> None:
        rec = self.recorder
        allocs = None  # (base, storage bytes, allocated by the device's caching allocator)
        if plan.fresh_returns:
            fresh_blocks = rec.fresh_blocks
            outputs = (out,) if plan.single_return else [out[i] for i in plan.fresh_returns]
            for value in outputs:
                tensors = (value,) if isinstance(value, Tensor) else value if isinstance(value, (list, tuple)) else ()
                for tensor in tensors:
                    if not isinstance(tensor, Tensor):
                        continue
                    rng = byte_range(tensor)
                    if rng is None:
                        continue
                    if reads and _returned_an_input(rng[0], reads):
                        continue
                    on = tensor.get_device()
                    if on >= 0:
                        if device < 0:
                            device = on
                        if fresh_blocks.pop(rng[0], None):
                            if allocs is None:
                                allocs = []
                            allocs.append((rng[0], tensor.untyped_storage().nbytes(), True))
                    elif self.pinned.is_pinned(tensor, rng[0], True):
                        # A fresh pinned block: what happened at this address before is another tensor's story.
                        if allocs is None:
                            allocs = []
                        allocs.append((rng[0], tensor.untyped_storage().nbytes(), False))
                    else:
                        continue
                    writes.append(rng)
        deferred = rec.end_op(outer)
        if not reads and not writes:
            if deferred:
                rec.emit_now(deferred)
            return
        thread = rec.thread_actor()
        site = rec.sites.capture(3)
        stream = rec.stream_actor(device) if device >= 0 else thread
        rec.emit_access(thread, stream, reads, writes, site, plan.name, allocs, deferred)

    def _record_stream(self, args: tuple) -> None:
        report_record_stream(self.recorder, args)


def report_record_stream(rec: Recorder, args: tuple) -> None:
    """`tensor.record_stream(stream)`: the allocator will wait for `stream` before reusing the tensor's block."""
    try:
        tensor, stream = args[0], args[1]
        rng = byte_range(tensor)
        if rng is None or tensor.get_device() < 0:
            return
        handle = torch.cuda.Stream(
            stream_id=stream.stream_id, device_index=stream.device_index, device_type=stream.device_type
        ).cuda_stream
        rec.emit("record_stream", rng[0], rec.stream_actor(stream.device_index, handle))
    except Exception as exc:  # noqa: BLE001
        rec.fail(exc)


class ModeBackend:
    """The dispatch mode as a backend, with the native hook's interface (native.NativeHooks): `install()` enters one
    mode on the calling thread and keeps it entered (not a `with` block, so that the autograd engine's threads see
    it too), `thread_entry()` makes the mode a user thread enters, `uninstall()` leaves it."""

    name = "mode"

    def __init__(self, recorder: Recorder, pinned: PinnedMemory, collectives: Any = None) -> None:
        self.recorder = recorder
        self.pinned = pinned
        self.collectives = collectives
        self.plans: dict = {}  # one plan per OpOverload, shared by every thread's mode
        self._mode: StreamcheckMode | None = None
        self._thread: int | None = None

    def thread_entry(self) -> StreamcheckMode:
        return StreamcheckMode(self.recorder, self.plans, self.pinned, self.collectives)

    def install(self) -> None:
        self._mode = self.thread_entry()
        self._mode.__enter__()
        self._thread = threading.get_ident()

    def uninstall(self) -> None:
        mode, self._mode = self._mode, None
        if mode is None or threading.get_ident() != self._thread:
            return
        try:
            mode.__exit__(None, None, None)
        except Exception:  # noqa: BLE001 - a mode stack the program rearranged: leave it, it is inactive now
            pass
