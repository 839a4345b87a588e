"""Issue 19, rows of the static engine (rules/): D1 deep call chains, D6 a long flat expression.

Each file holds a racy `g` (written on the current stream, read under `side`) next to the deep input: the scan must
keep g's SC101 finding and report no SC001 (an exit 2, a RecursionError, or a "nesting too deep" SC001 all lose it).
"""

from __future__ import annotations

import pytest

from .helpers import positions, scan_json

RACY_G = '''import torch

side = torch.cuda.Stream()


def g(x, y):
    x.copy_(y)
    with torch.cuda.stream(side):
        {call}z = x * 2
    return z


'''
WRITE_LINE = 7  # x.copy_(y)


def chain(depth: int) -> str:
    """def f0(t): f1(t) ... down to f<depth>, which orders nothing."""
    return "".join(f"def f{i}(t):\n    f{i + 1}(t)\n\n\n" for i in range(depth)) + f"def f{depth}(t):\n    return t\n"


@pytest.mark.parametrize("depth, called_in_region", [(400, False), (400, True), (1000, True)])
def test_d1_deep_call_chain_keeps_the_finding(tmp_path, capsys, monkeypatch, depth, called_in_region):
    call = "f0(side)\n        " if called_in_region else ""
    (tmp_path / "deep_chain.py").write_text(RACY_G.format(call=call) + chain(depth))
    monkeypatch.chdir(tmp_path)
    code, doc, err = scan_json(capsys, "--no-cache", ".")
    assert (code, err) == (1, "")
    assert positions(doc) == [("SC101", "deep_chain.py", WRITE_LINE, 5)]


def test_d6_four_hundred_term_expression_is_parsed(tmp_path, capsys, monkeypatch):
    (tmp_path / "long_sum.py").write_text(RACY_G.format(call="") + "w = " + " + ".join(["a"] * 400) + "\n")
    monkeypatch.chdir(tmp_path)
    code, doc, err = scan_json(capsys, "--no-cache", ".")
    assert (code, err) == (1, "")
    assert positions(doc) == [("SC101", "long_sum.py", WRITE_LINE, 5)]
