"""Async handles that travel with their buffers: `req.req = work; req.tensor = out`, waited in another function.

An `async_op=True` collective's handle is often stored on an object beside the buffer it writes (torchrec's
`Request`: `myreq.req = req; myreq.tensor = out`; `self._work = dist.all_to_all_single(self._out, ...)`), and a
later function (autograd's backward, an awaitable's `wait`) waits the handle through that object and then reads
the buffer. The pair of attribute names (here `req` and `tensor`) is what travels: a function that reaches the
buffer through an object's field and mentions the handle's field of the same object (it checks, clears or waits
it) must wait it before the buffer is touched, on a path to the touch (not on an if/else's other arm, not in a
block that returns first); a local bound from the handle's field is the handle, and on the arm where the handle was
tested None nothing is in flight.

What is assumed: the object is recognised by the pair of field names alone, within the launch's file (within its
class for `self.`): a consumer's object is not matched by its annotated type or parameter name, since torchrec
reaches it both as a parameter (`myreq: Request[Tensor]`) and as `ctx.myreq` bound to a local, and a file that
stores a handle and its buffer under the same two fields of different objects is rare.

The extraction keeps, for each file, the uses of the fields its own launches store (`travelling_fields`,
`held_through`); the query (`travelling_touches`) pairs them across the file's functions.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Iterable, Iterator

from .facts import RETURNED, AsyncWork, FunctionFacts, Use, exclusive
from .races import exits_before

if TYPE_CHECKING:
    from .program import Function, Program

TOUCHES = frozenset({"read", "write", "host", "stream"})
# Reads that look at no element: iterating a container (`for t in bufs`), an identity test (`buf is None`).
MENTIONS = frozenset({"for", "is"})


@dataclass(frozen=True)
class Travel:
    """One async collective's handle and one of its tensors, stored under one object's two fields."""

    handle_field: str  # `req` (or `_work` for a `self.` object)
    buffer_field: str  # `tensor`
    on_self: bool  # stored on `self`: only the methods of the launching class reach it
    work: AsyncWork
    tensor: str  # the tensor as the launch names it


def split_root(path: str) -> tuple[str, str]:
    """`myreq.req` -> ("myreq", "req"); a plain name has no field."""
    root, _, field = path.partition(".")
    return root, field


def _destinations(fn: FunctionFacts, path: str) -> set[str]:
    """Where `path` is stored as a whole (`obj.f = path`), and itself, when those are fields of an object."""
    found = {path} | {u.arg for u in fn.uses if u.path == path and u.how == "escape" and u.arg}
    return {p for p in found if split_root(p)[1] and "[" not in p}


def travels_in(fn: FunctionFacts) -> list[Travel]:
    travels = []
    for work in fn.async_works + fn.handed_works:
        if not work.handle:
            continue
        # A handed work's buffers also through its aliases: an element's field through the loop over a container
        # of the object (`bucket.param_data` of `for bucket in self.buckets` is `self.buckets.param_data`).
        held = [(a, {a}) for a in work.aliases if "." in a and "[" not in a] if work in fn.handed_works else []
        for handle in sorted(_destinations(fn, work.handle)):
            for tensor, buffers in [(t, _destinations(fn, t)) for t in work.tensors] + held:
                for buffer in sorted(buffers):
                    (h_root, h_field), (b_root, b_field) = split_root(handle), split_root(buffer)
                    if h_root == b_root and h_field != b_field:
                        travels.append(Travel(h_field, b_field, h_root in ("self", "cls"), work, tensor))
    return travels


def travelling_fields(functions: Iterable[FunctionFacts]) -> set[str]:
    """The fields of a file's travelling handles and their buffers (before the extraction drops uses)."""
    return {field for fn in functions for t in travels_in(fn) for field in (t.handle_field, t.buffer_field)}


def bound_local(use: Use) -> str | None:
    """The local name an escape binds the value to (`g = req.tensor` -> "g"), else None."""
    if use.how == "escape" and use.arg and "." not in use.arg and use.arg != RETURNED:
        return use.arg
    return None


def held_through(fn: FunctionFacts, fields: set[str]) -> set[str]:
    """The paths of `fn` that reach one of `fields`, and the local names bound from them (`g = req.tensor`,
    `v = g.view(-1)`): the uses the travelling-handle query needs kept."""
    if not fields:
        return set()
    held = {u.path for u in fn.uses if any(split_root(p)[1] in fields for p in as_fields(fn, u.path))}
    while True:
        aliases = {bound_local(u) for u in fn.uses if u.path in held} - held - {None}
        if not aliases:
            return held
        held |= aliases


