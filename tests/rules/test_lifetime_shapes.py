"""SC104 lifetime shapes of session 8: containers that keep blocks with an event (kept_with_events.py), and a
helper's side-stream use and record of what its caller then frees (summaries.parameter_lifetimes)."""

from __future__ import annotations

from static_helpers import findings_of, line_of, program_of

KEEPER = """
import torch
from typing import NamedTuple


class State(NamedTuple):
    buf: torch.Tensor
    event: torch.Event


def scatter_grads(grads, stream):
    buf = torch.cat(grads)
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        out = buf.sum()
    event = stream.record_event()
    return buf, event, out


class Group:
    def post_backward(self, grads):
        states = self.comm_ctx.states
        while len(states) >= 2:
            oldest = states.pop(0)
            if oldest.event is not None:
                torch.cuda.current_stream().wait_event(oldest.event)
            del oldest
        buf, event, out = scatter_grads(grads, self.comm_ctx.rs_stream)
        self.comm_ctx.states.append(State(buf, event))
        return out


class Root:
    def final(self):
        for st in self._comm_ctx.states:
            if st.event is not None:
                torch.cuda.current_stream().wait_event(st.event)
        self._comm_ctx.states.clear()
"""

POP_WAIT = "                torch.cuda.current_stream().wait_event(oldest.event)\n"
LOOP_WAIT = "                torch.cuda.current_stream().wait_event(st.event)\n"


def _sc104(sources):
    return [f for f in findings_of(sources) if f.rule == "SC104"]


def test_kept_pairs_waited_before_every_drop_give_nothing():
    assert _sc104({"fsdp.py": KEEPER}) == []


def test_popped_element_dropped_without_its_event_wait():
    source = KEEPER.replace(POP_WAIT, "                pass\n")
    [finding] = _sc104({"fsdp.py": source})
    assert (finding.rule, finding.primary.path, finding.primary.line, finding.kind) == (
        "SC104", "fsdp.py", line_of(source, "del oldest"), "FREE")
    assert finding.extra == {"path": "self.comm_ctx.states", "stream": "self.comm_ctx.rs_stream", "event": "event"}
    assert [(r.role, r.line) for r in finding.related] == [
        ("write", line_of(source, "self.comm_ctx.states.append"))]


def test_cleared_container_of_another_class_without_the_event_waits():
    # `self._comm_ctx.states` in Root and `self.comm_ctx.states` in Group share the specific attribute name
    source = KEEPER.replace(LOOP_WAIT, "                pass\n")
    [finding] = _sc104({"fsdp.py": source})
    assert (finding.primary.line, finding.kind, finding.extra["path"], finding.extra["stream"]) == (
        line_of(source, "self._comm_ctx.states.clear()"), "FREE", "self._comm_ctx.states", "self.comm_ctx.rs_stream")


def test_a_host_sync_or_a_record_of_the_kept_tensor_is_enough():
    synced = KEEPER.replace(LOOP_WAIT, "                pass\n").replace(
        "        self._comm_ctx.states.clear()",
        "        torch.cuda.synchronize()\n        self._comm_ctx.states.clear()")
    assert _sc104({"fsdp.py": synced}) == []
    recorded = KEEPER.replace(POP_WAIT, "                pass\n").replace(
        "        self.comm_ctx.states.append(", "        buf.record_stream(self.comm_ctx.rs_stream)\n"
        "        self.comm_ctx.states.append(")
    assert _sc104({"fsdp.py": recorded}) == []


def test_an_event_the_scan_never_sees_recorded_keeps_nothing():
    # `event_token_ids`-like names and events recorded nowhere in the scan: no keepalive contract to check
    source = """
    class Store:
        def add(self, key, ids, done_event):
            self.pending[key] = (ids, done_event)

        def drop(self, key):
            self.pending.pop(key, None)
    """
    assert _sc104({"s.py": source}) == []


HELPER = """
import torch

copy_stream = torch.cuda.Stream()
done = torch.cuda.Event()


def move_key(state, key):
    with torch.cuda.stream(copy_stream):
        state["cpu_" + key].copy_(state[key], non_blocking=True)
        state[key].record_stream(copy_stream)
    done.record(copy_stream)


def offload(optimizer, name):
    copy_stream.wait_stream(torch.cuda.current_stream())
    state = optimizer.state[name]
    move_key(state, "exp_avg")
    del state["exp_avg"]
"""


