"""What a runtime race finding (SC201-SC204) says in words a person knows: streams, tensor, the two accesses, the fix.

The runtime writes findings with raw identities in `extra` (instrument/races.py, instrument/watch.py): actors such as
"cuda:0/s0", "cuda:0/s94371", "nccl:1/0", "T139872"; `earlier` / `later` access dicts (actor, thread, is_write, site,
op, seq, stream); `earlier_stack` / `later_stack` ("path:line in function", the blamed frame first); storage and
byte range. This module turns them into a `RaceView`:

- stream names: a name the trace gave (`stream_name` events, copied into `extra["streams"]` by `enrich`) wins;
  otherwise stream 0 of a device is "compute stream cuda:D", any other "side stream 0x<handle> on cuda:D", an NCCL
  actor "NCCL stream of group G on cuda:D" (group 0, the default group, with its ranks when the world size is known),
  a host thread "host thread T<ident>";
- the tensor: `extra["tensor"]` (name, shape, dtype, ds_id, allocation site) when the runtime or `enrich` put it
  there, else the storage address;
- the fix hint: the edge that is missing, as code at the place it belongs (`side.wait_stream(compute)` before the
  read, `t.record_stream(s)` before the free, `s.synchronize()` before the host access).

`enrich(finding, names, world_size)` adds what a recorded trace knows (stream names, storage infos, allocation sites)
to `extra` and rewrites message and fix with these words, so json, sarif and github say the same as the text.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field, replace
from typing import Any, Mapping

from streamcheck.findings import ROLE_SYNC, Finding, parse_frame
from streamcheck.instrument.actors import NCCL, STREAM, is_host, parse
from streamcheck.instrument.names import Names

_KIND_WORDS = {"RAW": "read-after-write", "WAR": "write-after-read", "WAW": "write-after-write",
               "FREE": "free-while-in-use", "HOST": "host-device", "PEER": "handed-over-early"}


def is_runtime_finding(finding: Finding) -> bool:
    extra = finding.extra
    return isinstance(extra.get("earlier"), dict) and isinstance(extra.get("later"), dict)


def stream_label(actor: str, names: Mapping[str, str] | None = None, world_size: int = 0) -> str:
    """A person's name for an actor id (see the module docstring)."""
    who = parse(actor)
    device = who.device if who.kind in (STREAM, NCCL) else None
    if names and names.get(actor):
        name = str(names[actor])
        # "first used at x.py:3 in f" -> "side stream first used at ..."; look only before " at " so that a file
        # name such as test_streams.py does not count as the name already saying "stream".
        if who.kind == STREAM and "stream" not in name.split(" at ", 1)[0]:
            name = f"{'compute' if who.is_default_stream else 'side'} stream {name}"
        if device is None or "cuda:" in name:
            return name
        return f"{name} cuda:{device}" if name.endswith("stream") else f"{name} on cuda:{device}"
    if who.kind == STREAM:
        if who.is_default_stream:
            return f"compute stream cuda:{device}"
        return f"side stream 0x{who.stream:x} on cuda:{device}"
    if who.kind == NCCL:
        if who.group in ("0", "default_pg") and world_size > 0:
            return f"NCCL stream of group {list(range(world_size))} on cuda:{device}"
        return f"NCCL stream of group {who.group} on cuda:{device}"
    if who.is_host:
        return f"host thread {actor}"
    return actor


def display_path(path: str) -> str:
    """A path short enough to read: from the package for installed code, relative for files under the cwd."""
    marker = "site-packages/"
    if marker in path:
        return path.split(marker, 1)[1]
    try:
        relative = os.path.relpath(path)
    except ValueError:
        return path
    return relative if not relative.startswith("..") else path


def short_frame(frame: str) -> str:
    """"/long/path/file.py:12 in f" -> "file.py:12 in f"."""
    parsed = parse_frame(frame)
    if parsed is None:
        return frame
    path, line, function = parsed
    return f"{path.rsplit('/', 1)[-1]}:{line}" + (f" in {function}" if function else "")


