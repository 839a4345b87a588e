"""Which program tensor a reported storage is: a module parameter or buffer, or DeepSpeed's partition of one.

Looked up only when a race is first reported (never per op): the live `torch.nn.Module`s are found through the
garbage collector, their parameters and buffers listed with `named_parameters()` / `named_buffers()` from each
root module (so names carry the full dotted path), and for ZeRO-3 parameters the partitions DeepSpeed hangs on
them — `ds_tensor` (this rank's shard) and `ds_secondary_tensor` (the hpZ secondary shard) — with the parameter's
`ds_id`. A storage many tensors share (DeepSpeed's flat buffers) is named after the tensors whose bytes overlap the
race, the first by name plus how many more.
"""

from __future__ import annotations

import gc
import time
from typing import Any, Iterator

import torch

from .dispatch import byte_range

_PARTITIONS = ("ds_tensor", "ds_secondary_tensor")


def _root_modules() -> list[torch.nn.Module]:
    module_type = torch.nn.Module  # type(obj), not isinstance: some module-level proxies warn when inspected
    modules = [obj for obj in gc.get_objects() if issubclass(type(obj), module_type)]
    children = {id(child) for module in modules for child in module.children()}
    return [module for module in modules if id(module) not in children]


def _named_tensors(module: torch.nn.Module) -> Iterator[tuple[str, torch.Tensor, Any]]:
    for name, param in module.named_parameters(remove_duplicate=True):
        ds_id = getattr(param, "ds_id", None)
        yield name, param, ds_id
        for attribute in _PARTITIONS:
            part = getattr(param, attribute, None)
            if isinstance(part, torch.Tensor):
                yield f"{name}.{attribute}", part, ds_id
    for name, buffer in module.named_buffers(remove_duplicate=True):
        yield name, buffer, None


class StorageNamer:
    """Indexes the named tensors by storage once, and again on a miss at most every `refresh_s` seconds (a walk
    over every live object: cheap once per report, too slow per race)."""

    def __init__(self, refresh_s: float = 30.0) -> None:
        self.refresh_s = refresh_s
        # storage -> [(start, end, name, shape, dtype, ds_id)]: no tensor is kept alive by the index
        self._by_storage: dict[int, list[tuple[int, int, str, list, str, Any]]] = {}
        self._built_at: float | None = None

    def _build(self) -> None:
        index: dict[int, list] = {}
        seen: set[tuple[int, str]] = set()
        for root in _root_modules():
            for name, tensor, ds_id in _named_tensors(root):
                try:
                    rng = byte_range(tensor)
                except Exception:  # noqa: BLE001 - a tensor subclass without storage
                    continue
                if rng is None or (rng[0], name) in seen:
                    continue
                seen.add((rng[0], name))
                index.setdefault(rng[0], []).append((rng[1], rng[2], name, list(tensor.shape), str(tensor.dtype), ds_id))
        self._by_storage = index
        self._built_at = time.monotonic()

    def describe(self, storage: int, start: int, end: int) -> dict | None:
        """{name, shape, dtype, ds_id?} of the named tensor(s) whose bytes of `storage` overlap [start, end)."""
        if self._built_at is None or (storage not in self._by_storage
                                      and time.monotonic() - self._built_at > self.refresh_s):
            self._build()
        matches = sorted((entry for entry in self._by_storage.get(storage, ()) if entry[1] > start and entry[0] < end),
                         key=lambda entry: entry[2])
        if not matches:
            return None
        _, _, name, shape, dtype, ds_id = matches[0]
        more = f" (+{len(matches) - 1} more in the same buffer)" if len(matches) > 1 else ""
        info: dict = {"name": name + more, "shape": shape, "dtype": dtype}
        if ds_id is not None:
            info["ds_id"] = ds_id
        return info
