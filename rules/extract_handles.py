"""Handle facts for SC105, beside extract_hazards.py's pass: point-to-point launches and where a work's tensors are.

- **Point-to-point launches** are asynchronous without `async_op=True`: `dist.isend(t, dst)` and `dist.irecv(t, src)`
  return their handle, and `dist.batch_isend_irecv(ops)` returns one handle per `P2POp(dist.irecv, t, peer)` that
  went into `ops` (appended, or bound to a name that was appended, or written in the call's list display).
- **ProcessGroup methods** launch without a flag: `group.send([t], peer, tag)`, `group.recv([buf], peer, tag)`,
  `group.allreduce([t])`, ... (c10d's `ProcessGroup` API, tensors in lists) always return a work that must be
  waited; known where the receiver is a parameter annotated `ProcessGroup` (vLLM's gloo `cpu_all_reduce_`).
- **Loop bindings**: what a loop variable iterates, through `zip(...)`, `enumerate(...)`, `.items()` and `.values()`
  and nested tuple targets (`for p, (h, buf) in zip(params, pairs)`), so that `for req in reqs: req.wait()` waits
  `reqs` and a tensor named by a loop variable is an element of the container it iterates.
- **Coalescing managers**: `with dist._coalescing_manager(group, async_ops=...) as cm:` launches the collectives of
  its body as one work whose handle is `cm` (`cm.wait()` waits them all; their own results are no handles).
- **Aliases** of a work's tensors at its launch: the containers the tensor was appended to (`bufs.append(t)`), the
  tensors that were appended to it or that it views (`out.append(base.narrow(...))`), the names bound from it and the
  containers a loop variable iterates: a later touch of any of them touches the buffer in flight.
"""

from __future__ import annotations

import ast
from typing import Callable, Iterable

from .facts import RETURNED, AsyncWork, FunctionFacts

__all__ = ["BATCH_P2P", "GROUP_LAUNCHES", "GROUP_SENDS", "group_launch", "COALESCING_MANAGER", "P2P_LAUNCHES", "P2P_OP", "P2P_SEND", "coalesced", "handed_on",
           "loop_bindings", "loop_sources", "p2p_op_list", "p2p_ops_in_display", "p2p_ops_in_list", "p2p_sends",
           "p2p_tensor", "work_aliases"]

P2P_LAUNCHES = frozenset({"isend", "irecv"})
BATCH_P2P = "batch_isend_irecv"
P2P_SEND = "isend"  # the op of a work whose tensors are only read (a batch's sends are one such work)
P2P_OP = "P2POp"
# Methods of c10d's ProcessGroup that launch asynchronously and return a work (their tensors come in lists); the
# sends only read theirs.
GROUP_LAUNCHES = frozenset({"send", "recv", "recv_anysource", "allreduce", "allreduce_coalesced", "broadcast",
                            "allgather", "allgather_into_tensor_coalesced", "_allgather_base", "reduce",
                            "reduce_scatter", "_reduce_scatter_base", "alltoall", "alltoall_base", "gather",
                            "scatter"})
GROUP_SENDS = frozenset({"send"})
PROCESS_GROUP = "ProcessGroup"
COALESCING_MANAGER = "_coalescing_manager"  # torch.distributed's
# Iteration helpers whose arguments are iterated element by element.
ZIPPERS = frozenset({"zip"})
ENUMERATORS = frozenset({"enumerate", "reversed", "sorted", "list", "tuple", "iter"})
MAX_ALIASES = 12  # a work's alias set stays small: past this, the closure is following a container of everything


def p2p_tensor(node: ast.Call, last: str) -> ast.AST | None:
    """The tensor argument of `isend(t, dst)`, `irecv(t, src)` or `P2POp(dist.irecv, t, peer)`; None for one
    element of a container by a constant index (`recv_list[1]`): its path is the whole container, whose other
    elements the function goes on using (a path does not tell `recv_list[0]` from `recv_list[1]`)."""
    index = 1 if last == P2P_OP else 0
    tensor = node.args[index] if len(node.args) > index else next(
        (k.value for k in node.keywords if k.arg == "tensor"), None)
    if isinstance(tensor, ast.Subscript) and isinstance(tensor.slice, (ast.Constant, ast.UnaryOp)):
        return None
    return tensor


