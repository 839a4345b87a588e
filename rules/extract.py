"""One pass over a file's syntax tree that fills FileFacts (see facts.py for what each fact means).

The parser is the standard library's `ast`: measured on DeepSpeed 0.13.4 (511 files, 81.6 k lines, one core),
`ast.parse` of every file takes 0.45 s, while libcst takes 3.0 s to parse only the 94 files that pass the token
prefilter, 2.8 s more for one plain visitor and 9 s more for positions. `ast` gives exact positions for free, which
is all the facts need; nothing here rewrites source.

The visitor is one class put together from its parts: calls and accesses (extract_calls.py), bindings
(extract_bindings.py), stream regions and conditional blocks (extract_blocks.py); the name tables are in
extract_names.py and the small expression helpers in extract_paths.py. The hazard facts of detailed files
(SC102-SC105) are collected beside it (extract_hazards.py).
"""

from __future__ import annotations

import ast
import re
import sys
from typing import Any, Callable

from .extract_bindings import ALIAS, Bindings
from .extract_blocks import RegionsAndBlocks
from .extract_calls import CallsAndAccesses
from .extract_elements import element_facts
from .extract_handle_flow import handle_flow_facts
from .extract_keeps import kept_facts, own_statements
from streamcheck.triton_kernels import KernelWrites, kernel_writes
from .extract_names import METADATA_ATTRS, METADATA_METHODS, NOT_DATA_WRITES, VIEW_METHODS
from .extract_paths import NO_PATH_NAMES, access_path, dotted, elements, split_index
from .facts import MODULE_SCOPE, NO_REGION, Access, ClassFacts, FileFacts, FunctionFacts, ParseFailure, module_name
from .options import StaticOptions
from .streams import PROPERTY_VALUE

# Names other modules import from here (they live in the parts named above).
__all__ = ["ALIAS", "METADATA_ATTRS", "METADATA_METHODS", "NOT_DATA_WRITES", "VIEW_METHODS", "access_path", "dotted",
           "elements", "extract", "lower_newer_syntax", "split_index"]

# Nodes the visitor never descends into (see _FactsVisitor.generic_visit): no facts come from them.
_LEAVES = (ast.expr_context, ast.operator, ast.unaryop, ast.cmpop, ast.boolop, ast.Constant)

# Line breaks of str.splitlines that the parser does not count as ends of lines.
_OTHER_LINE_BREAKS = re.compile("[\v\f\x1c\x1d\x1e\x85\u2028\u2029]")

# Deeply nested but valid code (`a + a + ... + a`, 400 terms) nests the visitor that deep: Python frames only.
VISITOR_RECURSION_LIMIT = 20_000


def extract(source: str, path: str, options: StaticOptions, detailed: bool) -> FileFacts:
    tree = _parse(source, path)
    module, is_package = module_name(path)
    facts = FileFacts(path=path, module=module, is_package=is_package, detailed=detailed)
    visitor = (_FactsVisitor if detailed else _PlainFactsVisitor)(facts, source.splitlines(), options, detailed)
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(max(limit, VISITOR_RECURSION_LIMIT))
    try:
        # str.splitlines also breaks at form feeds and other separators the parser does not count, and lowered
        # source was parsed in place of this text: then a node's line number may not index these lines.
        visitor.lines_as_parsed = not getattr(tree, "lowered", False) and not _other_line_breaks(source)
        visitor.run(tree)
    finally:
        sys.setrecursionlimit(limit)
        visitor.release()
    return facts


def _other_line_breaks(source: str) -> bool:
    """Whether `source` holds a line break of _OTHER_LINE_BREAKS (ASCII text can only hold the first five: five
    substring tests take a hundredth of the regex's time)."""
    if source.isascii():
        return "\f" in source or "\v" in source or "\x1c" in source or "\x1d" in source or "\x1e" in source
    return _OTHER_LINE_BREAKS.search(source) is not None


def _says_stream_in_a_string(expr: ast.AST) -> bool:
    """Whether a string or bytes literal under `expr` holds "stream" in any case: where the source lines hold no
    backslash and only ASCII, the only way `ast.unparse` spells "stream" that the lines do not is a literal's value
    (`"str" "eam"` joined; unparse's escapes start with a backslash and use no letter of "stream" but e and a)."""
    for node in ast.walk(expr):
        if node.__class__ is ast.Constant:
            value = node.value
            if value.__class__ is str:
                if "stream" in value.lower():
                    return True
            elif value.__class__ is bytes and b"stream" in value.lower():
                return True
    return False


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
        tree = ast.parse(lowered, filename=path)
    except (SyntaxError, ValueError):
        raise failure from None
    tree.lowered = True
    return tree


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


