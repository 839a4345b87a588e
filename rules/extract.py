"""One pass over a file's syntax tree that fills FileFacts (see facts.py for what each fact means).

The parser is the standard library's `ast`: measured on DeepSpeed 0.13.4 (511 files, 81.6 k lines, one core),
`ast.parse` of every file takes 0.45 s, while libcst takes 3.0 s to parse only the 94 files that pass the token
prefilter, 2.8 s more for one plain visitor and 9 s more for positions. `ast` gives exact positions for free, which
is all the facts need; nothing here rewrites source.
"""

from __future__ import annotations

import ast
import sys

from .collectives import TENSOR_KEYWORDS, Outputs, outputs_of
from .facts import (
    MODULE_SCOPE,
    NO_REGION,
    Access,
    AttrFunction,
    Call,
    ClassFacts,
    FileFacts,
    FunctionFacts,
    ParseFailure,
    Region,
    Sync,
    module_name,
)
from .options import StaticOptions, matches_name
from .streams import PROPERTY_VALUE
from .torch_api import (
    INIT_FUNCTIONS,
    TENSOR_INPLACE_METHODS,
    TENSOR_METHODS,
    TORCH_FUNCTIONS,
)

# Methods that return a view of (or the same) storage: a write through them writes the base tensor.
VIEW_METHODS = frozenset({
    "narrow", "view", "view_as", "reshape", "reshape_as", "flatten", "unflatten", "squeeze", "unsqueeze", "t",
    "transpose", "permute", "expand", "expand_as", "as_strided", "select", "detach", "unfold", "movedim",
    "diagonal", "split", "chunk", "unbind", "contiguous",
})

# Attributes that stand for the tensor itself (same storage).
SAME_STORAGE_ATTRS = frozenset({"data"})

# Attributes and methods that only read metadata: no device work, no ordering needed.
METADATA_ATTRS = frozenset({
    "shape", "dtype", "device", "is_cuda", "requires_grad", "ndim", "layout", "is_leaf", "grad_fn", "names",
    "is_sparse", "is_quantized", "is_meta", "__class__",
})
METADATA_METHODS = frozenset({
    "size", "dim", "numel", "nelement", "element_size", "stride", "storage_offset", "data_ptr", "is_contiguous",
    "is_pinned", "get_device", "type", "untyped_storage", "storage", "register_hook", "requires_grad_",
    "retain_grad", "record_stream", "is_floating_point", "is_complex", "__len__", "nbytes", "itemsize",
    "is_shared", "is_set_to", "resize_", "resize_as_", "share_memory_", "requires_grad_", "set_",
})

# Methods and torch functions whose tensor arguments give only shape, dtype and device: no data read.
METADATA_ARG_METHODS = frozenset({"view_as", "expand_as", "reshape_as", "type_as", "new_empty", "new_zeros",
                                  "new_ones", "new_full", "new_tensor", "is_set_to", "size", "stride"})
METADATA_ARG_FUNCTIONS = frozenset({"empty_like", "zeros_like", "ones_like", "full_like", "rand_like", "randn_like",
                                    "randint_like", "is_tensor", "is_same_size", "typename", "is_floating_point",
                                    "is_complex", "result_type", "is_storage"})

# torch functions that build a tensor from Python data or host arrays: their arguments are no device tensors.
HOST_DATA_FACTORIES = frozenset({"tensor", "as_tensor", "from_numpy", "frombuffer", "asarray", "Tensor"})

# Tensor methods whose result is new memory written by a kernel on the current stream (a hidden producer).
PRODUCING_METHODS = frozenset({
    "to", "cuda", "cpu", "clone", "float", "half", "bfloat16", "double", "int", "long", "sum", "mean", "norm",
    "abs", "sqrt", "mul", "add", "sub", "div", "pow", "exp", "softmax", "matmul", "mm", "bmm", "neg", "flatten",
})
COPYING_METHODS = frozenset({"to", "cuda", "cpu"})
# torch functions whose result is no data written on a stream: uninitialized memory, metadata, handles.
NOT_PRODUCERS = frozenset({
    "empty", "empty_like", "empty_strided", "tensor", "as_tensor", "from_numpy", "device", "Stream", "Event",
    "is_tensor", "numel", "is_grad_enabled", "get_default_dtype", "Size", "dtype", "Generator", "frombuffer",
    "zeros", "ones", "full", "arange", "rand", "randn", "randint", "linspace", "logspace", "eye", "randperm",
}) | METADATA_ARG_FUNCTIONS

