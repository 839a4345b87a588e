"""The ordering statements of the mutation benchmark, chosen by a fixed rule (see mutation_recall.py's docstring),
and the function spans and calls that decide whether a finding lies "near" a deleted statement.

Everything here reads source with the standard `ast` only; nothing of the scanned code is imported or run.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from pathlib import Path

from streamcheck.rules.extract import dotted  # a callee's shape as text: the same spelling the facts use

ORDERING_METHODS = ("wait_stream", "wait_event", "record_stream", "synchronize")
# `.wait()` counts when the receiver's last name says it is an event, a handle, a work or a request / future
# (handle, handles[i], self._work, req, fut, ...; also h, w, e alone), or when the receiver is itself a call
# (dist.all_reduce(t, async_op=True).wait()).
WAIT_RECEIVER = re.compile(r"event|handle|work|req|fut|^h$|^w$|^e$|^ev$", re.IGNORECASE)
EXCLUDED_FOLDERS = ("tests", "test", "benchmarks", "benchmark", "examples", "example")

# Tensor methods that make a call an access of a tensor (besides every public method whose name ends in "_",
# the in-place ones, and every call of torch.* / dist.* outside the stream and device API).
TENSOR_METHODS = frozenset("""
    narrow view view_as reshape flatten contiguous clone detach to cuda cpu item tolist numpy numel sum mean norm
    split chunk float half bfloat16 data_ptr untyped_storage storage index_select masked_fill copy pin_memory
    element_size nelement size stride unsqueeze squeeze permute transpose expand repeat flip type_as
""".split())
DEVICE_API_ROOTS = ("torch.cuda.", "torch.npu.", "torch.xpu.", "torch.mps.", "torch.accelerator.")
STREAM_API = frozenset("synchronize wait_stream wait_event record current_stream default_stream Stream Event "
                       "stream set_stream query elapsed_time".split())
TENSOR_ATTRIBUTES = ("data", "grad")


@dataclass(frozen=True)
class Site:
    """One ordering statement: where (1-based lines, 0-based columns as `ast` gives them) and its text."""

    path: str
    line: int
    end_line: int
    column: int
    end_column: int
    text: str  # the statement's source, whitespace collapsed
    function: str  # qualified name of the enclosing function


@dataclass(frozen=True)
class Function:
    path: str
    name: str  # the def's own name
    qualname: str
    line: int
    end_line: int
    calls: frozenset[str]  # last names of every callee in its body (nested defs included)


def last_name(node: ast.AST) -> str:
    while isinstance(node, (ast.Subscript, ast.Call)):
        node = node.value if isinstance(node, ast.Subscript) else node.func
    if isinstance(node, ast.Attribute):
        return node.attr
    return node.id if isinstance(node, ast.Name) else ""


def is_ordering_call(call: ast.Call) -> bool:
    func = call.func
    if not isinstance(func, ast.Attribute):
        return False
    if func.attr in ORDERING_METHODS:
        return True
    if func.attr != "wait":
        return False
    return isinstance(func.value, ast.Call) or bool(WAIT_RECEIVER.search(last_name(func.value)))


def is_tensor_access(node: ast.AST) -> bool:
    if isinstance(node, ast.Attribute) and node.attr in TENSOR_ATTRIBUTES:
        return True
    if not isinstance(node, ast.Call):
        return False
    func = node.func
    if isinstance(func, ast.Attribute):
        name = func.attr
        if name in STREAM_API:
            return False
        if name in TENSOR_METHODS or (name.endswith("_") and not name.startswith("_")):
            return True
    callee = dotted(func)
    if callee.startswith(DEVICE_API_ROOTS):
        return False
    return callee.startswith(("torch.", "dist."))


def _own_nodes(function: ast.AST):
    """Nodes of a function's body, not descending into nested defs, lambdas or classes."""
    stack = list(ast.iter_child_nodes(function))
    while stack:
        node = stack.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)):
            continue
        yield node
        stack.extend(ast.iter_child_nodes(node))


def _functions(tree: ast.Module):
    """(qualname, def node) of every function, in source order."""
    stack = [("", tree)]
    while stack:
        prefix, node = stack.pop()
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                qualname = f"{prefix}{child.name}"
                if not isinstance(child, ast.ClassDef):
                    yield qualname, child
                stack.append((f"{qualname}.", child))


def sites_of(source: str, path: str) -> list[Site]:
    """The ordering statements of one file that the fixed rule selects."""
    found = []
    for qualname, function in _functions(ast.parse(source)):
        own = list(_own_nodes(function))
        orderings = [n for n in own if isinstance(n, ast.Expr) and isinstance(n.value, ast.Call)
                     and is_ordering_call(n.value)]
        if not orderings:
            continue
        inside = {id(inner) for stmt in orderings for inner in ast.walk(stmt)}
        if not any(is_tensor_access(n) for n in own if id(n) not in inside):
            continue
        for stmt in orderings:
            text = " ".join((ast.get_source_segment(source, stmt) or "").split())
            found.append(Site(path, stmt.lineno, stmt.end_lineno, stmt.col_offset, stmt.end_col_offset,
                              text, qualname))
    return sorted(found, key=lambda s: (s.path, s.line, s.column))


def functions_of(source: str, path: str) -> list[Function]:
    found = []
    for qualname, node in _functions(ast.parse(source)):
        calls = frozenset(last_name(n.func) for n in ast.walk(node) if isinstance(n, ast.Call)) - {""}
        found.append(Function(path, node.name, qualname, node.lineno, node.end_lineno, calls))
    return found


def python_files(tree: Path, folders: tuple[str, ...], skip_test_folders: bool) -> list[str]:
    """'/'-separated paths (relative to `tree`) of the .py files under `folders`, sorted; with
    `skip_test_folders`, none below a folder named in EXCLUDED_FOLDERS."""
    paths = []
    for folder in folders:
        for file in sorted((tree / folder).rglob("*.py")):
            rel = file.relative_to(tree).as_posix()
            if not (skip_test_folders and set(rel.split("/")[:-1]) & set(EXCLUDED_FOLDERS)):
                paths.append(rel)
    return paths


def delete_statement(source: str, site: Site) -> str:
    """`source` with the site's statement replaced by `pass`; continuation backslashes keep every line number."""
    lines = re.findall(r"[^\n]*\n|[^\n]+$", source)  # split as `ast` counts lines
    start = sum(len(line) for line in lines[:site.line - 1]) + _char_offset(lines[site.line - 1], site.column)
    end = sum(len(line) for line in lines[:site.end_line - 1]) + _char_offset(lines[site.end_line - 1],
                                                                               site.end_column)
    replacement = "pass" + "\\\n" * (site.end_line - site.line)
    return source[:start] + replacement + source[end:]


def _char_offset(line: str, utf8_column: int) -> int:
    """`ast` columns count UTF-8 bytes; string slicing counts characters."""
    return len(line.encode("utf-8")[:utf8_column].decode("utf-8", errors="ignore"))
