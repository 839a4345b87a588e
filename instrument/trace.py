"""Recorded traces: JSONL, one event a line, versioned; written by the runtime, replayed anywhere.

Format (version 1):
- first line: {"e": "header", "format": "streamcheck-trace", "version": 1, "rank": R, "world_size": W, ...}
  (more header keys are allowed and kept);
- then one object per Detector call: {"e": "<method>", <argument>: <value>, ...} with the argument names of
  Detector's methods (EVENTS below); reads/writes are lists of [storage, start, end];
- naming events: {"e": "site", "id": k, "frames": [[file, line, function], ...]} (innermost user frame first),
  {"e": "stream_name", "stream": S, "name": "..."}, {"e": "storage_info", "storage": id, "shape": [...], ...}.

The n-th line after the header is event n (0-based): that is `Access.seq`. Readers ignore keys they don't know, and
`replay` skips events it doesn't know (counting them), so later versions may add fields and events.

Additions to notes/trace-contract.md (all backward compatible): Detector and TraceWriter both have `site(id,
frames)`, `stream_name(stream, name)` and `storage_info(storage, **info)` methods, so a tee of every call gives a
complete trace and a live Detector can name sites; `Access` has two more fields, `clock` (the actor's epoch) and
`stream` (for collectives: the stream they were launched from); header keys beyond rank/world_size are free-form;
`.gz` paths are written and read gzip-compressed.
"""

from __future__ import annotations

import gzip
import io
import json
import threading
from pathlib import Path
from typing import IO, Any, Iterable, Iterator

FORMAT = "streamcheck-trace"
VERSION = 1

# Every event a trace may hold and its arguments, in Detector's order; the first ones without a default are required.
EVENTS: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    # name: (required arguments, optional arguments)
    "stream_created": (("thread", "stream"), ()),
    "kernel": (("thread", "stream"), ("reads", "writes", "site", "op")),
    "host_access": (("thread",), ("reads", "writes", "site", "op")),
    "event_record": (("thread", "event", "stream"), ()),
    "event_wait": (("thread", "event", "stream"), ()),
    "event_destroy": (("event",), ()),
    "sync_event": (("thread", "event"), ()),
    "sync_stream": (("thread", "stream"), ()),
    "sync_device": (("thread", "device"), ()),
    "thread_start": (("parent", "child"), ()),
    "thread_join": (("parent", "child"), ()),
    "alloc": (("storage", "size", "stream"), ("site",)),
    "record_stream": (("storage", "stream"), ()),
    "free": (("thread", "storage"), ("site",)),
    "collective": (("thread", "stream", "comm"), ("reads", "writes", "async_op", "work", "site", "op")),
    "work_wait": (("thread", "stream", "work"), ("blocking",)),
    "site": (("id", "frames"), ()),
    "stream_name": (("stream", "name"), ()),
    "storage_info": (("storage",), ()),  # plus any descriptive keys
}


class TraceError(ValueError):
    """A trace that cannot be read; the message names the file and line."""


class TraceWriter:
    """Writes a trace; has the same methods as Detector, so the runtime can tee every call into both.

    Lines are buffered and written `batch` at a time (and on flush/close); thread-safe.
    """

    def __init__(self, path_or_file: str | Path | IO[str], rank: int = 0, world_size: int = 1, batch: int = 4096,
                 **header: Any) -> None:
        if isinstance(path_or_file, (str, Path)):
            path = Path(path_or_file)
            self._file: IO[str] = gzip.open(path, "wt") if path.suffix == ".gz" else open(path, "w")
            self._owns_file = True
        else:
            self._file = path_or_file
            self._owns_file = False
        self._batch = batch
        self._lines: list[str] = []
        self._lock = threading.Lock()
        self._encode = json.JSONEncoder(separators=(",", ":")).encode
        head = {"e": "header", "format": FORMAT, "version": VERSION, "rank": rank, "world_size": world_size}
        head.update(header)
        self._file.write(self._encode(head) + "\n")

    def _emit(self, event: dict) -> None:
        self._lines.append(self._encode(event))
        if len(self._lines) >= self._batch:
            self.flush()

    def flush(self) -> None:
        with self._lock:
            lines, self._lines = self._lines, []
            if lines:
                self._file.write("\n".join(lines) + "\n")
            self._file.flush()

    def close(self) -> None:
        self.flush()
        if self._owns_file:
            self._file.close()

    def __enter__(self) -> "TraceWriter":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ---- the Detector's methods -------------------------------------------------------------------------------
    def stream_created(self, thread: str, stream: str) -> None:
        self._emit({"e": "stream_created", "thread": thread, "stream": stream})

    def kernel(self, thread: str, stream: str, reads: Iterable = (), writes: Iterable = (), site: int = -1,
               op: str = "") -> None:
        self._emit({"e": "kernel", "thread": thread, "stream": stream, "reads": _ranges(reads),
                    "writes": _ranges(writes), "site": site, "op": op})

    def host_access(self, thread: str, reads: Iterable = (), writes: Iterable = (), site: int = -1,
                    op: str = "") -> None:
        self._emit({"e": "host_access", "thread": thread, "reads": _ranges(reads), "writes": _ranges(writes),
                    "site": site, "op": op})

    def event_record(self, thread: str, event: int, stream: str) -> None:
        self._emit({"e": "event_record", "thread": thread, "event": event, "stream": stream})

    def event_wait(self, thread: str, event: int, stream: str) -> None:
        self._emit({"e": "event_wait", "thread": thread, "event": event, "stream": stream})

    def event_destroy(self, event: int) -> None:
        self._emit({"e": "event_destroy", "event": event})

    def sync_event(self, thread: str, event: int) -> None:
        self._emit({"e": "sync_event", "thread": thread, "event": event})

    def sync_stream(self, thread: str, stream: str) -> None:
        self._emit({"e": "sync_stream", "thread": thread, "stream": stream})

    def sync_device(self, thread: str, device: int) -> None:
        self._emit({"e": "sync_device", "thread": thread, "device": device})

    def thread_start(self, parent: str, child: str) -> None:
        self._emit({"e": "thread_start", "parent": parent, "child": child})

    def thread_join(self, parent: str, child: str) -> None:
        self._emit({"e": "thread_join", "parent": parent, "child": child})

    def alloc(self, storage: int, size: int, stream: str, site: int = -1) -> None:
        self._emit({"e": "alloc", "storage": storage, "size": size, "stream": stream, "site": site})

    def record_stream(self, storage: int, stream: str) -> None:
        self._emit({"e": "record_stream", "storage": storage, "stream": stream})

    def free(self, thread: str, storage: int, site: int = -1) -> None:
        self._emit({"e": "free", "thread": thread, "storage": storage, "site": site})

    def collective(self, thread: str, stream: str, comm: str, reads: Iterable = (), writes: Iterable = (),
                   async_op: bool = False, work: int | None = None, site: int = -1, op: str = "") -> None:
        self._emit({"e": "collective", "thread": thread, "stream": stream, "comm": comm, "reads": _ranges(reads),
                    "writes": _ranges(writes), "async_op": async_op, "work": work, "site": site, "op": op})

    def work_wait(self, thread: str, stream: str, work: int, blocking: bool = False) -> None:
        self._emit({"e": "work_wait", "thread": thread, "stream": stream, "work": work, "blocking": blocking})

    def site(self, id: int, frames: list) -> None:  # noqa: A002 - the trace's field name
        self._emit({"e": "site", "id": id, "frames": [list(frame) for frame in frames]})

    def stream_name(self, stream: str, name: str) -> None:
        self._emit({"e": "stream_name", "stream": stream, "name": name})

    def storage_info(self, storage: int, **info: Any) -> None:
        self._emit({"e": "storage_info", "storage": storage, **info})


