"""Containers that keep tensors with an event (FunctionFacts.kept_events), read off one function's body.

A keepalive list such as FSDP2's `reduce_scatter_states.append(ReduceScatterState(reduce_scatter_input, event))`
holds a block another stream still uses until the event it is stored with completes; whoever drops the element
(`states.pop(0)` then `del oldest`, `states.clear()`, `del stash[k]`) must first wait that event. The facts, as
(how, container path, element, others, line, column):
- ("pair", C, ev, "t", ...)  `C.append((t, ev))`, `C.append(State(t, ev))`, `C[k] = (t, ev)`: one element's name says
  event (the element holds its text), another's does not (`others`: their paths, joined by commas);
- ("drop", C, x, "", ...)  `C.clear()`, `x = C.pop(...)` / `C.popleft()` (x: the names bound, joined by
  commas; "" when the element is not bound), `del C[k]`;
  for a bound element the release is `del x` or the end of the function (the line and column are the pop's);
- ("wait", C, "", taken, ...)  a wait, synchronize or query of an element's event (`wait_event(oldest.event)`,
  `st.event.synchronize()` over `for st in C`, `C[0].event.query()`); `taken` is "tensors" when the element's
  other parts are at hand after it (`oldest` is the whole element; `t, ev = C[k]`), "" when only the event was taken
  out (`_, ev = C[k]`: TRL waits such events only to drop the stash).
A local alias of the container (`states = self.comm_ctx.reduce_scatter_states`) is read as the container.
"""

from __future__ import annotations

import ast

from .extract_paths import dotted

KEEP = tuple[str, str, str, str, int, int]
_POPS = frozenset({"pop", "popleft", "popitem"})
_WAITS = frozenset({"wait_event", "wait", "synchronize", "query", "wait_stream"})


def kept_facts(node: ast.FunctionDef | ast.AsyncFunctionDef, lines: list[str] | None,
               statements: list[ast.stmt] | None = None) -> list[KEEP]:
    """The facts of one function. `lines`: its file's source lines as the parser numbered them, for a cheap test
    of where a wait can be (None: every expression is walked); `statements`: own_statements(node), when the caller
    has them already."""
    statements = list(own_statements(node)) if statements is None else statements
    aliases: dict[str, str] = {}  # local -> the container path it names
    elements = _Elements()  # local -> the container its value was taken from, by line
    for stmt in statements:  # (exact types: ast.parse makes no subclasses; one test per statement, most fail)
        kind = stmt.__class__
        if kind is ast.Assign:
            if len(stmt.targets) == 1 and stmt.targets[0].__class__ is ast.Name:
                name, value = stmt.targets[0].id, stmt.value
                if isinstance(value, ast.Attribute) and dotted(value):
                    aliases[name] = dotted(value)
        elif kind is ast.For or kind is ast.AsyncFor:
            iterated = stmt.iter.elts if isinstance(stmt.iter, ast.Tuple) else [stmt.iter]  # `(*a, *b)`
            for part in iterated:
                container = _path(part.value if isinstance(part, ast.Starred) else part, aliases)
                for name in _names(stmt.target) if container else ():
                    elements.bind(name, stmt.lineno, container)
    found: list[KEEP] = []
    for stmt in statements:
        kind = stmt.__class__
        if kind is ast.Assign and len(stmt.targets) == 1:
            names = _names(stmt.targets[0])
            taken = _popped(stmt.value, aliases) if isinstance(stmt.value, ast.Call) else ""
            held = taken or (_path(stmt.value.value, aliases) if isinstance(stmt.value, ast.Subscript) else "")
            if not held and isinstance(stmt.value, ast.Name):
                held = elements.at(stmt.value.id, stmt.lineno)  # `ev = event`: another name for the element
            if held and len(names) == 1 and isinstance(stmt.targets[0], (ast.Tuple, ast.List)):
                elements.event_only.add((names[0], stmt.lineno))  # `_, ev = C[k]`: the other parts are thrown away
            for name in names:
                # `oldest = C.pop(0)`, `tensor, event = C.pop(k)`, `event, ids = C[0]`; bound to anything else, the
                # name is no longer the element from here on (`event = self.s1.record_event()`)
                elements.bind(name, stmt.lineno, held)
            if taken:
                found.append(("drop", taken, ",".join(names), "", stmt.lineno, stmt.col_offset + 1))
            if stmt.targets[0].__class__ is ast.Subscript:
                container = _path(stmt.targets[0].value, aliases)
                if container and _pairs_event(stmt.value):
                    found.append(("pair", container, *_event_text(stmt.value), stmt.lineno, stmt.col_offset + 1))
        elif kind is ast.Delete:
            for target in stmt.targets:
                if isinstance(target, ast.Subscript) and _path(target.value, aliases):
                    found.append(("drop", _path(target.value, aliases), "", "", stmt.lineno, stmt.col_offset + 1))
        elif kind is ast.Expr and stmt.value.__class__ is ast.Call:
            call = stmt.value
            func = call.func
            if isinstance(func, ast.Attribute):
                container = _path(func.value, aliases)
                if func.attr in ("append", "appendleft") and container and len(call.args) == 1 \
                        and _pairs_event(call.args[0]):
                    found.append(("pair", container, *_event_text(call.args[0]), stmt.lineno, stmt.col_offset + 1))
                elif (func.attr == "clear" or func.attr in _POPS) and container:
                    found.append(("drop", container, "", "", stmt.lineno, stmt.col_offset + 1))
    if lines is not None and not _names_a_wait(lines[node.lineno - 1:node.end_lineno or node.lineno]):
        return sorted(set(found), key=lambda k: (k[4], k[5], k[0], k[1], k[2], k[3]))  # (no wait in its text:
        # most functions; their statements' own tests below would all fail)
    for expr in _wait_calls(statements, lines):
            for text in [expr.func.value] + list(expr.args):
                container = _element_of(text, aliases, elements)
                if container:
                    taken = "" if isinstance(text, ast.Name) and elements.event_only_at(text.id, expr.lineno) \
                        else "tensors"
                    found.append(("wait", container, "", taken, expr.lineno, expr.col_offset + 1))
                    break
    return sorted(set(found), key=lambda k: (k[4], k[5], k[0], k[1], k[2], k[3]))


