"""Hazard facts for SC102-SC105, gathered during extract.py's one pass over a file.

extract.py's visitor hands every node to `HazardCollector.see` before it visits it (parents before children), with
its current function, stream region and conditional block already set. The collector records, per function:
- `Use`: each mention of a name or attribute path, by what it does (read, host read, write, free, rebind, escape,
  record_stream, wait); a parent that already accounted for a child (the receiver of `x.copy_`, the path in
  `x.shape`, an assignment target) marks it so the child is not counted again;
- `Placement`: `path = <expr>` when the expression says where the tensor lives or that it is freshly allocated;
- `AsyncCopy`: `non_blocking=True` copies (a result used right away, `x.to("cpu", non_blocking=True).tolist()`,
  gets a temporary name such as `(to@12:9)`); `AsyncWork`: collectives called with `async_op=True`, with the name
  or list their handle goes to; `branches`: if/else pairs.
At the end of the file, uses of names no hazard can involve are dropped, so the cached facts stay small.
"""

from __future__ import annotations

import ast
from typing import TYPE_CHECKING

from .facts import NO_REGION, RETURNED, AsyncCopy, AsyncWork, FileFacts, FunctionFacts, Placement, Use
from .extract import elements
from .extract_paths import NO_PATH_NAMES, index_of
from .extract_handles import (BATCH_P2P, COALESCING_MANAGER, GROUP_LAUNCHES, GROUP_SENDS, P2P_LAUNCHES, P2P_OP, P2P_SEND, coalesced,
                              group_launch, handed_on, loop_bindings, loop_sources, p2p_op_list, p2p_ops_in_display, p2p_ops_in_list,
                              p2p_sends, p2p_tensor, work_aliases)
from .extract_closure_ops import ClosureOps
from .extract_handle_flow import lists_from_calls
from .extract_names import ESCAPING_METHODS
from .extract_keeps import SCOPE_TYPES, body_fields
from .extract_handle_objects import synthesize_handle_objects
from .extract_host_collectives import DEVICE_GROUP, device_group_spans, host_collectives
from .extract_pairs import EVENT_RECORD, EVENT_WAIT, PairFacts, positions, synthesize, taken_from
from .options import matches_name
from .travelling_handles import held_through, travelling_fields

if TYPE_CHECKING:
    from .extract import _FactsVisitor

# Functions that only look at a tensor's metadata or identity.
METADATA_FUNCTIONS = frozenset({
    "isinstance", "issubclass", "len", "id", "type", "hasattr", "getattr", "setattr", "delattr", "callable", "hash",
    "is_tensor", "is_storage", "numel",
})
# Calls that fill their argument from a file or another buffer on the host (loaders, NVMe readers).
FILLER_NAMES = frozenset({"readinto", "read_into", "copyto", "async_pread", "sync_pread", "pread", "read_tensor"})
# Reads on the host whatever the tensor is (on a CUDA tensor they also block the host: a sync).
HOST_METHODS = frozenset({"numpy", "tolist", "item"})
# Builtins that wrap a tensor in views of its rows without reading them (`list(t)` holds t[0], t[1], ...).
VIEW_BUILTINS = frozenset({"list", "tuple", "iter"})
STORAGE_METHODS = frozenset({"storage", "untyped_storage", "_typed_storage"})

FACTORIES = frozenset({
    "empty", "zeros", "ones", "full", "rand", "randn", "randint", "arange", "linspace", "tensor", "empty_strided",
    "zeros_like", "ones_like", "empty_like", "full_like", "rand_like", "randn_like", "cat", "stack",
})
NEW_METHODS = frozenset({"new_empty", "new_zeros", "new_ones", "new_full", "new_tensor"})
# Tensor methods whose result is new memory on the receiver's device.
FRESH_METHODS = frozenset({
    "clone", "float", "half", "double", "bfloat16", "int", "long", "bool", "sum", "mean", "norm", "abs", "sqrt",
    "mul", "add", "sub", "div", "pow", "exp", "softmax", "matmul", "mm", "bmm", "neg",
})
# With `async_op=True`, a callee whose name holds one of these is a collective (`dist_reduce_scatter_func`).
COLLECTIVE_WORDS = ("all_gather", "allgather", "all_reduce", "allreduce", "reduce_scatter", "broadcast", "all_to_all")
# Keyword arguments of collectives that are no tensors.
NON_TENSOR_KEYWORDS = frozenset({"group", "async_op", "op", "src", "dst", "tag", "group_src", "group_dst",
                                 "output_split_sizes", "input_split_sizes", "scatter_list_sizes"})


def _same_root(path: str, other: str) -> bool:
    """`param.grad` and `param._saved_grad` (one object's tensors); `self.` paths by their first attribute."""
    def root(p: str) -> str:
        parts = p.split(".")
        return ".".join(parts[:2]) if parts[0] == "self" else parts[0]
    return bool(other) and root(path) == root(other)


def is_true(node: ast.AST | None) -> bool:
    return isinstance(node, ast.Constant) and node.value is True


def device_kind(expr: ast.AST | None) -> str:
    """"host", "device" or "" for a device expression (`"cpu"`, `torch.device("cuda", i)`, `current_device_name()`)."""
    if expr is None:
        return ""
    text = ast.unparse(expr).lower()
    if "cpu" in text:
        return "host"
    if any(word in text for word in ("cuda", "device_name", "current_device", "get_accelerator")):
        return "device"
    return ""


