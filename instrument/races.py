"""Race -> Finding, the one place where the runtime's races become findings: the watch's finding sink, the replay
of a trace by `streamcheck report` (offline/merge.py) and `streamcheck analyze` all call `race_finding`. Torch-free.

Rule ids (instrument/runtime_rules.py): SC201 a RAW / WAR / WAW race between streams, SC202 FREE (freed while
another stream may still use it), SC203 HOST (the host touches memory a stream still owns, or a stream touches
memory the host is still using), SC204 PEER (memory other processes read handed over before a stream's write to it
finished). The primary location is the later access; related: the earlier access (role
write/read) and a "sync" location, the earlier site, after which the missing edge must start.

The finding carries the race itself in `extra` (storage, byte range, the two accesses, the streams' names, both call
stacks, and what the run adds: rank, pid, world size, the tensor), and its message and fix in the detector's words
(actor ids). A report re-tells it from `extra` alone in words a person knows (instrument/offline/race_view.py
`enrich`): nothing reads the message back.
"""

from __future__ import annotations

import linecache
from typing import Any

from streamcheck.findings import ROLE_FREE, ROLE_READ, ROLE_SYNC, ROLE_WRITE, Finding, Location

from .detector import Access, Race
from .names import Names
from .runtime_rules import RULE_OF_KIND

__all__ = ["Names", "RULE_OF_KIND", "race_finding", "missing_edge"]


def location(names: Names, access: Access, role: str, note: str = "") -> Location:
    frame = names.frame(access.site)
    if frame is None:
        return Location(path="<unknown>", line=0, role=role, note=note or f"{access.op} on {access.actor}")
    path, line, function = frame
    snippet = linecache.getline(path, line).strip() if line > 0 else ""
    return Location(path=path, line=line, role=role, note=note or function, snippet=snippet)


def _storage(race: Race, names: Names) -> str:
    info = names.storage_infos.get(race.storage) or {}
    label = info.get("name") or f"storage 0x{race.storage:x}"
    shape = f" {info['dtype']}{list(info['shape'])}" if "shape" in info and "dtype" in info else ""
    return f"{label}{shape} bytes [{race.start}, {race.end})"


def _verb(access: Access) -> str:
    if access.op == "free":
        return "free"
    return "write" if access.is_write else "read"


def _waiter(access: Access) -> str:
    """The actor that must wait: a collective's comm waits only for the stream it was launched from."""
    return access.stream or access.actor


def missing_edge(race: Race, names: Names) -> str:
    """One sentence: which edge to add, from where, to where."""
    earlier, later = race.earlier, race.later
    after = names.where(earlier.site)
    before = names.where(later.site)
    source = names.actor(earlier.actor)
    earlier_is_host = earlier.actor == earlier.thread
    later_is_host = later.actor == later.thread
    if race.kind == "PEER":
        return (f"{names.actor(later.actor)} synchronizes {source} (or an event recorded on it after {after}) before "
                f"it hands the memory to other processes at {before}")
    if race.kind == "FREE":
        return (f"call record_stream({earlier.actor}) on the tensor before it is freed at {before}, or make "
                f"{names.actor(later.actor)} wait for {source} after {after} before the free")
    if earlier.stream and not later_is_host:  # an async collective whose work handle nobody waited for
        return (f"call work.wait() on the handle of the {earlier.op or 'collective'} launched at {after} before "
                f"{before}, with {names.actor(_waiter(later))} as the current stream (or make it wait for "
                f"{source}, or launch with async_op=False)")
    if later_is_host and earlier_is_host:
        return (f"host thread {later.actor} must be ordered after {earlier.actor} after {after} (join the thread "
                f"or hand over with a lock/queue) before {before}")
    if later_is_host:
        return (f"host thread {later.actor} synchronizes {source} (or an event recorded on it after {after}) "
                f"before {before}")
    if earlier_is_host:
        return (f"the host work of {earlier.actor} at {after} must happen before {later.thread} enqueues {before} "
                f"(join the thread or synchronize first)")
    waiter = _waiter(later)
    return (f"{names.actor(waiter)} waits for {source} after {after}, before {before} (`wait_stream`, or an event "
            f"recorded on {earlier.actor} after {after} and waited on {waiter})")


