"""Recorded traces: JSONL, one event a line, versioned; written by the runtime, replayed anywhere.

Format (version 1):
- first line: {"e": "header", "format": "streamcheck-trace", "version": 1, "rank": R, "world_size": W, ...}
  (more header keys are allowed and kept; readers take the first non-blank line as the header);
- then one object per Sink call: {"e": "<method>", <argument>: <value>, ...} with the argument names of the Sink
  protocol's methods (events.py: EVENTS); reads/writes are lists of [storage, start, end];
- naming events: {"e": "site", "id": k, "frames": [[file, line, function], ...]} (innermost user frame first),
  {"e": "stream_name", "stream": S, "name": "..."}, {"e": "storage_info", "storage": id, "shape": [...], ...};
  they may come anywhere, before or after the events that use them (a watch writes each site with the flush that
  first writes an event of it, so a killed run's trace still names what it holds).

The n-th line after the header is event n (0-based): that is `Access.seq`. Readers ignore keys they don't know, and
`replay` skips events it doesn't know (counting them), so later versions may add fields and events.

The Detector, the writer and the HB oracle are all Sinks (events.py), so a tee of every call gives a complete trace;
`Access` has `clock` (the actor's epoch) and `stream` (for collectives: the stream they were launched from); header
keys beyond rank/world_size are free-form; `.gz` paths are written and read gzip-compressed.
"""

from __future__ import annotations

import gzip
import json
import threading
import zlib
from pathlib import Path
from typing import IO, Any, Iterable, Iterator

from streamcheck.constants import TRACE_FORMAT as FORMAT, TRACE_VERSION as VERSION, open_maybe_gzip

from .events import EVENTS, NAMING_EVENTS, EventError, arguments, defaults

__all__ = ["FORMAT", "VERSION", "EVENTS", "TraceError", "TraceWriter", "read_trace", "replay", "event_arguments"]


class TraceError(ValueError):
    """A trace that cannot be read; the message names the file and line."""


class TraceWriter:
    """Writes a trace. A Sink: its event methods are made from the protocol (events.py, `_writer_method` below), so
    the runtime can tee every call into a Detector and a writer.

    Lines are buffered and written `batch` at a time, on flush/close, and, with `flush_interval` (seconds), by a
    background thread at least that often, so that a run killed with SIGKILL loses at most that much of its trace.
    `before_flush`, if set, is called at the start of every flush: a place to write the naming events (sites) of
    what is about to be written. Thread-safe.
    """

    def __init__(self, path_or_file: str | Path | IO[str], rank: int = 0, world_size: int = 1, batch: int = 4096,
                 flush_interval: float | None = None, **header: Any) -> None:
        if isinstance(path_or_file, (str, Path)):
            path = Path(path_or_file)
            self._file: IO[str] = gzip.open(path, "wt") if path.suffix == ".gz" else open(path, "w")
            self._owns_file = True
        else:
            self._file = path_or_file
            self._owns_file = False
        self._batch = batch
        self._lines: list[str] = []
        self._lock = threading.Lock()  # the buffer
        self._write_lock = threading.Lock()  # the file: flushes write in the order they took their lines
        self._naming = False  # inside before_flush: its own events must not start another flush
        self.before_flush: Any = None
        self._encode = json.JSONEncoder(separators=(",", ":")).encode
        head = {"e": "header", "format": FORMAT, "version": VERSION, "rank": rank, "world_size": world_size}
        head.update(header)
        self._file.write(self._encode(head) + "\n")
        self._file.flush()
        self._closed = threading.Event()
        self._flusher: threading.Thread | None = None
        if flush_interval:
            self._flusher = threading.Thread(target=self._flush_every, args=(flush_interval,),
                                             name="streamcheck-trace-flush", daemon=True)
            self._flusher.start()

    def _flush_every(self, interval: float) -> None:
        while not self._closed.wait(interval):
            try:
                self.flush()
            except (OSError, ValueError):  # the file went away (disk full, closed): the run goes on
                return

    def _emit(self, event: dict) -> None:
        line = self._encode(event)
        with self._lock:
            self._lines.append(line)
            full = len(self._lines) >= self._batch
        if full and not self._naming:
            self.flush()

    def flush(self) -> None:
        hook = self.before_flush
        if hook is not None and not self._naming:
            self._naming = True
            try:
                hook()
            finally:
                self._naming = False
        with self._write_lock:
            with self._lock:
                lines, self._lines = self._lines, []
            if lines:
                self._file.write("\n".join(lines) + "\n")
            self._file.flush()

    def close(self) -> None:
        self._closed.set()
        if self._flusher is not None and self._flusher is not threading.current_thread():
            self._flusher.join()
        self.flush()
        if self._owns_file:
            self._file.close()

    def __enter__(self) -> "TraceWriter":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

def _ranges(ranges: Iterable) -> list:
    return [list(r) for r in ranges]


_AS_WRITTEN = {"reads": "_ranges({})", "writes": "_ranges({})", "frames": "[list(frame) for frame in {}]"}


