"""Call sites of recorded operations: captured cheaply on every op, turned into file/line/function only when reported.

Capture walks up from the hook to the first frame whose file lies outside torch and streamcheck (the frame a user
can act on; when there is none, as in DDP's reducer or the DataLoader's threads, the innermost frame outside
streamcheck, marked as a library frame in the function name it reports), then keys the site by that frame and a few callers as (code object id, bytecode offset) pairs, so the
hot path is a short frame walk, a tuple and a dict lookup; lines, files and functions are looked up only for sites
that are reported. The table keeps every code object it has seen alive, so an id never comes back for another
function.
"""

from __future__ import annotations

import importlib.util
import os
import sys
import threading

UNKNOWN_SITE = -1
# Appended to the function name of a site blamed on a library frame (it travels in traces and findings as is).
LIBRARY_NOTE = " [innermost library frame: no frame of the program on the stack]"
# For an access made with no Python frame at all during backward() (C++ autograd hooks, the DDP reducer).
BACKWARD_NOTE = " [during this backward(): the access came from C++ with no Python frame]"
_getframe = sys._getframe


def _package_dir(name: str) -> str | None:
    """The directory of a top-level package, found without importing it (the watch may start before torch is)."""
    try:
        spec = importlib.util.find_spec(name)
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.origin:
        return None
    return os.path.dirname(os.path.abspath(spec.origin)) + os.sep


def _line_of(code, offset: int) -> int:
    """The source line of the instruction at byte `offset` of `code`."""
    for start, end, line in code.co_lines():
        if start <= offset < end and line is not None:
            return line
    return code.co_firstlineno