def p2p_sends(node: ast.Call, dotted: Callable[[ast.AST], str]) -> bool:
    """Whether `P2POp(op, t, peer)` (or `isend` itself) sends: the peer only reads `t`."""
    if dotted(node.func).rsplit(".", 1)[-1] != P2P_OP:
        return dotted(node.func).rsplit(".", 1)[-1] == "isend"
    op = node.args[0] if node.args else next((k.value for k in node.keywords if k.arg == "op"), None)
    return op is not None and dotted(op).rsplit(".", 1)[-1] in ("isend", "send")


def p2p_op_list(node: ast.Call) -> ast.AST | None:
    """The op list of `batch_isend_irecv(ops)`."""
    if node.args:
        return node.args[0]
    return next((k.value for k in node.keywords if k.arg == "p2p_op_list"), None)


def p2p_ops_in_display(ops: ast.AST, dotted: Callable[[ast.AST], str], path_of: Callable[[ast.AST], str | None],
                       made: dict[str, list[tuple[str, bool]]]) -> list[tuple[str, bool]]:
    """(tensor, sent) of the ops in a list display handed to `batch_isend_irecv`: `P2POp(...)` calls written
    there, or names bound to one before (`[recv_prev_op]`)."""
    if not isinstance(ops, (ast.List, ast.Tuple)):
        return []
    found = []
    for elt in ops.elts:
        if isinstance(elt, ast.Call) and dotted(elt.func).rsplit(".", 1)[-1] == P2P_OP:
            tensor = p2p_tensor(elt, P2P_OP)
            path = path_of(tensor) if tensor is not None else None
            if path:
                found.append((path, p2p_sends(elt, dotted)))
        elif path_of(elt):
            found.extend(made.get(path_of(elt) or "", ()))
    return found


def p2p_ops_in_list(fn: FunctionFacts, ops: str, made: dict[str, list[tuple[str, bool]]]) -> list[tuple[str, bool]]:
    """The tensors of the ops that went into the list `ops` so far: `ops.append(P2POp(...))` (recorded under
    `ops`), or `op = P2POp(...)` (recorded under `op`) and `ops.append(op)` (an escape of `op` into `ops`)."""
    names = [ops] + [u.path for u in fn.uses if u.how == "escape" and u.arg == ops]
    tensors: list[tuple[str, bool]] = []
    for name in names:
        for tensor in made.get(name, ()):
            if tensor not in tensors:
                tensors.append(tensor)
    return tensors


def group_launch(method: str, receiver: ast.AST, classes: dict[str, str]) -> bool:
    """Whether `receiver.method(...)` is a ProcessGroup's asynchronous launch: `receiver` a name annotated as a
    ProcessGroup in `classes` (the function's parameter -> class annotation)."""
    return method in GROUP_LAUNCHES and isinstance(receiver, ast.Name) \
        and classes.get(receiver.id, "").rsplit(".", 1)[-1] == PROCESS_GROUP


def loop_sources(target: ast.AST, iterated: ast.AST) -> list[tuple[str, ast.AST]]:
    """(loop variable, the expression it takes its values from) where that expression is no path: a call or a
    list builder (`for req in batch_isend_irecv(ops)`, `for w, b in zip([dist.irecv(b) ...], bufs)`)."""
    pairs = [(target, iterated)]
    if isinstance(iterated, ast.Call) and isinstance(iterated.func, ast.Name) and iterated.func.id in ZIPPERS \
            and isinstance(target, (ast.Tuple, ast.List)) and len(target.elts) == len(iterated.args):
        pairs = list(zip(target.elts, iterated.args))
    return [(t.id, source) for t, source in pairs if isinstance(t, ast.Name) and isinstance(
        source, (ast.Call, ast.ListComp, ast.GeneratorExp)) and not (
        isinstance(source, ast.Call) and isinstance(source.func, ast.Name) and source.func.id in ZIPPERS | ENUMERATORS)]