class HazardCollector:
    def __init__(self, visitor: "_FactsVisitor") -> None:
        from .extract import METADATA_ATTRS, METADATA_METHODS, NOT_DATA_WRITES, VIEW_METHODS, access_path, dotted

        self.v = visitor
        self.access_path = access_path
        self.dotted = dotted
        self.view_methods = VIEW_METHODS
        self.metadata_attrs = METADATA_ATTRS
        self.metadata_methods = METADATA_METHODS - {"record_stream"}
        self.not_data_writes = NOT_DATA_WRITES
        self.skip: set[int] = set()  # ids of nodes a parent has already accounted for
        self.binds_memo: dict[int, bool] = {}  # id(statement) -> whether it binds a local name (_binds_a_name)
        # whether the file may hold `x := v` (a NamedExpr needs the ":=" token): else _binds_a_name walks statements
        self.walrus = any(":=" in line for line in visitor.src_lines)
        self._assigned_from = ""  # the access path of the value of the assignment being recorded
        self.bound_to: dict[int, str] = {}  # id(value expression) -> the path its result is bound or appended to
        self.escaping_calls: set[int] = set()  # id() of calls whose result is a view handed out (returned)
        self.loop_vars: dict[int, dict[str, tuple[str, ...]]] = {}  # id(function facts) -> loop var -> iterated paths
        self.loop_links: dict[int, list[tuple[str, tuple[str, ...]]]] = {}  # every loop's (var, paths), in order
        self.p2p_made: dict[int, dict[str, list[str]]] = {}  # id(function facts) -> where P2POps went -> tensors
        self.closure_ops = ClosureOps()  # P2POps nested functions put in their enclosing function's lists
        self.iterations: set[int] = set()  # id() of the expressions loops iterate: naming them reads no element
        self.pairs = PairFacts()  # tuples of a handle and its buffer, out and back (extract_pairs.py)
        self.true_defaults: dict[str, set[int]] = {}  # parameter name -> lines where it defaults to True
        # id(function facts) -> (handle, span, async flag is true, block, region) of `with _coalescing_manager(...)
        # as cm:` (extract_handles.coalesced)
        self.coalescing: dict[int, list[tuple[str, tuple[int, int, int, int], bool, tuple[int, int], int]]] = {}
        self.handlers = {
            ast.Call: self._call, ast.Assign: self._assign, ast.AnnAssign: self._assign,
            ast.AugAssign: self._aug_assign, ast.Delete: self._delete, ast.Return: self._escape,
            ast.Yield: self._escape, ast.YieldFrom: self._escape, ast.For: self._loop, ast.AsyncFor: self._loop,
            ast.comprehension: self._loop, ast.If: self._if, ast.Name: self._name, ast.Attribute: self._attribute,
            ast.arguments: self._defaults, ast.Compare: self._compare, ast.While: self._while,
            ast.With: self._with, ast.AsyncWith: self._with,
        }

    def see(self, node: ast.AST) -> None:
        handler = self.handlers.get(type(node))
        if handler is not None and id(node) not in self.skip:
            handler(node)

    # --- recording ----------------------------------------------------------------------------------------------
    @property
    def fn(self) -> FunctionFacts:
        return self.v.fn

    def _use(self, path: str, how: str, node: ast.AST, arg: str = "", at_end: bool = False,
             index: str | None = None) -> None:
        line, column = node.lineno, node.col_offset + 1
        if how == "read" and id(node) in self.iterations:
            arg = "for"  # `for t in bufs`, `zip(bufs, ...)`: the container is iterated, its tensors not read
        if index is None:
            index = index_of(node) if node.__class__ is ast.Subscript else ""  # (index_of's own first test)
        v = self.v  # (the visitor's state read directly, not through the `fn` property: a use per name mentioned)
        if at_end:  # a binding or free takes effect after its statement's expressions ran
            end = node.end_lineno or node.lineno, (node.end_col_offset or 0) + 1
            v.fn.uses.append(Use(path, how, *end, v.region, v.blocks[-1], arg, line, column, index))
        else:
            v.fn.uses.append(Use(path, how, line, column, v.region, v.blocks[-1], arg, 0, 0, index))

    def _mark(self, expr: ast.AST) -> str | None:
        """The access path of `expr`, with the nodes that spell it marked as accounted for."""
        path = self.access_path(expr)
        if path is None:
            return None  # not a plain path: its parts are seen (and counted) on their own
        node = expr
        add = self.skip.add
        while True:
            add(id(node))
            kind = node.__class__  # (ast.parse makes exact types)
            if kind is ast.Attribute or kind is ast.Subscript or kind is ast.Starred:
                node = node.value
            elif kind is ast.Call and node.func.__class__ is ast.Attribute and node.func.attr in self.view_methods:
                add(id(node.func))  # (_is_view_call, inlined)
                node = node.func.value
            else:
                break
        return path

    def _is_module(self, expr: ast.AST) -> bool:
        root = expr  # `torch.cuda`, `dist.ReduceOp.SUM`; not what a call returns
        kind = root.__class__  # (ast.parse makes exact types)
        while kind is ast.Attribute or kind is ast.Subscript:
            root = root.value
            kind = root.__class__
        return kind is ast.Name and root.id in self.v.facts.imports

    def _arguments(self, node: ast.Call, how: str, arg: str = "") -> None:
        exprs = node.args
        if node.keywords:
            exprs = exprs + [k.value for k in node.keywords if k.arg not in ("out", "non_blocking")]
        imports = self.v.facts.imports
        for expr in exprs:
            for elt in elements(expr):
                kind = elt.__class__  # (exact types)
                if kind is ast.Name:  # (the common argument: _is_module and _mark of a name, inlined)
                    if elt.id not in imports and elt.id not in NO_PATH_NAMES:
                        self.skip.add(id(elt))
                        self._use(elt.id, how, elt, arg)
                elif kind is ast.Attribute or kind is ast.Subscript or kind is ast.Starred or kind is ast.Call:
                    if kind is ast.Call and not _is_view_call(elt, self.view_methods):
                        temporary = self._unbound_copy(elt)  # `int(x.cpu(non_blocking=True))`
                        if temporary:
                            self._use(temporary, how, elt)
                        continue  # its own call: seen separately
                    if self._is_module(elt):
                        continue
                    path = self._mark(elt)
                    if path:
                        self._use(path, how, elt, arg)
        for kw in node.keywords:
            if kw.arg == "out":
                for elt in elements(kw.value):
                    path = self._mark(elt)
                    if path:
                        self._use(path, "write", elt, "out=")

    # --- calls --------------------------------------------------------------------------------------------------
    def _call(self, node: ast.Call) -> None:
        keywords = {k.arg: k.value for k in node.keywords if k.arg} if node.keywords else {}
        func = node.func
        callee = func.id if func.__class__ is ast.Name else self.dotted(func)
        self.v.callee_of = node, callee  # (the visitor's visit_Call, which comes next, spells it so too)
        last = callee.rsplit(".", 1)[-1]
        flag = keywords.get("async_op")
        if flag is not None and self._async_flag(flag, node) and self._is_collective(node, callee):
            self._async_work(node, last, keywords)
            return
        if last in P2P_LAUNCHES or last in (P2P_OP, BATCH_P2P):
            if self._p2p(node, callee, last):
                return
        attribute = func.__class__ is ast.Attribute
        if attribute and func.attr in GROUP_LAUNCHES and group_launch(
                func.attr, func.value, self.v.param_classes.get(id(self.v.fn), {})):
            # `group.recv([buf], peer, tag)`: always asynchronous (extract_handles.py); a send only reads
            self._async_work(node, P2P_SEND if last in GROUP_SENDS else last, keywords, flagged=False)
            return
        if flag.__class__ is ast.Name and self._is_collective(node, callee):
            self._maybe_async(node, last, keywords)  # then seen as any call
        constructor = last.lstrip("_")[:1].isupper()
        if constructor and len(node.args) >= 2:  # `Handle(work, out, ...)` (extract_pairs.py)
            self.pairs.built.setdefault(id(self.v.fn), []).append(
                (last, tuple(self.access_path(a) or "" for a in node.args)))
        if attribute and not self._is_module(func.value):
            self.skip.add(id(func))
            self._method_call(node, func.attr, func.value, keywords)
            return
        if attribute:
            self._mark(func)
        if last in METADATA_FUNCTIONS:
            for arg in node.args:
                self._mark(arg)
            return
        if constructor:
            self._arguments(node, "escape")  # a constructor stores it (with its event, say): a hand-off, no read
            return
        if id(node) in self.escaping_calls:  # `return tuple(bufs)`: the tensors go back to the caller
            self._arguments(node, "escape", RETURNED if last in VIEW_BUILTINS else "")
            return
        self._arguments(node, "write" if last in FILLER_NAMES else "read")

    def _maybe_async(self, node: ast.Call, op: str, keywords: dict) -> None:
        """`async_op=async_op`: kept aside for the tuples that hand its handle on (extract_pairs.py)."""
        exprs = list(node.args) + [v for k, v in keywords.items() if k not in NON_TENSOR_KEYWORDS]
        tensors = tuple(dict.fromkeys(p for expr in exprs for elt in elements(expr)
                                      if not isinstance(elt, ast.Constant) for p in [self.access_path(elt)] if p))
        self.pairs.maybe.setdefault(id(self.fn), []).append(AsyncWork(
            op, self.bound_to.get(id(node), ""), tensors, node.lineno, node.col_offset + 1,
            node.end_lineno or node.lineno, self.v.blocks[-1], self.v.region))

    def _with(self, node: ast.With | ast.AsyncWith) -> None:
        """`with _coalescing_manager(group, async_ops=flag) as cm:`: `cm` is the handle of the body's collectives,
        made into one work at the end of the file (extract_handles.coalesced)."""
        for item in node.items:
            expr, name = item.context_expr, item.optional_vars
            if isinstance(expr, ast.Call) and isinstance(name, ast.Name) \
                    and self.dotted(expr.func).rsplit(".", 1)[-1] == COALESCING_MANAGER:
                flag = _keyword(expr, "async_ops")
                span = (node.lineno, node.col_offset + 1, node.end_lineno or node.lineno, node.end_col_offset or 0)
                self.coalescing.setdefault(id(self.fn), []).append(
                    (name.id, span, self._async_flag(flag, expr), self.v.blocks[-1], self.v.region))

    def _recorded(self, node: ast.Call, event: str | None) -> None:
        """An event recorded inside `with stream(s):` after the region's work on some tensors stands for that work,
        as a handle does for its collective: kept aside (like `_maybe_async`) for a tuple that hands the event on
        with one of those tensors (`return AllGatherResult(out, event, work)`), whose taker must wait the event
        before touching the tensor (extract_pairs.py)."""
        if not event or event.startswith("("):
            return
        # Of the region's paths, those the function made or wrote before (a tensor, not a bucket id or a size).
        made = {u.path for u in self.fn.uses if u.how == "write"} | {
            a.path for a in self.fn.accesses if a.kind == "write"} | {p.path for p in self.fn.placements if p.fresh}
        tensors = tuple(dict.fromkeys(u.path for u in self.fn.uses if u.region == self.v.region
                                      and u.how in ("read", "write", "stream") and u.path != event
                                      and u.path in made))
        if tensors:
            self.pairs.maybe.setdefault(id(self.fn), []).append(AsyncWork(
                EVENT_RECORD, event, tensors, node.lineno, node.col_offset + 1, node.end_lineno or node.lineno,
                self.v.blocks[-1], self.v.region))

    def _async_flag(self, flag: ast.AST | None, node: ast.Call) -> bool:
        """`async_op=True`, or `async_op=async_op` where this function's parameter defaults to True."""
        if is_true(flag):
            return True
        return isinstance(flag, ast.Name) and flag.id in self.fn.params and any(
            self.fn.line <= line <= node.lineno for line in self.true_defaults.get(flag.id, ()))

    def _is_collective(self, node: ast.Call, callee: str) -> bool:
        names = self.v.collectives
        if matches_name(callee, names) or any(word in callee.rsplit(".", 1)[-1].lower() for word in COLLECTIVE_WORDS):
            return True
        # `instrument_w_nvtx(dist.allgather_fn)(...)`: a wrapped collective
        inner = node.func
        return isinstance(inner, ast.Call) and any(
            isinstance(a, (ast.Name, ast.Attribute)) and matches_name(self.dotted(a), names) for a in inner.args)

    def _async_work(self, node: ast.Call, op: str, keywords: dict, flagged: bool = True) -> None:
        if isinstance(node.func, ast.Attribute):
            self._mark(node.func)
        tensors: list[str] = []
        exprs = list(node.args) + [v for k, v in keywords.items() if k not in NON_TENSOR_KEYWORDS]
        for expr in exprs:
            for elt in elements(expr):
                if isinstance(elt, ast.Constant) or self._is_module(elt):
                    continue
                if isinstance(elt, ast.Call) and not _is_view_call(elt, self.view_methods):
                    continue
                path = self._mark(elt)
                if path and path not in tensors:
                    tensors.append(path)
        self.fn.async_works.append(AsyncWork(
            op, self.bound_to.get(id(node), ""), tuple(tensors), node.lineno, node.col_offset + 1,
            node.end_lineno or node.lineno, self.v.blocks[-1], self.v.region, flagged=flagged))

    def _p2p(self, node: ast.Call, callee: str, last: str) -> bool:
        """Point-to-point launches (extract_handles.py); True when the call is accounted for."""
        func = node.func
        if isinstance(func, ast.Attribute) and not self._is_module(func.value):
            return False  # a method of some object, not torch.distributed's
        if isinstance(func, ast.Name) and not self.v.facts.imports.get(callee, "").startswith(("torch", "deepspeed")):
            return False
        if any(part == "ops" or "functional" in part for part in callee.split(".")):
            return False  # `torch.ops._c10d_functional.irecv(t, ...)` returns a tensor, no handle
        if last == P2P_OP:  # `ops.append(P2POp(dist.irecv, t, peer))`, `op = P2POp(...)`: remember where it went
            tensor = p2p_tensor(node, last)
            path, dest = self.access_path(tensor) if tensor is not None else None, self.bound_to.get(id(node))
            if path and dest:
                self.p2p_made.setdefault(id(self.fn), {}).setdefault(dest, []).append(
                    (path, p2p_sends(node, self.dotted)))
                self.closure_ops.note_op(self.fn, dest, path, p2p_sends(node, self.dotted), node.lineno,
                                         self.v._owner)
            return False  # the constructor's arguments escape into it, as any constructor's
        if isinstance(func, ast.Attribute):
            self._mark(func)
        ops_path = None
        if last == BATCH_P2P:
            ops = p2p_op_list(node)
            made = self.p2p_made.get(id(self.fn), {})
            tensors = p2p_ops_in_display(ops, self.dotted, self.access_path, made) if ops is not None else []
            ops_path = self.access_path(ops) if ops is not None else None
            if ops_path:
                self._mark(ops)
                tensors += p2p_ops_in_list(self.fn, ops_path, made)
                tensors += [t for t in self.closure_ops.tensors_of(self.fn, ops_path) if t not in tensors]
        else:
            tensor = p2p_tensor(node, last)
            path = self._mark(tensor) if tensor is not None else None
            tensors = [(path, last == P2P_SEND)] if path else []
        handle = self.bound_to.get(id(node), "")
        # ops made elsewhere (`self._p2p_ops`, a parameter): the list stands for the tensors they hold
        holders = (ops_path,) if last == BATCH_P2P and not tensors and ops_path else ()
        for sent, op in ((False, last), (True, P2P_SEND)):  # a batch's receives, then its sends (only read)
            paths = tuple(dict.fromkeys(p for p, s in tensors if s == sent))
            if paths or (not tensors and not sent):
                self.fn.async_works.append(AsyncWork(
                    op if last == BATCH_P2P else last, handle, paths, node.lineno, node.col_offset + 1,
                    node.end_lineno or node.lineno, self.v.blocks[-1], self.v.region, holders))
        return True

    def _method_call(self, node: ast.Call, method: str, receiver: ast.AST, keywords: dict) -> None:
        non_blocking = is_true(keywords.get("non_blocking"))
        if method == "resize_" and isinstance(receiver, ast.Call) and isinstance(receiver.func, ast.Attribute) \
                and receiver.func.attr in STORAGE_METHODS:
            self.skip.update((id(receiver), id(receiver.func)))
            path = self._mark(receiver.func.value)
            if path:
                self._use(path, "free", node, f"{receiver.func.attr}().resize_", at_end=True)
                self._resize_allocation(path, node)
            return
        if method == "resize_" and self.access_path(receiver):  # `stor.resize_(n)` of a storage (or tensor) object
            self._resize_allocation(self._mark(receiver), node)
            return
        if method == "set_" and self.access_path(receiver):  # `tmp.set_(ref.untyped_storage(), ...)`: a view of
            path = self._mark(receiver)                          # ref's storage from now on, not its own memory
            self._use(path, "rebind", node, "set_", at_end=True)
            self.fn.placements.append(Placement(path, "", node.lineno, False, self.v.region))
            source = storage_owner(node.args[0] if node.args else _keyword(node, "source"), self.access_path)
            if source and source != path:  # what is written through `tmp` is written into `ref` (aliasing.py)
                self.fn.derived.append((path, source, node.lineno))
            return
        if method in ("synchronize", "wait_event"):
            # `ev.synchronize()`, `s.wait_event(ev)`: a wait of an event that may have come with its buffers
            # (extract_pairs.py); arg EVENT_WAIT: no wait of a collective's handle (SC105's waiting callees)
            waited = self._mark(receiver) if method == "synchronize" else (
                self._mark(node.args[0]) if node.args else None)
            if waited:
                self._use(waited, "wait", node, EVENT_WAIT)
            return
        if method in self.metadata_methods or method in self.view_methods:
            self._mark(receiver)
            return
        path = self._mark(receiver) or self._unbound_copy(receiver)  # `x.to("cpu", non_blocking=True).tolist()`
        if path is None and isinstance(receiver, ast.Call):
            # `dist.all_reduce(t, async_op=True).wait()`, `fut = dist.all_reduce(...).get_future()`: the handle
            # is not dropped; it is waited here or lives on in what this call returns.
            path = self.bound_to.get(id(node)) if method != "wait" else None
            path = path or f"({method}@{node.lineno}:{node.col_offset + 1})"
            self.bound_to[id(receiver)] = path
        if method in ("record", "record_event") and self.v.region != NO_REGION:
            self._recorded(node, path if method == "record" else self.bound_to.get(id(node), ""))
        if method == "record_stream":
            stream = ast.unparse(node.args[0]) if node.args else ""
            for each in (path, *self.loop_vars.get(id(self.fn), {}).get(path, ())) if path else ():
                self._use(each, "record_stream", node, stream)
            return
        if method == "wait":
            if isinstance(receiver, ast.Call) and isinstance(receiver.func, ast.Attribute) \
                    and receiver.func.attr in ("pop", "popleft", "get"):
                path = self.access_path(receiver.func.value)  # `handles.pop().wait()`
            if path:
                self._use(path, "wait", node)
                for iterated in self.loop_vars.get(id(self.fn), {}).get(path, ()):
                    self._use(iterated, "wait", node)
            return
        if method in ESCAPING_METHODS:
            for arg in node.args:  # `handles.append(dist.all_reduce(..., async_op=True))`, `.extend(... for p in ps)`
                for made in _bound_values(arg) if path else ():
                    if isinstance(made, ast.Call):
                        self.bound_to[id(made)] = path
                stored = positions(arg, self.access_path) if path else None
                if path:  # (read for a closure's P2POps, extract_closure_ops.py)
                    self.closure_ops.note_store(self.fn, path, [p for p in stored or (self.access_path(arg),) if p],
                                                node.lineno)
                if stored:  # `self._recv_act.append((works, tensors))`
                    self.pairs.out.setdefault(id(self.fn), []).append((path, stored))
                elif path and isinstance(arg, ast.Call):  # `pairs.append(self._reduce_scatter_gradient(p))`
                    self.pairs.appended.setdefault(id(self.fn), []).append(
                        (path, self.dotted(arg.func).rsplit(".", 1)[-1]))
            self._arguments(node, "escape")
            if path:  # where a stored handle or tensor went: `handles.append(work)`
                for arg in node.args:
                    if isinstance(arg, ast.Name):
                        self._use(arg.id, "escape", arg, path)
            return
        if method in ("copy_", "to", "cpu", "cuda") and non_blocking:
            self._async_copy(node, method, path, keywords)
            return
        if id(node) in self.escaping_calls:
            how = "escape"
        elif method in HOST_METHODS:
            how = "host"
        elif method == "resize_":
            how = "free"
        elif method.endswith("_") and not method.startswith("_") and method not in self.not_data_writes:
            how = "write"
        else:
            how = "read"
        if path:
            self._use(path, how, node, method, at_end=how == "free")
        self._arguments(node, "write" if method in FILLER_NAMES else "read")

    def _resize_allocation(self, path: str, node: ast.Call) -> None:
        """`x.untyped_storage().resize_(n)`, `stor.resize_(n)` with a size other than 0: the caching allocator hands
        out a block on the current stream here, as a factory would (fresh_block_on_side_stream.py); `resize_(0)`
        only frees."""
        size = node.args[0] if node.args else _keyword(node, "size")
        if size is None or isinstance(size, ast.Constant) and size.value == 0:
            return
        self._use(path, "alloc", node, "resize_", at_end=True)
        self.fn.placements.append(Placement(path, "", node.lineno, True, self.v.region))

    def _unbound_copy(self, expr: ast.AST) -> str | None:
        """For a non_blocking `.to(...)` / `.cpu()` / `.cuda()` whose result is used right away, a name for that
        temporary result (`(to@12:9)`), bound so the copy records it as its destination."""
        if not (isinstance(expr, ast.Call) and isinstance(expr.func, ast.Attribute)
                and expr.func.attr in ("to", "cpu", "cuda") and is_true(_keyword(expr, "non_blocking"))):
            return None
        name = f"({expr.func.attr}@{expr.lineno}:{expr.col_offset + 1})"
        self.bound_to[id(expr)] = name
        return name

    def _async_copy(self, node: ast.Call, method: str, path: str | None, keywords: dict) -> None:
        if method == "copy_":
            source = node.args[0] if node.args else keywords.get("src")
            src = self._mark(source) if source is not None else None
            dst, target = path or "", ""
            if path:
                self._use(path, "write", node, "copy_")
            if src:
                self._use(src, "stream", source)
        else:
            src, dst = path, self.bound_to.get(id(node), "")
            target_expr = node.args[0] if node.args else keywords.get("device")
            target = ast.unparse(target_expr) if target_expr is not None else method
            if path:
                self._use(path, "stream", node, method)
        if src or dst:
            self.fn.async_copies.append(AsyncCopy(
                method, dst, src or "", target, node.lineno, node.col_offset + 1, node.end_lineno or node.lineno,
                self.v.region, self.v.blocks[-1]))

    # --- bindings -----------------------------------------------------------------------------------------------
    def _assign(self, node: ast.Assign | ast.AnnAssign) -> None:
        value = node.value
        if value is None:
            return
        targets = node.targets if isinstance(node, ast.Assign) else [node.target]
        single = self.access_path(targets[0]) if len(targets) == 1 and not isinstance(
            targets[0], ast.Subscript) else None
        self._tuple_assign(node, targets[0], value, single)
        element = None
        if len(targets) == 1 and isinstance(targets[0], ast.Subscript) and isinstance(targets[0].value, ast.Name) \
                and index_of(targets[0]):
            element = (targets[0].value.id, index_of(targets[0]))
        if single and not (isinstance(targets[0], ast.Attribute) and targets[0].attr == "data"):
            for expr in _bound_values(value):
                self.bound_to[id(expr)] = single
            where, fresh = self._placement(value)
            if where or fresh:
                self.fn.placements.append(Placement(single, where, node.lineno, fresh, self.v.region))
            if isinstance(value, ast.Attribute) and value.attr == DEVICE_GROUP:
                self.fn.device_groups.append((single, node.lineno, 0))  # (until: set in finish)
        if _is_numpy_view(value):  # `a = h.numpy()` shares h's memory: the read is where `a` is used
            self.skip.update((id(value), id(value.func)))
            aliased = self._mark(value.func.value)
            if aliased:
                self._use(aliased, "escape", value)
        else:  # `y = x`, `self.buf = x`, `y = x.view(-1)`, `d[k] = (a, b)`, `{"k": x}`: stored, tracked no further
            for elt in _stored(value):
                if isinstance(elt, (ast.Name, ast.Attribute, ast.Subscript)) or _is_view_call(elt, self.view_methods):
                    aliased = self._mark(elt)
                    if aliased:  # arg: where it went, when that is one path (a handle and its buffer travel)
                        self._use(aliased, "escape", elt, single or "")
                        if element is not None:  # `bufs[k] = buf`: also into that element of a local container
                            self._use(aliased, "escape", elt, element[0], index=element[1])
        dropped = isinstance(value, ast.Constant) and value.value is None
        # `p.data = p._mp_param`: a swap between tensors the object holds, the old storage is kept too; a new
        # tensor from elsewhere (`p.grad.data = bucket_view`) drops it.
        value_path = self.access_path(value)
        swapped = value_path is not None
        self._assigned_from = value_path or ""
        for target in targets:
            for elt in elements(target):
                self._store(elt, node, "None" if dropped else "", swapped)

    def _tuple_assign(self, node: ast.Assign | ast.AnnAssign, target: ast.AST, value: ast.AST, single: str | None
                      ) -> None:
        """`self.pair = (handle, buf)` hands a tuple on; `handle, buf = f(...)` / `= pairs.pop()` takes one apart."""
        stored = positions(value, self.access_path)
        if single and stored:
            self.pairs.out.setdefault(id(self.fn), []).append((single, stored))
        bound = positions(target, self.access_path)
        source = taken_from(value, self.access_path, self.dotted) if bound else None
        if bound and source is None and isinstance(value, ast.Name) and value.id in self.fn.params:
            source = ("names", value.id)  # a parameter taken apart: matched by the launcher's names
        if bound and source:
            self.pairs.back.setdefault(id(self.fn), []).append((
                source, bound, node.lineno, node.col_offset + 1, node.end_lineno or node.lineno, self.v.blocks[-1],
                self.v.region))

    def _store(self, target: ast.AST, statement: ast.AST, value: str = "", swapped: bool = False) -> None:
        if isinstance(target, ast.Subscript):
            path = self._mark(target)
            if path:
                self._use(path, "write", target, "[]=")
        elif isinstance(target, ast.Attribute) and target.attr == "data":
            path = self._mark(target.value)
            if path and not (swapped and _same_root(path, self._assigned_from)):
                self._use(path, "free", statement, ".data=", at_end=True)
            if path and "." not in path and self._assigned_from and not _same_root(path, self._assigned_from):
                self.fn.derived.append((path, self._assigned_from, statement.lineno))  # `x.data = y`: y's memory
        elif isinstance(target, (ast.Name, ast.Attribute)):
            path = self._mark(target)
            if path:
                self._use(path, "rebind", statement, value, at_end=True)

    def _aug_assign(self, node: ast.AugAssign) -> None:
        path = self._mark(node.target)
        if path:
            self._use(path, "write", node.target, type(node.op).__name__)

    def _delete(self, node: ast.Delete) -> None:
        for target in node.targets:
            if isinstance(target, ast.Subscript):  # `del state[key]`: the container's reference to the item
                path = self._mark(target)
                if path:
                    self._use(path, "free", target, "del[]", at_end=True)
                continue
            path = self._mark(target)
            if path:
                self._use(path, "free", target, "del", at_end=True)

    def _escape(self, node: ast.Return | ast.Yield | ast.YieldFrom) -> None:
        if node.value is None:
            return
        self.fn.hand_backs.append((node.lineno, node.col_offset + 1))
        returned = positions(node.value, self.access_path) if isinstance(node, ast.Return) else None
        value = node.value
        if isinstance(node, ast.Return) and isinstance(value, ast.Call) and len(value.args) >= 2 \
                and self.dotted(value.func).rsplit(".", 1)[-1].lstrip("_")[:1].isupper():
            returned = tuple(self.access_path(a) or "" for a in value.args)  # `return Result(out, event, work)`
        if returned:  # `return handle, buf`
            self.pairs.out.setdefault(id(self.fn), []).append(("", returned))
        for elt in _stored(node.value):  # `return t.numpy()`, `return list(t)`: views handed out, read later
            if isinstance(elt, ast.Call) and (
                    (isinstance(elt.func, ast.Attribute) and elt.func.attr == "numpy")
                    or (isinstance(elt.func, ast.Name) and elt.func.id in VIEW_BUILTINS)):
                self.escaping_calls.add(id(elt))
        for elt in _stored(node.value):
            if isinstance(elt, (ast.Name, ast.Attribute, ast.Subscript)):
                path = self._mark(elt)
                if path:
                    self._use(path, "escape", elt, RETURNED)

    def _while(self, node: ast.While) -> None:
        self.fn.loops.append((node.lineno, node.end_lineno or node.lineno))

    def _loop(self, node: ast.For | ast.AsyncFor | ast.comprehension) -> None:
        if not isinstance(node, ast.comprehension):
            self.fn.loops.append((node.lineno, node.end_lineno or node.lineno))
        # `for t in (x, mix, sqr): t.record_stream(s)`, `for req in reqs: req.wait()`, `for a, b in zip(xs, ys)`
        bindings, iterated = loop_bindings(node.target, node.iter, self.access_path)
        for expr in iterated:  # the nodes that spell the path, down to the name a use is recorded at
            while True:
                self.iterations.add(id(expr))
                if isinstance(expr, (ast.Attribute, ast.Subscript, ast.Starred)):
                    expr = expr.value
                elif _is_view_call(expr, self.view_methods):
                    expr = expr.func.value
                else:
                    break
        self._tuple_loop(node)
        for var, source in loop_sources(node.target, node.iter):  # `for req in batch_isend_irecv(ops)`: the
            name = f"(iter@{source.lineno}:{source.col_offset + 1})"  # handles the loop waits, by a name
            for expr in _bound_values(source):
                self.bound_to[id(expr)] = name
            bindings.append((var, (name,)))
        for var, paths in bindings:
            self.loop_vars.setdefault(id(self.fn), {})[var] = paths
            self.loop_links.setdefault(id(self.fn), []).append((var, paths))

    def _compare(self, node: ast.Compare) -> None:
        """`buf is not None`, `x is y`: identity tests look at no element (a read tagged "is": a mention)."""
        if all(isinstance(op, (ast.Is, ast.IsNot)) for op in node.ops):
            for side in [node.left, *node.comparators]:
                path = self._mark(side) if isinstance(side, (ast.Name, ast.Attribute)) else None
                if path:
                    self._use(path, "read", side, "is")

    def _defaults(self, node: ast.arguments) -> None:
        """`def post(t=slice_tensor): ...`: a default captures the tensor for later, it reads nothing now."""
        for default in [*node.defaults, *(d for d in node.kw_defaults if d is not None)]:
            path = self._mark(default)
            if path:
                self._use(path, "escape", default)
        positional = [*node.posonlyargs, *node.args]
        for arg, default in [*zip(positional[len(positional) - len(node.defaults):], node.defaults),
                             *zip(node.kwonlyargs, node.kw_defaults)]:
            if is_true(default):  # `def f(..., async_op=True)`: what the flag is unless a caller says otherwise
                self.true_defaults.setdefault(arg.arg, set()).add(arg.lineno)

    def _tuple_loop(self, node: ast.For | ast.AsyncFor | ast.comprehension) -> None:
        """`for handle, buf in pairs`, `for p, (handle, buf) in zip(params, pairs)`: each element taken apart."""
        pairs = [(node.target, node.iter)]
        if isinstance(node.iter, ast.Call) and isinstance(node.iter.func, ast.Name) and node.iter.func.id == "zip" \
                and isinstance(node.target, (ast.Tuple, ast.List)) and len(node.target.elts) == len(node.iter.args):
            pairs = list(zip(node.target.elts, node.iter.args))
        where = node.target if isinstance(node, ast.comprehension) else node
        for target, source in pairs:
            bound = positions(target, self.access_path)
            container = self.access_path(source) if bound else None
            if bound and container:
                self.pairs.back.setdefault(id(self.fn), []).append((
                    ("container", container), bound, where.lineno, where.col_offset + 1, where.lineno,
                    self.v.blocks[-1], self.v.region))

    def _if(self, node: ast.If) -> None:
        if node.orelse:
            body = (node.body[0].lineno, node.body[-1].end_lineno or node.body[-1].lineno)
            other = (node.orelse[0].lineno, node.orelse[-1].end_lineno or node.orelse[-1].lineno)
            self.fn.branches.append(body + other)
            tested, none_in_body = _presence_test(node.test)
            path = self.access_path(tested) if tested is not None else None
            if path:
                self.fn.none_arms.append((path,) + (body if none_in_body else other))
            self.fn.choosing.extend(arm for arm, statements in ((body, node.body), (other, node.orelse))
                                    if _binds_a_name(statements, self.binds_memo, self.walrus))

    def _name(self, node: ast.Name) -> None:
        # (extract.py's generic_visit inlines this for the names it visits: change both)
        if node.ctx.__class__ is ast.Load and node.id not in NO_PATH_NAMES:
            self._use(node.id, "read", node)

    def _attribute(self, node: ast.Attribute) -> None:
        if not isinstance(node.ctx, ast.Load):
            return
        if node.attr in self.metadata_attrs:
            self._mark(node.value)
            return
        path = self._mark(node)
        if path:
            self._use(path, "read", node)

    # --- where a tensor lives -----------------------------------------------------------------------------------
    def _placement(self, value: ast.AST) -> tuple[str, bool]:
        if isinstance(value, ast.IfExp):
            (w1, f1), (w2, f2) = self._placement(value.body), self._placement(value.orelse)
            return (w1 if w1 == w2 else ""), f1 and f2
        if not isinstance(value, ast.Call):
            return "", False
        keywords = {k.arg: k.value for k in value.keywords if k.arg}
        last = self.dotted(value.func).rsplit(".", 1)[-1]
        if last == "pin_memory" or is_true(keywords.get("pin_memory")):
            return "pinned", True
        if last in FACTORIES and (not isinstance(value.func, ast.Attribute) or self._is_module(value.func)):
            if "device" in keywords:
                return device_kind(keywords["device"]), True
            return ("" if last.endswith("_like") or last in ("cat", "stack") else "host"), True
        if not isinstance(value.func, ast.Attribute):
            return "", False
        if last == "cpu":
            return "host", True
        if last == "cuda":
            return "device", True
        if last == "to":
            target = value.args[0] if value.args else keywords.get("device")
            return device_kind(target), True
        if last in NEW_METHODS:
            return device_kind(keywords.get("device")), True
        return "", last in FRESH_METHODS

    # --- end of file ----------------------------------------------------------------------------------------------
    def finish(self, facts: FileFacts) -> None:
        """Keep only the uses and placements a hazard rule can look at, and the source lines they point to."""
        handed: dict[int, list[AsyncWork]] = {}  # works whose flag is a variable: kept where the handle is stored
        for fn in facts.functions:
            for handle, span, flag, block, region in self.coalescing.get(id(fn), ()):
                work = coalesced(handle, span, fn.async_works + self.pairs.maybe.get(id(fn), []), block, region)
                if work is not None:
                    (fn.async_works if flag else handed.setdefault(id(fn), [])).append(work)
        keep = {id(fn): work_aliases(fn, self.loop_links.get(id(fn), [])) for fn in facts.functions}
        for fn in facts.functions:
            candidates = handed.get(id(fn), []) + self.pairs.maybe.get(id(fn), [])
            fn.handed_works, kept = handed_on(fn, candidates, self.loop_links.get(id(fn), []))
            keep[id(fn)] |= kept
        launched = {id(fn): len(fn.async_works) for fn in facts.functions}
        synthesize(facts.functions, self.pairs)  # handles and buffers that come back in a tuple (extract_pairs.py)
        synthesize_handle_objects(facts.functions)  # classes whose wait() writes a tensor (extract_handle_objects.py)
        for fn in facts.functions:
            if len(fn.async_works) != launched[id(fn)]:
                keep[id(fn)] |= work_aliases(fn, self.loop_links.get(id(fn), []))
        travelling = travelling_fields(facts.functions)
        for fn in facts.functions:
            fn.host_collectives = host_collectives(fn)  # (before the flag's uses and placement are dropped)
            if fn.device_groups:
                fn.device_groups = device_group_spans(fn)  # (before the rebinds are dropped)
            # (every loop is kept: a loop brings an access round again after a later one, races.loop_around)
            interesting = keep[id(fn)]
            interesting.update(p for c in fn.async_copies for p in (c.dst, c.src) if p)
            interesting.update(held_through(fn, travelling))
            interesting.update(p for w in fn.async_works for p in w.tensors + (w.handle,) if p)
            interesting.update(lists_from_calls(fn))  # a callee's handles, maybe (returned_handles.py)
            returned = set()
            for u in fn.uses:  # (one pass, not three: the uses are most of a detailed file's facts)
                how = u.how
                if u.region != NO_REGION:
                    interesting.add(u.path)
                # Released or held for a stream here: the function may run inside a caller's region (SC104).
                elif how == "free" or how == "record_stream" or how == "alloc" or (
                        how == "rebind" and u.arg == "None"):
                    interesting.add(u.path)
                # A fresh allocation returned: made on the caller's stream (fresh_block_on_side_stream.py).
                if how == "escape" and u.arg == RETURNED:
                    returned.add(u.path)
            interesting.update(p.path for p in fn.placements if p.fresh and p.path in returned)
            if fn.name == "__init__":  # `self.buf = buf`: what a constructor keeps (host_read_after_escape.py)
                interesting.update(u.path for u in fn.uses if u.how == "escape" and u.arg.startswith("self.")
                                   and u.path in fn.params)
            # A container store of a kept tensor (`state[key] = buf`) says where it went (release_after_side_use.py).
            stores = {u.line for u in fn.uses if u.how == "escape" and u.path in interesting}
            # `self._done = done` of an event the function records: the attribute holds it (races._kept_for_host_waits)
            recorded = {s.receiver for s in fn.syncs if s.kind == "record"}
            fn.uses = [u for u in fn.uses if u.path in interesting or u.how == "wait"  # waits: for callers too
                       or (u.arg == "[]=" and u.line in stores)
                       or (u.how == "escape" and u.path in recorded and u.arg.startswith("self."))]
            fn.placements = [p for p in fn.placements if p.path in interesting or p.path.startswith("self.")]
            for line in [u.line for u in fn.uses] + [c.line for c in fn.async_copies] + [
                    w.line for w in fn.async_works] + [fn.end_line]:
                self.v._keep_line(line)