_BODIES = ("body", "orelse", "finalbody", "handlers", "cases")  # the fields that hold nested statements
_SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)
SCOPE_TYPES = frozenset(_SCOPES)  # (for exact-type tests: ast.parse makes no subclasses)
_BODIES_OF: dict[type, tuple[str, ...]] = {}  # statement type -> those of _BODIES it has


def body_fields(kind: type) -> tuple[str, ...]:
    """The fields of a statement type that hold nested statements (handlers and cases hold them in their bodies)."""
    fields = _BODIES_OF.get(kind)
    if fields is None:  # (a getattr that misses costs an exception: most statements have none of _BODIES)
        fields = _BODIES_OF[kind] = tuple(f for f in _BODIES if f in kind._fields)
    return fields


def own_statements(node: ast.FunctionDef | ast.AsyncFunctionDef):
    """The statements of the function's body at every depth, in source order, not those of nested functions or
    classes (statements are a tenth of a body's nodes: walking every node here was a quarter of the facts pass)."""
    stack = [s for s in reversed(node.body) if not isinstance(s, _SCOPES)]
    while stack:
        current = stack.pop()
        yield current
        for field in body_fields(current.__class__):
            for child in reversed(getattr(current, field) or ()):
                kind = child.__class__  # (exact types: ast.parse makes no subclasses)
                if kind is ast.ExceptHandler or kind is ast.match_case:
                    stack.extend(reversed([s for s in child.body if s.__class__ not in SCOPE_TYPES]))
                elif kind not in SCOPE_TYPES:
                    stack.append(child)


def _wait_calls(statements: list[ast.stmt], lines: list[str] | None):
    """The calls of a wait-like method in the statements' own expressions (not in lambdas): only expressions
    whose source lines name one of _WAITS are walked."""
    for stmt in statements:
        if lines is not None and not isinstance(stmt, (ast.Try, ast.Match)) and not _names_a_wait(
                lines[stmt.lineno - 1:_header_end(stmt)]):
            continue  # (a try's handlers and a match's cases sit below its body: no header to test)
        for expr in _expressions(stmt):
            if lines is not None and not _names_a_wait(lines[expr.lineno - 1:expr.end_lineno or expr.lineno]):
                continue
            stack = [expr]
            while stack:
                current = stack.pop()
                if isinstance(current, ast.Call) and isinstance(current.func, ast.Attribute) \
                        and current.func.attr in _WAITS:
                    yield current
                stack.extend(c for c in ast.iter_child_nodes(current) if not isinstance(c, ast.Lambda))


_WAIT_WORDS = ("wait", "synchronize", "query")  # every name of _WAITS holds one


def _names_a_wait(lines: list[str]) -> bool:
    for line in lines:  # (the words of _WAIT_WORDS, spelled out: no generator per statement)
        if "wait" in line or "synchronize" in line or "query" in line:
            return True
    return False


def _header_end(stmt: ast.stmt) -> int:
    """The last line of the statement's own text: all of a simple one, a compound one's up to its body."""
    body = stmt.body if "body" in stmt._fields else None  # (a getattr that misses costs an exception)
    if body:
        return max(stmt.lineno, body[0].lineno - 1) if body[0].lineno > stmt.lineno else stmt.lineno
    return stmt.end_lineno or stmt.lineno


