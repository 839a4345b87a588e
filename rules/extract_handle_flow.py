"""How values move between a function's locals, its containers, its calls and its returns (FunctionFacts.handle_flow),
read off one function's body for the handle-flow query (handle_flow.py).

Async handles travel as plain Python values: Megatron's `_p2p_ops` stores `reqs["recv_prev"] = irecv(...)` and
returns the dict, `_communicate` merges it (`reqs.update(p2p_reqs)`) and returns `(prev, next, reqs)`, the
schedule destructures `buf, handles = comm.send_forward_recv_forward(...)`, queues `queue.append(handles.pop(
"recv_prev"))` and waits `queue.pop(0)` in the next iteration. The rows, as lists (JSON):
- ["bind", local, operands, line, column]  `x = <operand>`, `x = a if c else b` (both), `for x in c` / `c.values()`
- ["unpack", targets, line, column, line]   `a, b = f(...)` (the call at line, column; "" for a target no name)
- ["store", container, key, operands, line] `c[k] = v` (key: the constant's text, "*" for any other index),
                                            `c.append(v)` / `appendleft` / `insert` ("*"), `c.update(v)` /
                                            `c.extend(v)` ("=": the value's elements keep their keys)
- ["return", positions, line]               `return a, b` (one operand list per position; one position for a
                                            single value)
- ["mention", local, line, column, test]    a load of a local bound by a removal (`h = c.pop(0)`); test is 1 for
                                            `h is None` / `h is not None`, which does nothing with the handle
- ["captured", local]                       such a local that a nested function or lambda also names
An operand is ["name", n], ["take", container, key, removed] (`c.pop(k)`, `c.get(k)`, `c[k]`, `c.popleft()`; key ""
when it is no string constant; removed 1 for pop/popleft/popitem, which leave the local the only holder) or
["call", line, column]. Only names (no attribute paths) take part.
"""

from __future__ import annotations

import ast

from .extract_keeps import _SCOPES, own_statements

TAKES = frozenset({"pop", "popleft", "get", "popitem"})
REMOVALS = frozenset({"pop", "popleft", "popitem"})  # the element leaves the container: the local holds the last
APPENDS = frozenset({"append", "appendleft", "insert"})
MERGES = frozenset({"update", "extend"})
ANY_KEY = "*"
MERGED = "="


def handle_flow_facts(node: ast.FunctionDef | ast.AsyncFunctionDef,
                      statements: list[ast.stmt] | None = None) -> list[list]:
    """The rows of one function (`statements`: own_statements(node), when the caller has them already)."""
    rows: list[list] = []
    taken: set[str] = set()  # locals bound by a removal: their later mentions are kept
    for stmt in (own_statements(node) if statements is None else statements):
        kind = stmt.__class__  # (exact types: ast.parse makes no subclasses)
        if kind is ast.Assign or kind is ast.AnnAssign:
            if stmt.value is None:
                continue
            targets = stmt.targets if kind is ast.Assign else [stmt.target]
            operands = _operands(stmt.value)
            for target in targets:
                if isinstance(target, ast.Name) and operands:
                    rows.append(["bind", target.id, operands, stmt.lineno, stmt.col_offset + 1])
                    if any(o[0] == "take" and o[3] for o in operands):
                        taken.add(target.id)
                elif isinstance(target, (ast.Tuple, ast.List)) and isinstance(stmt.value, ast.Call):
                    names = [e.id if isinstance(e, ast.Name) else "" for e in target.elts]
                    call = stmt.value
                    rows.append(["unpack", names, call.lineno, call.col_offset + 1, stmt.lineno])
                elif isinstance(target, ast.Subscript) and isinstance(target.value, ast.Name) and operands:
                    rows.append(["store", target.value.id, _key(target.slice) or ANY_KEY, operands, stmt.lineno])
        elif kind is ast.Expr:
            if stmt.value.__class__ is not ast.Call:
                continue
            call = stmt.value
            func = call.func
            if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name) and call.args \
                    and (func.attr in APPENDS or func.attr in MERGES):
                operands = _operands(call.args[-1])
                if operands:
                    key = MERGED if func.attr in MERGES else ANY_KEY
                    rows.append(["store", func.value.id, key, operands, stmt.lineno])
        elif kind is ast.For or kind is ast.AsyncFor:
            bound = _loop_element(stmt.target, stmt.iter)
            if bound is not None:
                name, container = bound
                rows.append(["bind", name, [["take", container, "", 0]], stmt.lineno, stmt.col_offset + 1])
        elif kind is ast.Return and stmt.value is not None:
            parts = stmt.value.elts if isinstance(stmt.value, ast.Tuple) else [stmt.value]
            positions = [_operands(p) for p in parts]
            if any(positions):
                rows.append(["return", positions, stmt.lineno])
    if taken:
        rows.extend(_mentions(node, taken))
    return rows


