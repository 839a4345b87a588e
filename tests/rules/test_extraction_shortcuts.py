"""The facts pass's shortcuts (issue 18) answer what the plain versions answer: the prefilter's name test by
shortest names, the line-break test, index texts without ast.unparse, fact objects built through __dict__, the plain visitor's left-out nodes."""

from __future__ import annotations

import ast
import pickle
import random
import re
from dataclasses import FrozenInstanceError, replace
from pathlib import Path

import pytest

from streamcheck.rules.extract import _OTHER_LINE_BREAKS, _FactsVisitor, _other_line_breaks, _PlainFactsVisitor
from streamcheck.rules.extract_paths import index_of
from streamcheck.rules.facts import Call, FileFacts, Use
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


# Plain-file code for the plain visitor's shortcuts: bound and read names, attributes, keywords and annotations
# that are names, constants or attribute chains (left out) or hold calls (visited), forwarding lambdas, attributes
# of self, functions held by attributes, conditional blocks and expressions.
PLAIN_SNIPPETS = [
    "import os\nfrom . import sub as s\nx = os.path.join(a, b=c, d=1, e=True)\n",
    "class C(Base, metaclass=M):\n    def f(self, a: int, b: 'zero.Stage3', *r, k: t.X = g(), **kw) -> h():\n"
    "        self.a = self.b = helper\n        self.c: int = make(k=lambda y=q(): y)\n"
    "        for i, (j, k) in enumerate(z(w)):\n            if i: return f(j)\n        else:\n            raise E(k)\n",
    "def helper(): pass\ndef g(opt: Stage3):\n    opt.step = lambda closure=None: step(opt, closure, k=opt)\n"
    "    x.y = helper\n    with ctx(a) as (m, n), other:\n        y = [v(u) for u in w if p(u)] or {k: f(k) for k in d}\n",
    "async def a(x):\n    async with s:\n        await x.f(*xs, **{k: v})\n    async for i in g():\n        yield i\n"
    "    try:\n        q(x[f(1)], k=x[0].y, j='s'.join(z))\n    except (E, F) as e:\n        r(e)\n    finally:\n"
    "        t()\n    while c(): del d[e()]\n    assert x(), m(f'{y(1)!r:>{w(2)}}')\n",
    "match c():\n    case [a, *b] if g(a): f(b)\n    case {'k': v}: h(v)\n    case P(x=1): pass\n"
    "@dec(arg)\n@d2.e\nclass K:\n    @property\n    def s(self):\n        return torch.cuda.current_stream()\n",
]


@pytest.mark.parametrize("source", PLAIN_SNIPPETS + sorted(
    str(path) for path in (Path(__file__).parents[2] / "rules").glob("extract*.py")),
    ids=lambda source: Path(source).name if source.endswith(".py") else None)
def test_the_plain_visitor_gives_the_facts_the_full_visitor_gives_a_plain_file(source):
    """_PlainFactsVisitor leaves out nodes and tests that hold no fact of a plain file: the full visitor, told
    the file is plain (detailed=False), must find exactly the same facts."""
    if source.endswith(".py"):
        path, source = source, Path(source).read_text(encoding="utf-8")
    else:
        path = "pkg/mod.py"
    found = []
    for visitor_class in (_PlainFactsVisitor, _FactsVisitor):
        facts = FileFacts(path=path, module="pkg.mod", is_package=False, detailed=False)
        visitor = visitor_class(facts, source.splitlines(), StaticOptions(), False)
        visitor.lines_as_parsed = True
        visitor.run(ast.parse(source))
        visitor.release()
        found.append(facts.to_dict())
    assert found[0] == found[1]
    assert any(fn.get("calls") for fn in found[0]["functions"])  # (the code has facts to compare; to_dict leaves out empty fields)
