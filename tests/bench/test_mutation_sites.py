"""The mutation benchmark's fixed site rule and its deletion/flagging on a tiny tree (no network)."""

from __future__ import annotations

import ast
from pathlib import Path

from corpus_sites import delete_statement, python_files, sites_of
from mutation_recall import Program, near_findings, shape_of

ORDERED = """import torch

def run(x, y, s):
    x.copy_(y)
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        z = x * 2
"""

KINDS = """import torch

def waits(handles, lock, t, ev, s):
    t.add_(1)
    handles[0].wait()
    lock.wait()
    ev.wait(s)
    dist.all_reduce(t, async_op=True).wait()
    torch.cuda.synchronize()
    t.record_stream(
        s)
    x = s.wait_stream(s)

def no_tensor(s):
    s.synchronize()
    torch.cuda.current_stream().wait_stream(s)

class K:
    torch.cuda.synchronize()
"""


def test_the_rule_selects_statements_in_functions_with_a_tensor_access():
    sites = sites_of(KINDS, "k.py")
    assert [(s.line, s.end_line, s.text, s.function) for s in sites] == [
        (5, 5, "handles[0].wait()", "waits"),
        (7, 7, "ev.wait(s)", "waits"),
        (8, 8, "dist.all_reduce(t, async_op=True).wait()", "waits"),
        (9, 9, "torch.cuda.synchronize()", "waits"),
        (10, 11, "t.record_stream( s)", "waits"),
    ]


def test_deletion_keeps_every_line_and_parses():
    site = sites_of(KINDS, "k.py")[-1]
    mutated = delete_statement(KINDS, site)
    assert len(mutated.splitlines()) == len(KINDS.splitlines())
    assert mutated.splitlines()[9:11] == ["    pass\\", ""]
    ast.parse(mutated)
    assert "t.record_stream" not in mutated


def test_test_folders_are_left_out(tmp_path: Path):
    for rel in ("pkg/a.py", "pkg/tests/b.py", "pkg/benchmark/c.py", "pkg/sub/examples/d.py", "pkg/sub/e.py"):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text("")
    assert python_files(tmp_path, ("pkg",), skip_test_folders=True) == ["pkg/a.py", "pkg/sub/e.py"]
    assert len(python_files(tmp_path, ("pkg",), skip_test_folders=False)) == 5


def test_deleting_the_wait_is_flagged(tmp_path: Path):
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "m.py").write_text(ORDERED)
    program = Program(tmp_path, ("pkg",))
    assert program.base == set()
    [site] = sites_of(ORDERED, "pkg/m.py")
    assert (site.line, site.text) == (5, "s.wait_stream(torch.cuda.current_stream())")
    new = program.new_findings(site)
    assert [(f.rule, f.primary.path, f.primary.line) for f in new] == [("SC101", "pkg/m.py", 4)]
    assert [fn.qualname for fn in program.near(site)] == ["run"]
    assert near_findings(new, program.near(site)) == new
    assert shape_of(new) == "SC101 RAW"
