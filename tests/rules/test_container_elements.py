"""Tensors and events held as elements of a container an attribute holds (issue 14, vLLM 0.33.0's engram
`prefetch.py`): one method fills `self._buffers[k]`'s tensor on a side stream and records its event, looping over
the dict; another takes the pair out by key, waits the event and hands the tensor to a Triton kernel. The element,
its views and its event are the container's, so the write and the read pair up and the wait orders them. The racy
source is the real function less its wait; its twin with the wait gives no finding. Exact outcomes: (rule, path,
line, kind)."""

from __future__ import annotations

import textwrap

from static_helpers import facts_of, findings_of, line_of, program_of, summary_of
from streamcheck.rules.orderings import event_id

PREFETCH = """
import torch

class Prefetch:
    def __init__(self, layers, max_rows):
        self.stream = torch.cuda.Stream()
        self._buffers = {layer: (torch.empty(max_rows, layer.dim, device="cuda"), torch.cuda.Event())
                         for layer in layers}

    def start(self, num_tokens):
        stream = self.stream
        for layer, (out, done) in self._buffers.items():
            START_ORDERING
            with torch.cuda.stream(stream):
                kv = layer.wkv(layer.staged_rows[:num_tokens])
                out[:num_tokens].copy_(kv)
            done.record(stream)

    def forward(self, layer, hidden_states: torch.Tensor):
        out, done = self._buffers[layer]
        ORDERING
        kv = out[: hidden_states.shape[0]]
        output = torch.empty_like(hidden_states)
        post_kernel[(hidden_states.shape[0],)](hidden_states, kv, output, kv.stride(0))
        return output
"""


def _variant(ordering: str, start: str = "stream.wait_event(layer._prefetch_done)") -> str:
    return textwrap.dedent(PREFETCH).replace("START_ORDERING", start).replace("ORDERING", ordering)


def test_a_write_through_a_loop_over_an_attributes_container_pairs_with_a_read_of_the_element_taken_by_key():
    racy = _variant("pass")
    findings = findings_of({"prefetch.py": racy})
    assert summary_of(findings) == [("SC101", "prefetch.py", line_of(racy, "out[:num_tokens].copy_(kv)"), "RAW")]
    assert [(r.role, r.line) for r in findings[0].related if r.role == "read"] == [
        ("read", line_of(racy, "post_kernel["))]
    assert findings[0].extra["path"] == "out"


def test_the_event_of_the_element_waited_by_key_orders_the_read():
    assert findings_of({"prefetch.py": _variant("torch.cuda.current_stream().wait_event(done)")}) == []


def test_a_view_of_a_taken_element_is_the_containers_element_and_a_kernel_reads_it():
    [facts] = facts_of({"prefetch.py": _variant("pass")})
    forward = next(fn for fn in facts.functions if fn.name == "forward")
    assert ("kv", "self._buffers", line_of(_variant("pass"), "kv = out[")) in forward.taken
    assert [(a.kind, a.path) for a in forward.accesses if a.op == "post_kernel[]"] == [
        ("read", "hidden_states"), ("read", "self._buffers")]


def test_an_event_unpacked_in_a_loop_over_an_attributes_container_is_the_containers():
    program = program_of({"prefetch.py": _variant("pass")})
    start = next(fn for fn in program.functions.values() if fn.facts.name == "start")
    forward = next(fn for fn in program.functions.values() if fn.facts.name == "forward")
    assert event_id(program, start, "done") == event_id(program, forward, "done") == "self._buffers@prefetch.py::Prefetch"


def test_an_element_written_in_place_in_the_loop_is_not_memory_made_on_the_side_stream():
    # Without the side stream's wait for the lookup (prefetch.py:79 deleted), the buffers were still allocated in
    # `__init__`: no SC104 for a block `copy_` only fills (free_after_handoff's containers filled on a side stream).
    fixed = _variant("torch.cuda.current_stream().wait_event(done)", start="pass")
    assert [f for f in findings_of({"prefetch.py": fixed}) if f.rule == "SC104"] == []
