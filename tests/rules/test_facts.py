"""Facts of one file: what is extracted, where, and that it survives a JSON round trip."""

from __future__ import annotations

import json
import textwrap

import pytest

from streamcheck.rules.facts import NO_REGION, FileFacts, ParseFailure, extract_facts, module_name
from streamcheck.rules.options import StaticOptions

from static_helpers import line_of

SOURCE = """
import torch
import torch.distributed as dist
from deepspeed.accelerator import get_accelerator
from .utils import helper as h
from .. import comm
from .sibling import *


class Store(Base):
    def release(self, param, src):
        param.ds_secondary_tensor.narrow(0, 0, 4).copy_(src.view(-1))
        param.ds_tensor.data.add_(1)
        torch.add(src, 1, out=self.buf)
        n = param.ds_secondary_tensor.numel()
        shape = param.ds_secondary_tensor.shape
        if param.ds_secondary_tensor is None:
            pass
        y = src * self.scale_tensor
        torch.cuda.current_stream().synchronize()

    def fetch(self, params):
        self.side.wait_stream(torch.cuda.current_stream())
        with get_accelerator().stream(self.side):
            out = torch.cat([p.ds_secondary_tensor.to("cuda") for p in params])
            dist.all_gather_into_tensor(self.gathered, out, async_op=True)
            with torch.cuda.stream(torch.cuda.current_stream()):
                pass
        ev = torch.cuda.Event()
        ev.record()
        self.side.wait_event(ev)
        loss = out.sum().item()
        if loss:
            torch.cuda.synchronize()

    def convert(self, param):
        def all_gather_coalesced(params):
            return params
        param.all_gather_coalesced = all_gather_coalesced
        param.partition = h
"""


@pytest.fixture(scope="module")
def facts():
    return extract_facts(textwrap.dedent(SOURCE), "pkg/sub/store.py", StaticOptions())


def _fn(facts, qualname):
    return next(f for f in facts.functions if f.qualname == qualname)


def test_module_name_from_path():
    assert module_name("pkg/sub/store.py") == ("pkg.sub.store", False)
    assert module_name("./pkg/__init__.py") == ("pkg", True)


def test_imports_keep_relative_targets_for_the_program(facts):
    assert facts.imports == {
        "torch": "torch",
        "dist": "torch.distributed",
        "get_accelerator": "deepspeed.accelerator.get_accelerator",
        "h": ".utils.helper",
        "comm": "..comm",
    }
    assert facts.star_imports == [".sibling"]
    assert facts.detailed


def test_functions_classes_and_nesting(facts):
    names = [(f.qualname, f.cls) for f in facts.functions]
    assert names == [
        ("<module>", None),
        ("Store.release", "Store"),
        ("Store.fetch", "Store"),
        ("Store.convert", "Store"),
        ("Store.convert.all_gather_coalesced", None),
    ]
    assert [(c.qualname, c.bases) for c in facts.classes] == [("Store", ("Base",))]
    release = _fn(facts, "Store.release")
    assert (release.line, release.end_line) == (
        line_of(SOURCE, "def release"), line_of(SOURCE, "current_stream().synchronize()"))


def test_writes_strip_views_and_data_and_see_out(facts):
    release = _fn(facts, "Store.release")
    writes = [(a.path, a.op, a.line) for a in release.accesses if a.kind == "write"]
    assert writes == [
        ("param.ds_secondary_tensor", "copy_", line_of(SOURCE, ".narrow(0, 0, 4).copy_")),
        ("param.ds_tensor", "add_", line_of(SOURCE, ".data.add_(1)")),
        ("self.buf", "out=", line_of(SOURCE, "out=self.buf")),
    ]


def test_reads_skip_metadata_and_none_checks(facts):
    release = _fn(facts, "Store.release")
    reads = sorted({(a.path, a.line) for a in release.accesses if a.kind == "read"})
    # `src` is a parameter: kept, as callers read their argument where the function reads it (summaries.py);
    # `.numel()`, `.shape`, `is None` and the modules `torch` / `torch.cuda` are no reads.
    assert reads == [
        ("self.scale_tensor", line_of(SOURCE, "y = src *")),
        ("src", line_of(SOURCE, ".copy_(src.view(-1))")),
        ("src", line_of(SOURCE, "torch.add(src, 1")),
        ("src", line_of(SOURCE, "y = src *")),
    ]