# In-place-looking names that do not write tensor data.
NOT_DATA_WRITES = frozenset({"requires_grad_", "share_memory_", "retain_grad_", "set_", "resize_", "apply_"})

# Plain functions that only look at their arguments on the host.
HOST_ONLY_FUNCTIONS = frozenset({
    "hasattr", "isinstance", "issubclass", "len", "id", "print", "type", "getattr", "setattr", "delattr", "str",
    "repr", "callable", "hash", "format", "sorted", "enumerate", "zip", "iter", "next", "list", "tuple", "set",
    "dict", "frozenset", "super", "vars", "dir", "print_rank_0", "debug_rank0", "log_dist",
})
# Methods of loggers and containers: storing or printing a tensor is no device access.
HOST_ONLY_METHODS = frozenset({
    "info", "debug", "warning", "error", "append", "extend", "add", "discard", "remove", "pop", "popleft",
    "appendleft", "get", "setdefault", "index", "count", "keys", "values", "items", "update", "insert",
})

BLOCKING_HOST_METHODS = frozenset({"item", "tolist", "cpu", "numpy"})
STORING_METHODS = frozenset({"append", "appendleft", "put", "put_nowait", "add", "insert"})


# Deeply nested but valid code (`a + a + ... + a`, 400 terms) nests the visitor that deep: Python frames only.
VISITOR_RECURSION_LIMIT = 20_000
ALIAS = "="  # the op of a binding recorded as where an attribute's tensor comes from (see visit_Assign)


def extract(source: str, path: str, options: StaticOptions, detailed: bool) -> FileFacts:
    tree = _parse(source, path)
    module, is_package = module_name(path)
    facts = FileFacts(path=path, module=module, is_package=is_package, detailed=detailed)
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(max(limit, VISITOR_RECURSION_LIMIT))
    try:
        _FactsVisitor(facts, source.splitlines(), options, detailed).run(tree)
    finally:
        sys.setrecursionlimit(limit)
    return facts


def _parse(source: str, path: str) -> ast.Module:
    try:
        return ast.parse(source, filename=path)
    except SyntaxError as exc:
        failure = ParseFailure(exc.msg or "invalid syntax", exc.lineno or 0, exc.offset or 0)
    except (ValueError, TypeError) as exc:  # null bytes, bad encodings
        raise ParseFailure(str(exc), 0, 0) from None
    lowered = lower_newer_syntax(source)
    if lowered is None:
        raise failure
    try:
        return ast.parse(lowered, filename=path)
    except (SyntaxError, ValueError):
        raise failure from None


def lower_newer_syntax(source: str) -> str | None:
    """Source in a grammar newer than this interpreter's (PEP 695 `def f[T]`, `class C[T]`, `type X = ...`), with
    those forms written the old way on the same lines, so `ast` can read it; None when libcst cannot parse it
    either (or is not installed): then the file is really broken."""
    try:
        import libcst
    except ImportError:
        return None
    try:
        module = libcst.parse_module(source)
    except Exception:  # libcst's ParserSyntaxError, or a grammar it does not know
        return None

    class Lower(libcst.CSTTransformer):
        def leave_FunctionDef(self, original, updated):
            return updated.with_changes(type_parameters=None)

        def leave_ClassDef(self, original, updated):
            return updated.with_changes(type_parameters=None)

        def leave_TypeAlias(self, original, updated):
            return libcst.Assign(targets=[libcst.AssignTarget(updated.name)], value=updated.value)

    return module.visit(Lower()).code


def dotted(node: ast.AST) -> str:
    """A callee's or receiver's shape as text: `self.a.b`, `get_accelerator().stream`, `xs[].f`, `?.g`."""
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return f"{dotted(node.value)}.{node.attr}"
    if isinstance(node, ast.Call):
        return f"{dotted(node.func)}()"
    if isinstance(node, ast.Subscript):
        return f"{dotted(node.value)}[]"
    return "?"


