"""Autofixes (`scan --fix`, `--diff`, SARIF `fixes`): each finding's missing ordering, inserted as one statement.

A fix is derived only from a finding's structured fields (rule, locations and their roles, `extra`), never from its
message text:

    SC101  the write on the current stream (`extra["writer_stream"] == ""`), the read inside `with stream(S):`
           (the "stream context" location): `S.wait_stream(torch.cuda.current_stream())` before that `with`  safe
           the write inside `with stream(S):`, the read on the current stream (`reader_stream == ""`):
           `torch.cuda.current_stream().wait_stream(S)` before the read, when both are in one function      safe
           S is the stream as that `with` names it in the code (`side`, `self.allgather_stream`), read from the
           source, so the fix never writes a stream the way the finding's words describe it (`torch.cuda.Stream()`);
           none when `extra["across_hook_calls"]` (the wait is there, for another call of the hook's stream)
    SC104  `<path>.record_stream(<stream>)` before the free (the primary location)                          safe
    SC105  `<handle>.wait()` before the use (the primary location)                                          safe
    SC102  `torch.cuda.current_stream().synchronize()` before the host read (primary)                       unsafe
    SC103  the same synchronize before the host overwrite (primary)                                         unsafe

SC102/SC103's fix blocks the host (a performance change: an event recorded after the copy is often better), so it is
applied only with --unsafe-fixes, as ruff does. A rule may also hand over its own edit in
`extra["fix_edit"] = {"path", "line", "column", "insert", "safe", "description"}`: insert the statement `insert`
before the statement at path:line:column.

The edit itself is made with libcst: the innermost statement of a block (module, function, loop, `with`, ...) that
contains the target position gets the new statement right before it, at its indentation; comments, blank lines and
formatting elsewhere are untouched. A statement equal to the one to insert that already stands right before the
target is left alone, so a second `--fix` changes nothing.
"""

from __future__ import annotations

import dataclasses
import difflib
import re
from dataclasses import dataclass
from typing import Iterable

from streamcheck.findings import ROLE_READ, ROLE_STREAM_CONTEXT, Finding

# A name or attribute chain: what can be written into new code as is (not `torch.cuda.Stream()`, not `x[0]`).
_DOTTED = re.compile(r"[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*")
_IMPORTS_TORCH = re.compile(r"^\s*import\s+torch\s*(?:#.*)?$|^\s*import\s+torch\s*,|^\s*import\s+[\w., ]*\btorch\s*$",
                            re.MULTILINE)
CURRENT_STREAM = "torch.cuda.current_stream()"


@dataclass(frozen=True)
class Fix:
    """Insert `statement` on its own line before the statement that contains path:line:column."""

    rule: str
    path: str
    line: int
    column: int
    statement: str
    safe: bool
    description: str
    needs_torch: bool = False  # the statement names `torch`: only offered where the module does `import torch`
    # When set, `statement` holds "{stream}": the stream argument of the `with` statement on this line, as the code
    # writes it; `stream_fallback` is used where that argument is not a plain name. The `with` and the target must
    # be in one function (the name must be in scope where the statement goes).
    stream_line: int = 0
    stream_fallback: str = ""


def derive_fix(finding: Finding) -> Fix | None:
    """The fix of one finding, or None when its fields do not determine one."""
    given = finding.extra.get("fix_edit")
    if isinstance(given, dict):
        return _given_fix(finding, given)
    derive = _DERIVERS.get(finding.rule)
    return derive(finding) if derive else None


def _given_fix(finding: Finding, edit: dict) -> Fix | None:
    try:
        return Fix(finding.rule, str(edit["path"]), int(edit["line"]), int(edit.get("column", 1)),
                   str(edit["insert"]).strip(), bool(edit.get("safe", True)),
                   str(edit.get("description") or "insert `{statement}`"))
    except (KeyError, TypeError, ValueError):
        return None