def test_helper_records_what_its_caller_frees():
    assert _sc104({"adam.py": HELPER}) == []


def test_caller_frees_what_a_helper_used_on_a_side_stream_without_a_record():
    source = HELPER.replace("        state[key].record_stream(copy_stream)\n", "")
    [finding] = _sc104({"adam.py": source})
    assert (finding.rule, finding.primary.path, finding.primary.line, finding.kind) == (
        "SC104", "adam.py", line_of(source, 'del state["exp_avg"]'), "FREE")
    assert finding.extra == {"path": "state", "stream": "copy_stream"}
    call = line_of(source, 'move_key(state, "exp_avg")')
    assert [(r.role, r.line) for r in finding.related] == [("read", call), ("stream context", call)]


def test_caller_waiting_for_the_helper_stream_before_the_free_gives_nothing():
    source = HELPER.replace("        state[key].record_stream(copy_stream)\n", "").replace(
        '    del state["exp_avg"]',
        '    torch.cuda.current_stream().wait_stream(copy_stream)\n    del state["exp_avg"]')
    assert _sc104({"adam.py": source}) == []


MOVER = """
import torch


def move_to_cpu(tensor, record_stream=False):
    if torch.is_tensor(tensor) and tensor.is_cuda:
        cpu_tensor = tensor.to(torch.device("cpu"), non_blocking=True)
        if record_stream:
            tensor.record_stream(torch.cuda.current_stream())
        tensor = cpu_tensor
    return tensor


class Dispatcher:
    def dtoh(self):
        self.dtoh_stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(self.dtoh_stream):
            self.input_splits = move_to_cpu(
                self.input_splits, record_stream=True
            )
        self.d2h_event = self.dtoh_stream.record_event()
"""


def test_attribute_replaced_by_a_helper_that_records_it_gives_nothing():
    assert _sc104({"moe.py": MOVER}) == []


def test_attribute_replaced_by_what_a_helper_makes_of_it_without_a_record():
    # Megatron's `self.input_splits = maybe_move_tensor_to_cpu(self.input_splits, ...)` in the D2H region
    source = MOVER.replace("            tensor.record_stream(torch.cuda.current_stream())\n", "            pass\n")
    [finding] = _sc104({"moe.py": source})
    assert (finding.rule, finding.primary.path, finding.primary.line, finding.kind) == (
        "SC104", "moe.py", line_of(source, "self.input_splits = move_to_cpu("), "FREE")
    assert finding.extra == {"path": "self.input_splits", "stream": "self.dtoh_stream"}
    assert [(r.role, r.line) for r in finding.related] == [
        ("read", line_of(source, "self.input_splits, record_stream=True")),
        ("stream context", line_of(source, "with torch.cuda.stream(self.dtoh_stream)"))]


def test_imports_through_a_namespace_package_resolve():
    # `megatron/` holds no `__init__.py` (PEP 420) while its code imports `megatron.core.x`
    sources = {
        "megatron/core/__init__.py": "",
        "megatron/core/moe/__init__.py": "",
        "megatron/core/moe/utils.py": MOVER.split("class Dispatcher")[0],
        "megatron/core/moe/dispatcher.py": "import torch\nfrom megatron.core.moe.utils import move_to_cpu\n\n"
                                           + "class Dispatcher" + MOVER.split("class Dispatcher")[1],
    }
    program = program_of(sources)
    [(call, edges)] = [(c, e) for c, e in program.exact_edges_of("megatron/core/moe/dispatcher.py::Dispatcher.dtoh")
                       if c.callee == "move_to_cpu"]
    assert [e.callee for e in edges] == ["megatron/core/moe/utils.py::move_to_cpu"]
    assert _sc104(sources) == []
    sources["megatron/core/moe/utils.py"] = sources["megatron/core/moe/utils.py"].replace(
        "            tensor.record_stream(torch.cuda.current_stream())\n", "            pass\n")
    [finding] = _sc104(sources)
    dispatcher = sources["megatron/core/moe/dispatcher.py"]
    assert (finding.primary.path, finding.primary.line, finding.kind, finding.extra["path"]) == (
        "megatron/core/moe/dispatcher.py", line_of(dispatcher, "self.input_splits = move_to_cpu("), "FREE",
        "self.input_splits")