def access_path(node: ast.AST) -> str | None:
    """The tensor an expression denotes, as an access path, or None when it is not a plain path.

    Views (`x.narrow(...)`, `x[i]`) and `.data` lead back to their base; metadata (`x.shape`) is not a
    path; subscripts of containers (`self.bufs[i]`) stand for the container's elements.
    """
    if isinstance(node, ast.Name):
        return None if node.id in ("self", "cls") else node.id
    if isinstance(node, ast.Attribute):
        if node.attr in METADATA_ATTRS:
            return None
        if node.attr in SAME_STORAGE_ATTRS:
            return access_path(node.value)
        if isinstance(node.value, ast.Name) and node.value.id in ("self", "cls"):
            return f"{node.value.id}.{node.attr}"
        base = access_path(node.value)
        return f"{base}.{node.attr}" if base else None
    if isinstance(node, ast.Subscript):
        return access_path(node.value)
    if isinstance(node, ast.Starred):
        return access_path(node.value)
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in VIEW_METHODS:
        return access_path(node.func.value)
    return None


class _FactsVisitor(ast.NodeVisitor):
    def __init__(self, facts: FileFacts, lines: list[str], options: StaticOptions, detailed: bool) -> None:
        self.facts = facts
        self.src_lines = lines
        self.options = options
        self.detailed = detailed
        self.stream_names = options.all_stream_contexts
        self.collectives = options.all_collectives
        self.sync_callables = options.all_sync_callables
        self.scope: list[str] = []  # qualname parts
        self.class_stack: list[str | None] = [None]
        self.fn: FunctionFacts | None = None
        self.region = NO_REGION
        self.blocks: list[tuple[int, int]] = [(0, 0)]
        # (qualname, names bound so far) of the module and each enclosing function, innermost last: a plain name
        # that the innermost function does not bind belongs to the nearest enclosing scope that does.
        self.frames: list[tuple[str, set[str]]] = [(MODULE_SCOPE, set())]
        self.pending_attr_functions: list[tuple[str, str, str, int]] = []  # attr, name, scope, line
        self.defined: set[str] = set()
        self.hazards = None
        if detailed:  # SC102-SC105 facts: every node is shown to the collector first (extract_hazards.py)
            from .extract_hazards import HazardCollector

            self.hazards = HazardCollector(self)
            self.visit = self._visit_with_hazards

    def _visit_with_hazards(self, node: ast.AST):
        self.hazards.see(node)
        return ast.NodeVisitor.visit(self, node)

    # --- driving -----------------------------------------------------------------------------------------------
    def run(self, tree: ast.Module) -> None:
        end = len(self.src_lines) or 1
        self.fn = FunctionFacts(MODULE_SCOPE, MODULE_SCOPE, None, 1, end)
        self.facts.functions.append(self.fn)
        self.visit(tree)
        _drop_unwritten_locals(self.fn)
        _drop_unrecorded_stores(self.fn)
        self._resolve_attr_functions()
        if self.hazards is not None:
            self.hazards.finish(self.facts)

    def _keep_line(self, line: int) -> None:
        if line not in self.facts.lines and 0 < line <= len(self.src_lines):
            self.facts.lines[line] = self.src_lines[line - 1].strip()

    def _scope_name(self) -> str:
        return ".".join(self.scope) if self.scope else MODULE_SCOPE

    # --- imports -----------------------------------------------------------------------------------------------
    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            if alias.asname:
                self.facts.imports[alias.asname] = alias.name
            else:
                top = alias.name.split(".", 1)[0]
                self.facts.imports[top] = top

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        base = self._absolute_module(node.module or "", node.level)
        for alias in node.names:
            if alias.name == "*":
                self.facts.star_imports.append(base)
                continue
            target = f"{base}.{alias.name}" if base and not base.endswith(".") else base + alias.name
            self.facts.imports[alias.asname or alias.name] = target

    @staticmethod
    def _absolute_module(module: str, level: int) -> str:
        # Relative imports keep their leading dots: only the whole program knows the package a file belongs to.
        return "." * level + module

    # --- scopes ------------------------------------------------------------------------------------------------
    def visit_ClassDef(self, node: ast.ClassDef) -> None:
        for expr in node.decorator_list + node.bases + [k.value for k in node.keywords]:
            self.visit(expr)
        self.scope.append(node.name)
        qualname = ".".join(self.scope)
        self.facts.classes.append(ClassFacts(qualname, tuple(dotted(b) for b in node.bases), node.lineno))
        self.class_stack.append(qualname)
        for stmt in node.body:  # class bodies run in the enclosing scope, at definition time
            self.visit(stmt)
        self.class_stack.pop()
        self.scope.pop()

    def visit_FunctionDef(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        for expr in node.decorator_list:
            self.visit(expr)
        self.visit(node.args)  # defaults run in the enclosing scope
        if node.returns:
            self.visit(node.returns)
        cls = self.class_stack[-1]
        self.scope.append(node.name)
        fn = FunctionFacts(".".join(self.scope), node.name, cls, node.lineno, node.end_lineno or node.lineno)
        args = node.args
        fn.params = [a.arg for a in args.posonlyargs + args.args + args.kwonlyargs]
        if args.vararg:
            fn.params.append(args.vararg.arg)
        if args.kwarg:
            fn.params.append(args.kwarg.arg)
        self.facts.functions.append(fn)
        returned = _property_value(node)
        if returned is not None and "stream" in returned.lower():  # `@property def s0(self): return current_stream()`
            fn.stream_aliases[PROPERTY_VALUE] = [returned]
        self.defined.add(fn.qualname)
        self.frames[-1][1].add(node.name)
        self.frames.append((fn.qualname, set(fn.params)))
        saved = self.fn, self.region, self.blocks
        self.fn, self.region, self.blocks = fn, NO_REGION, [(0, 0)]
        self.class_stack.append(None)  # functions nested in a method are not methods
        for stmt in node.body:
            self.visit(stmt)
        self.class_stack.pop()
        _drop_unwritten_locals(fn)
        _drop_unrecorded_stores(fn)
        self.fn, self.region, self.blocks = saved
        self.frames.pop()
        self.scope.pop()

    visit_AsyncFunctionDef = visit_FunctionDef

    # --- stream regions ----------------------------------------------------------------------------------------
    def visit_With(self, node: ast.With | ast.AsyncWith) -> None:
        saved = self.region
        for item in node.items:
            self.visit(item.context_expr)
            if item.optional_vars is not None:
                self.visit(item.optional_vars)
            stream = self._stream_of(item.context_expr)
            if stream is not None and self.detailed:
                expr = item.context_expr
                self.fn.regions.append(
                    Region(stream, expr.lineno, expr.col_offset + 1, node.end_lineno or node.lineno, self.region))
                self._keep_line(expr.lineno)
                self.region = len(self.fn.regions) - 1
        for stmt in node.body:
            self.visit(stmt)
        self.region = saved

    visit_AsyncWith = visit_With

    def _stream_of(self, expr: ast.AST) -> str | None:
        """The stream text if `expr` switches the current stream, else None."""
        if isinstance(expr, ast.Name) and expr.id in self.fn.stream_aliases:
            # `ctx = torch.cuda.stream(s) if overlap else nullcontext()` ... `with ctx:`: the stream arm
            for text in reversed(self.fn.stream_aliases[expr.id]):
                try:
                    bound = ast.parse(text, mode="eval").body
                except SyntaxError:
                    continue
                if isinstance(bound, ast.Call):
                    stream = self._stream_of(bound)
                    if stream is not None:
                        return stream
        if isinstance(expr, (ast.Name, ast.Attribute)) and dotted(expr).lower().endswith("stream"):
            return dotted(expr)  # `with side_stream:` (torch.Stream is a context manager)
        if not isinstance(expr, ast.Call) or not matches_name(dotted(expr.func), self.stream_names):
            return None
        arg = expr.args[0] if expr.args else next((k.value for k in expr.keywords if k.arg == "stream"), None)
        if arg is None:
            return "?"
        text = ast.unparse(arg)
        if text == "None" or text.endswith("current_stream()"):
            return None  # stays on the current stream
        return text

    # --- conditional blocks -------------------------------------------------------------------------------------
    def _visit_block(self, body: list[ast.AST], guarded: bool = True) -> None:
        if not body:
            return
        block = (body[0].lineno, body[-1].end_lineno or body[-1].lineno)
        if guarded:
            self.fn.guarded.append(block)
        self.blocks.append(block)
        for stmt in body:
            self.visit(stmt)
        self.blocks.pop()
        if _ends_in_exit(body[-1]):
            self.fn.exits.append(block)

    def visit_If(self, node: ast.If) -> None:
        self.visit(node.test)
        self._visit_block(node.body)
        self._visit_block(node.orelse)

    def visit_For(self, node: ast.For | ast.AsyncFor) -> None:
        self.visit(node.iter)
        self.visit(node.target)
        self._visit_block(node.body, guarded=False)  # a loop over handles or params: taken to run
        self._visit_block(node.orelse)

    visit_AsyncFor = visit_For

    def visit_While(self, node: ast.While) -> None:
        self.visit(node.test)
        self._visit_block(node.body, guarded=False)
        self._visit_block(node.orelse)

    def visit_Try(self, node: ast.Try) -> None:
        for stmt in node.body:  # the body runs unless something raises
            self.visit(stmt)
        for handler in node.handlers:
            if handler.type is not None:
                self.visit(handler.type)
            self._visit_block(handler.body)
        self._visit_block(node.orelse)
        for stmt in node.finalbody:
            self.visit(stmt)

    visit_TryStar = visit_Try

    def visit_Match(self, node: ast.Match) -> None:
        self.visit(node.subject)
        for case in node.cases:
            self._visit_block(case.body)

    def _visit_conditional_expr(self, node: ast.AST) -> None:
        self.blocks.append((node.lineno, node.end_lineno or node.lineno))
        self.generic_visit(node)
        self.blocks.pop()

    visit_IfExp = visit_ListComp = visit_SetComp = visit_DictComp = visit_GeneratorExp = _visit_conditional_expr
    visit_BoolOp = visit_Lambda = _visit_conditional_expr

    # --- calls -------------------------------------------------------------------------------------------------
    def visit_Call(self, node: ast.Call) -> None:
        callee = dotted(node.func)
        func_args = tuple(
            dotted(a) for a in node.args if isinstance(a, (ast.Name, ast.Attribute)) and dotted(a) != "?")
        args = tuple(_arg_text(a) for a in node.args) + tuple(
            f"{k.arg}={_arg_text(k.value)}" for k in node.keywords if k.arg)
        if not any(a.partition("=")[2] if "=" in a else a for a in args):
            args = ()
        self.fn.calls.append(
            Call(node.lineno, node.col_offset + 1, callee, self.region, self.blocks[-1], func_args, args))
        self._keep_line(node.lineno)
        if self.detailed:
            self._call_facts(node, callee)
        self.generic_visit(node)

    def _call_facts(self, node: ast.Call, callee: str) -> None:
        method = node.func.attr if isinstance(node.func, ast.Attribute) else None
        last = callee.rsplit(".", 1)[-1]
        receiver = dotted(node.func.value) if method else ""
        line, col = node.lineno, node.col_offset + 1
        sync_kind = self._sync_kind(node, callee, method, receiver)
        if sync_kind:
            arg = dotted(node.args[0]) if node.args else ""
            self.fn.syncs.append(
                Sync(sync_kind, receiver, line, col, arg, self.region, self.blocks[-1], method or last))
        on_module = receiver.split(".", 1)[0] in self.facts.imports  # `torch.add(...)`, `dist.all_reduce(...)`
        tensor_method = bool(method) and not on_module and method in TENSOR_METHODS
        if method and on_module:
            if method in INIT_FUNCTIONS and node.args:  # `torch.nn.init.xavier_uniform_(w)` writes `w`
                self._access("write", node.args[0], line, col, method)
        elif method in TENSOR_INPLACE_METHODS:
            self._access("write", node.func.value, line, col, method)
        elif tensor_method and method not in METADATA_METHODS and method not in VIEW_METHODS and not sync_kind \
                and method not in METADATA_ARG_METHODS:
            self._access("read", node.func.value, line, col, method)
        for kw in node.keywords:
            if kw.arg == "out":
                for elt in elements(kw.value):
                    self._access("write", elt, line, col, "out=")
        if method in STORING_METHODS and len(node.args) == 1 and isinstance(node.args[0], ast.Name):
            # `events.append(event)`: kept only if `event` turns out to be recorded here (_drop_unrecorded_stores)
            self.fn.syncs.append(Sync("store", receiver, line, col, node.args[0].id, self.region, self.blocks[-1],
                                      method))
        host_only = callee in HOST_ONLY_FUNCTIONS or (method in HOST_ONLY_METHODS and not on_module)
        if host_only or sync_kind:
            return
        if matches_name(callee, self.stream_names) or last in ("Stream", "Event", "current_stream"):
            return  # naming a stream or event touches no tensor
        if last in HOST_DATA_FACTORIES and self._is_torch_function(callee):
            return  # `torch.tensor(values)`: Python numbers or host arrays copied in, no device read
        if method in METADATA_ARG_METHODS or last in METADATA_ARG_FUNCTIONS or (tensor_method and (method in (
                "to", "cuda", "type") or method in VIEW_METHODS)):
            return  # `x.view_as(z)`, `torch.empty_like(z)`, `x.to(z)`: only z's shape, dtype and device are looked at
        collective = matches_name(callee, self.collectives)
        if not collective and self._is_distributed(callee):
            return  # `dist.get_world_size(group)`, `dist.barrier()`: process groups and ranks, no tensor data
        if not (collective or tensor_method or self._is_torch_function(callee)):
            return  # a hand-off to other code: what the callee does with it is the callee's (summaries.py)
        # The table's argument positions are those of the communication libraries' functions (`dist.x`, a name
        # imported from one); a method of the same name (`params.all_gather_coalesced()`) has its own.
        written = outputs_of(callee) if collective and (
            "." not in callee or callee.split(".", 1)[0] in self.facts.imports) else None
        for position, arg in enumerate(node.args):
            if written and position >= written.tensor_positions:
                break  # `dist.all_reduce(t, op, group)`: the rest are no tensors
            self._argument(arg, line, col, last, collective, written, position in written.positions if written
                           else False)
        for kw in node.keywords:
            if kw.arg not in (None, "out") and (not collective or kw.arg in TENSOR_KEYWORDS):
                self._argument(kw.value, line, col, last, collective, written,
                               kw.arg in written.keywords if written else False)

    def _argument(self, arg: ast.AST, line: int, col: int, op: str, collective: bool, written: Outputs | None,
                  is_output: bool) -> None:
        """A device op's argument: read; a collective's output written (and read too when it works in place)."""
        for elt in elements(arg):
            if not is_output or written.in_place:
                self._access("read", elt, line, col, op, collective)
            if is_output:
                self._access("write", elt, line, col, op, collective)

    def _is_distributed(self, callee: str) -> bool:
        head, _, rest = callee.partition(".")
        target = f"{self.facts.imports.get(head, head)}.{rest}"
        return target.startswith("torch.distributed.") and target.count(".") == 2

    def _is_torch_function(self, callee: str) -> bool:
        """`torch.cat`, `F.linear` (F imported from torch), `cat` imported from torch: a device op on its args."""
        head = callee.split(".", 1)[0]
        target = self.facts.imports.get(head, "")
        return target == "torch" or target.startswith("torch.")

    def _sync_kind(self, node: ast.Call, callee: str, method: str | None, receiver: str) -> str:
        last = callee.rsplit(".", 1)[-1]
        if last == "wait_stream":
            return "wait_stream"
        if last == "wait_event" or (last == "wait" and "event" in receiver.lower()):
            return "wait_event"
        if matches_name(callee, self.sync_callables):
            return "synchronize"
        if last in ("record", "record_event") and method:
            return "record"
        if last == "record_stream":
            return "record_stream"
        if method in BLOCKING_HOST_METHODS and not any(k.arg == "non_blocking" for k in node.keywords):
            return "host_sync"
        if method == "wait" and receiver and not receiver.split(".", 1)[0] in self.facts.imports:
            return "wait"
        return ""

    def _access(self, kind: str, expr: ast.AST, line: int, col: int, op: str, collective: bool = False,
                at: tuple[int, int] | None = None, fresh: bool = False) -> None:
        path = access_path(expr)
        if path is None:
            return
        if at is None and isinstance(expr, ast.AST) and hasattr(expr, "lineno"):
            line, col = expr.lineno, expr.col_offset + 1
        owner = self._owner(path) if "." not in path else ""
        self.fn.accesses.append(
            Access(kind, path, line, col, op, self.region, collective, owner, _index_of(expr), fresh))
        self._keep_line(line)

    def _owner(self, name: str) -> str:
        """The scope a plain name belongs to when the current function does not bind it ("" when it does)."""
        if len(self.frames) == 1 or name in self.frames[-1][1]:
            return ""
        for qualname, bound in reversed(self.frames[:-1]):
            if name in bound:
                return qualname
        return ""

    def visit_Name(self, node: ast.Name) -> None:
        if not isinstance(node.ctx, ast.Load):
            self.frames[-1][1].add(node.id)

    def visit_BinOp(self, node: ast.BinOp) -> None:
        if self.detailed:
            for operand in (node.left, node.right):
                self._access("read", operand, node.lineno, node.col_offset + 1, type(node.op).__name__)
        self.generic_visit(node)

    # --- functions held by attributes --------------------------------------------------------------------------
    def visit_Assign(self, node: ast.Assign) -> None:
        self._note_self_assigns(node.targets)
        if self.detailed and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            values = [node.value.body, node.value.orelse] if isinstance(node.value, ast.IfExp) else [node.value]
            for value in values:
                text = ast.unparse(value)
                if "stream" in text.lower() and len(text) < 200:
                    self.fn.stream_aliases.setdefault(node.targets[0].id, []).append(text)
        if isinstance(node.value, (ast.Name, ast.Attribute)):
            for target in node.targets:
                if isinstance(target, ast.Attribute):
                    self.pending_attr_functions.append(
                        (target.attr, dotted(node.value), self._scope_name(), node.lineno))
        self.generic_visit(node)
        if not self.detailed or len(node.targets) != 1:
            return
        target, end = node.targets[0], (node.end_lineno or node.lineno, (node.end_col_offset or 0) + 1)
        if self._produces_tensor(node.value):
            # `y = x.to(dev, non_blocking=True)`, `y = torch.cat(...)`: a new tensor written by a kernel on the
            # stream current here (a hidden producer); taken as written where the statement ends.
            func = node.value.func
            op = func.attr if isinstance(func, ast.Attribute) else dotted(func)
            self._access("write", target, *end, op.rsplit(".", 1)[-1], at=end, fresh=True)
        elif self._bound_in_region(target, node.value):
            # `self.cached = gather(x)` / `self.cached = out` inside `with stream(s):` keeps a tensor of s's work
            # for later: a binding (op ALIAS) that tells where the attribute's tensor comes from, not a kernel's
            # write any race is paired with.
            self._access("write", target, *end, ALIAS, at=end, fresh=True)

    def _bound_in_region(self, target: ast.AST, value: ast.AST) -> bool:
        """An attribute bound inside a stream region to a path, or to what a call returns, unless the call only
        names a stream, an event or metadata. (A local bound from an unknown call in a region is as often a handle
        or a view as new memory: not taken.)"""
        if self.region == NO_REGION or not isinstance(target, ast.Attribute):
            return False
        if access_path(value):
            return True
        if not isinstance(value, ast.Call):
            return False
        last = dotted(value.func).rsplit(".", 1)[-1]
        return last not in NOT_PRODUCERS and last not in HOST_ONLY_FUNCTIONS and last not in (
            "current_stream", "default_stream", "record_event", "get_accelerator")

    def _produces_tensor(self, value: ast.AST) -> bool:
        if not isinstance(value, ast.Call) or not isinstance(value.func, (ast.Attribute, ast.Name)):
            return False
        callee = dotted(value.func)
        last = callee.rsplit(".", 1)[-1]
        if isinstance(value.func, ast.Attribute) and value.func.value is not None and not self._is_torch_function(
                callee):
            if last in COPYING_METHODS:  # a blocking copy orders the host with it; only an async one is left behind
                return any(k.arg == "non_blocking" and isinstance(k.value, ast.Constant) and k.value.value is True
                           for k in value.keywords)
            return last in PRODUCING_METHODS
        head = callee.split(".", 1)[0]
        if self.facts.imports.get(head) not in ("torch", "torch.nn.functional") or callee.count(".") > 1:
            return False  # `torch.cat`, `F.linear`; not `torch.cuda.current_stream()`, `torch.distributed.x`
        if not value.args or not isinstance(value.args[0], (ast.Name, ast.Attribute, ast.Subscript, ast.List,
                                                              ast.Tuple, ast.ListComp)):
            return False  # a factory (`torch.zeros(n)`): initialization, not a producer of data another stream awaits
        return last in TORCH_FUNCTIONS and last not in NOT_PRODUCERS

    def visit_AnnAssign(self, node: ast.AnnAssign) -> None:
        self._note_self_assigns([node.target])
        self.generic_visit(node)

    def _note_self_assigns(self, targets: list[ast.AST]) -> None:
        if self.fn.cls is None:
            return
        for target in targets:
            for elt in elements(target):
                if (isinstance(elt, ast.Attribute) and isinstance(elt.value, ast.Name) and elt.value.id == "self"
                        and elt.attr not in self.fn.self_assigns):
                    self.fn.self_assigns.append(elt.attr)

    def _resolve_attr_functions(self) -> None:
        """Keep `x.attr = name` only where `name` is a function of this file or an imported name."""
        for attr, name, scope, line in self.pending_attr_functions:
            target = None
            parts = [] if scope == MODULE_SCOPE else scope.split(".")
            while True:  # innermost enclosing scope first
                candidate = ".".join(parts + [name])
                if candidate in self.defined:
                    target = candidate
                    break
                if not parts:
                    break
                parts.pop()
            if target is None:
                head = name.split(".", 1)[0]
                if head in self.facts.imports:
                    target = self.facts.imports[head] + name[len(head):]
            if target is not None:
                self.facts.attr_functions.append(AttrFunction(attr, target, line))
                self._keep_line(line)


def _property_value(node: ast.FunctionDef | ast.AsyncFunctionDef) -> str | None:
    """The text a `@property` returns when its body is one `return <expr>` (after a docstring), else None."""
    if not any(isinstance(d, ast.Name) and d.id == "property" for d in node.decorator_list):
        return None
    body = [s for s in node.body if not (isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant))]
    if len(body) == 1 and isinstance(body[0], ast.Return) and body[0].value is not None:
        return ast.unparse(body[0].value)
    return None


