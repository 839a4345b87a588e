"""Where a reported expression ends (streamcheck/report/regions.py) is read from the `def`/`class` around it, and
that block gives the same answer as a parse of the whole file (checked on every expression of this package by
tests/bench/test_region_ends.py)."""

from __future__ import annotations

import ast
import dataclasses

import pytest

from streamcheck.findings import Location
from streamcheck.report import regions

@pytest.fixture(autouse=True)
def _fresh():
    regions._expression_ends.cache_clear()
    regions._lines.cache_clear()
    yield
    regions._expression_ends.cache_clear()
    regions._lines.cache_clear()


def _end_and_parses(tmp_path, monkeypatch, source: str, line: int, column: int) -> tuple[Location, list[int]]:
    """with_end of (line, column) in a file of `source`, and the length of every source it handed to ast.parse."""
    path = tmp_path / "m.py"
    path.write_text(source)
    sizes: list[int] = []
    parse = ast.parse

    def counting(text, *args, **kwargs):
        sizes.append(len(text))
        return parse(text, *args, **kwargs)

    monkeypatch.setattr(ast, "parse", counting)
    end = regions.with_end(Location(str(path), line, column))
    return dataclasses.replace(end, path="m.py"), sizes


METHOD = '''import torch


class Holder:
    """A docstring."""

    def fill(self, x, y):
        x.copy_(
            y)
        return x
''' + "\n".join(f"\n\ndef filler_{n}(a):\n    return a + {n}" for n in range(200)) + "\n"


def test_a_method_is_parsed_alone(tmp_path, monkeypatch):
    end, sizes = _end_and_parses(tmp_path, monkeypatch, METHOD, 8, 9)
    assert end == Location("m.py", 8, 9, end_line=9, end_column=15)
    assert len(sizes) == 1 and sizes[0] < 100 < len(METHOD)  # `if 1:` and the four lines of fill


def test_a_string_that_leaves_the_block_makes_the_whole_file_parsed(tmp_path, monkeypatch):
    # the docstring's text at column 0 ends the indented block early: it does not parse, the file is read whole
    source = 'class Holder:\n    def fill(self, x, y):\n        """Copy.\n\nMore.\n"""\n        x.copy_(y)\n'
    end, sizes = _end_and_parses(tmp_path, monkeypatch, source, 7, 9)
    assert end == Location("m.py", 7, 9, end_line=7, end_column=19)
    assert sizes[-1] == len(source)


def test_a_location_after_the_block_is_read_from_the_whole_file(tmp_path, monkeypatch):
    source = "def f():\n    pass\nx = (\n    y.copy_(z))\n"
    end, sizes = _end_and_parses(tmp_path, monkeypatch, source, 4, 5)
    assert end == Location("m.py", 4, 5, end_line=4, end_column=15)
    assert sizes == [len(source)]


def test_line_numbers_count_only_the_newlines_the_parser_counts(tmp_path):
    # a form feed is a line separator for str.splitlines, not for the parser
    path = tmp_path / "m.py"
    path.write_bytes(b"import torch\n\x0c\ndef f(x, y):\n    z = 1 \x0c\n    x.copy_(y)\n")
    assert regions.with_end(Location(str(path), 5, 5)) == Location(str(path), 5, 5, end_line=5, end_column=15)
