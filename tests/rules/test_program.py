"""The whole-program view: call resolution across files and classes, and the streams functions run on."""

from __future__ import annotations

from streamcheck.rules.program import CURRENT_STREAM

from static_helpers import line_of, program_of

PKG = {
    "pkg/__init__.py": "from .comm import *\n",
    "pkg/comm.py": """
        def all_gather_into(out, inp):
            return out

        class Backend:
            def reduce(self, t):
                return t
    """,
    "pkg/zero/__init__.py": "",
    "pkg/zero/store.py": """
        import torch
        from .. import comm as dist
        from ..comm import Backend
        from pkg.comm import all_gather_into as gather_fn

        class Base:
            def hook(self):
                self.prepare()

            def prepare(self):
                pass

        class Store(Base):
            def prepare(self):
                dist.all_gather_into(None, None)
                Backend().reduce(None)
                super().prepare()

            def convert(self, param):
                def all_gather_coalesced(params):
                    return gather_fn(params, params)
                param.all_gather_coalesced = all_gather_coalesced

            def release(self, param):
                param.ds_secondary_tensor.copy_(param)
    """,
    "pkg/zero/coordinator.py": """
        import torch
        import pkg

        class Coordinator:
            def fetch(self, params):
                with torch.cuda.stream(self.side):
                    handle = params[0].all_gather_coalesced(params)
                    self.log()
                self.release_all(params)

            def log(self):
                pkg.all_gather_into(None, None)

            def release_all(self, params):
                for p in params:
                    p.release_param()
    """,
}

STORE = "pkg/zero/store.py"
COORD = "pkg/zero/coordinator.py"


def _callees(program, caller, callee_text):
    return sorted(
        (e.callee, e.exact) for call, edges in program.calls_of(caller) if call.callee == callee_text for e in edges)


def test_relative_module_alias_and_from_import():
    program = program_of(PKG)
    assert _callees(program, f"{STORE}::Store.prepare", "dist.all_gather_into") == [
        ("pkg/comm.py::all_gather_into", True)]
    assert _callees(program, f"{STORE}::Store.convert.all_gather_coalesced", "gather_fn") == [
        ("pkg/comm.py::all_gather_into", True)]


def test_star_import_through_a_package():
    program = program_of(PKG)
    assert _callees(program, f"{COORD}::Coordinator.log", "pkg.all_gather_into") == [
        ("pkg/comm.py::all_gather_into", True)]


def test_self_calls_reach_overrides_and_super_reaches_bases():
    program = program_of(PKG)
    assert _callees(program, f"{STORE}::Base.hook", "self.prepare") == [
        (f"{STORE}::Base.prepare", True), (f"{STORE}::Store.prepare", True)]
    assert _callees(program, f"{STORE}::Store.prepare", "super().prepare") == [(f"{STORE}::Base.prepare", True)]


def test_attribute_held_closure_is_called_through_any_object():
    program = program_of(PKG)
    assert _callees(program, f"{COORD}::Coordinator.fetch", "params[].all_gather_coalesced") == [
        (f"{STORE}::Store.convert.all_gather_coalesced", False)]


def test_call_graph_edges_from_caller_to_callees():
    program = program_of(PKG)
    assert f"{STORE}::Store.convert.all_gather_coalesced" in program.callees[f"{COORD}::Coordinator.fetch"]
    assert "pkg/comm.py::all_gather_into" in program.callees[f"{STORE}::Store.convert.all_gather_coalesced"]


def test_stream_contexts_propagate_through_calls():
    program = program_of(PKG)
    side = f"self.side@{COORD}::Coordinator"
    assert program.streams_of(f"{STORE}::Store.convert.all_gather_coalesced") == {side}
    assert program.streams_of(f"{COORD}::Coordinator.log") == {side}
    # reached from the region (through the closure) and, via Store.prepare, on the current stream
    assert program.streams_of("pkg/comm.py::all_gather_into") == {side, CURRENT_STREAM}
    assert program.streams_of(f"{COORD}::Coordinator.fetch") == {CURRENT_STREAM}
    assert program.streams_of(f"{COORD}::Coordinator.release_all") == {CURRENT_STREAM}


def test_region_walk_gives_the_call_chain():
    program = program_of(PKG)
    chains = {fid: [(e.caller, e.call.line) for e in chain] for fid, chain in
              program.walk_region(f"{COORD}::Coordinator.fetch", 0)}
    assert chains["pkg/comm.py::all_gather_into"] == [
        (f"{COORD}::Coordinator.fetch", line_of(PKG[COORD], "params[0].all_gather_coalesced")),
        (f"{STORE}::Store.convert.all_gather_coalesced", line_of(PKG[STORE], "return gather_fn"))]


def test_by_name_resolution_stays_inside_one_program():
    sources = {
        "a.py": """
            def make(p):
                def gather(ps):
                    return ps
                p.gather = gather
        """,
        "b.py": """
            def make(p):
                def gather(ps):
                    return ps
                p.gather = gather

            def use(p):
                return p.gather([p])
        """,
    }
    program = program_of(sources)
    assert _callees(program, "b.py::use", "p.gather") == [("b.py::make.gather", False)]


def test_common_method_names_are_not_resolved_by_name():
    sources = {"m.py": """
        class Q:
            def append(self, x):
                pass

        def f(items, x):
            items.append(x)
    """}
    program = program_of(sources)
    assert _callees(program, "m.py::f", "items.append") == []