def _writer_method(name: str):
    """TraceWriter's method for one Sink event, made from the protocol's signature (as dataclasses make __init__):
    a plain function, as fast as a hand-written one."""
    required, optional = EVENTS[name]
    values = defaults(name)
    parameters = [*required, *(f"{key}={key}_default" for key in optional)]
    fields = [f"{key!r}: {_AS_WRITTEN.get(key, '{}').format(key)}" for key in (*required, *optional)]
    extra = ", **info" if name == "storage_info" else ""
    source = (f"def {name}(self, {', '.join(parameters)}{extra}):\n"
              f"    self._emit({{'e': {name!r}, {', '.join(fields)}{extra}}})\n")
    scope = {"_ranges": _ranges, **{f"{key}_default": value for key, value in values.items()}}
    exec(source, scope)  # noqa: S102 - source built from the Sink protocol's own names above
    method = scope[name]
    method.__qualname__ = f"TraceWriter.{name}"
    return method


for _name in EVENTS:
    setattr(TraceWriter, _name, _writer_method(_name))


# Field types every reader checks, so that a damaged or foreign line is one bad line, never a TypeError deep in a
# consumer (the detector, hb.py, the report's namer). ids are hashable scalars; the rest as the writer writes them.
_STR, _INT, _ID, _BOOL, _RANGES, _FRAMES, _IDS = "a string", "an integer", "an integer or a string", "true or false", \
    "a list of [storage, start, end]", "a list of [file, line, function]", "a list of integers or strings"
_FIELD_TYPES = {
    "thread": _STR, "stream": _STR, "comm": _STR, "parent": _STR, "child": _STR, "op": _STR, "name": _STR,
    "size": _INT, "device": _INT, "site": _INT,
    "event": _ID, "storage": _ID, "work": _ID, "id": _ID,
    "async_op": _BOOL, "blocking": _BOOL,
    "reads": _RANGES, "writes": _RANGES, "frames": _FRAMES, "events": _IDS,
}


def _is_ranges(value: Any) -> bool:
    if value.__class__ is not list:
        return False
    for r in value:
        if r.__class__ is not list or len(r) != 3 or r[1].__class__ is not int or r[2].__class__ is not int \
                or r[0].__class__ not in _ID_TYPES:
            return False
    return True


_ID_TYPES = (int, str)
_CHECKS = {
    _STR: lambda v: v.__class__ is str,
    _INT: lambda v: v.__class__ is int,
    _ID: lambda v: v.__class__ in _ID_TYPES,
    _BOOL: lambda v: v.__class__ is bool,
    _RANGES: _is_ranges,
    _FRAMES: lambda v: v.__class__ is list and all(frame.__class__ is list for frame in v),
    _IDS: lambda v: v.__class__ is list and all(item.__class__ in _ID_TYPES for item in v),
}
# event name -> (required keys, ((key, null is wrong, check, expected), ...)), built once: this runs on every line of a trace
_SCHEMA = {
    name: (required, tuple((key, key in required and key != "work", _CHECKS[_FIELD_TYPES[key]], _FIELD_TYPES[key])
                           for key in required + optional if key in _FIELD_TYPES))
    for name, (required, optional) in EVENTS.items()
}


def check_event(event: dict) -> str:
    """Why a known event cannot be replayed (a required field missing, a field of the wrong type), or ""."""
    name = event["e"]
    required, fields = _SCHEMA[name]
    for key in required:
        if key not in event:
            return f"{name!r} lacks {', '.join(k for k in required if k not in event)}"
    for key, not_null, check, expected in fields:
        value = event.get(key)
        if value is None and not not_null:
            continue  # an optional field left out, or work=None (a collective without a handle)
        if not check(value):
            return f"{name!r} field {key!r} must be {expected}, not {_json_type(value)}"
    return ""


def _json_type(value: Any) -> str:
    return {dict: "an object", list: "a list", str: "a string", bool: "true/false", type(None): "null",
            float: "a number", int: "an integer"}.get(type(value), type(value).__name__)


# What a lenient reader yields for a line it had to skip: an event no consumer knows, so that it keeps its index
# (Access.seq of the events after it stays the trace index) and is counted among the skipped events.
UNREADABLE = "unreadable_line"


def read_trace(source: str | Path | IO[str], problems: list[str] | None = None) -> Iterator[dict]:
    """Yield the events of a trace, the header first.

    The first non-blank line must be a streamcheck-trace header of a version this reader knows: otherwise
    TraceError, always. A later bad line (not UTF-8, not JSON, nested too deep, not an event object, a known event
    with a missing or mistyped field, the cut-off end of a killed run) raises TraceError naming file and line; or,
    given a `problems` list, is appended there as "file:line: why", yielded as an UNREADABLE placeholder, and
    reading goes on.
    """
    if isinstance(source, (str, Path)):
        path = Path(source)
        name = str(path)
        try:
            raw = path.open("rb")
        except OSError as exc:
            raise TraceError(f"{name}: cannot open: {exc.strerror or exc}") from None
        with raw:
            try:
                binary = open_maybe_gzip(raw)
            except OSError as exc:
                raise TraceError(f"{name}: cannot read: {exc.strerror or exc}") from None
            yield from _parse(binary, name, problems)
    else:
        yield from _parse(source, getattr(source, "name", "<trace>"), problems)