def _operands(value: ast.AST) -> list[list]:
    if isinstance(value, ast.IfExp):
        return _operands(value.body) + _operands(value.orelse)
    if isinstance(value, ast.Name):
        return [["name", value.id]]
    if isinstance(value, ast.Subscript) and isinstance(value.value, ast.Name):
        return [["take", value.value.id, _key(value.slice), 0]]
    if isinstance(value, ast.Call):
        func = value.func
        if isinstance(func, ast.Attribute) and func.attr in TAKES and isinstance(func.value, ast.Name):
            removed = int(func.attr in REMOVALS)
            return [["take", func.value.id, _key(value.args[0]) if value.args else "", removed]]
        return [["call", value.lineno, value.col_offset + 1]]
    return []


def _key(index: ast.AST) -> str:
    """A string constant's text (a dict key); "" for anything else (a list index, a variable)."""
    return repr(index.value) if isinstance(index, ast.Constant) and isinstance(index.value, str) else ""


def _loop_element(target: ast.AST, iterated: ast.AST) -> tuple[str, str] | None:
    """(loop variable, container) for `for x in c`, `for x in c.values()`, `for _, x in c.items()`."""
    if isinstance(iterated, ast.Call) and isinstance(iterated.func, ast.Attribute) and not iterated.args \
            and iterated.func.attr in ("values", "items") and isinstance(iterated.func.value, ast.Name):
        container = iterated.func.value.id
        if iterated.func.attr == "items":
            if isinstance(target, (ast.Tuple, ast.List)) and len(target.elts) == 2:
                target = target.elts[1]
            else:
                return None
        return (target.id, container) if isinstance(target, ast.Name) else None
    if isinstance(iterated, ast.Name) and isinstance(target, ast.Name):
        return target.id, iterated.id
    return None


def _mentions(node: ast.FunctionDef | ast.AsyncFunctionDef, names: set[str]) -> list[list]:
    rows: list[list] = []
    captured: set[str] = set()
    tests: set[int] = set()  # id() of names compared with `is` / `is not` (None tests)
    stack = list(node.body)
    while stack:
        current = stack.pop()
        if isinstance(current, _SCOPES):
            captured |= _free_names(current, names)
            continue
        if isinstance(current, ast.Compare) and isinstance(current.left, ast.Name) \
                and all(isinstance(op, (ast.Is, ast.IsNot)) for op in current.ops):
            tests.add(id(current.left))
        if isinstance(current, ast.Name) and isinstance(current.ctx, ast.Load) and current.id in names:
            rows.append(["mention", current.id, current.lineno, current.col_offset + 1, int(id(current) in tests)])
        stack.extend(ast.iter_child_nodes(current))
    rows.extend(["captured", name] for name in sorted(captured))
    return rows


def _free_names(scope: ast.AST, names: set[str]) -> set[str]:
    """Of `names`, those a nested function or lambda reads from the enclosing function (it binds them not itself,
    or declares them nonlocal): its own local of the same name is another variable."""
    loaded, bound, declared = set(), set(), set()
    for n in ast.walk(scope):
        if isinstance(n, ast.Name) and n.id in names:
            (loaded if isinstance(n.ctx, ast.Load) else bound).add(n.id)
        elif isinstance(n, ast.arg) and n.arg in names:
            bound.add(n.arg)
        elif isinstance(n, (ast.Nonlocal, ast.Global)):
            declared.update(name for name in n.names if name in names)
    return (loaded - bound) | declared


def lists_from_calls(fn) -> set[str]:
    """Locals bound to a call's result (`handles = self.isend_tensor_dict(...)`) that the function iterates or
    waits: they may be the handles the callee launched and returned (returned_handles.py). Their uses are kept at
    the end of the file (extract_hazards.py), so what the function does with them after the call is known."""
    bound = {r[1] for r in fn.handle_flow if r[0] == "bind" and any(o[0] == "call" for o in r[2])}
    return {u.path for u in fn.uses if u.path in bound and (u.how == "wait" or u.how == "read" and u.arg == "for")}
