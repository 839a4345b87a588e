"""The facts pass's shortcuts (issue 18) answer what the plain versions answer: the prefilter's name test by
shortest names, the line-break test, index texts without ast.unparse, fact objects built through __dict__."""

from __future__ import annotations

import ast
import pickle
import random
import re
from dataclasses import FrozenInstanceError, replace

import pytest

from streamcheck.rules.extract import _OTHER_LINE_BREAKS, _other_line_breaks
from streamcheck.rules.extract_paths import index_of
from streamcheck.rules.facts import Call, Use
from streamcheck.rules.options import StaticOptions, matches_name
from streamcheck.rules.prefilter import _cores, _names, _names_in


def _names_in_plainly(code: str, names: frozenset[str]) -> bool:
    return any(re.search(rf"(?<!\w){re.escape(name)}(?!\w)", code) for name in names)


def test_names_by_shortest_name_find_what_a_test_of_every_name_finds():
    names = _names(StaticOptions())
    grouped = [name for _, holders in _cores(names) for name in holders]
    assert sorted(grouped) == sorted(names)  # every name under exactly one shortest name it holds
    assert all(core in name for core, holders in _cores(names) for name in holders)
    words = sorted(names) + ["sender", "reduced", "all_gathered", "xsend", "isend_", "gathering", "Events", "_"]
    pieces = words + [" ", ".", "(", "\n", "x", "é"]
    rng = random.Random(18)
    for _ in range(3000):
        code = "".join(rng.choice(pieces) for _ in range(rng.randint(0, 8)))
        assert _names_in(code, names) == _names_in_plainly(code, names), code


@pytest.mark.parametrize("text", ["a = 1\n", "a\fb\n", "x\vy", "p\x1cq", "\x1d", "r\x1e", "é\x85", "ü\u2028",
                                  "\u2029", "ü = 1\n", "a\rb\n", ""])
def test_the_line_break_test_agrees_with_the_regex(text):
    assert _other_line_breaks(text) == bool(_OTHER_LINE_BREAKS.search(text))


@pytest.mark.parametrize("source", ["x[5]", "x[0x1F]", "x[10**50]", "x[-1]", "x[i]", "x[True]", "x['k']",
                                    "self.b[1 - cur]", "x[a:b]", "x[f(i)]", "x[" + "n" * 41 + "]",
                                    "x[" + "9" * 41 + "]", "x"])
def test_index_texts_are_those_ast_unparse_gives(source):
    expr = ast.parse(source, mode="eval").body
    found = index_of(expr)
    expected = {"x[5]": "5", "x[0x1F]": "31", "x[10**50]": "10 ** 50", "x[-1]": "-1", "x[i]": "i",
                "x[True]": "True", "x['k']": "'k'", "self.b[1 - cur]": "1 - cur", "x[a:b]": "a:b", "x[f(i)]": ""}
    assert found == expected.get(source, "")


def test_facts_built_through_their_dict_stay_frozen_equal_and_picklable():
    use = Use("buf", "read", 3, 5, 0, (0, 0), "", 0, 0, "")
    assert use == Use("buf", "read", 3, 5, 0, (0, 0), "", 0, 0, "") and hash(use) == hash(pickle.loads(
        pickle.dumps(use)))
    with pytest.raises(FrozenInstanceError):
        use.path = "other"
    call = Call(1, 2, "f", 0, (0, 0))
    assert replace(call, args=("x",)).args == ("x",) and call.func_args == () and call.true_args == ()


def test_a_dotted_name_matches_as_a_whole_or_after_a_dot():
    names = frozenset({"torch.cuda.stream", "stream_context", "x.y"})
    assert matches_name("torch.cuda.stream", names) and matches_name("a.torch.cuda.stream", names)
    assert matches_name("get_accelerator().stream_context", names)
    assert not matches_name("mytorch.cuda.stream", names) and not matches_name("x.yz", names)
    assert matches_name("q.x.y", names) and not matches_name("qx.y", names)
