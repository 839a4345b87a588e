"""Work that never reaches the dispatcher: inductor's Triton kernels (torch.compile) and CUDA graph replays.

Triton kernels. Code compiled by inductor launches its kernels with `CachingAutotuner.run(*args, stream=...)`, a
Python method, with the kernel's arguments in the order of `triton_meta["signature"]`. Each launch is one kernel on
the launching stream: arguments named `out_ptr*` / `in_out_ptr*` or listed in `mutated_arg_names` are written, the
other tensor arguments read. The program keeps running compiled; aten ops the compiled code calls (extern kernels,
allocations) reach the op hooks as usual. The module is patched when it is imported (it costs seconds to import,
so the watch does not import it itself). Frames of inductor's generated code are not the program's (sites.py).

CUDA graphs. Ops enqueued while a thread captures a graph do not run: their accesses are kept with the graph (in
capture order, with their capture sites) instead of reaching the detector, and each `replay()` emits them as
kernels of the stream it replays on. A race against a replayed access is blamed on the captured op's site, with
" (CUDA graph replay)" in its op name. The graph's internal stream order is kept as one sequence on the replay
stream: races between a graph's own branches are not looked for.
"""

from __future__ import annotations

import threading
from typing import Any

import torch

from streamcheck.triton_kernels import KernelWrites, writes_of_source

from .dispatch import byte_range
from .patching import Patches
from .recorder import Recorder

TRITON_HEURISTICS = "torch._inductor.runtime.triton_heuristics"
TRITON_JIT = "triton.runtime.jit"
_WRITTEN_PREFIXES = ("out_ptr", "in_out_ptr")


def device_of(tensor: torch.Tensor) -> int:
    """The CUDA device of a kernel argument (-1: not a device tensor); tests stand CPU tensors in for it."""
    return tensor.get_device()