STASH = """
import torch


def chunked_copy_(dst, src):
    dst.copy_(src, non_blocking=True)


def stash(tensors, d2h_stream):
    stash_data = []
    d2h_stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(d2h_stream):
        for tensor in tensors:
            cpu_buffer = torch.empty(tensor.shape, device="cpu", pin_memory=True)
            chunked_copy_(cpu_buffer, tensor)
            tensor.record_stream(d2h_stream)
            stash_data.append((tensor, cpu_buffer))
        for tensor, _ in stash_data:
            tensor.untyped_storage().resize_(0)
    return stash_data
"""
STASH_RECORD = "            tensor.record_stream(d2h_stream)\n"


def test_storage_freed_after_the_tensor_went_into_a_list_is_still_its_release():
    # torchrec 1.9.2 memory_stashing.py: the list holds a reference, but resize_(0) frees the block regardless
    assert _sc104({"stash.py": STASH}) == []
    source = STASH.replace(STASH_RECORD, "")
    [finding] = _sc104({"stash.py": source})
    assert (finding.rule, finding.primary.path, finding.primary.line, finding.kind) == (
        "SC104", "stash.py", line_of(source, "tensor.untyped_storage().resize_(0)"), "FREE")
    assert finding.extra == {"path": "tensor", "stream": "d2h_stream"}
    assert [(r.role, r.line) for r in finding.related] == [
        ("read", line_of(source, "chunked_copy_(cpu_buffer, tensor)")),
        ("stream context", line_of(source, "with torch.cuda.stream(d2h_stream)"))]


def test_a_tensor_handed_on_and_only_dropped_later_is_not_judged_here():
    # `del` / rebinding drops one reference of several: the list's holder frees it, after what it waits for
    source = STASH.replace(STASH_RECORD, "").replace(
        "            tensor.untyped_storage().resize_(0)", "            del tensor")
    assert _sc104({"stash.py": source}) == []


STAGES = """
import torch


class Pipeline:
    def _run_with_event(self, runnable, event, inputs, stream):
        with torch.cuda.stream(stream):
            if event is not None:
                event.wait(stream)
                inputs.record_stream(stream)
            output = runnable(inputs)
            new_event = torch.cuda.Event()
            new_event.record(stream)
            return (output, new_event)

    def _run_stage(self, idx, stage):
        batch, event = self._outputs[idx]
        self._outputs[idx] = self._run_with_event(runnable=stage.runnable, event=event, inputs=batch,
                                                  stream=stage.stream)
"""
STAGES_RECORD = "                inputs.record_stream(stream)\n"


def test_input_used_on_a_side_stream_and_handed_back_with_an_event_needs_its_record():
    # torchrec 1.9.2 StagedTrainPipeline._run_with_event: the caller drops the stage input once it has the event
    assert _sc104({"stages.py": STAGES}) == []
    source = STAGES.replace(STAGES_RECORD, "")
    [finding] = _sc104({"stages.py": source})
    assert (finding.rule, finding.primary.path, finding.primary.line, finding.kind) == (
        "SC104", "stages.py", line_of(source, "return (output, new_event)"), "FREE")
    assert finding.extra == {"path": "inputs", "stream": "stream"}
    assert [(r.role, r.line) for r in finding.related] == [
        ("read", line_of(source, "output = runnable(inputs)")),
        ("stream context", line_of(source, "with torch.cuda.stream(stream)"))]


def test_waiting_for_the_side_stream_before_returning_or_returning_no_event_gives_nothing():
    unrecorded = STAGES.replace(STAGES_RECORD, "")
    waited = unrecorded.replace("            return (output, new_event)",
                                "        torch.cuda.current_stream().wait_stream(stream)\n"
                                "        return (output, new_event)")
    assert _sc104({"stages.py": waited}) == []
    no_event = unrecorded.replace("            return (output, new_event)", "            return output")
    assert _sc104({"stages.py": no_event}) == []
    rebound = unrecorded.replace("            output = runnable(inputs)",
                                 "            inputs = inputs.to('cuda', non_blocking=True)\n"
                                 "            output = runnable(inputs)")
    assert _sc104({"stages.py": rebound}) == []
    # the caller waits the event it gets back: its stream is ordered after the side stream before it drops the input
    caller_waits = unrecorded.replace("                                                  stream=stage.stream)\n",
                                      "                                                  stream=stage.stream)\n"
                                      "        torch.cuda.current_stream().wait_event(self._outputs[idx][1])\n")
    assert caller_waits != unrecorded and _sc104({"stages.py": caller_waits}) == []
