"""Hazard facts (SC102-SC105) of one file: uses by kind, placements, non_blocking copies, async collectives."""

from __future__ import annotations

import json
import textwrap

from streamcheck.rules.facts import NO_REGION, AsyncCopy, AsyncWork, FileFacts, Placement, extract_facts
from streamcheck.rules.options import StaticOptions

from static_helpers import line_of

SOURCE = """
import torch
import torch.distributed as dist


def offload(dev, loader, side):
    host = torch.empty(dev.shape, pin_memory=True)
    host.copy_(dev, non_blocking=True)
    n = host.numel() + host.shape[0]
    first = host[0].item()
    values = host.tolist()
    arr = host.numpy()
    host[1:] = 0
    host += 1
    loader.readinto(host)
    cpu = dev.to("cpu", non_blocking=True)
    back = cpu.cuda(non_blocking=True)
    with torch.cuda.stream(side):
        total = dev.sum()
    dev.record_stream(side)
    del dev
    return cpu


class Reducer:
    def __init__(self, n):
        self.pinned = torch.zeros(n).pin_memory()
        self.grads = torch.empty(n, device="cuda")

    def reduce(self, tensors, param, group):
        handles = []
        for t in tensors:
            handles.append(dist.all_reduce(t, group=group, async_op=True))
        work = instrument(dist.allgather_fn)(self.grads, param.ds_tensor, param.grad, group=group, async_op=True)
        if group is None:
            self.grads.data = torch.empty(0)
        else:
            param.grad = None
        for h in handles:
            h.wait()
        param.ds_tensor.storage().resize_(0)
        return work
"""


def _facts():
    return extract_facts(textwrap.dedent(SOURCE), "pkg/offload.py", StaticOptions())


def _fn(facts: FileFacts, qualname: str):
    return next(f for f in facts.functions if f.qualname == qualname)


def _line(text: str) -> int:
    return line_of(SOURCE, text)


def test_uses_of_the_host_buffer_by_kind():
    offload = _fn(_facts(), "offload")
    kinds = [(u.how, u.line, u.arg) for u in sorted(offload.uses, key=lambda u: (u.line, u.column))
             if u.path == "host"]
    assert kinds == [
        ("rebind", _line("host = torch.empty"), ""),
        ("write", _line("host.copy_(dev"), "copy_"),
        # `host.numel()` and `host.shape` are metadata: no use
        ("host", _line("first = host[0]"), "item"),
        ("host", _line("values = host.tolist()"), "tolist"),
        ("escape", _line("arr = host.numpy()"), ""),  # a view: the read is where `arr` is used
        ("write", _line("host[1:] = 0"), "[]="),
        ("write", _line("host += 1"), "Add"),
        ("write", _line("loader.readinto(host)"), ""),
    ]


def test_copies_placements_and_frees():
    offload = _fn(_facts(), "offload")
    assert offload.async_copies == [
        AsyncCopy("copy_", "host", "dev", "", _line("host.copy_(dev"), 5, _line("host.copy_(dev")),
        AsyncCopy("to", "cpu", "dev", "'cpu'", _line("cpu = dev.to"), 11, _line("cpu = dev.to")),
        AsyncCopy("cuda", "back", "cpu", "cuda", _line("back = cpu.cuda"), 12, _line("back = cpu.cuda")),
    ]
    assert Placement("host", "pinned", _line("host = torch.empty"), True) in offload.placements
    assert Placement("cpu", "host", _line("cpu = dev.to"), True) in offload.placements
    dev = [(u.how, u.line, u.region) for u in sorted(offload.uses, key=lambda u: (u.line, u.column))
           if u.path == "dev"]
    assert dev == [
        ("stream", _line("host.copy_(dev"), NO_REGION),
        ("stream", _line("cpu = dev.to"), NO_REGION),  # `dev.shape` before is metadata: no use
        ("read", _line("total = dev.sum()"), 0),
        ("record_stream", _line("dev.record_stream(side)"), NO_REGION),
        ("free", _line("del dev"), NO_REGION),
    ]
    [escape] = [u for u in offload.uses if u.path == "cpu" and u.how == "escape"]
    assert escape.line == _line("return cpu")