def _is_view_call(node: ast.AST, view_methods: frozenset[str]) -> bool:
    return isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in view_methods


def storage_owner(expr: ast.AST | None, access_path) -> str | None:
    """The tensor whose memory a `set_` source names: `ref.untyped_storage()` / `ref.storage()` -> `ref`, a plain
    path (a storage object or a tensor) -> itself."""
    if isinstance(expr, ast.Call) and isinstance(expr.func, ast.Attribute) and expr.func.attr in STORAGE_METHODS:
        expr = expr.func.value
    return access_path(expr) if expr is not None else None


def _keyword(call: ast.Call, name: str) -> ast.AST | None:
    return next((k.value for k in call.keywords if k.arg == name), None)


def _is_numpy_view(node: ast.AST) -> bool:
    return isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "numpy"


def _bound_values(value: ast.AST) -> list[ast.AST]:
    """The expressions whose result ends up in an assignment's target (through conditionals and list builders)."""
    if isinstance(value, ast.IfExp):
        return _bound_values(value.body) + _bound_values(value.orelse)
    if isinstance(value, (ast.ListComp, ast.GeneratorExp, ast.SetComp)):
        return _bound_values(value.elt)
    if isinstance(value, (ast.List, ast.Tuple)):
        return [v for elt in value.elts for v in _bound_values(elt)]
    return [value]


