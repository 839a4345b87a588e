"""Where a reported place ends: the expression that starts at a location's line and column, read from the file.

The rules report where an access starts; code scanning and editors highlight a region, so the end is taken from
the source: the outermost expression that starts exactly there (`param.secondary_shard.copy_(...)` for a write by
`copy_`, `t1` in `del t1`). A location the file does not confirm (moved code, no such expression, no file) keeps
no end: nothing is guessed.

A scan that analysed the files works out the ends of its findings' locations once (`ends_of`) and keeps them with
its findings in the cache; a later scan that takes those findings from the cache hands them back (`tell`), so its
report parses no file again (a warm `--format text` scan of DeepSpeed 0.19.8 spent 0.3 s parsing the four files
its findings name). An end told for a file whose modification time has changed since is not used.
"""

from __future__ import annotations

import dataclasses
import functools
import os
import warnings
from typing import Any, Iterable

from streamcheck.findings import Finding, Location

# path -> (the file's st_mtime_ns when its ends were read, (line, column) -> (end line, end column) or None)
_told: dict[str, tuple[int, dict[tuple[int, int], tuple[int, int] | None]]] = {}


def with_end(loc: Location) -> Location:
    """`loc` with end_line / end_column (1-based, the column after the last character) where the source says."""
    if loc.end_line or loc.line <= 0 or loc.column <= 0:
        return loc
    try:
        stamp = os.stat(loc.path).st_mtime_ns
    except (OSError, ValueError):
        return loc
    told = _told.get(loc.path)
    if told is not None and told[0] == stamp and (loc.line, loc.column) in told[1]:
        end = told[1][(loc.line, loc.column)]
    else:
        end = _expression_ends(loc.path, stamp).get((loc.line, loc.column))
    if end is None:
        return loc
    return dataclasses.replace(loc, end_line=end[0], end_column=end[1])


def ends_of(findings: Iterable[Finding]) -> dict[str, list[Any]]:
    """The ends of the findings' locations (primary and related), as the files on disk say now, in a form the
    scan cache keeps: path -> [st_mtime_ns, [[line, column, end line, end column], ...]] (0, 0: no end)."""
    found: dict[str, list[Any]] = {}
    unreadable: set[str] = set()
    seen: set[tuple[str, int, int]] = set()
    for finding in findings:
        for loc in (finding.primary, *finding.related):
            if loc.end_line or loc.line <= 0 or loc.column <= 0 or loc.path in unreadable \
                    or (loc.path, loc.line, loc.column) in seen:
                continue
            seen.add((loc.path, loc.line, loc.column))
            entry = found.get(loc.path)
            if entry is None:
                try:
                    stamp = os.stat(loc.path).st_mtime_ns
                except (OSError, ValueError):
                    unreadable.add(loc.path)
                    continue
                entry = found[loc.path] = [stamp, []]
            end = _expression_ends(loc.path, entry[0]).get((loc.line, loc.column))
            entry[1].append([loc.line, loc.column, *(end or (0, 0))])
    return found


def tell(ends: Any) -> None:
    """Take ends that `ends_of` worked out for findings the caller is about to report (read from a cache: anything
    malformed is left out)."""
    if not isinstance(ends, dict):
        return
    for path, entry in ends.items():
        try:
            stamp, rows = entry
            _told[path] = (int(stamp), {(int(line), int(column)): (int(end_line), int(end_column)) if end_line
                                        else None for line, column, end_line, end_column in rows})
        except (TypeError, ValueError):
            continue


@functools.lru_cache(maxsize=64)
def _expression_ends(path: str, _stamp: int) -> dict[tuple[int, int], tuple[int, int]]:
    """(line, 1-based column) where an expression starts -> (end line, 1-based column after it), outermost wins.
    Columns in characters (ast counts UTF-8 bytes)."""
    import ast

    try:
        with open(path, "rb") as handle:
            data = handle.read()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            tree = ast.parse(data, filename=path)
        lines = data.decode("utf-8").splitlines()
    except (OSError, SyntaxError, ValueError, UnicodeDecodeError, RecursionError, MemoryError):
        return {}
    ascii_lines: dict[int, bool] = {}

    def char_column(line: int, offset: int) -> int:
        text = lines[line - 1] if 0 < line <= len(lines) else ""
        plain = ascii_lines.get(line)
        if plain is None:
            plain = ascii_lines[line] = text.isascii()
        if plain:  # one byte per character
            return min(offset, len(text)) + 1
        return len(text.encode("utf-8")[:offset].decode("utf-8", "replace")) + 1

    ends: dict[tuple[int, int], tuple[int, int]] = {}
    expr, node_type = ast.expr, ast.AST
    stack: list[Any] = [tree]
    while stack:  # every node, as ast.walk (whose generators took half the time); the order does not matter
        node = stack.pop()
        for name in node._fields:
            value = getattr(node, name, None)
            if type(value) is list:
                stack.extend(item for item in value if isinstance(item, node_type))
            elif isinstance(value, node_type):
                stack.append(value)
        if not isinstance(node, expr) or getattr(node, "end_lineno", None) is None:
            continue
        start = (node.lineno, char_column(node.lineno, node.col_offset))
        end = (node.end_lineno, char_column(node.end_lineno, node.end_col_offset))
        if start not in ends or end > ends[start]:
            ends[start] = end
    return ends