def test_reads_in_regions_and_collectives(facts):
    fetch = _fn(facts, "Store.fetch")
    assert [(r.stream, r.line, r.end_line) for r in fetch.regions] == [
        ("self.side", line_of(SOURCE, "get_accelerator().stream"), line_of(SOURCE, "with torch.cuda.stream(torch.cuda.current_stream())") + 1)]
    reads = [(a.path, a.op, a.region, a.collective) for a in fetch.accesses if a.kind == "read"]
    assert ("p.ds_secondary_tensor", "to", 0, False) in reads
    assert ("self.gathered", "all_gather_into_tensor", 0, True) not in reads
    # `out = torch.cat(...)` is a new tensor written by `cat` on the region's stream (a hidden producer), and the
    # all-gather's output is written by the collective (collectives.py), not read ...
    writes = [(a.path, a.op, a.region, a.collective) for a in fetch.accesses if a.kind == "write"]
    assert writes == [("out", "cat", 0, False), ("self.gathered", "all_gather_into_tensor", 0, True)]
    # ... so its reads are kept: by the collective in the region and by `.sum()` after it.
    assert [(path, op, region) for path, op, region, _ in reads if path == "out"] == [
        ("out", "all_gather_into_tensor", 0), ("out", "sum", -1)]


def test_syncs_and_their_blocks(facts):
    fetch = _fn(facts, "Store.fetch")
    syncs = [(s.kind, s.receiver, s.line, s.region, s.block) for s in fetch.syncs]
    if_line = line_of(SOURCE, "torch.cuda.synchronize()")
    assert syncs == [
        ("wait_stream", "self.side", line_of(SOURCE, "self.side.wait_stream"), NO_REGION, (0, 0)),
        ("record", "ev", line_of(SOURCE, "ev.record()"), NO_REGION, (0, 0)),
        ("wait_event", "self.side", line_of(SOURCE, "wait_event(ev)"), NO_REGION, (0, 0)),
        ("host_sync", "out.sum()", line_of(SOURCE, ".item()"), NO_REGION, (0, 0)),
        ("synchronize", "torch.cuda", if_line, NO_REGION, (if_line, if_line)),
    ]
    release = _fn(facts, "Store.release")
    assert [(s.kind, s.receiver) for s in release.syncs] == [("synchronize", "torch.cuda.current_stream()")]


def test_attribute_held_functions(facts):
    held = [(a.attr, a.function) for a in facts.attr_functions]
    assert held == [
        ("all_gather_coalesced", "Store.convert.all_gather_coalesced"),
        ("partition", ".utils.helper"),
    ]


def test_snippets_are_kept_for_fact_lines(facts):
    line = line_of(SOURCE, ".narrow(0, 0, 4).copy_")
    assert facts.snippet(line) == "param.ds_secondary_tensor.narrow(0, 0, 4).copy_(src.view(-1))"


def test_json_round_trip(facts):
    again = FileFacts.from_dict(json.loads(json.dumps(facts.to_dict())))
    assert again == facts


def test_cache_rows_are_every_field_of_every_fact_in_field_order():
    """FunctionFacts.to_dict (its row getters looked up once) writes each fact as its dataclass fields' values, in
    field order, and every other field as it is, leaving out the empty ones but the identity: over the detailed
    facts of this package's examples and rules; from_dict gives the same function back."""
    from dataclasses import fields
    from pathlib import Path

    from streamcheck.rules.extract import extract
    from streamcheck.rules.facts import FunctionFacts

    root = Path(__file__).resolve().parents[2]
    sources = sorted((root / "examples").rglob("*.py")) + sorted((root / "rules").glob("*.py"))
    facts_kinds = FunctionFacts._parts
    rows = 0
    for path in sources:
        facts = extract(path.read_text(encoding="utf-8"), path.name, StaticOptions(), detailed=True)
        for fn in facts.functions:
            data = fn.to_dict()
            assert list(data) == [f.name for f in fields(FunctionFacts)
                                  if getattr(fn, f.name) or f.name in ("qualname", "name", "cls", "line", "end_line")]
            assert FunctionFacts.from_dict(json.loads(json.dumps(data))) == fn
            for name, value in data.items():
                if name in facts_kinds:
                    expected = [[getattr(item, f.name) for f in fields(facts_kinds[name])] for item in getattr(fn, name)]
                    assert value == expected, (path, fn.qualname, name)
                    rows += len(value)
                else:
                    assert value is getattr(fn, name)
    assert rows > 5_000


def test_parse_failure_has_a_position():
    with pytest.raises(ParseFailure) as info:
        extract_facts("def f(:\n    pass\n", "bad.py", StaticOptions())
    assert (info.value.line, info.value.column) == (1, 7)


def test_files_without_stream_words_only_feed_the_call_graph():
    facts = extract_facts("def f(x, y):\n    x.copy_(y)\n    g(x)\n", "plain.py", StaticOptions())
    assert not facts.detailed
    assert [c.callee for c in facts.functions[1].calls] == ["x.copy_", "g"]
    assert facts.functions[1].accesses == []