def _stored(value: ast.AST) -> list[ast.AST]:
    """The expressions a value holds when it is stored or returned: a display's elements, a dict's values."""
    if isinstance(value, ast.Dict):
        return [e for v in value.values if v is not None for e in elements(v)]
    return elements(value)


def _binds_a_name(statements: list[ast.stmt], memo: dict[int, bool], walrus: bool = True) -> bool:
    """Whether an arm assigns a plain local name (nested functions and classes aside). `memo`: id() of a statement
    -> whether it (or what it nests) binds one, so the arms of nested if/else chains are walked once, not once
    per enclosing `if` (the tree lives as long as the memo: one file's pass). `walrus`: whether the file may hold
    an assignment expression; without one, only statements bind and expressions are not walked."""
    if not walrus:
        return any(_statement_binds_no_walrus(stmt, memo) for stmt in statements)
    return any(_statement_binds(stmt, memo) for stmt in statements)


def _statement_binds_no_walrus(statement: ast.stmt, memo: dict[int, bool]) -> bool:
    """_statement_binds of a file without `:=`: an assignment statement binds a local by its targets, a compound
    statement by the statements it nests, nothing else binds (no expression is walked: most of a body's nodes)."""
    found = memo.get(id(statement))
    if found is not None:
        return found
    kind = statement.__class__
    found = False
    if kind is ast.Assign or kind is ast.AnnAssign or kind is ast.AugAssign:
        targets = statement.targets if kind is ast.Assign else [statement.target]
        found = any(isinstance(t, ast.Name) and isinstance(t.ctx, ast.Store)
                    for target in targets for t in ast.walk(target))
    elif kind not in SCOPE_TYPES:  # (a nested function or class binds no local of this one)
        for field in body_fields(kind):
            for child in getattr(statement, field) or ():
                nested = child.body if child.__class__ is ast.ExceptHandler or child.__class__ is ast.match_case \
                    else (child,)
                if any(_statement_binds_no_walrus(each, memo) for each in nested):
                    found = True
                    break
            if found:
                break
    memo[id(statement)] = found
    return found