def _doer(access: Access, names: Names) -> str:
    """"cuda:0/s1 (side stream)" or "c10d::allreduce_ on nccl:0/0 launched from cuda:0/s1"."""
    if access.op == "free":
        return f"thread {access.thread} (the block goes back to the pool of {names.actor(access.actor)})"
    if access.stream:
        return f"{access.op or 'collective'} on {access.actor} launched from {names.actor(access.stream)}"
    if access.actor == access.thread:
        return f"host thread {access.actor}"
    return names.actor(access.actor)


def race_finding(race: Race, names: Names, **run: Any) -> Finding:
    """The finding of one race. `run`: what the run adds to `extra` (rank, pid, world_size, tensor, ...)."""
    earlier, later = race.earlier, race.later
    fix = missing_edge(race, names)
    message = (f"{_verb(later)} of {_storage(race, names)} by {_doer(later, names)} at {names.where(later.site)} is "
               f"not ordered after the {_verb(earlier)} by {_doer(earlier, names)} at {names.where(earlier.site)}")
    if race.kind == "PEER":
        message = (f"hand-over of {_storage(race, names)} to other processes by {_doer(later, names)} at "
                   f"{names.where(later.site)} ({later.op}) is not ordered after the {_verb(earlier)} by "
                   f"{_doer(earlier, names)} at {names.where(earlier.site)}: they may read it before it is done")
    primary = location(names, later, ROLE_READ if not later.is_write else ROLE_WRITE)
    related: tuple = ()
    if later.op == "free":
        primary = location(names, later, ROLE_FREE)
    reuse = race.reuse
    if reuse is not None:  # a FREE reported where the block can be reused: the pool stream's next work
        message = (f"reuse of {_storage(race, names)} by {names.actor(reuse.actor)} at {names.where(reuse.site)} "
                   f"({reuse.op or 'its next work'}, the pool stream's next work after the free at "
                   f"{names.where(later.site)}) is not ordered after the {_verb(earlier)} by "
                   f"{_doer(earlier, names)} at {names.where(earlier.site)}: the caching allocator may hand the "
                   f"block to this work while that {_verb(earlier)} still runs")
        related = (location(names, later, ROLE_FREE,
                            note=f"freed here by thread {later.thread}, without record_stream({earlier.actor})"),)
        primary = location(names, reuse, ROLE_WRITE, note=f"{reuse.op} on {reuse.actor}: may reuse the freed block")
    related += (
        location(names, earlier, ROLE_WRITE if earlier.is_write else ROLE_READ),
        location(names, earlier, ROLE_SYNC, note=f"the missing edge starts after this {_verb(earlier)}: "
                 f"{_waiter(later)} must wait for {earlier.actor} here"),
    )
    frame = names.frame(later.site)
    extra: dict[str, Any] = {
        "storage": race.storage,
        "start": race.start,
        "end": race.end,
        "earlier": _access_dict(earlier),
        "later": _access_dict(later),
    }
    if reuse is not None:
        extra["reuse"] = _access_dict(reuse)
    streams = names.streams_of((earlier.actor, earlier.stream, later.actor, later.stream))
    if streams:
        extra["streams"] = streams
    extra.update({key: value for key, value in run.items() if value not in (None, {}, "")})
    extra["earlier_stack"] = names.stack(earlier.site)
    extra["later_stack"] = names.stack(later.site)
    return Finding(rule=RULE_OF_KIND[race.kind], message=message, primary=primary, related=related, fix=fix,
                   kind=race.kind, symbol=frame[2] if frame else "", extra=extra)


def _access_dict(access: Access) -> dict:
    return {"actor": access.actor, "thread": access.thread, "is_write": access.is_write, "site": access.site,
            "op": access.op, "seq": access.seq, "stream": access.stream}