class _FactsVisitor(CallsAndAccesses, Bindings, RegionsAndBlocks, ast.NodeVisitor):
    def __init__(self, facts: FileFacts, lines: list[str], options: StaticOptions, detailed: bool) -> None:
        self.facts = facts
        self.src_lines = lines
        self.lines_as_parsed = False  # whether a node's line numbers index src_lines (extract() tells)
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
        # attr, name, scope, line, and for a forwarding lambda (receiver, its class, lambda params, call args)
        self.pending_attr_functions: list[tuple] = []
        self.param_classes: dict[int, dict[str, str]] = {}  # per function: parameter -> its class annotation text
        self.taken_from: dict[int, dict[str, str]] = {}  # per function: local -> the container it came out of
        self.aliases: dict[int, dict[str, str]] = {}  # per function: local -> the attribute path it names
        self.awaited_containers: dict[int, set[str]] = {}  # per function: local dicts of awaited results
        self.written_locals: dict[int, set[str]] = {}  # per function: the plain names it has written so far
        self.tensor_params: dict[int, set[str]] = {}  # per function: parameters annotated as tensors
        # ... annotated as nothing but a tensor (`torch.Tensor`, `torch.Tensor | None`; not `list | torch.Tensor`)
        self.only_tensor_params: dict[int, set[str]] = {}
        self.defined: set[str] = set()
        self.kernels: dict = {}  # the file's Triton kernels by name -> what they store through (triton_kernels.py)
        self.callee_of: tuple[ast.Call | None, str] = (None, "")  # the last call the hazard collector spelled
        self.hazards = None
        if detailed:  # SC102-SC105 facts: every node is shown to the collector first (extract_hazards.py)
            from .extract_hazards import HazardCollector

            self.hazards = HazardCollector(self)
            self._hazard_handlers, self._hazard_skip = self.hazards.handlers, self.hazards.skip
            self.visit = self._visit_with_hazards

    # --- traversal: ast.NodeVisitor's, without its per-node cost ---------------------------------------------------
    # NodeVisitor.visit builds "visit_" + the class name and looks it up for every node, and generic_visit walks
    # fields through a generator: a quarter of the facts pass's time in the profile, and the pass over DeepSpeed
    # 0.19.8 takes 4.3-4.6 s CPU instead of 6.1 s without them. Here the method is
    # looked up once per node type, a type's fields that can hold nodes are listed once (_child_fields), and the
    # leaves no visitor or hazard handler looks at (Load/Store/Del, the operators of BinOp, BoolOp, Compare,
    # UnaryOp, and Constant) are not visited at all; their parents read them directly. A handler for one of them
    # would need it taken out of _NO_CHILDREN / _LEAVES and the Constant test in generic_visit.
    _methods: dict[type, Callable[..., Any]] = {}

    def visit(self, node: ast.AST) -> Any:
        method = self._methods.get(type(node)) or self._method_of(type(node))
        return method(self, node)

    def _visit_with_hazards(self, node: ast.AST) -> Any:
        # HazardCollector.see, inlined: one call less for each of the detailed files' nodes
        handler = self._hazard_handlers.get(type(node))
        if handler is not None and id(node) not in self._hazard_skip:
            handler(node)
        method = self._methods.get(type(node)) or self._method_of(type(node))
        return method(self, node)

    @classmethod
    def _method_of(cls, kind: type) -> Callable[..., Any]:
        method = getattr(cls, "visit_" + kind.__name__, None)
        if method is None or method is ast.NodeVisitor.visit_Constant:  # (its body is for pre-3.8 visit_Num)
            method = cls.generic_visit
        cls._methods[kind] = method
        return method

    def generic_visit(self, node: ast.AST) -> None:
        visit = self.visit
        fields = _CHILD_FIELDS.get(type(node))
        if fields is None:
            fields = _child_fields(type(node))
        if fields is _ANY_FIELD:  # a node type whose fields are not known: look at every value
            for name in node._fields:
                value = getattr(node, name, None)
                if type(value) is list:
                    for item in value:
                        if isinstance(item, ast.AST) and not isinstance(item, _LEAVES):
                            visit(item)
                elif isinstance(value, ast.AST) and not isinstance(value, _LEAVES):
                    visit(value)
            return
        if self.hazards is None:
            for name, many in fields:
                value = getattr(node, name, None)
                if many:
                    for item in value or ():
                        if item is not None and item.__class__ is not ast.Constant:  # (None: `{**d}` in Dict.keys)
                            visit(item)
                elif value is not None and value.__class__ is not ast.Constant:
                    visit(value)
            return
        # _visit_with_hazards inlined: one call less for each child (1.6 M nodes in vLLM 0.33.0's detailed files)
        handlers, skip, methods = self._hazard_handlers, self._hazard_skip, self._methods
        for name, many in fields:
            value = getattr(node, name, None)
            for item in (value or ()) if many else (value,):
                kind = item.__class__
                if kind is _NAME:  # the collector's _name and visit_Name, inlined: a fifth of the nodes
                    if item.ctx.__class__ is _LOAD:
                        if item.id not in NO_PATH_NAMES and id(item) not in skip:
                            self.hazards._use(item.id, "read", item)
                    else:
                        self.frames[-1][1].add(item.id)
                    continue
                if item is None or kind is ast.Constant:  # (None: `{**d}` in Dict.keys, an absent field)
                    continue
                handler = handlers.get(kind)
                if handler is not None and id(item) not in skip:
                    handler(item)
                (methods.get(kind) or self._method_of(kind))(self, item)

    # --- driving -----------------------------------------------------------------------------------------------
    def release(self) -> None:
        """Drop the visitor's state: a detailed visitor and its hazard collector hold each other (and bound
        methods of themselves), a cycle only the cyclic collector frees; without it the scan can pause the
        collector while it extracts (scanner/extraction.py)."""
        if self.hazards is not None:
            self.hazards.__dict__.clear()
        self.__dict__.clear()

    def run(self, tree: ast.Module) -> None:
        end = len(self.src_lines) or 1
        self.fn = FunctionFacts(MODULE_SCOPE, MODULE_SCOPE, None, 1, end)
        self.facts.functions.append(self.fn)
        self.kernels = kernel_writes(tree)  # (plain files too: a launch in another file binds their kernels' accesses)
        self.visit(tree)
        _drop_unwritten_locals(self.fn)
        _drop_unrecorded_stores(self.fn)
        self._resolve_attr_functions()
        if self.hazards is not None:
            self.hazards.finish(self.facts)

    def _keep_line(self, line: int) -> None:
        if line not in self.facts.lines and 0 < line <= len(self.src_lines):
            self.facts.lines[line] = self.src_lines[line - 1].strip()

    def _may_say_stream(self, expr: ast.AST) -> bool:
        """False only when `ast.unparse(expr)` cannot hold "stream" in any case: none of the source lines the
        expression spans does, they hold no backslash and no non-ASCII name (which unparse spells otherwise than
        the source), and no string literal under `expr` holds it (`_says_stream_in_a_string`; a quote on a line
        let every such value through to unparse, 1 % of a detailed file's pass). Unparsing every value assigned
        to a name took 7 % of the facts pass on vLLM 0.33.0."""
        if not self.lines_as_parsed:
            return True
        quoted = False
        for line in self.src_lines[expr.lineno - 1:expr.end_lineno]:
            if "stream" in line.lower() or "\\" in line or not line.isascii():
                return True
            if not quoted and ("'" in line or '"' in line):
                quoted = True
        return quoted and _says_stream_in_a_string(expr)

    def _may_spell(self, expr: ast.AST, word: str) -> bool:
        """False only when `ast.unparse(expr)` cannot hold `word`: none of the source lines the expression spans
        does, and they hold no backslash (an escape in a string) and nothing but ASCII (the parser normalizes other
        names). Unparsing every parameter annotation took 2 % of the facts pass on vLLM 0.33.0."""
        if not self.lines_as_parsed:
            return True
        for line in self.src_lines[expr.lineno - 1:expr.end_lineno]:
            if word in line or "\\" in line or not line.isascii():
                return True
        return False

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
        if self.detailed:  # (read by kernel launches' facts, extract_calls.py `_launched`, and by the parameter
            # aliases of extract_bindings.py `_through_container`: detailed files only)
            annotated = {a.arg: ast.unparse(a.annotation) for a in args.posonlyargs + args.args + args.kwonlyargs
                         if a.annotation is not None and self._may_spell(a.annotation, "Tensor")}
            self.tensor_params[id(fn)] = {name for name, text in annotated.items() if "Tensor" in text}
            self.only_tensor_params[id(fn)] = {name for name, text in annotated.items() if _only_tensors(text)}
            fn.tensor_params = sorted(self.only_tensor_params[id(fn)])
        classes = {a.arg: text for a in args.posonlyargs + args.args + args.kwonlyargs
                   if a.annotation is not None and (text := _class_annotation(a.annotation))}
        if classes:
            self.param_classes[id(fn)] = classes
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
        if self.detailed:
            statements = list(own_statements(node))  # (both read them: walked once)
            fn.kept_events = kept_facts(node, self.src_lines if self.lines_as_parsed else None, statements)
            fn.handle_flow = handle_flow_facts(node, statements)
            fn.elements = element_facts(statements)
            for row in fn.handle_flow:  # a take may be a finding's place (handle_flow.py)
                if row[0] == "bind" and any(o[0] == "take" and o[3] for o in row[2]):
                    self._keep_line(row[3])
            for fact in fn.kept_events:
                self._keep_line(fact[4])
        _drop_unwritten_locals(fn)
        _drop_unrecorded_stores(fn)
        if fn.qualname in self.kernels:
            _kernel_accesses(fn, self.kernels[fn.qualname])
        self.fn, self.region, self.blocks = saved
        self.frames.pop()
        self.scope.pop()

    visit_AsyncFunctionDef = visit_FunctionDef