def test_configured_stream_context_and_sync():
    options = StaticOptions(stream_contexts=("on_side_stream",), sync_callables=("mylib.block_until_done",))
    source = "def f(s, x):\n    with on_side_stream(s):\n        x.add_(1)\n    mylib.block_until_done()\n"
    facts = extract_facts(source, "cfg.py", options)
    fn = facts.functions[1]
    assert [(r.stream, r.line) for r in fn.regions] == [("s", 2)]
    assert [(a.kind, a.path, a.region) for a in fn.accesses] == [("write", "x", 0)]
    assert [(s.kind, s.line) for s in fn.syncs] == [("synchronize", 4)]
    assert extract_facts(source, "cfg.py", StaticOptions()).functions[1].regions == []


def test_options_cache_key_tracks_what_changes_facts():
    assert StaticOptions().cache_key() == StaticOptions().cache_key()
    assert StaticOptions(collectives=("b", "a")).cache_key() == StaticOptions(collectives=("a", "b")).cache_key()
    assert StaticOptions(collectives=("a",)).cache_key() != StaticOptions().cache_key()
    assert hash(StaticOptions(sync_callables=("x",))) == hash(StaticOptions(sync_callables=["x"]))


def test_a_stream_object_used_as_context_manager():
    source = "def f(self, x):\n    with self.copy_stream:\n        x.add_(1)\n    with self.stream_lock:\n        pass\n"
    fn = extract_facts(source, "s.py", StaticOptions()).functions[1]
    assert [(r.stream, r.line, r.end_line) for r in fn.regions] == [("self.copy_stream", 2, 3)]


def test_an_element_store_of_a_new_tensor_writes_into_the_tensor_stored_into():
    # `y = x.to(...)` binds a new tensor (fresh: no memory anyone used before); `kv[blocks] = x.to(...)` copies
    # that new tensor into kv's memory, which other streams may still use (vLLM's KV load, issue 14)
    source = textwrap.dedent("""
        def load(kv, cpu, blocks, side):
            with torch.cuda.stream(side):
                y = cpu.to("cuda", non_blocking=True)
                kv[blocks] = cpu.to("cuda", non_blocking=True)
    """)
    fn = extract_facts(source, "kv.py", StaticOptions()).functions[1]
    assert [(a.path, a.line, a.op, a.index, a.fresh) for a in fn.accesses if a.kind == "write"] == [
        ("y", line_of(source, "y = cpu.to"), "to", "", True),
        ("kv", line_of(source, "kv[blocks] ="), "to", "blocks", False),
    ]


def test_stream_bindings_say_which_stream_each_arm_binds():
    source = textwrap.dedent("""
    import torch

    class Reducer:
        def reduce(self, offload, overlap):
            if offload:
                stream = self.side if overlap else torch.cuda.current_stream()
            elif overlap:
                stream = self.side
            else:
                stream = torch.cuda.current_stream()
            with torch.cuda.stream(stream):
                pass
    """)
    facts = extract_facts(source, "r.py", StaticOptions())
    [reduce] = [f for f in facts.functions if f.name == "reduce"]
    first, side, current = (n for n, text in enumerate(source.splitlines(), 1) if text.strip().startswith("stream ="))
    assert reduce.stream_bindings == [("stream", first, "self.side"), ("stream", first, "torch.cuda.current_stream()"),
                                      ("stream", side, "self.side"), ("stream", current, "torch.cuda.current_stream()")]


def test_guard_tests_are_facts_of_detailed_files_only():
    # guards.py reads them only in a function with stream regions, which plain files never record
    body = "def f(x, flag):\n    if flag:\n        x.add_(1)\n    else:\n        g(x)\n"
    plain = extract_facts(body, "plain.py", StaticOptions())
    assert not plain.detailed and plain.functions[1].guard_tests == []
    detailed = extract_facts("import torch\n" + body.replace("g(x)", "torch.cuda.synchronize()"), "d.py",
                             StaticOptions())
    assert detailed.detailed and detailed.functions[1].guard_tests == [(4, 4, ("flag",)), (6, 6, ("flag",))]


def test_a_value_that_says_stream_only_through_joined_literals_is_still_unparsed():
    # no line says "stream", but the joined literal does: the quote test of _may_say_stream must let it through
    source = 'import torch\n\ndef f(s):\n    kind = "str" "eam"\n    with torch.cuda.stream(s):\n        pass\n'
    fn = extract_facts(source, "j.py", StaticOptions()).functions[1]
    assert fn.stream_aliases == {"kind": ["'stream'"]}
    assert [(name, line) for name, line, _text in fn.stream_bindings] == [("kind", 4)]