def as_fields(fn: FunctionFacts, path: str) -> list[str]:
    """`path`, and what it is through a loop over a container (`bucket.param_data` in `for bucket in self.buckets`:
    `self.buckets.param_data`, FunctionFacts.derived)."""
    root, _, rest = path.partition(".")
    return [path] + sorted({f"{source}.{rest}" for local, source, _line in fn.derived
                            if local == root and rest and "[" not in source})


@dataclass(frozen=True)
class TravellingTouch:
    """A touch of a travelling buffer, in a function that reaches the handle too but has not waited it."""

    function: "Function"
    use: Use  # the touch (of the buffer's path or of a local bound from it)
    buffer: str  # the buffer's path in this function (`myreq.tensor`)
    handle: str  # the handle's path in this function (`myreq.req`)
    travel: Travel
    launcher: "Function"
    first_mention: tuple[int, int]  # where the function first mentions the handle: the wait goes before it


def travelling_touches(program: "Program") -> Iterator[TravellingTouch]:
    launches_by_file: dict[str, list[tuple["Function", Travel]]] = {}
    for fn in program.functions.values():
        for travel in travels_in(fn.facts):
            launches_by_file.setdefault(fn.file.path, []).append((fn, travel))
    if not launches_by_file:
        return
    for function in program.functions.values():
        for launcher, travel in launches_by_file.get(function.file.path, ()):
            if function is launcher:
                continue
            if travel.on_self and function.owner != launcher.owner:
                continue
            touch = _first_unwaited_touch(function, travel)
            if touch is not None:
                use, buffer, handle = touch
                mentions = [(u.start_line or u.line, u.start_column or u.column) for u in function.facts.uses
                            if u.path == handle]
                first = min(mentions + [(use.start_line or use.line, use.start_column or use.column)])
                yield TravellingTouch(function, use, buffer, handle, travel, launcher, first)


def _first_unwaited_touch(function: "Function", travel: Travel) -> tuple[Use, str, str] | None:
    """The first touch of the buffer's field (or of a local bound from it) that no wait of the handle's field (or
    of a local bound from it: `work = myreq.req; work.wait()`) precedes on a path to it: a wait on the other arm
    of an if/else, or in a block that returns (raises, breaks) first, orders nothing for it (hazard_flow.py's rule
    for SC105's own launches). A wait under a condition with no other arm counts, as it does there."""
    facts = function.facts
    uses = sorted(facts.uses, key=lambda u: (u.line, u.column))
    roots = {split_root(u.path)[0] for u in uses if split_root(u.path)[1] == travel.handle_field}
    if travel.on_self:
        roots &= {"self", "cls"}
    for root in sorted(roots):
        handle, buffer = f"{root}.{travel.handle_field}", f"{root}.{travel.buffer_field}"
        names, handles = {buffer}, {handle}
        bound_at: dict[str, int] = {}
        waits: list[int] = []  # lines of the waits seen so far
        for use in uses:
            if use.path in handles and use.how == "wait":
                waits.append(use.line)
                continue
            if use.path in handles and bound_local(use):
                handles.add(bound_local(use))  # `work = myreq.req`: waiting work waits the handle
                continue
            if use.path in names and use.how in ("rebind", "free"):
                if (use.start_line or use.line) <= bound_at.get(use.path, -1) <= use.line:
                    continue  # the binding that made it an alias
                names.discard(use.path)  # a new buffer (or none) there; the names bound from it keep the old one
                continue
            # (an element's field, through the loop over the container: `bucket.param_data`)
            held = use.path in names or buffer in as_fields(facts, use.path)
            alias = bound_local(use) if held else None
            if alias:
                names.add(alias)  # `g = req.tensor`: g is the buffer too
                bound_at[alias] = use.line
                continue
            if held and use.how in TOUCHES and use.arg not in MENTIONS and not any(
                    not exclusive(facts, wait, use.line) and not exits_before(function, wait, use.line)
                    for wait in waits) and not _handle_absent(facts, handles, use.line):
                return use, buffer, handle
    return None


def _handle_absent(facts: FunctionFacts, handles: set[str], line: int) -> bool:
    """Whether `line` lies in the arm of an if/else on which one of `handles` was tested None (`else:` of `if
    myreq.req is not None: myreq.req.wait()`): no collective is in flight there."""
    return any(path in handles and first <= line <= last for path, first, last in facts.none_arms)