@dataclass
class AccessView:
    """One side of the race."""

    verb: str  # read | write | free
    op: str
    actor: str
    stream: str  # a person's name of the actor
    thread: str
    launched_from: str = ""  # for a collective: the stream it was launched from (the one its NCCL stream waits for)
    launch_actor: str = ""
    path: str = ""
    line: int = 0
    function: str = ""
    snippet: str = ""
    callers: list[str] = field(default_factory=list)  # "file.py:12 in f", innermost first

    @property
    def where(self) -> str:
        if not self.path or self.path == "<unknown>":
            return "an unknown site"
        return f"{self.path.rsplit('/', 1)[-1]}:{self.line}"


@dataclass
class RaceView:
    kind: str
    tensor: str  # one line: name, dtype[shape], bytes, ds_id, allocation site
    tensor_name: str  # the short name used in sentences
    earlier: AccessView
    later: AccessView
    missing: str  # "the side stream never waited for the compute stream after X"
    fix: str
    ranks: list[int]
    count: int
    counts_by_rank: dict[str, int]
    steps: list[int]


def _frames(stack: Any) -> list[str]:
    return [str(frame) for frame in stack] if isinstance(stack, list) else []


def _access(finding: Finding, which: str, names: Mapping[str, str], world_size: int) -> AccessView:
    data = finding.extra.get(which) or {}
    actor = str(data.get("actor", ""))
    if data.get("op") == "free":
        verb = "free"
    else:
        verb = "write" if data.get("is_write") else "read"
    view = AccessView(verb=verb, op=str(data.get("op") or "?"), actor=actor,
                      stream=stream_label(actor, names, world_size), thread=str(data.get("thread", "")))
    if data.get("stream"):
        view.launch_actor = str(data["stream"])
        view.launched_from = stream_label(view.launch_actor, names, world_size)
    stack = _frames(finding.extra.get(f"{which}_stack"))
    location = finding.primary if which == "later" else next(
        (loc for loc in finding.related if loc.role in ("read", "write", "free")), None)
    if location is not None and location.path != "<unknown>":
        view.path, view.line, view.function, view.snippet = (location.path, location.line, location.note,
                                                             location.snippet)
    elif stack:
        view.path, view.line, view.function = parse_frame(stack[0]) or ("", 0, "")
    view.callers = [short_frame(frame) for frame in stack[1:] if not _is_torch_frame(frame)]
    return view


def _is_torch_frame(frame: str) -> bool:
    """torch's own frames (dynamo's eval_frame wrappers between user frames) say nothing to the reader."""
    parsed = parse_frame(frame)
    return parsed is not None and display_path(parsed[0]).startswith("torch/")


def tensor_text(finding: Finding) -> tuple[str, str]:
    """(the full one-line description, the short name for sentences)."""
    extra = finding.extra
    info = extra.get("tensor") if isinstance(extra.get("tensor"), dict) else {}
    start, end = extra.get("start"), extra.get("end")
    span = f"bytes [{start}, {end})" if start is not None and end is not None else ""
    storage = extra.get("storage")
    address = f"storage 0x{int(storage):x}" if isinstance(storage, int) else "a tensor"
    name = str(info.get("name") or "")
    parts = []
    if info.get("dtype") and info.get("shape") is not None:
        dtype = str(info["dtype"]).removeprefix("torch.")
        parts.append(f"{dtype}{list(info['shape'])}")
    if info.get("ds_id") is not None:
        parts.append(f"ds_id {info['ds_id']}")
    if info.get("alloc_site"):
        parts.append(f"allocated at {info['alloc_site']}")
    parts.append(f"{address}, race on {span}" if span else address)
    head = name or address
    description = f"{name}: " + ", ".join(parts) if name else ", ".join(parts)
    return description, head


