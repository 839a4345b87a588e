"""streamcheck: find CUDA stream-ordering races in PyTorch code.

`streamcheck.watch()` (the runtime detector) is imported lazily so that the lint never needs torch.
"""

from __future__ import annotations

__all__ = ["watch", "annotate", "Finding", "Location"]


def __getattr__(name: str):
    if name in ("watch", "annotate"):
        from streamcheck.instrument import watch as runtime

        return getattr(runtime, name)
    if name in ("Finding", "Location"):
        from streamcheck import findings

        return getattr(findings, name)
    raise AttributeError(f"module 'streamcheck' has no attribute {name!r}")