class LaunchHooks:
    """Installs the Triton launch hook and the CUDA graph capture/replay hooks."""

    def __init__(self, recorder: Recorder) -> None:
        self.recorder = recorder
        self._patches = Patches()
        self._kernel_writes: dict[int, tuple[Any, KernelWrites | None]] = {}  # id(JITFunction) -> it, its stores
        self._capturing = threading.local()

    # ---- Triton -------------------------------------------------------------------------------------------------
    def _patch_triton(self, module: Any) -> None:
        self._wrap_run(getattr(module, "CachingAutotuner", None), self._compiled_launched, "benchmark_run")

    def _patch_jit(self, module: Any) -> None:
        self._wrap_run(getattr(module, "JITFunction", None), self._jit_launched, "warmup")

    def _wrap_run(self, owner: Any, launched: Any, skip_flag: str) -> None:
        """Wrap `owner.run` so that each launch, after it is enqueued, is reported by `launched(kernel, args,
        kwargs)`; a launch with `skip_flag` set (a benchmark or a warm-up: no kernel of the program) is not."""
        if owner is None or "run" not in vars(owner):
            return
        original = owner.run
        hooks = self

        def run(self, *args, **kwargs):
            out = original(self, *args, **kwargs)
            rec = hooks.recorder
            if rec.active and not kwargs.get(skip_flag, False):
                try:
                    launched(self, args, kwargs)
                except Exception as exc:  # noqa: BLE001
                    rec.fail(exc)
            return out

        self._patches.set(owner, "run", run)

    def _compiled_launched(self, kernel: Any, args: tuple, kwargs: dict) -> None:
        """Inductor's kernel: arguments named out_ptr* / in_out_ptr* or listed as mutated are written."""
        names = list((kernel.triton_meta or {}).get("signature", {}))
        mutated = set(getattr(kernel, "mutated_arg_names", ()) or ())
        written = [name.startswith(_WRITTEN_PREFIXES) or name in mutated for name in names]
        bound = [(position < len(written) and written[position], value) for position, value in enumerate(args)]
        self._emit_launch(kernel, bound, kwargs["stream"])

    def writes_of(self, kernel: Any) -> KernelWrites | None:
        """What a JITFunction stores through, read once from its source (None: no source to read)."""
        key = id(kernel)
        if key not in self._kernel_writes:
            self._kernel_writes[key] = (kernel, None)  # (a kernel that calls itself; kept: its id stays its own)
            names = getattr(getattr(kernel, "fn", None), "__globals__", {})

            def helper(name: str) -> KernelWrites | None:
                other = names.get(name)
                return self.writes_of(other) if isinstance(other, type(kernel)) else None

            source = getattr(kernel, "src", None)
            self._kernel_writes[key] = (kernel, writes_of_source(source, helper) if isinstance(source, str) else None)
        return self._kernel_writes[key][1]

    def _jit_launched(self, kernel: Any, args: tuple, kwargs: dict) -> None:
        """The program's @triton.jit kernel, on the current stream: what its source stores through is written."""
        found = self.writes_of(kernel)
        names = list(getattr(kernel, "arg_names", None) or (found.params if found else ()))
        written = found.written if found else set()
        bound = [(name in written, value) for name, value in zip(names, args)]
        bound += [(name in written, value) for name, value in kwargs.items() if name in names]
        self._emit_launch(kernel, bound, None)

    def _emit_launch(self, kernel: Any, bound: list[tuple[bool, Any]], stream: int | None) -> None:
        """One kernel on `stream` (None: the thread's current one) over its (written, argument) pairs: the device
        tensors among them are its reads and writes."""
        reads: list = []
        writes: list = []
        device = -1
        for is_written, value in bound:
            if not isinstance(value, torch.Tensor):
                continue
            on = device_of(value)
            rng = byte_range(value)
            if on < 0 or rng is None:
                continue
            device = on if device < 0 else device
            (writes if is_written else reads).append(rng)
        if device < 0:
            return
        rec = self.recorder
        site = rec.sites.capture(4)
        op = f"triton:{getattr(getattr(kernel, 'fn', None), '__name__', 'kernel')}"
        rec.emit_access(rec.thread_actor(), rec.stream_actor(device, stream), reads, writes, site, op, None, None)

    # ---- CUDA graphs ----------------------------------------------------------------------------------------------
    def _patch_graphs(self) -> None:
        graph_class = torch.cuda.CUDAGraph
        hooks = self
        begin, end, replay = graph_class.capture_begin, graph_class.capture_end, graph_class.replay

        def capture_begin(graph, *args, **kwargs):
            out = begin(graph, *args, **kwargs)
            graph._streamcheck_accesses = []
            hooks.recorder.capture_into(graph._streamcheck_accesses)
            return out

        def capture_end(graph, *args, **kwargs):
            hooks.recorder.capture_into(None)
            return end(graph, *args, **kwargs)

        def replay_(graph, *args, **kwargs):
            out = replay(graph, *args, **kwargs)
            hooks.replayed(getattr(graph, "_streamcheck_accesses", None))
            return out

        for name, replacement in (("capture_begin", capture_begin), ("capture_end", capture_end),
                                  ("replay", replay_)):
            self._patches.set(graph_class, name, replacement)

    def replayed(self, captured: list | None) -> None:
        """A graph was replayed on this thread's current stream: its captured accesses happen now, on that stream."""
        rec = self.recorder
        if not captured or not rec.active:
            return
        try:
            thread = rec.thread_actor()
            for device, reads, writes, site, op in captured:
                rec.emit_access(thread, rec.stream_actor(device), list(reads), list(writes), site,
                                f"{op} (CUDA graph replay)", None, None)
        except Exception as exc:  # noqa: BLE001
            rec.fail(exc)

    # ---- life cycle -----------------------------------------------------------------------------------------------
    def install(self) -> None:
        for name, patch in ((TRITON_HEURISTICS, self._patch_triton), (TRITON_JIT, self._patch_jit)):
            self._patches.on_import(name, patch)
        if torch.cuda.is_available() and hasattr(torch.cuda, "CUDAGraph"):
            self._patch_graphs()

    def uninstall(self) -> None:
        self._patches.undo()
        self.recorder.capture_into(None)