class _PlainFactsVisitor(_FactsVisitor):
    """The visitor of a file the prefilter passed over: no hazard collector sees its nodes, and the only handler
    of a name is visit_Name's note of a bound one, which only the accesses of detailed files read (`_owner`), so a
    name (`x`, read or bound) or an attribute of one (`self.a.b`, read or written: there is no attribute handler)
    holds no fact and is not visited (a third of a plain file's nodes; vLLM 0.33.0 has 2 476 plain files). Nor is a
    keyword argument or a parameter whose value or annotation is one, or a constant.

    Measured on vLLM 0.33.0's plain files (issue 18, session 19): ast.parse is 3.0 s CPU of their 5.3 s, and
    leaving out every expression that holds no call (an oracle, not a test the visitor could afford) saves nothing
    more: what is left is the calls' facts and the statements'."""

    _methods: dict[type, Callable[..., Any]] = {}  # (its own: generic_visit differs)

    def visit_Name(self, node: ast.Name) -> None:
        pass  # (a bound name reached through visit_For's or visit_With's own visits; see above)

    def visit_Assign(self, node: ast.Assign) -> None:
        """extract_bindings.py visit_Assign's facts of a plain file (a forwarding lambda, the attributes of self
        a method assigns, functions held by attributes), without its tests of detailed files' facts: 113 000
        assignments in vLLM 0.33.0's plain files."""
        value = node.value
        if value.__class__ is ast.Lambda and self._forwarding_lambda(node):  # (it needs a lambda)
            return
        if self.fn.cls is not None:  # (_note_self_assigns' first test)
            self._note_self_assigns(node.targets)
        if value.__class__ is _NAME or value.__class__ is _ATTRIBUTE:
            for target in node.targets:
                if target.__class__ is _ATTRIBUTE:
                    self.pending_attr_functions.append(
                        (target.attr, dotted(value), self._scope_name(), node.lineno))
        self.generic_visit(node)

    def generic_visit(self, node: ast.AST) -> None:
        fields = _CHILD_FIELDS.get(type(node))
        if fields is None:
            fields = _child_fields(type(node))
        if fields is _ANY_FIELD:
            return _FactsVisitor.generic_visit(self, node)
        methods = self._methods
        for name, many in fields:
            value = getattr(node, name, None)
            for item in (value or ()) if many else (value,):
                kind = item.__class__
                if kind is _NAME:
                    continue
                elif kind is _ATTRIBUTE:
                    base = item.value
                    while base.__class__ is _ATTRIBUTE:
                        base = base.value
                    if base.__class__ is _NAME:
                        continue
                elif item is None or kind is ast.Constant:  # (None: `{**d}` in Dict.keys, an absent field)
                    continue
                elif kind is _KEYWORD or kind is _ARG:  # `f(k=v)`, `def f(x: int)`: as their value would be
                    base = item.value if kind is _KEYWORD else item.annotation
                    while base.__class__ is _ATTRIBUTE:
                        base = base.value
                    if base is None or base.__class__ is _NAME or base.__class__ is ast.Constant:
                        continue
                (methods.get(kind) or self._method_of(kind))(self, item)  # (visit, inlined)


