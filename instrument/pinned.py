"""Pinned (page-locked) host memory: the one kind of host memory a stream can still be using after the host moved on.

A `copy_(..., non_blocking=True)` between a CUDA tensor and a pinned host tensor returns before the copy ran, so
the host buffer is read (H2D) or written (D2H) by the stream, not by the thread: instrument/dispatch.py puts the
pinned side of such an op into the kernel's accesses. A CPU op on a pinned tensor (`h.add_(1)`, `h.numpy()` reads
through `aten::` ops, `h.tolist()`) is an access by the host thread: it races with a stream access that no
synchronization has ordered before the host. Pageable host memory is not tracked: CUDA copies to and from it are
synchronous with the host.

Whether a block is pinned is asked once per storage address (`Tensor.is_pinned()` asks the CUDA driver) and cached:
the host caching allocator keeps its blocks, so a pinned address stays pinned.
"""

from __future__ import annotations

import torch


class PinnedMemory:
    """Caches `is_pinned()` per storage base address."""

    def __init__(self, cuda_available: bool | None = None) -> None:
        self.enabled = torch.cuda.is_available() if cuda_available is None else cuda_available
        self._pinned_by_base: dict[int, bool] = {}

    def is_pinned(self, tensor: torch.Tensor, base: int, fresh: bool = False) -> bool:
        """`fresh`: the tensor was just allocated, so the address may have changed hands: ask again."""
        if not self.enabled:
            return False
        pinned = None if fresh else self._pinned_by_base.get(base)
        if pinned is None:
            try:
                pinned = bool(tensor.is_pinned())
            except Exception:  # noqa: BLE001 - tensors without storage cannot be pinned
                pinned = False
            self._pinned_by_base[base] = pinned
        return pinned