def _ranges(ranges: Iterable) -> list:
    return [list(r) for r in ranges]


def read_trace(source: str | Path | IO[str]) -> Iterator[dict]:
    """Yield the events of a trace, the header first. Raises TraceError with file and line on bad input."""
    if isinstance(source, (str, Path)):
        path = Path(source)
        name = str(path)
        try:
            raw = path.open("rb")
        except OSError as exc:
            raise TraceError(f"{name}: cannot open: {exc.strerror or exc}") from None
        with raw:
            magic = raw.read(2)
            raw.seek(0)
            binary = gzip.GzipFile(fileobj=raw) if magic == b"\x1f\x8b" else raw
            text = io.TextIOWrapper(binary, encoding="utf-8")
            yield from _parse(text, name)
    else:
        yield from _parse(source, getattr(source, "name", "<trace>"))


def _parse(lines: Iterable[str], name: str) -> Iterator[dict]:
    number = 0
    try:
        for number, line in enumerate(lines, 1):
            if not line.strip():
                continue
            try:
                event = json.loads(line)
            except json.JSONDecodeError as exc:
                raise TraceError(f"{name}:{number}: not JSON ({exc.msg})") from None
            if not isinstance(event, dict) or not isinstance(event.get("e"), str):
                raise TraceError(f"{name}:{number}: expected an object with an \"e\" key")
            if number == 1:
                _check_header(event, name)
            yield event
    except (UnicodeDecodeError, OSError, EOFError) as exc:
        raise TraceError(f"{name}:{number + 1}: unreadable ({exc})") from None
    if number == 0:
        raise TraceError(f"{name}: empty file, expected a streamcheck trace header")


def _check_header(event: dict, name: str) -> None:
    if event.get("e") != "header" or event.get("format") != FORMAT:
        raise TraceError(f"{name}:1: not a streamcheck trace (the first line must be a {FORMAT} header)")
    version = event.get("version")
    if not isinstance(version, int) or version > VERSION:
        raise TraceError(f"{name}:1: trace format version {version!r} is newer than this streamcheck "
                         f"(reads up to {VERSION})")


def event_arguments(event: dict, line: int | str = "?") -> dict:
    """The keyword arguments of a known event (unknown keys dropped); TraceError if a required one is missing."""
    name = event["e"]
    required, optional = EVENTS[name]
    missing = [key for key in required if key not in event]
    if missing:
        raise TraceError(f"event {line}: {name!r} lacks {', '.join(missing)}")
    if name == "storage_info":
        return {key: value for key, value in event.items() if key != "e"}
    return {key: event[key] for key in required + optional if key in event}


def replay(events: Iterable[dict], detector: Any) -> dict:
    """Feed a trace's events to `detector` (a Detector or anything with its methods), in order.

    Returns the header. `detector.seq` is set to each event's index so that Access.seq is the trace index even
    where unknown events are skipped. Bad events raise TraceError naming the event index.
    """
    header: dict = {}
    index = 0
    skipped = 0
    for event in events:
        name = event.get("e")
        if name == "header":
            header = event
            if hasattr(detector, "header"):
                detector.header = event
            continue
        if name in EVENTS:
            args = event_arguments(event, index)
            detector.seq = index
            try:
                getattr(detector, name)(**args)
            except (TypeError, ValueError, KeyError, AttributeError) as exc:
                raise TraceError(f"event {index} ({name}): bad arguments: {exc}") from None
        else:
            skipped += 1
        index += 1
    header = dict(header)
    header["skipped_events"] = skipped
    header["events"] = index
    return header
