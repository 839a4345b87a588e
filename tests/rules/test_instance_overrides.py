"""Instance overrides: a forwarding lambda stored over a method of an object of a known class (DeepSpeed's ZenFlow
replaces ZeRO-3's `partition_grads` with `optimizer_z3.partition_grads = lambda p, g: partition_grads(optimizer_z3,
p, g)`): calls of `self.partition_grads(...)` in the class family may run the forwarded function, with the
lambda's arguments, and the lambda's call is not one made where the lambda is stored (callgraph.py
`_overriding_calls`, extract_bindings.py `_forwarding_lambda`)."""

from __future__ import annotations

from static_helpers import findings_of, line_of, program_of

OPTIMIZER = """
import torch


class Optimizer:
    def reduce(self, params, grads):
        with torch.cuda.stream(self.reduce_stream):
            self.partition_grads(params, grads)

    def partition_grads(self, params, grads):
        for param, grad in zip(params, grads):
            self.flat.copy_(param.grad.view(-1))
            param.grad.record_stream(torch.cuda.current_stream())
            param.grad = None
"""

OVERRIDE = """
import torch
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pkg.opt import Optimizer


def install(opt: "Optimizer", overlap):
    if overlap:
        opt.partition_grads = lambda params, grads: partition_grads(opt, params, grads)


def partition_grads(opt, params, grads):
    for param, grad in zip(params, grads):
        opt.flat.copy_(param.grad.view(-1), non_blocking=True)
        param.grad.record_stream(torch.cuda.current_stream())
        param.grad = None
"""

RECORD = "        param.grad.record_stream(torch.cuda.current_stream())\n"


def _sources(override: str) -> dict[str, str]:
    return {"pkg/__init__.py": "", "pkg/opt.py": OPTIMIZER, "pkg/override.py": override}


def test_a_forwarding_lambda_over_a_method_is_a_call_of_its_function_with_the_lambdas_arguments():
    program = program_of(_sources(OVERRIDE))
    calls = [(call.callee, call.args, [(e.callee, e.exact) for e in edges])
             for call, edges in program.calls_of("pkg/opt.py::Optimizer.reduce") if call.callee != "torch.cuda.stream"]
    assert calls == [
        ("self.partition_grads", ("params", "grads"), [("pkg/opt.py::Optimizer.partition_grads", True)]),
        ("self.partition_grads", ("self", "params", "grads"), [("pkg/override.py::partition_grads", False)]),
    ]
    # the lambda's call runs where the attribute is called, not in `install`
    assert [call.callee for call, _ in program.calls_of("pkg/override.py::install")] == []
    assert program.only_side_stream("pkg/override.py::partition_grads") == "self.reduce_stream@pkg/opt.py::Optimizer"


def test_the_override_recording_what_it_frees_gives_nothing():
    assert [f for f in findings_of(_sources(OVERRIDE)) if f.rule == "SC104"] == []


def test_the_override_freeing_a_side_stream_grad_without_the_record():
    source = OVERRIDE.replace(RECORD, "")
    [finding] = [f for f in findings_of(_sources(source)) if f.rule == "SC104"]
    assert (finding.rule, finding.primary.path, finding.primary.line, finding.kind) == (
        "SC104", "pkg/override.py", line_of(source, "param.grad = None"), "FREE")
    assert finding.extra == {"path": "param.grad", "stream": "self.reduce_stream"}
    assert [(r.path, r.line, r.role) for r in finding.related] == [
        ("pkg/override.py", line_of(source, "opt.flat.copy_"), "read"),
        ("pkg/opt.py", line_of(OPTIMIZER, "with torch.cuda.stream"), "stream context"),
    ]


def test_no_override_where_the_receivers_class_is_not_known():
    # an unannotated parameter may be any object: the lambda stays code of `install`, called there
    source = OVERRIDE.replace('opt: "Optimizer"', "opt").replace(RECORD, "")
    program = program_of(_sources(source))
    assert [call.args for call, _ in program.calls_of("pkg/opt.py::Optimizer.reduce")
            if call.callee == "self.partition_grads"] == [("params", "grads")]
    assert [(call.callee, [e.callee for e in edges]) for call, edges in program.calls_of("pkg/override.py::install")
            ] == [("partition_grads", ["pkg/override.py::partition_grads"])]
    assert [f for f in findings_of(_sources(source)) if f.rule == "SC104"] == []


def test_an_override_stored_on_self_reaches_the_calls_of_the_class():
    source = """
import torch


def reduce_all(engine, grads):
    for g in grads:
        engine.flat.copy_(g, non_blocking=True)


class Engine:
    def __init__(self):
        self._reduce = lambda grads: reduce_all(self, grads)

    def backward(self, grads):
        with torch.cuda.stream(self.side):
            self._reduce(grads)
"""
    program = program_of({"engine.py": source})
    assert [(call.args, [(e.callee, e.exact) for e in edges])
            for call, edges in program.calls_of("engine.py::Engine.backward") if call.callee == "self._reduce"] == [
        (("grads",), []), (("self", "grads"), [("engine.py::reduce_all", False)])]
    assert program.only_side_stream("engine.py::reduce_all") == "self.side@engine.py::Engine"


def test_the_forwarded_arguments_follow_the_lambdas_parameters_by_position_and_keyword():
    source = """
import torch


def fill(flat, out, scale=None, src=None):
    out.copy_(src, non_blocking=True)


class Engine:
    def __init__(self):
        self.fill = lambda src, out=None, scale=2: fill(self.flat, out, scale=scale, src=src)

    def run(self, bufs, dest):
        with torch.cuda.stream(self.side):
            self.fill(bufs[0], out=dest)
"""
    program = program_of({"engine.py": source})
    [forwarded] = [call.args for call, edges in program.calls_of("engine.py::Engine.run")
                   if any(e.callee == "engine.py::fill" for e in edges)]
    # the receiver's attribute, a keyword given by the caller, a default (no path), a positional one
    assert forwarded == ("self.flat", "dest", "scale=", "src=bufs[0]")