def _parse(lines: Iterable, name: str, problems: list[str] | None) -> Iterator[dict]:
    """Lines (bytes from a file, or str) -> events; see read_trace."""
    number = 0
    header_seen = False
    iterator = iter(lines)
    while True:
        try:
            line = next(iterator)
        except StopIteration:
            break
        except (OSError, EOFError, zlib.error, UnicodeDecodeError) as exc:  # a gzip trace cut short, a bad disk
            why = f"unreadable after line {number} ({exc})"
            if problems is None or not header_seen:
                raise TraceError(f"{name}:{number + 1}: {why}") from None
            problems.append(f"{name}:{number + 1}: {why}; the events before it are kept")
            break
        number += 1
        event, why = _event_of(line)
        if event is None and why == "":
            continue  # a blank line
        if not header_seen:
            if event is None:
                raise TraceError(f"{name}:{number}: {why}: not a streamcheck trace (the first line must be a "
                                 f"{FORMAT} header)")
            _check_header(event, name, number)
            header_seen = True
            yield event
            continue
        if event is not None and event["e"] in EVENTS:
            why = check_event(event)
            if why:
                why, event = f"bad event: {why}", None
        if event is None:
            if _unfinished(line):
                why = "truncated last line (was the run killed?)"
            if problems is None:
                raise TraceError(f"{name}:{number}: {why}")
            problems.append(f"{name}:{number}: {why}, skipped")
            event = {"e": UNREADABLE, "line": number}
        yield event
    if not header_seen:
        raise TraceError(f"{name}: empty file, expected a streamcheck trace header")


def _event_of(line: bytes | str) -> tuple[dict | None, str]:
    """(event, "") for a good line, (None, "") for a blank one, (None, why) for a bad one."""
    if isinstance(line, bytes):
        try:
            line = line.decode("utf-8")
        except UnicodeDecodeError as exc:
            return None, f"not UTF-8 (byte 0x{line[exc.start]:02x} at column {exc.start + 1})"
    if not line.strip():
        return None, ""
    try:
        event = json.loads(line)
    except ValueError as exc:
        return None, f"not JSON ({getattr(exc, 'msg', exc)})"
    except RecursionError:
        return None, "not JSON this reader can take (nested too deep)"
    if not isinstance(event, dict) or not isinstance(event.get("e"), str):
        return None, 'expected an object with an "e" key'
    return event, ""


def _unfinished(line: bytes | str) -> bool:
    return not (line.endswith(b"\n") if isinstance(line, bytes) else line.endswith("\n"))


def _check_header(event: dict, name: str, number: int = 1) -> None:
    if event.get("e") != "header" or event.get("format") != FORMAT:
        raise TraceError(f"{name}:{number}: not a streamcheck trace (the first line must be a {FORMAT} header)")
    version = event.get("version")
    if type(version) is not int or version < 1:
        raise TraceError(f"{name}:{number}: trace header has no valid format version ({version!r})")
    if version > VERSION:
        raise TraceError(f"{name}:{number}: trace format version {version!r} is newer than this streamcheck "
                         f"(reads up to {VERSION})")


def event_arguments(event: dict, line: int | str = "?") -> dict:
    """The keyword arguments of a known event (unknown keys dropped); TraceError if a required one is missing."""
    try:
        return arguments(event)
    except EventError as exc:
        raise TraceError(f"event {line}: {exc}") from None


def replay(events: Iterable[dict], detector: Any, problems: list[str] | None = None,
           until: int | None = None) -> dict:
    """Feed a trace's events to `detector` (a Sink: a Detector, the HB oracle, a writer), in order.

    Returns the header. This is where events are numbered: `detector.seq` is set to each event's index so that
    Access.seq is the trace index even where unknown events are skipped. A bad event raises TraceError naming the
    event index; or, given a `problems` list, is appended there and skipped (keeping its index), and the replay
    goes on. `until`: events after that index are not delivered, except the naming ones (which may come late).
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
        if name in EVENTS and (until is None or index <= until or name in NAMING_EVENTS):
            try:
                args = event_arguments(event, index)
                detector.seq = index
                try:
                    getattr(detector, name)(**args)
                except (TypeError, ValueError, KeyError, AttributeError, IndexError) as exc:
                    raise TraceError(f"event {index} ({name}): bad arguments: {exc}") from None
            except TraceError as exc:
                if problems is None:
                    raise
                problems.append(f"{exc}, skipped")
                skipped += 1
        elif name not in EVENTS:
            skipped += 1
        index += 1
    header = dict(header)
    header["skipped_events"] = skipped
    header["events"] = index
    return header
