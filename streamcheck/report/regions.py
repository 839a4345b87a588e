"""Where a reported place ends: the expression that starts at a location's line and column, read from the file.

The rules report where an access starts; code scanning and editors highlight a region, so the end is taken from
the source: the outermost expression that starts exactly there (`param.secondary_shard.copy_(...)` for a write by
`copy_`, `t1` in `del t1`). A location the file does not confirm (moved code, no such expression, no file) keeps
no end: nothing is guessed.

A scan that analysed the files works out the ends of its findings' locations once (`ends_of`) and keeps them with
its findings in the cache; a later scan that takes those findings from the cache hands them back (`tell`), so its
report parses no file again (a warm `--format text` scan of DeepSpeed 0.19.8 spent 0.3 s parsing the four files
its findings name). An end told for a file whose modification time has changed since is not used.

Only the `def` or `class` around a location is parsed, not its file: on DeepSpeed 0.19.8 the cold scan's seven
findings name five files of up to 3 900 lines, whose parses took 0.75 s of a 4.7 s scan. The block is the lines from
the nearest enclosing `def`/`class` line to the next code line indented no deeper; when that is not a complete
statement (a string or a bracket reaches out of it: the parse fails) or the location lies outside it, the file is
parsed whole, so a block never gives another answer than the file would.
"""

from __future__ import annotations

import dataclasses
import functools
import os
import re
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
        end = _ends_around(loc.path, stamp, loc.line).get((loc.line, loc.column))
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
            end = _ends_around(loc.path, entry[0], loc.line).get((loc.line, loc.column))
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


# A line that opens a block whose end the indentation tells: `def`, `async def`, `class`, with its indentation.
_BLOCK_START = re.compile(r"([ \t]*)(?:async[ \t]+def|def|class)[ \t]")


def _ends_around(path: str, stamp: int, line: int) -> dict[tuple[int, int], tuple[int, int]]:
    """The expression ends of the innermost `def`/`class` around `line` (1-based), or of the whole file."""
    lines = _lines(path, stamp)
    if lines is None:
        return {}
    block = _block_around(lines, line)
    if block is not None:
        ends = _expression_ends(path, stamp, *block)
        if ends is not None:
            return ends
    return _expression_ends(path, stamp) or {}


def _block_around(lines: list[str], line: int) -> tuple[int, int] | None:
    """(first, last) 1-based lines of the innermost `def`/`class` statement that holds `line`, by indentation."""
    if not 0 < line <= len(lines):
        return None
    text = lines[line - 1]
    depth = len(text) - len(text.lstrip(" \t"))
    first = None
    for number in range(line, 0, -1):
        start = _BLOCK_START.match(lines[number - 1])
        if start and (number == line or len(start.group(1)) < depth):
            first, depth = number, len(start.group(1))
            break
    if first is None:
        return None
    last = len(lines)
    for number in range(first + 1, len(lines) + 1):
        code = lines[number - 1]
        stripped = code.lstrip(" \t")
        if stripped and not stripped.startswith("#") and len(code) - len(stripped) <= depth:
            last = number - 1
            break
    return (first, last) if line <= last else None


@functools.lru_cache(maxsize=16)
def _lines(path: str, _stamp: int) -> list[str] | None:
    try:
        with open(path, "rb") as handle:
            text = handle.read().decode("utf-8")
    except (OSError, ValueError, UnicodeDecodeError):
        return None
    # the newlines the parser counts (str.splitlines also splits at form feeds and other separators)
    return text.replace("\r\n", "\n").replace("\r", "\n").split("\n")


@functools.lru_cache(maxsize=256)
def _expression_ends(path: str, stamp: int, first: int = 0,
                     last: int = 0) -> dict[tuple[int, int], tuple[int, int]] | None:
    """(line, 1-based column) where an expression starts -> (end line, 1-based column after it), outermost wins,
    in lines `first`..`last` (a complete statement; 0: the whole file). None where those lines do not parse.
    Columns in characters (ast counts UTF-8 bytes)."""
    import ast

    lines = _lines(path, stamp)
    if lines is None:
        return None
    shift = 0
    if first:
        block = lines[first - 1:last]
        indented = block[0][:1] in (" ", "\t")
        # an indented block parses under a header of its own: its lines move down by one, its columns stay
        source = ("if 1:\n" if indented else "") + "\n".join(block) + "\n"
        shift = first - 1 - indented
    else:
        source = "\n".join(lines)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            tree = ast.parse(source, filename=path)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None
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
        start_line, end_line = node.lineno + shift, node.end_lineno + shift
        start = (start_line, char_column(start_line, node.col_offset))
        end = (end_line, char_column(end_line, node.end_col_offset))
        if start not in ends or end > ends[start]:
            ends[start] = end
    return ends
