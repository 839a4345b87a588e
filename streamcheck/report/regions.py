"""Where a reported place ends: the expression that starts at a location's line and column, read from the file.

The rules report where an access starts; code scanning and editors highlight a region, so the end is taken from
the source: the outermost expression that starts exactly there (`param.secondary_shard.copy_(...)` for a write by
`copy_`, `t1` in `del t1`). A location the file does not confirm (moved code, no such expression, no file) keeps
no end: nothing is guessed.
"""

from __future__ import annotations

import ast
import dataclasses
import functools
import os
import warnings

from streamcheck.findings import Location


def with_end(loc: Location) -> Location:
    """`loc` with end_line / end_column (1-based, the column after the last character) where the source says."""
    if loc.end_line or loc.line <= 0 or loc.column <= 0:
        return loc
    try:
        stamp = os.stat(loc.path).st_mtime_ns
    except (OSError, ValueError):
        return loc
    end = _expression_ends(loc.path, stamp).get((loc.line, loc.column))
    if end is None:
        return loc
    return dataclasses.replace(loc, end_line=end[0], end_column=end[1])


@functools.lru_cache(maxsize=64)
def _expression_ends(path: str, _stamp: int) -> dict[tuple[int, int], tuple[int, int]]:
    """(line, 1-based column) where an expression starts -> (end line, 1-based column after it), outermost wins.
    Columns in characters (ast counts UTF-8 bytes)."""
    try:
        with open(path, "rb") as handle:
            data = handle.read()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            tree = ast.parse(data, filename=path)
        lines = data.decode("utf-8").splitlines()
    except (OSError, SyntaxError, ValueError, UnicodeDecodeError, RecursionError, MemoryError):
        return {}

    def char_column(line: int, offset: int) -> int:
        text = lines[line - 1] if 0 < line <= len(lines) else ""
        return len(text.encode("utf-8")[:offset].decode("utf-8", "replace")) + 1

    ends: dict[tuple[int, int], tuple[int, int]] = {}
    for node in ast.walk(tree):
        if not isinstance(node, ast.expr) or getattr(node, "end_lineno", None) is None:
            continue
        start = (node.lineno, char_column(node.lineno, node.col_offset))
        end = (node.end_lineno, char_column(node.end_lineno, node.end_col_offset))
        if start not in ends or end > ends[start]:
            ends[start] = end
    return ends