def _sc101(finding: Finding) -> Fix | None:
    writer, reader = finding.extra.get("writer_stream"), finding.extra.get("reader_stream")
    context = _related(finding, ROLE_STREAM_CONTEXT)
    if context is None or finding.extra.get("across_hook_calls"):
        return None  # (the wait for the current stream is there: each call of the hook needs its own stream waited)
    if writer == "" and isinstance(reader, str) and reader:  # the read runs inside the `with`
        statement = f"{{stream}}.wait_stream({CURRENT_STREAM})"
        return Fix("SC101", context.path, context.line, context.column, statement, True,
                   f"insert `{{statement}}` before the `with` at line {context.line}", needs_torch=True,
                   stream_line=context.line, stream_fallback=reader if _is_dotted(reader) else "")
    if reader == "" and isinstance(writer, str) and writer:  # the write ran inside the `with`
        read = finding.primary if finding.primary.role == ROLE_READ else _related(finding, ROLE_READ)
        if read is None or read.path != context.path or read.line <= context.line:
            return None
        statement = f"{CURRENT_STREAM}.wait_stream({{stream}})"
        return Fix("SC101", read.path, read.line, read.column, statement, True,
                   f"insert `{{statement}}` before the read at line {read.line}", needs_torch=True,
                   stream_line=context.line, stream_fallback=writer if _is_dotted(writer) else "")
    return None  # two named streams: which name is in scope where is not known


def _sc104(finding: Finding) -> Fix | None:
    path, stream = finding.extra.get("path", ""), finding.extra.get("stream", "")
    if not (_is_dotted(path) and _is_dotted(stream)):
        return None
    statement = f"{path}.record_stream({stream})"
    return _before_primary(finding, statement, True)


def _sc105(finding: Finding) -> Fix | None:
    handle = finding.extra.get("handle", "")
    if not _is_dotted(handle):
        return None
    return _before_primary(finding, f"{handle}.wait()", True)


def _host_sync(finding: Finding) -> Fix | None:
    copy_line = finding.extra.get("copy_line")
    if not isinstance(copy_line, int) or copy_line >= finding.primary.line:
        return None  # the copy and the host access in one statement: no statement boundary to put the sync at
    return _before_primary(finding, f"{CURRENT_STREAM}.synchronize()", False, needs_torch=True)


def _before_primary(finding: Finding, statement: str, safe: bool, needs_torch: bool = False) -> Fix:
    where = finding.primary
    return Fix(finding.rule, where.path, where.line, where.column, statement, safe,
               f"insert `{{statement}}` before line {where.line}", needs_torch=needs_torch)


_DERIVERS = {"SC101": _sc101, "SC102": _host_sync, "SC103": _host_sync, "SC104": _sc104, "SC105": _sc105}


def _related(finding: Finding, role: str):
    return next((loc for loc in finding.related if loc.role == role), None)


def _is_dotted(text) -> bool:
    return isinstance(text, str) and _DOTTED.fullmatch(text) is not None


# -- applying -----------------------------------------------------------------------------------------------------

def apply_fixes(source: bytes, fixes: list[Fix]) -> tuple[bytes, list[Fix]]:
    """`source` with every fix inserted (bytes in, bytes out: the file's encoding and newlines are kept), and the
    fixes that changed something. Fixes that do not fit (no statement at the position, `torch` not imported, the
    file does not parse) are left out."""
    import libcst as cst
    from libcst.metadata import MetadataWrapper, PositionProvider

    try:
        wrapper = MetadataWrapper(cst.parse_module(source))
    except cst.ParserSyntaxError:
        return source, []
    module = wrapper.module
    positions = wrapper.resolve(PositionProvider)
    imports_torch = _IMPORTS_TORCH.search(module.code) is not None
    statements, function_of = _block_statements(module)
    planned: dict[int, list[Fix]] = {}
    for fix in fixes:
        if fix.needs_torch and not imports_torch:
            continue
        target = _innermost(statements, positions, fix.line)
        if target is not None and fix.stream_line:
            fix = _with_stream_named(fix, module, statements, positions, function_of, target)
        if target is not None and fix is not None:
            # "{statement}" in a description stands for the statement as finally inserted.
            fix = dataclasses.replace(fix, description=fix.description.replace("{statement}", fix.statement))
            planned.setdefault(id(target), [])
            if all(f.statement != fix.statement for f in planned[id(target)]):
                planned[id(target)].append(fix)
    if not planned:
        return source, []
    inserter = _Inserter(planned)
    updated = module.visit(inserter)
    return (updated.bytes, inserter.applied) if inserter.applied else (source, [])