def _code_name(actor: str, other: str) -> str:
    """A variable-like name for a stream in a code hint: compute, side (side_<handle> when both are side streams)."""
    def base(a: str) -> str:
        if is_host(a):
            return "thread"
        return "compute" if parse(a).is_default_stream else "side"

    name = base(actor)
    who = parse(actor)
    if who.kind == STREAM and name == "side" and other != actor and base(other) == "side":
        name = f"side_{who.stream:x}"
    return name


def fix_hint(kind: str, earlier: AccessView, later: AccessView,
             code: Mapping[str, str] | None = None) -> tuple[str, str]:
    """(the missing edge in words, the fix as code at its place). `code`: actor -> the name the program's code
    gives it (instrument/offline/code_names.py); where both streams have one, the fix uses them instead of placeholders."""
    code = code or {}
    before, after = later.where, earlier.where
    if kind == "FREE":
        user = _code_name(earlier.actor, later.actor)
        missing = f"the block is freed at {before} while {earlier.stream} may still {earlier.verb} it ({after})"
        fix = (f"call `t.record_stream({user})` on the tensor before the free at {before} ({user} = "
               f"{earlier.stream}), so the allocator waits for {user}'s work before it reuses the memory; or make "
               f"{later.stream} wait for {user} before the free")
        return missing, fix
    if kind == "PEER":
        stream = _code_name(earlier.actor, later.actor)
        missing = (f"the host handed the memory to other processes at {before} before {earlier.stream} finished "
                   f"the {earlier.verb} at {after}")
        fix = (f"call `{stream}.synchronize()` (or `torch.cuda.synchronize()`) between the {earlier.verb} at {after} "
               f"and the hand-over at {before} ({stream} = {earlier.stream}); a host barrier or a queue only says "
               f"that the work was queued")
        return missing, fix
    if earlier.launch_actor:  # the earlier access is an async collective's: its work handle was not waited for
        missing = f"nothing waited for the {earlier.op} launched at {after} before the {later.verb} at {before}"
        if is_host(later.actor):
            fix = (f"call `work.wait()` on the handle of the {earlier.op} launched at {after}, then "
                   f"`torch.cuda.current_stream().synchronize()`, before the host {later.verb} at {before}")
        else:
            fix = (f"call `work.wait()` on the handle of the {earlier.op} launched at {after} before the "
                   f"{later.verb} at {before}, with {later.stream} as the current stream (or launch it with "
                   f"async_op=False)")
        return missing, fix
    if is_host(later.actor) and not is_host(earlier.actor):
        stream = _code_name(earlier.actor, later.actor)
        missing = f"{later.stream} never waited for {earlier.stream} after {after}"
        fix = (f"call `{stream}.synchronize()` before the host {later.verb} at {before} ({stream} = "
               f"{earlier.stream}), or record an event on {stream} after {after} and call `event.synchronize()` "
               f"there")
        return missing, fix
    if is_host(earlier.actor):
        missing = f"the host {earlier.verb} at {after} by {earlier.thread} is not ordered before {later.thread}'s work"
        if is_host(later.actor):
            fix = (f"order {later.thread} after {earlier.thread}: join the thread or hand over through a lock or "
                   f"queue before {before}")
        else:
            fix = (f"make the host {earlier.verb} at {after} finish before {later.thread} enqueues the {later.verb} at "
                   f"{before} (join the thread or hand over through a queue first)")
        return missing, fix
    waiter_actor = later.launch_actor or later.actor
    waiter_label = later.launched_from or later.stream
    waiter = _code_name(waiter_actor, earlier.actor)
    source = _code_name(earlier.actor, waiter_actor)
    missing = f"{waiter_label} never waited for {earlier.stream} after {after}"
    what = f"the {later.op} is launched" if later.launch_actor else f"the {later.verb}"
    if code.get(waiter_actor) and code.get(earlier.actor):
        waiter, source = code[waiter_actor], code[earlier.actor]
        return missing, (f"add `{waiter}.wait_stream({source})` before {what} at {before}; or record an event on "
                         f"{source} after {after} and call `{waiter}.wait_event(event)` there")
    fix = (f"add `{waiter}.wait_stream({source})` before {what} at {before} ({waiter} = {waiter_label}, "
           f"{source} = {earlier.stream}); or record an event on {source} after {after} and call "
           f"`{waiter}.wait_event(event)` there")
    return missing, fix