_NAME, _ATTRIBUTE, _KEYWORD, _ARG, _LOAD = ast.Name, ast.Attribute, ast.keyword, ast.arg, ast.Load


TENSOR_ANNOTATION_WORDS = frozenset({"Tensor", "torch.Tensor", "None", "Optional", "typing.Optional"})


def _only_tensors(annotation: str) -> bool:
    """An annotation's text names a tensor and nothing else but None (`torch.Tensor | None`, `Optional[Tensor]`)."""
    words = re.findall(r"[\w.]+", annotation)
    return any("Tensor" in word for word in words) and all(word in TENSOR_ANNOTATION_WORDS for word in words)


def _class_annotation(annotation: ast.expr) -> str:
    """The dotted class name an annotation names (`opt: Stage3`, `opt: "zero.Stage3"`), or "" for anything else."""
    if isinstance(annotation, ast.Constant) and isinstance(annotation.value, str):
        text = annotation.value.strip()
        return text if text and all(part.isidentifier() for part in text.split(".")) else ""
    text = dotted(annotation) if isinstance(annotation, (ast.Name, ast.Attribute)) else ""
    return "" if "?" in text else text


def _property_value(node: ast.FunctionDef | ast.AsyncFunctionDef) -> str | None:
    """The text a `@property` returns when its body is one `return <expr>` (after a docstring), else None."""
    if not any(isinstance(d, ast.Name) and d.id == "property" for d in node.decorator_list):
        return None
    body = [s for s in node.body if not (isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant))]
    if len(body) == 1 and isinstance(body[0], ast.Return) and body[0].value is not None:
        return ast.unparse(body[0].value)
    return None


