"""Handles that travel in a tuple beside their buffer, and come back destructured in another function of the file.

A launcher hands an async work's handle and its buffer on together, as one tuple:
- returned: `return handle, input_list[rank]` (DeepSpeed's `_reduce_scatter_gradient`), `return req, output_buffer`;
- stored in a container or an attribute: `self._recv_act.append((works, tensors))` (torchrec's maglev stage).
Another function takes the tuple apart again and waits the handle before it touches the buffer:
- `handle, buf = self._reduce_scatter_gradient(p)`, `self._work, self._grad_buffer = _grad_dist(...)`;
- `works, tensors = self._recv_act.popleft()`, `for p, (handle, buf) in zip(params, pairs)`, where `pairs` holds
  what calls of a pair-returning function returned (`pairs.append(self._reduce_scatter_gradient(p))`).
Where the positions of a handle and of one of its tensors in an outgoing tuple are known, each destructuring of
the same tuple is an async work of its own (`AsyncWork`, at the destructuring), whose handle and tensor are the
names bound at those positions: SC105's queries (a touch before the wait, a travelling pair of fields, a
function leaving it in flight) then apply to it as to any launch.

A pair handed to a constructor (`Handle(work, out, ...)`) is one for the parameters of that class's `__init__` in
the file (which stores them on `self`: SC105's travelling fields). A parameter taken apart (`(out, event, work) =
result`) pairs with an outgoing tuple or result constructor of the file that has the same names at the same
positions (`return AllGatherResult(out, event, work)`: FSDP2's all-gather). Collectives launched with
`async_op=<a variable>` take part only here, as handles handed on: whoever takes them apart waits them.

Only functions of one file are paired (by the callee's last name, and containers by path: `self.` paths within
one class, locals within one function).
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field
from typing import Callable

from .facts import AsyncWork, FunctionFacts

# The op of an event recorded on a stream after its work on a tensor (extract_hazards.py `_recorded`): a handle for
# that work when the two are handed on together; and the arg of a Use that waits an event (`s.wait_event(ev)`).
EVENT_RECORD = "record_event"
EVENT_WAIT = "event"
# Container methods that hand back one stored element.
TAKING_METHODS = frozenset({"pop", "popleft", "get", "popitem"})


@dataclass
class PairFacts:
    """What one file's pass saw of tuples going out and coming back (kept by the collector, never cached)."""

    # id(function facts) -> (where: "" for a return, else the container or attribute path, the paths by position)
    out: dict[int, list[tuple[str, tuple[str, ...]]]] = field(default_factory=dict)
    # id(function facts) -> (source, paths by position, line, column, end line, block, region); source is
    # ("call", callee's last name) or ("container", path)
    back: dict[int, list[tuple[tuple[str, str], tuple[str, ...], int, int, int, tuple[int, int], int]]] = \
        field(default_factory=dict)
    # id(function facts) -> (container path, callee's last name) for `pairs.append(f(...))`
    appended: dict[int, list[tuple[str, str]]] = field(default_factory=dict)
    # id(function facts) -> collectives launched with `async_op=<a variable>`: async when the caller says so, so
    # only a tuple that hands their handle on pairs them (never checked where they are launched)
    maybe: dict[int, list[AsyncWork]] = field(default_factory=dict)
    # id(function facts) -> (class name, argument paths by position) of `Cls(handle, buf, ...)` constructions
    built: dict[int, list[tuple[str, tuple[str, ...]]]] = field(default_factory=dict)


def positions(node: ast.AST, path_of: Callable[[ast.AST], str | None]) -> tuple[str, ...] | None:
    """The paths of a tuple display (or target) by position ("" where an element is no path), else None."""
    if not isinstance(node, (ast.Tuple, ast.List)) or len(node.elts) < 2:
        return None
    return tuple(path_of(elt) or "" for elt in node.elts)


def taken_from(value: ast.AST, path_of: Callable[[ast.AST], str | None], dotted: Callable[[ast.AST], str]
               ) -> tuple[str, str] | None:
    """Where a destructured value comes from: ("call", name) for `f(...)` / `self.f(...)`, ("container", C) for
    `C.pop()`, `C.popleft()`, `C.get(k)`, `C[k]`."""
    if isinstance(value, ast.Subscript):
        container = path_of(value.value)
        return ("container", container) if container else None
    if not isinstance(value, ast.Call):
        return None
    func = value.func
    if isinstance(func, ast.Attribute) and func.attr in TAKING_METHODS:
        container = path_of(func.value)
        if container:
            return "container", container
    name = dotted(func).rsplit(".", 1)[-1]
    return ("call", name) if name else None