def _ends_in_exit(stmt: ast.AST) -> bool:
    """A statement after which the block never goes on: a return, raise, continue or break, also as the end of a
    `with` body or of both arms of an if/else."""
    if isinstance(stmt, (ast.Return, ast.Raise, ast.Continue, ast.Break)):
        return True
    if isinstance(stmt, (ast.With, ast.AsyncWith)):
        return bool(stmt.body) and _ends_in_exit(stmt.body[-1])
    if isinstance(stmt, ast.If):
        return bool(stmt.orelse) and _ends_in_exit(stmt.body[-1]) and _ends_in_exit(stmt.orelse[-1])
    return False


def _drop_unrecorded_stores(fn: FunctionFacts) -> None:
    """Keep `container.append(name)` only for names of events this function records (events that travel)."""
    recorded = {s.receiver for s in fn.syncs if s.kind == "record"}
    fn.syncs = [s for s in fn.syncs if s.kind != "store" or s.arg in recorded]


def _drop_unwritten_locals(fn: FunctionFacts) -> None:
    """A plain local name only matters to the rules when the same function writes it: keep the facts small."""
    written = {a.path for a in fn.accesses if a.kind == "write" and "." not in a.path}
    params = set(fn.params)  # what a helper does to its parameters is what its callers do (summaries.py)
    fn.accesses = [a for a in fn.accesses if "." in a.path or a.path in written or a.owner or a.path in params]


