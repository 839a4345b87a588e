"""The facts pass's stream regions (`with torch.cuda.stream(s):`) and conditional blocks (if/for/while/try/match
bodies, conditional expressions): where each call and access sits. A part of extract.py's visitor."""

from __future__ import annotations

import ast

from .extract_handles import loop_bindings
from .extract_paths import access_path, dotted
from .facts import Region
from .options import matches_name


class RegionsAndBlocks(ast.NodeVisitor):
    """The visitor's methods for regions and blocks; they use the visitor's state (extract.py `_FactsVisitor`):
    `fn`, `region`, `blocks`, `detailed`, `stream_names`, `_keep_line`."""

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
            if _ends_in_exit(body[-1], (ast.Return,)):
                self.fn.returns.append(block)

    def visit_If(self, node: ast.If) -> None:
        self.visit(node.test)
        if self.detailed:  # (read by guards.py only in a function with stream regions: detailed files only)
            tested = _tested_names(node.test)
            for arm in (node.body, node.orelse):
                if arm:
                    self.fn.guard_tests.append((arm[0].lineno, arm[-1].end_lineno or arm[-1].lineno, tested))
        syncs_before = len(self.fn.syncs)
        self._visit_block(node.body, guarded=not _only_if_it_exists(node))
        if _on_another_platform(node.test):
            del self.fn.syncs[syncs_before:]  # they order nothing on a CUDA run (vLLM's XPU-only synchronize)
        self._visit_block(node.orelse)

    def visit_For(self, node: ast.For | ast.AsyncFor) -> None:
        self.visit(node.iter)
        self.visit(node.target)
        if self.detailed:  # `for op in self.recv_ops`: op is an element of self.recv_ops (FunctionFacts.derived)
            for name, sources in loop_bindings(node.target, node.iter, access_path)[0]:
                self.fn.derived.extend((name, source, node.lineno) for source in sources if source != name)
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


# Tests that hold only on a device with its own stream API (`if current_platform.is_xpu():`): a wait or synchronize
# under one is no edge of a CUDA (or ROCm) run, which is the run the lint reasons about.
OTHER_PLATFORM_TESTS = frozenset({"is_xpu", "is_hpu", "is_npu", "is_tpu", "is_cpu", "is_mps", "is_xla"})


def _on_another_platform(test: ast.expr) -> bool:
    return isinstance(test, ast.Call) and not test.args and not test.keywords \
        and dotted(test.func).rsplit(".", 1)[-1] in OTHER_PLATFORM_TESTS


def _tested_names(test: ast.expr) -> tuple[str, ...]:
    """The names and attribute paths an `if` test reads, each as its longest dotted path (`self.cfg.overlap`),
    callees included (`dist.get_world_size`)."""
    found: list[str] = []
    _loaded_paths(test, found)
    if len(found) == 1:  # (most tests: `if x:`, `if self.a is None:`)
        return (found[0],)
    unique = set(found)
    # keep the longest paths only: `self.cfg.overlap` covers its own `self.cfg` and `self`
    return tuple(sorted(t for t in unique if not any(o.startswith(t + ".") for o in unique)))


def _loaded_paths(node: ast.AST, found: list[str]) -> None:
    """The dotted paths of the loaded names and attributes under `node` that are plain paths (`self.cfg.overlap`,
    not `f().x` or `xs[0].y`), as `dotted` spells them; of a plain path only the whole, not its prefixes (which
    _tested_names drops anyway). Walking every node with ast.walk and spelling each one with `dotted` took 6 %
    of the plain files' facts pass on DeepSpeed 0.19.8 (every `if` of every file)."""
    kind = node.__class__
    if kind is _NAME:
        if node.ctx.__class__ is _LOAD:
            found.append(node.id)
        return
    if kind is _ATTRIBUTE:
        base = node.value
        while base.__class__ is _ATTRIBUTE:
            base = base.value
        if base.__class__ is _NAME and node.ctx.__class__ is _LOAD:
            found.append(dotted(node))  # (its prefixes are loads too, and covered by it)
        elif base.__class__ is _NAME:
            _loaded_paths(node.value, found)
        else:  # `f().x.y`, `xs[0].y`: no plain path down to the base, whose parts are looked at
            _loaded_paths(base, found)
        return
    if kind is _CONSTANT:
        return
    for name in node._fields:
        value = getattr(node, name, None)
        if value.__class__ is list:
            for item in value:
                if isinstance(item, ast.AST):
                    _loaded_paths(item, found)
        elif isinstance(value, ast.AST):
            _loaded_paths(value, found)


_NAME, _ATTRIBUTE, _CONSTANT, _LOAD = ast.Name, ast.Attribute, ast.Constant, ast.Load


def _only_if_it_exists(node: ast.If) -> bool:
    """`if self.s1 is not None: self.s1.synchronize()`: the body uses the tested object, which every path that
    has it uses; the condition says whether there is one, not whether to wait (not a guard)."""
    test = node.test
    if isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.ops[0], ast.IsNot) \
            and isinstance(test.comparators[0], ast.Constant) and test.comparators[0].value is None:
        test = test.left
    if not isinstance(test, (ast.Name, ast.Attribute)) or len(node.body) != 1:
        return False
    stmt = node.body[0]
    return (isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call)
            and isinstance(stmt.value.func, ast.Attribute) and ast.dump(stmt.value.func.value) == ast.dump(test))


EXITS = (ast.Return, ast.Raise, ast.Continue, ast.Break)


def _ends_in_exit(stmt: ast.AST, kinds: tuple[type, ...] = EXITS) -> bool:
    """A statement after which the block never goes on: a return, raise, continue or break (or only `kinds`),
    also as the end of a `with` body or of both arms of an if/else."""
    if isinstance(stmt, kinds):
        return True
    if isinstance(stmt, (ast.With, ast.AsyncWith)):
        return bool(stmt.body) and _ends_in_exit(stmt.body[-1], kinds)
    if isinstance(stmt, ast.If):
        return bool(stmt.orelse) and _ends_in_exit(stmt.body[-1], kinds) and _ends_in_exit(stmt.orelse[-1], kinds)
    return False