def test_async_collectives_handles_and_waits():
    facts = _facts()
    reduce = _fn(facts, "Reducer.reduce")
    assert reduce.async_works == [
        AsyncWork("all_reduce", "handles", ("t",), _line("handles.append(dist"), 28, _line("handles.append(dist"),
                  (_line("handles.append(dist"), _line("handles.append(dist")), aliases=("tensors",)),  # loop's list
        AsyncWork("instrument()", "work", ("self.grads", "param.ds_tensor", "param.grad"),
                  _line("work = instrument"), 16, _line("work = instrument")),
    ]
    waits = [(u.path, u.line) for u in reduce.uses if u.how == "wait"]
    assert waits == [("h", _line("h.wait()")), ("handles", _line("h.wait()"))]  # through `for h in handles`
    frees = [(u.path, u.arg, u.line) for u in reduce.uses if u.how in ("free", "rebind") and "." in u.path]
    assert frees == [
        ("self.grads", ".data=", _line("self.grads.data = torch.empty(0)")),
        ("param.grad", "None", _line("param.grad = None")),
        ("param.ds_tensor", "storage().resize_", _line("param.ds_tensor.storage().resize_(0)")),
    ]
    body = _line("self.grads.data = torch.empty(0)")
    assert reduce.branches == [(body, body, body + 2, body + 2)]
    init = _fn(facts, "Reducer.__init__")
    assert [(p.path, p.where) for p in init.placements] == [("self.pinned", "pinned"), ("self.grads", "device")]


def test_uses_of_unrelated_names_are_dropped_and_lines_kept():
    facts = _facts()
    offload = _fn(facts, "offload")
    assert {u.path for u in offload.uses} == {"host", "dev", "cpu", "total", "back"}
    assert facts.snippet(_line("host += 1")) == "host += 1"


def test_hazard_facts_survive_the_json_round_trip():
    facts = _facts()
    again = FileFacts.from_dict(json.loads(json.dumps(facts.to_dict())))
    for before, after in zip(facts.functions, again.functions):
        assert (before.uses, before.placements, before.async_copies, before.async_works, before.branches) == (
            after.uses, after.placements, after.async_copies, after.async_works, after.branches)
    assert any(f.uses for f in again.functions)


def test_files_without_stream_words_get_no_hazard_facts():
    facts = extract_facts("def f(x):\n    y = x.cpu()\n    del y\n", "plain.py", StaticOptions())
    assert not facts.detailed
    assert all(not (f.uses or f.placements) for f in facts.functions)


STORAGE_ALIASES = """
import torch

def outer(refs, storages, side):
    events = []

    def stash():
        ev = torch.cuda.Event()
        ev.record(side)
        events.append(ev)

    def restore(n):
        events[-1].synchronize()
        for ref, stor in zip(refs, storages):
            stor.resize_(n)
            view = torch.tensor([], device="cuda")
            view.set_(stor, 0, ref.shape)
            ref.data = view
            ref.untyped_storage().resize_(0)
            tmp = torch.tensor([], device="cuda")
            tmp.set_(ref.untyped_storage(), 0, ref.shape)
            with torch.cuda.stream(side):
                tmp.zero_()
"""


def test_set_and_data_make_a_local_a_view_and_resize_allocates():
    facts = extract_facts(textwrap.dedent(STORAGE_ALIASES), "m.py", StaticOptions())
    restore = next(f for f in facts.functions if f.qualname == "outer.restore")
    at = lambda text: line_of(STORAGE_ALIASES, text)  # noqa: E731
    assert [d for d in restore.derived if d[0] in ("view", "ref", "tmp")] == [
        ("ref", "refs", at("for ref, stor")), ("view", "stor", at("view.set_(")), ("ref", "view", at("ref.data = view")),
        ("tmp", "ref", at("tmp.set_("))]
    assert [(u.path, u.line) for u in restore.uses if u.how == "alloc"] == [("stor", at("stor.resize_(n)"))]
    assert Placement("stor", "", at("stor.resize_(n)"), True) in restore.placements
    # resize_(0) frees and allocates nothing
    assert [(u.path, u.arg) for u in restore.uses if u.how == "free" and u.line == at("resize_(0)")] == [
        ("ref", "untyped_storage().resize_")]


def test_a_closure_names_the_event_list_of_its_enclosing_function():
    facts = extract_facts(textwrap.dedent(STORAGE_ALIASES), "m.py", StaticOptions())
    names = {f.qualname: f.outer_names for f in facts.functions}
    assert names["outer.stash"] == {"side": "outer", "events": "outer"}
    assert names["outer.restore"] == {"events": "outer"}
    assert names["outer"] == {}