def _expressions(stmt: ast.stmt):
    """The expressions a statement holds itself (its header's, for a compound statement; a handler's type, a
    case's pattern guard), not those of its nested statements."""
    for field, value in ast.iter_fields(stmt):
        if field in _BODIES and field != "handlers" and field != "cases":
            continue
        for item in value if isinstance(value, list) else (value,):
            if isinstance(item, ast.ExceptHandler):
                if item.type is not None:
                    yield item.type
            elif isinstance(item, ast.match_case):
                if item.guard is not None:
                    yield item.guard
            elif isinstance(item, ast.expr) and not isinstance(item, ast.Lambda):
                yield item
            elif isinstance(item, (ast.withitem, ast.comprehension, ast.keyword, ast.arguments)):
                yield from (c for c in ast.iter_child_nodes(item) if isinstance(c, ast.expr))


def _path(expr: ast.AST, aliases: dict[str, str]) -> str:
    text = dotted(expr) if isinstance(expr, (ast.Name, ast.Attribute)) else ""
    if not text:
        return ""
    head, dot, rest = text.partition(".")
    return aliases.get(head, head) + dot + rest if head in aliases else text


def _popped(call: ast.Call, aliases: dict[str, str]) -> str:
    func = call.func
    if isinstance(func, ast.Attribute) and func.attr in _POPS:
        return _path(func.value, aliases)
    return ""


def _is_event(expr: ast.AST) -> bool:
    text = dotted(expr) if isinstance(expr, (ast.Name, ast.Attribute)) else ""
    if not text and isinstance(expr, ast.Call) and isinstance(expr.func, ast.Attribute):
        return expr.func.attr == "record_event"
    last = text.rsplit(".", 1)[-1].lower()
    return last.endswith("event") or last == "ev"  # not `event_token_ids`


def _pairs_event(value: ast.AST) -> bool:
    """A tuple, or a record's constructor call, of an event and something that is not one."""
    if isinstance(value, ast.Tuple):
        parts = list(value.elts)
    elif isinstance(value, ast.Call) and isinstance(value.func, (ast.Name, ast.Attribute)):
        parts = list(value.args) + [k.value for k in value.keywords]
    else:
        return False
    named = [p for p in parts if isinstance(p, (ast.Name, ast.Attribute, ast.Call))]
    events = [p for p in named if _is_event(p)]
    return bool(events) and any(isinstance(p, (ast.Name, ast.Attribute)) and not _is_event(p) for p in named)


def _event_text(value: ast.AST) -> tuple[str, str]:
    """(the event's text, the other elements' paths joined by commas)."""
    parts = list(value.elts) if isinstance(value, ast.Tuple) else list(value.args) + [k.value for k in value.keywords]
    event = next(ast.unparse(p) for p in parts if _is_event(p))
    others = [dotted(p) for p in parts if isinstance(p, (ast.Name, ast.Attribute)) and not _is_event(p)]
    return event, ",".join(o for o in others if o)


def _names(target: ast.AST) -> list[str]:
    if isinstance(target, ast.Name):
        return [target.id]
    if isinstance(target, (ast.Tuple, ast.List)):
        return [e.id for e in target.elts if isinstance(e, ast.Name) and e.id != "_"]
    return []


class _Elements:
    """Which container a local holds an element of, line by line: (line, container) per binding in source order,
    "" for a binding to anything else."""

    def __init__(self) -> None:
        self.bindings: dict[str, list[tuple[int, str]]] = {}
        self.event_only: set[tuple[str, int]] = set()  # (name, line): bound alone out of an element's tuple

    def bind(self, name: str, line: int, container: str) -> None:
        if container or name in self.bindings:
            self.bindings.setdefault(name, []).append((line, container))

    def at(self, name: str, line: int) -> str:
        """The binding in force at `line`; before the first (a loop's wait of the element its previous pass took)
        the first element binding."""
        binding = self._binding_at(name, line)
        return binding[1] if binding else ""

    def event_only_at(self, name: str, line: int) -> bool:
        """Whether the binding of `name` in force at `line` took nothing else out of its element."""
        binding = self._binding_at(name, line)
        return binding is not None and (name, binding[0]) in self.event_only

    def _binding_at(self, name: str, line: int) -> tuple[int, str] | None:
        """(line, container) of the binding `at` and `event_only_at` read."""
        bindings = sorted(self.bindings.get(name, ()), key=lambda b: b[0])  # (loops' bindings come first)
        earlier = [binding for binding in bindings if binding[0] <= line]
        if earlier:
            return earlier[-1]
        return next((binding for binding in bindings if binding[1]), None)

    def __contains__(self, name: str) -> bool:
        return name in self.bindings


def _element_of(expr: ast.AST, aliases: dict[str, str], elements: _Elements) -> str:
    """The container whose element's event `expr` names (`oldest.event`, `st.event`, `C[0].event`), or ""."""
    line = expr.lineno
    while isinstance(expr, (ast.Attribute, ast.Subscript)):
        if isinstance(expr, ast.Subscript) and not (isinstance(expr.value, ast.Name) and expr.value.id in elements):
            container = _path(expr.value, aliases)  # `C[0].event`; `state[1]` of an element is the element's
            if container:
                return container
        expr = expr.value
    if isinstance(expr, ast.Name):
        return elements.at(expr.id, line)
    return ""