def loop_bindings(target: ast.AST, iterated: ast.AST, path_of: Callable[[ast.AST], str | None]
                  ) -> tuple[list[tuple[str, tuple[str, ...]]], list[ast.AST]]:
    """(loop variable, the paths it iterates) for a loop's target and iterable, and the expressions iterated
    (whose mention is an iteration, not a read of the elements' memory)."""
    if isinstance(iterated, (ast.Tuple, ast.List)) and isinstance(target, ast.Name):
        # `for t in (x, mix, sqr)`: t is each of them in turn
        paths = tuple(p for p in map(path_of, iterated.elts) if p)
        return ([(target.id, paths)] if paths else []), list(iterated.elts)
    if isinstance(iterated, ast.Call):
        func = iterated.func
        name = func.id if isinstance(func, ast.Name) else ""
        if name in ZIPPERS and isinstance(target, (ast.Tuple, ast.List)) and len(target.elts) == len(iterated.args):
            bindings = []
            for part, source in zip(target.elts, iterated.args):
                bindings.extend(_bind(part, source, path_of))
            return bindings, list(iterated.args)
        if name == "enumerate" and iterated.args and isinstance(target, (ast.Tuple, ast.List)) \
                and len(target.elts) == 2:
            return _bind(target.elts[1], iterated.args[0], path_of), [iterated.args[0]]
        if name in ENUMERATORS and iterated.args:
            return _bind(target, iterated.args[0], path_of), [iterated.args[0]]
        if isinstance(func, ast.Attribute) and func.attr in ("items", "values") and not iterated.args:
            part = target.elts[1] if func.attr == "items" and isinstance(target, (ast.Tuple, ast.List)) \
                and len(target.elts) == 2 else target
            return _bind(part, func.value, path_of), [iterated]
    return _bind(target, iterated, path_of), [iterated]


def _bind(target: ast.AST, source: ast.AST, path_of: Callable[[ast.AST], str | None]
          ) -> list[tuple[str, tuple[str, ...]]]:
    path = path_of(source)
    if not path:
        return []
    if isinstance(target, ast.Name):
        return [(target.id, (path,))]
    if isinstance(target, (ast.Tuple, ast.List)):  # `(h, buf)` of a container of pairs: each is one of its parts
        return [(name, (path,)) for elt in target.elts for name, _ in _bind(elt, source, path_of)]
    return []


def _plain(path: str) -> bool:
    return bool(path) and path != RETURNED and not path.startswith("(") and "[" not in path


def alias_edges(fn: FunctionFacts, loop_links: list[tuple[str, tuple[str, ...]]], until: int | None = None
                ) -> dict[str, set[str]]:
    """Undirected edges between the paths of `fn` that hold the same memory: an escape into one path (`y = x`,
    `bufs.append(x)`, `p = base.narrow(...)`; bindings only up to line `until`), and a loop variable and what it
    iterates."""
    edges: dict[str, set[str]] = {}

    def link(a: str, b: str) -> None:
        if a != b and _plain(a) and _plain(b):
            edges.setdefault(a, set()).add(b)
            edges.setdefault(b, set()).add(a)

    bindings = [(u.path, u.start_line or u.line, u.line) for u in fn.uses if u.how == "rebind"]
    for use in fn.uses:
        if use.how != "escape":
            continue
        if until is not None and use.line > until and any(
                path == use.arg and first <= use.line <= last for path, first, last in bindings):
            continue  # `y = x` after the launch: y holds it from there on (SC105 follows such names itself)
        link(use.path, use.arg)  # before the launch, or put in a container after it (`bufs.append(t)`)
    for var, paths in loop_links:
        for path in paths:
            link(var, path)
    return edges


