"""Call sites of recorded operations: captured cheaply on every op, turned into file/line/function only when reported.

Capture walks up from the hook to the first frame whose file lies outside torch and streamcheck (the frame a user
can act on), then keeps that frame and a few callers as (code object, line) pairs. The pairs are interned by the
code objects' ids, so the hot path is a frame walk, a tuple and a dict lookup; the code objects are kept alive by
the table, so an id is never reused for another function while the table exists.
"""

from __future__ import annotations

import importlib.util
import os
import sys
import threading

UNKNOWN_SITE = -1

def _package_dir(name: str) -> str | None:
    """The directory of a top-level package, found without importing it (the watch may start before torch is)."""
    try:
        spec = importlib.util.find_spec(name)
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.origin:
        return None
    return os.path.dirname(os.path.abspath(spec.origin)) + os.sep


class SiteTable:
    """Interns call sites; `capture()` on the hot path, `frames(site)` when a site is reported."""

    def __init__(self, depth: int = 8, extra_internal: tuple[str, ...] = ()) -> None:
        self.depth = depth
        internal = [d for d in (_package_dir("torch"), _package_dir("streamcheck")) if d]
        here = os.path.dirname(os.path.abspath(__file__)) + os.sep  # instrument/ when run from a source tree
        internal.append(here)
        internal.extend(extra_internal)
        self._internal_prefixes = tuple(internal)
        self._is_internal_code: dict[int, bool] = {}
        self._code_keepalive: dict[int, object] = {}
        self._ids: dict[tuple, int] = {}
        self._keys: list[tuple] = []
        self._lock = threading.Lock()

    def _classify(self, code) -> bool:
        filename = code.co_filename
        internal = filename.startswith(self._internal_prefixes) or filename.startswith("<frozen")
        self._is_internal_code[id(code)] = internal
        self._code_keepalive[id(code)] = code
        return internal

    def capture(self, skip: int = 2) -> int:
        """The site id of the caller `skip` frames up, blamed on its first frame outside torch/streamcheck."""
        try:
            frame = sys._getframe(skip)
        except ValueError:
            return UNKNOWN_SITE
        is_internal = self._is_internal_code
        while frame is not None:
            code = frame.f_code
            internal = is_internal.get(id(code))
            if internal is None:
                internal = self._classify(code)
            if not internal:
                break
            frame = frame.f_back
        if frame is None:
            return UNKNOWN_SITE
        key: tuple = ()
        depth = self.depth
        while frame is not None and depth:
            code = frame.f_code
            if id(code) not in is_internal:
                self._classify(code)
            key += (id(code), frame.f_lineno)
            frame = frame.f_back
            depth -= 1
        site = self._ids.get(key)
        if site is None:
            with self._lock:
                site = self._ids.get(key)
                if site is None:
                    site = len(self._keys)
                    self._keys.append(key)
                    self._ids[key] = site
        return site

    def frames(self, site: int) -> list[list]:
        """[[file, line, function], ...], the blamed frame first; [] for an unknown site."""
        if site is None or site < 0 or site >= len(self._keys):
            return []
        key = self._keys[site]
        out = []
        for i in range(0, len(key), 2):
            code = self._code_keepalive[key[i]]
            out.append([code.co_filename, key[i + 1], code.co_name])
        return out

    def __len__(self) -> int:
        return len(self._keys)
