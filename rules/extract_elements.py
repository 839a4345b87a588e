"""How elements move between a function's local containers (FunctionFacts.elements), read off one function's body.

A helper that gets a list of gradients often rebuilds it before the helper that uses them on a side stream sees
it (DeepSpeed ZeRO-1/2: `for tensor in bucket: small_bucket.append(tensor)` ... `self.allreduce_and_copy(
small_bucket)`; `dtype_bucket.append((grad, grad_param))` ... `for grad, grad_param in dtype_bucket:
bucket_grads.append(grad)`). The rows, as (inner, outer, line, slot): the local `inner` is (or holds) an element of
the local `outer`, or with `slot` >= 0 the slot-th part of a tuple element of it:
- `outer.append(x)` / `.add(x)` / `.extend(x)` / `.insert(i, x)`, `outer[k] = x`: (x, outer, line, -1);
  `outer.append((a, b))`: (a, outer, line, 0), (b, outer, line, 1);
- `for a, b in outer:` and `a, b = outer`: (a, outer, line, 0), (b, outer, line, 1) (the loops the facts pass
  reads without slots, FunctionFacts.derived, are read from there);
- `x = outer.setdefault(k, [])` / `.get(k)` / `.pop(k)`: (x, outer, line, -1);
- `for b in helper(x):`: (b, "<call@line:column>", line, -1), the call's result standing for a local.
element_flow.py joins them with FunctionFacts.derived into which parameters' elements a local holds.
"""

from __future__ import annotations

import ast

ELEMENT = -1  # the element itself, not a part of a tuple element
_STORES = frozenset({"append", "add", "extend", "insert", "appendleft"})
_TAKES = frozenset({"setdefault", "get", "pop", "popleft"})
_NOT_HELPERS = frozenset({"zip", "range", "reversed", "sorted", "list", "tuple", "iter", "map", "filter"})


def element_facts(statements: list[ast.stmt]) -> list[tuple[str, str, int, int]]:
    """The rows of one function (`statements`: its own statements, extract_keeps.own_statements)."""
    found: list[tuple[str, str, int, int]] = []
    for stmt in statements:
        kind = stmt.__class__  # (exact types: ast.parse makes no subclasses)
        if kind is ast.Expr:
            if stmt.value.__class__ is ast.Call:
                found.extend(_stored(stmt.value, stmt.lineno))
        elif kind is ast.Assign and len(stmt.targets) == 1:
            target, value = stmt.targets[0], stmt.value
            if isinstance(target, ast.Subscript) and isinstance(target.value, ast.Name):
                found.extend(_parts(value, target.value.id, stmt.lineno))
            elif isinstance(target, (ast.Tuple, ast.List)) and isinstance(value, ast.Name):
                found.extend(_slots(target, value.id, stmt.lineno))
            elif isinstance(target, ast.Name) and isinstance(value, ast.Call) \
                    and isinstance(value.func, ast.Attribute) and value.func.attr in _TAKES \
                    and isinstance(value.func.value, ast.Name):
                found.append((target.id, value.func.value.id, stmt.lineno, ELEMENT))
        elif kind is ast.For or kind is ast.AsyncFor:
            found.extend(_iterated(stmt.target, stmt.iter, stmt.lineno))
    return found


def call_result(line: int, column: int) -> str:
    """The name the rows give the unnamed result of the call at (line, column) (`for b in split(grads):`)."""
    return f"<call@{line}:{column}>"


def _iterated(target: ast.AST, iterated: ast.AST, line: int) -> list[tuple[str, str, int, int]]:
    """`for a, b in outer:` with slots; `for b in helper(x):` (also under `enumerate`) with the call's result as
    the container (element_flow.py links it to what the helper returns)."""
    if isinstance(iterated, ast.Name):
        return _slots(target, iterated.id, line) if isinstance(target, (ast.Tuple, ast.List)) else []
    if not isinstance(iterated, ast.Call):
        return []
    func = iterated.func
    if isinstance(func, ast.Name) and func.id == "enumerate" and iterated.args \
            and isinstance(target, (ast.Tuple, ast.List)) and len(target.elts) == 2:
        return _iterated(target.elts[1], iterated.args[0], line)
    if isinstance(func, ast.Name) and func.id in _NOT_HELPERS:
        return []
    outer = call_result(iterated.lineno, iterated.col_offset + 1)
    if isinstance(target, ast.Name):
        return [(target.id, outer, line, ELEMENT)]
    return _slots(target, outer, line) if isinstance(target, (ast.Tuple, ast.List)) else []


def _stored(call: ast.Call, line: int) -> list[tuple[str, str, int, int]]:
    func = call.func
    if not (isinstance(func, ast.Attribute) and func.attr in _STORES and isinstance(func.value, ast.Name)
            and call.args):
        return []
    return _parts(call.args[-1], func.value.id, line)


def _parts(value: ast.AST, outer: str, line: int) -> list[tuple[str, str, int, int]]:
    if isinstance(value, ast.Name):
        return [(value.id, outer, line, ELEMENT)]
    if isinstance(value, ast.Tuple):
        return [(e.id, outer, line, slot) for slot, e in enumerate(value.elts) if isinstance(e, ast.Name)]
    return []


def _slots(target: ast.Tuple | ast.List, outer: str, line: int) -> list[tuple[str, str, int, int]]:
    return [(e.id, outer, line, slot) for slot, e in enumerate(target.elts) if isinstance(e, ast.Name)]