def _kernel_accesses(fn: FunctionFacts, kernel: KernelWrites) -> None:
    """A Triton kernel's accesses are what it stores and loads through its parameters, nothing else (pointer
    arithmetic reads no tensor); `fn.kernel` marks it for launches from other files (callgraph.py)."""
    fn.kernel = True
    fn.accesses = [Access(kind, param, fn.line, 1, op) for param in kernel.params
                   for kind, op, names in (("write", "tl.store", kernel.written), ("read", "tl.load", kernel.loaded))
                   if param in names]


def _drop_unrecorded_stores(fn: FunctionFacts) -> None:
    """Keep `container.append(name)` only for names of events this function records (events that travel)."""
    if not fn.syncs:  # (every function of a plain file, most of a detailed one's)
        return
    recorded = {s.receiver for s in fn.syncs if s.kind == "record"}
    fn.syncs = [s for s in fn.syncs if s.kind != "store" or s.arg in recorded]


def _drop_unwritten_locals(fn: FunctionFacts) -> None:
    """A plain local name only matters to the rules when the same function writes it: keep the facts small."""
    if not fn.accesses:  # (every function of a plain file)
        return
    written = {a.path for a in fn.accesses if a.kind == "write" and "." not in a.path}
    # ... or hands to a kernel launched inside a stream region: a kernel of another file may write it there on
    # that stream (its stores are bound at the launch through the call graph, summaries.py), and the function's
    # reads after the region are the other side
    written |= {arg.partition("=")[2] if "=" in arg else arg for call in fn.calls
                if call.region != NO_REGION and call.callee.endswith("[]") for arg in call.args}
    params = set(fn.params)  # what a helper does to its parameters is what its callers do (summaries.py)
    derived = {local for local, _source, _line in fn.derived}  # an element of an input (aliasing.from_outside)
    fn.accesses = [a for a in fn.accesses
                   if "." in a.path or a.path in written or a.owner or a.path in params or a.path in derived]


def _child_fields(kind: type) -> tuple[tuple[str, bool], ...]:
    """The fields of a node type that hold nodes the visitor descends into, each with whether it is a list, read
    from the type's signature in its docstring (`Attribute(expr value, identifier attr, expr_context ctx)`): not
    names, strings, numbers, contexts or operators. _ANY_FIELD when the docstring does not give every field."""
    signature = re.fullmatch(r"\w+\((.*)\)", (kind.__doc__ or "").strip())
    declared = [field.split() for field in signature.group(1).split(", ")] if signature else []
    if any(len(f) != 2 for f in declared) or [name for _, name in declared] != list(kind._fields):
        _CHILD_FIELDS[kind] = _ANY_FIELD
        return _ANY_FIELD
    found = tuple((name, of.endswith("*")) for of, name in declared if of.rstrip("*?") not in _NO_CHILDREN)
    _CHILD_FIELDS[kind] = found
    return found


# Field types (in the ast grammar's words) that never hold a node the visitor descends into.
_NO_CHILDREN = frozenset({"identifier", "string", "int", "constant", "type_ignore", "expr_context", "operator",
                          "unaryop", "cmpop", "boolop"})
_ANY_FIELD: tuple[tuple[str, bool], ...] = (("", False),)
_CHILD_FIELDS: dict[type, tuple[tuple[str, bool], ...]] = {}
