"""Small helpers over `ast` expressions that every part of the facts pass shares: a callee's text, the access path
a tensor expression denotes, its element index, the expressions inside a literal list."""

from __future__ import annotations

import ast

from .extract_names import METADATA_ATTRS, SAME_STORAGE_ATTRS, VIEW_METHODS


# Names that are no access path (the object a method runs on): access_path gives None for them, and the visitors
# that test a name before calling it (extract.py, extract_calls.py, extract_hazards.py) read this.
NO_PATH_NAMES = ("self", "cls")


def dotted(node: ast.AST) -> str:
    """A callee's or receiver's shape as text: `self.a.b`, `get_accelerator().stream`, `xs[].f`, `?.g`."""
    kind = node.__class__  # (ast.parse makes exact types: `is` tests, not isinstance, on 200 000 nodes a tree)
    if kind is _NAME:
        return node.id
    if kind is _ATTRIBUTE:
        return f"{dotted(node.value)}.{node.attr}"
    if kind is _CALL:
        return f"{dotted(node.func)}()"
    if kind is _SUBSCRIPT:
        return f"{dotted(node.value)}[]"
    return "?"


def access_path(node: ast.AST) -> str | None:
    """The tensor an expression denotes, as an access path, or None when it is not a plain path.

    Views (`x.narrow(...)`, `x[i]`) and `.data` lead back to their base; metadata (`x.shape`) is not a
    path; subscripts of containers (`self.bufs[i]`) stand for the container's elements.
    """
    kind = node.__class__  # (exact types, as in dotted)
    if kind is _NAME:
        name = node.id
        return None if name in NO_PATH_NAMES else name
    if kind is _ATTRIBUTE:
        attr = node.attr
        if attr in METADATA_ATTRS:
            return None
        value = node.value
        if attr in SAME_STORAGE_ATTRS:
            return access_path(value)
        if value.__class__ is _NAME and value.id in NO_PATH_NAMES:
            return f"{value.id}.{attr}"
        base = access_path(value)
        return f"{base}.{attr}" if base else None
    if kind is _SUBSCRIPT or kind is _STARRED:
        return access_path(node.value)
    if kind is _CALL:
        func = node.func
        if func.__class__ is _ATTRIBUTE and func.attr in VIEW_METHODS:
            return access_path(func.value)
    return None


_NAME, _ATTRIBUTE, _CALL, _SUBSCRIPT, _STARRED = ast.Name, ast.Attribute, ast.Call, ast.Subscript, ast.Starred


def arg_text(expr: ast.AST) -> str:
    """A call argument as an access path with its element index (`bufs[i]`), or "" when it is none."""
    path = access_path(expr)
    if not path:
        return ""
    index = index_of(expr)
    return f"{path}[{index}]" if index else path


def split_index(text: str) -> tuple[str, str]:
    """`bufs[i]` -> ("bufs", "i"); `x` -> ("x", "")."""
    if text.endswith("]") and "[" in text:
        path, _, index = text[:-1].partition("[")
        return path, index
    return text, ""


def index_of(expr: ast.AST) -> str:
    """The index text of `x[<index>]` when it picks one element by a constant or a simple expression of names
    (`buf[1 - cur]`, `self.bufs[i]`), or `a:b` for a slice with both bounds simple (`buf[0:N]`); "" for
    anything else (the whole path)."""
    if expr.__class__ is not ast.Subscript:  # (ast.parse makes exact types)
        return ""
    index = expr.slice
    kind = index.__class__
    if kind is ast.Name:  # the common indexes, spelled as ast.unparse spells them, without its cost
        return index.id if len(index.id) <= 40 else ""
    if kind is ast.Constant and index.value.__class__ is int:
        text = repr(index.value)
        return text if len(text) <= 40 else ""
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
    if node.__class__ not in _HOLDERS:  # nearly every argument: one set lookup, not seven type tests
        return [node]
    if isinstance(node, (ast.List, ast.Tuple, ast.Set)):
        return [e for elt in node.elts for e in elements(elt)]
    if isinstance(node, (ast.ListComp, ast.GeneratorExp, ast.SetComp)):
        return elements(node.elt)
    if isinstance(node, ast.IfExp):
        return elements(node.body) + elements(node.orelse)
    return [node]


# The node types whose elements `elements` looks inside (ast.parse makes these exact types, no subclasses).
_HOLDERS = frozenset({ast.List, ast.Tuple, ast.Set, ast.ListComp, ast.GeneratorExp, ast.SetComp, ast.IfExp})