def closure(start: Iterable[str], edges: dict[str, set[str]], exclude: set[str]) -> list[str]:
    """The paths reachable from `start` over `edges`, never through `exclude` (the work's handles), in the order
    found, at most MAX_ALIASES of them."""
    seen = list(dict.fromkeys(start))
    index = 0
    while index < len(seen) and len(seen) <= MAX_ALIASES:
        path = seen[index]
        root, _, rest = path.partition(".")
        # `op.tensor` where `op` iterates `recvs`: `recvs[i].tensor`, whose path is `recvs.tensor`
        fields = {f"{other}.{rest}" for other in edges.get(root, ())} if rest and root not in ("self", "cls") else set()
        for other in sorted(edges.get(path, set()) | fields):
            if other not in seen and other not in exclude:
                seen.append(other)
        index += 1
    return seen[:MAX_ALIASES + 1]


def work_aliases(fn: FunctionFacts, loop_links: list[tuple[str, tuple[str, ...]]]) -> set[str]:
    """Set each async work's `aliases` (at its launch) and return the paths whose uses must be kept (the aliases
    and the names bound from them later)."""
    from dataclasses import replace

    if not fn.async_works:
        return set()
    keep: set[str] = set()
    everywhere = alias_edges(fn, loop_links)
    works = []
    for work in fn.async_works:
        handles = {work.handle} | {u.arg for u in fn.uses if u.path == work.handle and u.how == "escape"}
        tensors = [t for t in work.tensors if t]
        at_launch = closure(tensors, alias_edges(fn, loop_links, work.end_line), handles)
        aliases = tuple(dict.fromkeys(work.aliases + tuple(p for p in at_launch if p not in tensors)))
        keep.update(closure(tensors, everywhere, handles))
        keep.update(h for h in handles if _plain(h))  # the lists they went into: bound here, or not (a global)
        keep.update(work.aliases)
        works.append(replace(work, aliases=aliases) if aliases != work.aliases else work)
    fn.async_works = works
    return keep


def coalesced(handle: str, span: tuple[int, int, int, int], launched: list[AsyncWork], block: tuple[int, int],
              region: int) -> AsyncWork | None:
    """The one work of a coalescing manager bound to `handle`, its `with` at span (line, column, end line, end
    column): the collectives `launched` in its body, with their tensors; None when the body launches none."""
    line, column, end_line, _ = span
    inside = [w for w in launched if line <= w.line <= end_line]
    tensors = tuple(dict.fromkeys(t for w in inside for t in w.tensors if t))
    if not tensors:
        return None
    return AsyncWork(inside[0].op, handle, tensors, line, column, end_line, block, region)


def handed_on(fn: FunctionFacts, candidates: list[AsyncWork], loop_links: list[tuple[str, tuple[str, ...]]]
              ) -> tuple[list[AsyncWork], set[str]]:
    """Of works whose flag is a variable, those whose handle `fn` stores on an object's field (`self._work = cm`),
    with their aliases at the launch (`bucket.param_data` of `for bucket in self.buckets`: `self.buckets.param_data`),
    and the paths whose uses must be kept."""
    from dataclasses import replace

    from .extract_pairs import EVENT_RECORD

    works, keep = [], set()
    for work in candidates:
        if not work.handle or work.handle.startswith("(") or work.op == EVENT_RECORD:
            continue
        stored = {u.arg for u in fn.uses if u.path == work.handle and u.how == "escape" and "." in u.arg
                  and "[" not in u.arg and u.arg != RETURNED}
        if not stored:
            continue
        tensors = [t for t in work.tensors if t]
        at_launch = closure(tensors, alias_edges(fn, loop_links, work.end_line), {work.handle} | stored)
        works.append(replace(work, aliases=tuple(p for p in at_launch if p not in tensors)))
        keep.update(at_launch)
        keep.add(work.handle)
    return works, keep