class SiteTable:
    """Interns call sites; `capture()` on the hot path, `frames(site)` when a site is reported."""

    def __init__(self, depth: int = 8, extra_internal: tuple[str, ...] = ()) -> None:
        self.depth = depth
        # (triton's: a `kernel[grid](...)` launch is blamed on the line that wrote it, not on JITFunction's lambda)
        internal = [d for d in (_package_dir("torch"), _package_dir("streamcheck"), _package_dir("triton")) if d]
        here = os.path.dirname(os.path.abspath(__file__)) + os.sep  # instrument/ when run from a source tree
        internal.append(here)
        internal.append(threading.__file__)  # a thread's bootstrap and run(): never the frame a user can act on
        internal.extend(extra_internal)
        self._internal_prefixes = tuple(internal)
        self._own_prefixes = tuple(d for d in (_package_dir("streamcheck"), here) if d)
        self._notes: dict[int, str] = {}  # site -> what its first frame's function name says it is (LIBRARY_NOTE...)
        self._is_internal_code: dict[int, bool] = {}
        self._shallow: set[int] = set()  # ids of code objects blamed on a stack shorter than `depth`
        self._code_keepalive: dict[int, object] = {}
        self._ids: dict[tuple, int] = {}
        self._chains: list[list[tuple]] = []
        self._lock = threading.Lock()

    def _classify(self, code) -> bool:
        filename = code.co_filename
        internal = (filename.startswith(self._internal_prefixes) or filename.startswith("<frozen")
                    or "/torchinductor_" in filename)  # inductor's generated code: blame who called the compiled fn
        self._is_internal_code[id(code)] = internal
        self._code_keepalive[id(code)] = code
        return internal

    def capture(self, skip: int = 2) -> int:
        """The site id of the caller `skip` frames up, blamed on its first frame outside torch/streamcheck.

        Sites are told apart by the whole chain of `depth` frames from the blamed one up, so that the chain a
        report shows is the one this access came through (wrappers such as DeepSpeed's comm layer are shared by
        racy and harmless call paths alike).
        """
        try:
            frame = start = _getframe(skip)
        except ValueError:
            return UNKNOWN_SITE
        is_internal = self._is_internal_code
        while frame is not None:
            internal = is_internal.get(id(frame.f_code))
            if internal is None:
                internal = self._classify(frame.f_code)
            if not internal:
                break
            frame = frame.f_back
        if frame is None:
            return self.library_site(start)
        if self.depth == 8 and id(frame.f_code) not in self._shallow:
            # Unrolled (this runs once per op): (code object id, bytecode offset) of 8 frames; the bytecode offset
            # is cheaper than f_lineno and as precise. A shorter stack ends the expression at a None; code blamed
            # once on a short stack takes the loop from then on (an exception per op would cost more than the loop).
            f = frame
            try:
                key = (id(f.f_code), f.f_lasti, id((f := f.f_back).f_code), f.f_lasti,
                       id((f := f.f_back).f_code), f.f_lasti, id((f := f.f_back).f_code), f.f_lasti,
                       id((f := f.f_back).f_code), f.f_lasti, id((f := f.f_back).f_code), f.f_lasti,
                       id((f := f.f_back).f_code), f.f_lasti, id((f := f.f_back).f_code), f.f_lasti)
            except AttributeError:
                self._shallow.add(id(frame.f_code))
                key = self._key(frame)
        else:
            key = self._key(frame)  # the same key the unrolled form builds, for any depth
        site = self._ids.get(key)
        if site is None:
            site = self._intern(key, frame)
        return site

    def library_site(self, frame) -> int:
        """Every frame lies in torch (or streamcheck): blame the innermost frame outside streamcheck, and mark the
        site so that reports say it is a library frame (DDP's reducer, FSDP internals, the DataLoader's threads)."""
        own = self._own_prefixes
        while frame is not None and frame.f_code.co_filename.startswith(own):
            frame = frame.f_back
        if frame is None:
            return UNKNOWN_SITE
        key = self._key(frame)
        site = self._ids.get(key)
        if site is None:
            site = self._intern(key, frame)
            self._notes[site] = LIBRARY_NOTE
        return site

    def is_library_site(self, site: int) -> bool:
        return self._notes.get(site) == LIBRARY_NOTE

    def noted(self, site: int, note: str) -> int:
        """A site with `site`'s frames whose first function name carries `note` (UNKNOWN_SITE stays unknown)."""
        if site is None or site < 0 or site >= len(self._chains):
            return UNKNOWN_SITE
        key = ("noted", note, site)
        found = self._ids.get(key)
        if found is None:
            found = self._add(key, self._chains[site])
            self._notes[found] = note
        return found

    def intern_chain(self, chain: list) -> int:
        """The site id of a chain of (code object, bytecode offset) pairs, the blamed frame first (the native hook
        walks the frames itself and calls this for a chain it has not seen)."""
        key: list = []
        for code, offset in chain:
            key += (id(code), offset)
        return self._add(tuple(key), list(chain))

    def _key(self, frame) -> tuple:
        key: list = []
        depth = self.depth
        while frame is not None and depth:
            key += (id(frame.f_code), frame.f_lasti)
            frame = frame.f_back
            depth -= 1
        return tuple(key)

    def _intern(self, key: tuple, frame) -> int:
        chain = []
        depth = self.depth
        while frame is not None and depth:
            chain.append((frame.f_code, frame.f_lasti))
            frame = frame.f_back
            depth -= 1
        return self._add(key, chain)

    def _add(self, key: tuple, chain: list) -> int:
        """The id of `key`, a new one for a chain not seen before (its code objects stay alive: ids stay unique)."""
        with self._lock:
            site = self._ids.get(key)
            if site is None:
                site = len(self._chains)
                self._chains.append(chain)
                self._ids[key] = site
        return site

    def frames(self, site: int) -> list[list]:
        """[[file, line, function], ...], the blamed frame first; [] for an unknown site."""
        if site is None or site < 0 or site >= len(self._chains):
            return []
        frames = [[code.co_filename, _line_of(code, offset), code.co_name] for code, offset in self._chains[site]]
        note = self._notes.get(site)
        if note and frames:
            frames[0][2] += note
        return frames

    def __len__(self) -> int:
        return len(self._chains)