def _key(fn: FunctionFacts, container: str) -> tuple[str, str]:
    """Containers on `self` are the class's; other paths the function's own."""
    return ((fn.cls or "", container) if container.startswith("self.") else (f"{fn.qualname}@{fn.line}", container))


def synthesize(functions: list[FunctionFacts], pairs: PairFacts) -> None:
    """Add, to each function that destructures a tuple a launcher of the file handed on, the async work of each
    (handle, tensor) position pair it binds."""
    by_call: dict[str, list[tuple[int, int, str]]] = {}
    by_container: dict[tuple[str, str], list[tuple[int, int, str]]] = {}
    by_names: list[tuple[tuple[str, ...], tuple[int, int, str]]] = []  # for a parameter taken apart
    for fn in functions:
        maybe = pairs.maybe.get(id(fn), [])
        for where, paths in pairs.out.get(id(fn), ()):
            for pair in _pairs_in(fn, paths, maybe):
                by_names.append((paths, pair))
                if where:
                    by_container.setdefault(_key(fn, where), []).append(pair)
                else:
                    by_call.setdefault(fn.name, []).append(pair)
        for cls, paths in pairs.built.get(id(fn), ()):
            for h, t, op in _pairs_in(fn, paths, maybe):
                _into_constructor(functions, cls, h, t, op)
    if not by_call and not by_container:
        return
    for fn in functions:  # `pairs.append(self._reduce_scatter_gradient(p))`: the container holds the pairs
        for container, callee in pairs.appended.get(id(fn), ()):
            by_container.setdefault(_key(fn, container), []).extend(by_call.get(callee, ()))
    for fn in functions:
        for (kind, name), paths, line, column, end_line, block, region in pairs.back.get(id(fn), ()):
            if kind == "names":  # `(out, event, work, ...) = result`, a parameter: the launcher's own names
                found = [pair for named, pair in by_names if max(pair[:2]) < len(paths) and
                         all(named[k] == paths[k] for k in pair[:2])]
            else:
                found = by_call.get(name, ()) if kind == "call" else by_container.get(_key(fn, name), ())
            for h, t, op in dict.fromkeys(found):
                if max(h, t) < len(paths) and paths[h] and paths[t] and paths[h] != paths[t]:
                    fn.async_works.append(_work(op, paths[h], paths[t], line, column, end_line, block, region))


def _into_constructor(functions: list[FunctionFacts], cls: str, h: int, t: int, op: str) -> None:
    """`Cls(handle, buf)`: Cls.__init__ of this file gets the pair as its parameters (it stores them on `self`)."""
    for init in functions:
        if init.name == "__init__" and init.cls and init.cls.rsplit(".", 1)[-1] == cls \
                and len(init.params) > max(h, t) + 1:
            handle, tensor = init.params[h + 1], init.params[t + 1]  # (after self)
            init.async_works.append(_work(op, handle, tensor, init.line, 1, init.line, (0, 0), -1))


def _pairs_in(fn: FunctionFacts, paths: tuple[str, ...], maybe: list[AsyncWork] = ()) -> list[tuple[int, int, str]]:
    """(handle position, tensor position, the collective) of an outgoing tuple of `fn`."""
    found = []
    for work in [*fn.async_works, *maybe]:
        if not work.handle:
            continue
        handles = {work.handle} | {u.arg for u in fn.uses if u.path == work.handle and u.how == "escape" and u.arg}
        tensors = set(work.tensors) | set(work.aliases)
        for h, path in enumerate(paths):
            if path in handles:
                found.extend((h, t, work.op) for t, other in enumerate(paths) if other in tensors)
    return found


def _work(op: str, handle: str, tensor: str, line: int, column: int, end_line: int, block: tuple[int, int],
          region: int) -> AsyncWork:
    return AsyncWork(op, handle, (tensor,), line, column, end_line, block, region)