def describe(finding: Finding, world_size: int | None = None) -> RaceView:
    """The RaceView of a runtime finding (is_runtime_finding must hold)."""
    extra = finding.extra
    names = extra.get("streams") if isinstance(extra.get("streams"), dict) else {}
    if world_size is None:
        world_size = int(extra.get("world_size") or 0)
    earlier = _access(finding, "earlier", names, world_size)
    later = _access(finding, "later", names, world_size)
    tensor, tensor_name = tensor_text(finding)
    from streamcheck.instrument.offline.code_names import code_names

    missing, fix = fix_hint(finding.kind, earlier, later, code_names(finding, names))
    ranks = [int(r) for r in extra.get("ranks", [extra["rank"]] if "rank" in extra else [])]
    counts = extra.get("counts_by_rank") if isinstance(extra.get("counts_by_rank"), dict) else {}
    steps = [int(s) for s in extra.get("steps", [])] if isinstance(extra.get("steps"), list) else []
    return RaceView(finding.kind, tensor, tensor_name, earlier, later, missing, fix, ranks, finding.count,
                    {str(k): int(v) for k, v in counts.items()}, steps)


def headline(view: RaceView) -> str:
    """The message: kind, tensor, both accesses with their streams and places."""
    later, earlier = view.later, view.earlier
    kind = _KIND_WORDS.get(view.kind, view.kind)
    if view.kind == "PEER":
        return (f"{kind} race on {view.tensor_name}: other processes read it from the hand-over at {later.where} "
                f"({later.op}), not ordered after {earlier.op} on {earlier.stream} ({earlier.verb} at "
                f"{earlier.where})")
    if view.kind == "FREE":
        return (f"{kind} race on {view.tensor_name}: freed at {later.where} while {earlier.stream} may still "
                f"{earlier.verb} it ({earlier.op} at {earlier.where})")
    return (f"{kind} race on {view.tensor_name}: {later.op} on {later.stream} {later.verb}s it at {later.where}, "
            f"not ordered after {earlier.op} on {earlier.stream} ({earlier.verb} at {earlier.where})")


# ---- enrich: what a recorded trace adds ------------------------------------------------------------------------------
def enrich(finding: Finding, names: Names | None = None, world_size: int = 0) -> Finding:
    """The finding with stream names and tensor facts in `extra`, and message / fix in those words."""
    if not is_runtime_finding(finding):
        return finding
    extra = dict(finding.extra)
    if world_size and "world_size" not in extra:
        extra["world_size"] = world_size
    if names is not None:
        actors = {extra["earlier"].get("actor"), extra["later"].get("actor"), extra["later"].get("stream"),
                  extra["earlier"].get("stream")}
        streams = dict(extra.get("streams") or {})
        for actor in sorted(a for a in actors if a):
            if actor in names.stream_names and actor not in streams:
                streams[actor] = names.stream_names[actor]
        if streams:
            extra["streams"] = streams
        storage = extra.get("storage")
        if storage in names.storage_infos or storage in names.alloc_sites:
            tensor = dict(names.storage_infos.get(storage, {}))
            tensor.update(extra.get("tensor") or {})
            alloc = names.site_text(names.alloc_sites.get(storage, -1))
            if alloc and "alloc_site" not in tensor:
                tensor["alloc_site"] = alloc
            extra["tensor"] = tensor
    enriched = replace(finding, extra=extra)
    view = describe(enriched)
    related = tuple(replace(loc, note=f"the missing edge: {view.missing}") if loc.role == ROLE_SYNC else loc
                    for loc in finding.related)
    return replace(enriched, message=headline(view), fix=view.fix, related=related)