def _statement_binds(statement: ast.stmt, memo: dict[int, bool]) -> bool:
    found = memo.get(id(statement))
    if found is not None:
        return found
    found = False
    pending = [statement]
    while pending:
        node = pending.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)):
            continue
        if node is not statement and isinstance(node, ast.stmt):
            if _statement_binds(node, memo):
                found = True
                break
            continue
        if isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign, ast.NamedExpr)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            # (`state._event = None` binds no local: its `state` is loaded)
            if any(isinstance(t, ast.Name) and isinstance(t.ctx, ast.Store)
                   for target in targets for t in ast.walk(target)):
                found = True
                break
        pending.extend(ast.iter_child_nodes(node))
    memo[id(statement)] = found
    return found


def _presence_test(test: ast.expr) -> tuple[ast.expr | None, bool]:
    """(X, whether X is None on the body) for `if X is None`, `if X is not None`, `if not X`, `if X`; else (None, _)."""
    if isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.comparators[0], ast.Constant) \
            and test.comparators[0].value is None and isinstance(test.ops[0], (ast.Is, ast.IsNot)):
        return test.left, isinstance(test.ops[0], ast.Is)
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        return test.operand, True
    if isinstance(test, (ast.Name, ast.Attribute)):
        return test, False
    return None, False