def _block_statements(module) -> tuple[list, dict[int, object]]:
    """Every statement that is an element of a block (the module's body or an indented block's), and for each
    (by id) the function it is in (None at module or class level)."""
    import libcst as cst

    found: list = []
    function_of: dict[int, object] = {}
    functions: list = []

    class Collect(cst.CSTVisitor):
        def visit_Module(self, node) -> None:
            found.extend(node.body)
            function_of.update((id(child), None) for child in node.body)

        def visit_FunctionDef(self, node) -> None:
            functions.append(node)

        def leave_FunctionDef(self, node) -> None:
            functions.pop()

        def visit_IndentedBlock(self, node) -> None:
            found.extend(node.body)
            function_of.update((id(child), functions[-1] if functions else None) for child in node.body)

    module.visit(Collect())
    return found, function_of


def _with_stream_named(fix: Fix, module, statements, positions, function_of, target) -> Fix | None:
    """`fix` with "{stream}" replaced by the stream its `with` statement names, or None if that cannot be done."""
    import libcst as cst

    with_node = next((node for node in statements if isinstance(node, cst.With)
                      and positions[node].start.line == fix.stream_line), None)
    name = ""
    if with_node is not None:
        if function_of.get(id(with_node)) is not function_of.get(id(target)):
            return None  # the stream's name may not be in scope where the statement goes
        for item in with_node.items:
            call = item.item
            if isinstance(call, cst.Call) and call.args and module.code_for_node(call.func).endswith("stream"):
                name = module.code_for_node(call.args[0].value)
                break
    if not _is_dotted(name):
        name = fix.stream_fallback
    if not _is_dotted(name):
        return None
    return dataclasses.replace(fix, statement=fix.statement.replace("{stream}", name), stream_line=0)


def _innermost(statements: list, positions, line: int):
    """The smallest block statement whose lines include `line` (lines, not columns: a location's column may point
    anywhere in the statement, or be 1 when unknown)."""
    best, best_size = None, None
    for node in statements:
        where = positions.get(node)
        if where is None or not where.start.line <= line <= where.end.line:
            continue
        size = (where.end.line - where.start.line, where.end.column - where.start.column)
        if best_size is None or size < best_size:
            best, best_size = node, size
    return best


class _Inserter:
    """A libcst transformer (built lazily so importing this module does not import libcst)."""

    def __new__(cls, planned: dict[int, list[Fix]]):
        import libcst as cst

        class Inserter(cst.CSTTransformer):
            def __init__(self):
                super().__init__()
                self.applied: list[Fix] = []

            def leave_Module(self, original, updated):
                return updated.with_changes(body=self._insert(original.body, updated.body))

            def leave_IndentedBlock(self, original, updated):
                return updated.with_changes(body=self._insert(original.body, updated.body))

            def _insert(self, originals, updated_body):
                body: list = []
                for original, node in zip(originals, updated_body):
                    for fix in planned.get(id(original), ()):
                        previous = body[-1] if body else None
                        if fix.statement in (_code_of(node), previous is not None and _code_of(previous)):
                            continue  # already there: a second --fix changes nothing
                        new = cst.parse_statement(fix.statement + "\n")
                        # The target's leading comments and blank lines go above the inserted line.
                        new = new.with_changes(leading_lines=node.leading_lines)
                        node = node.with_changes(leading_lines=())
                        body.append(new)
                        self.applied.append(fix)
                    body.append(node)
                return body

        return Inserter()


def _code_of(statement) -> str:
    import libcst as cst

    return cst.Module(body=[statement.with_changes(leading_lines=())]).code.strip()


# -- reporting ----------------------------------------------------------------------------------------------------

def unified_diff(path: str, before: bytes, after: bytes) -> str:
    old = before.decode("utf-8", errors="replace").splitlines(keepends=True)
    new = after.decode("utf-8", errors="replace").splitlines(keepends=True)
    return "".join(difflib.unified_diff(old, new, fromfile=f"a/{path}", tofile=f"b/{path}"))


def inserted_lines(before: bytes, after: bytes) -> list[tuple[int, str]]:
    """(line of `before` the text goes in front of, the inserted text) for each run of inserted lines."""
    old = before.decode("utf-8", errors="replace").splitlines(keepends=True)
    new = after.decode("utf-8", errors="replace").splitlines(keepends=True)
    inserts = []
    for tag, i1, _i2, j1, j2 in difflib.SequenceMatcher(a=old, b=new, autojunk=False).get_opcodes():
        if tag == "insert":
            inserts.append((i1 + 1, "".join(new[j1:j2])))
    return inserts