def _arg_text(expr: ast.AST) -> str:
    """A call argument as an access path with its element index (`bufs[i]`), or "" when it is none."""
    path = access_path(expr)
    if not path:
        return ""
    index = _index_of(expr)
    return f"{path}[{index}]" if index else path


def split_index(text: str) -> tuple[str, str]:
    """`bufs[i]` -> ("bufs", "i"); `x` -> ("x", "")."""
    if text.endswith("]") and "[" in text:
        path, _, index = text[:-1].partition("[")
        return path, index
    return text, ""


def _index_of(expr: ast.AST) -> str:
    """The index text of `x[<index>]` when it picks one element by a constant or a simple expression of names
    (`buf[1 - cur]`, `self.bufs[i]`), or `a:b` for a slice with both bounds simple (`buf[0:N]`); "" for
    anything else (the whole path)."""
    if not isinstance(expr, ast.Subscript):
        return ""
    index = expr.slice
    simple = all(isinstance(n, (ast.Constant, ast.Name, ast.Attribute, ast.BinOp, ast.UnaryOp, ast.operator,
                                ast.unaryop, ast.Load, ast.Slice)) for n in ast.walk(index))
    if not simple:
        return ""
    if isinstance(index, ast.Slice):
        if index.lower is None or index.upper is None or index.step is not None:
            return ""
        text = f"{ast.unparse(index.lower)}:{ast.unparse(index.upper)}"
    else:
        text = ast.unparse(index)
    return text if len(text) <= 40 else ""


def elements(node: ast.AST) -> list[ast.AST]:
    """A call argument and, for literal lists/tuples and comprehensions, the expressions inside."""
    if isinstance(node, (ast.List, ast.Tuple, ast.Set)):
        return [e for elt in node.elts for e in elements(elt)]
    if isinstance(node, (ast.ListComp, ast.GeneratorExp, ast.SetComp)):
        return elements(node.elt)
    if isinstance(node, ast.IfExp):
        return elements(node.body) + elements(node.orelse)
    return [node]
