"""The engine's model of code outside the scan: inputs a side stream reads were made on the current stream
(outside_producers.py), results a side stream writes into what outlives the call are read on it (outside_consumers.py)."""

from __future__ import annotations

from static_helpers import findings_of, line_of, summary_of

LOADER = """
    import torch

    class Loader:
        def __init__(self):
            self.stream = torch.cuda.Stream()

        def __call__(self, inputs, stage):
            {before}
            with torch.cuda.stream(self.stream):
                self.static[stage].copy_(torch.cat([inputs]))
            {after}
            return self.static[stage]
"""


def _found(source):
    return [(f.rule, f.kind, f.primary.line, f.extra["path"], f.extra.get("producer", ""),
             f.extra.get("consumer", ""))
            for f in findings_of({"m.py": source})]


def test_an_input_read_and_a_result_handed_out_on_a_side_stream_with_no_waits():
    racy = LOADER.format(before="pass", after="pass")
    line = line_of(racy, "self.static[stage].copy_")
    assert _found(racy) == [
        ("SC101", "RAW", line, "self.static", "device op", "outside"),  # read on the current stream after return
        ("SC106", "WAR", line, "self.static", "", ""),  # the last call's result, maybe still read on the current one
        ("SC101", "RAW", line, "inputs", "outside", "device op"),  # made on the current stream by the caller
    ]


def test_the_waits_in_both_directions_order_both():
    fixed = LOADER.format(before="self.stream.wait_stream(torch.cuda.current_stream())",
                          after="torch.cuda.current_stream().wait_stream(self.stream)")
    assert _found(fixed) == []


def test_a_stream_the_current_stream_waits_for_elsewhere_is_handed_over_there():
    source = LOADER.format(before="self.stream.wait_stream(torch.cuda.current_stream())", after="pass") + """
        def ready(self):
            torch.cuda.current_stream().wait_stream(self.stream)
    """
    assert _found(source) == []


def test_host_buffers_uploads_and_numbers_are_not_inputs_made_on_a_stream():
    source = """
        import torch

        def stage(batch, host_buf, scale, side):
            with torch.cuda.stream(side):
                dev = batch.to("cuda", non_blocking=True)
                dev.mul_(scale)
                out = torch.cat([host_buf])
            return dev, out
    """
    assert _found(source) == []



def test_a_stream_captured_at_construction_is_not_the_stream_a_later_call_runs_on():
    # TRL <= 1.13.0 (fixed in 1.14.0, PR #7195): `self.s0` is the default stream, taken once; under FSDP2's or a
    # recompute's `with stream(compute)` the activation was made on `compute`, which nobody waits for.
    source = """
        import torch

        class OffloadActivations:
            def __init__(self):
                self.s0 = torch.cuda.default_stream()
                self.s1 = torch.cuda.Stream()

            def pack_tensor(self, activation):
                self.s1.wait_stream(self.s0)
                with torch.cuda.stream(self.s1):
                    cpu_tensor = torch.empty_like(activation, pin_memory=True, device="cpu")
                    cpu_tensor.copy_(activation, non_blocking=True)
                return cpu_tensor

            def forward_and_pack(self, x, w, compute):
                with torch.cuda.stream(compute):
                    x.mul_(w)
                    return self.pack_tensor(x)
    """
    # Reported at the side stream's read of its input (the caller's write reaches it through the parameter).
    assert [(rule, kind, line, path) for rule, kind, line, path, _, _ in _found(source)] == [
        ("SC101", "RAW", line_of(source, "cpu_tensor.copy_"), "activation")]
    fixed = source.replace("self.s1.wait_stream(self.s0)", "self.s1.wait_stream(torch.cuda.current_stream())")
    assert _found(fixed) == []
    # TRL 1.14.0's own fix: `s0` becomes a property that asks for the current stream where it is used.
    as_property = source.replace("self.s0 = torch.cuda.default_stream()\n", "").replace(
        "    def pack_tensor", "    @property\n            def s0(self):\n                return torch.cuda.current_stream()\n\n"
        "            def pack_tensor")
    assert "def s0" in as_property and _found(as_property) == []


COPY_SERVICE = """
    import torch
    from executor import Executor

    class CopyService:
        def __init__(self):
            self.recvs = {}
            self.remote = Executor()
            self._copy_stream = torch.cuda.Stream()

        def run(self, sources):
            local = [(key, dst) for key, dst in self.recvs.items() if key in sources]
            self._copy_stream.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(self._copy_stream):
                for key, dst in local:
                    dst.copy_(sources[key], non_blocking=True)
            AFTER_COPIES
            if not self.remote.pending:
                return
            self.remote.execute()
"""

# The remote half, in another module: it waits for everything (Megatron's NVSHMEM executor), but only on the path
# that does not return first.
EXECUTOR = """
    import torch

    class Executor:
        def execute(self):
            torch.cuda.synchronize()
"""


def _copy_service_findings(after_copies: str, executor: str = EXECUTOR):
    source = COPY_SERVICE.replace("AFTER_COPIES", after_copies)
    found = [(f.rule, f.kind, f.primary.path, f.primary.line, f.extra["path"], f.extra.get("consumer", ""))
             for f in findings_of({"service.py": source, "executor.py": executor}, select={"SC101"})]
    return found, line_of(source, "dst.copy_")


def test_elements_of_an_attribute_written_on_a_copy_stream_are_handed_out_and_an_early_return_skips_the_sync():
    # `dst` is an element of `self.recvs` through a filtered copy and a loop (FunctionFacts.derived); the only
    # wait for the copy stream (the executor's synchronize) is after `if ...: return`, so not on every way out.
    found, line = _copy_service_findings(after_copies="pass")
    assert found == [("SC101", "RAW", "service.py", line, "dst", "outside")]


def test_the_wait_before_the_early_return_orders_the_copies():
    found, _ = _copy_service_findings(after_copies="torch.cuda.current_stream().wait_stream(self._copy_stream)")
    assert found == []


def test_a_device_wide_synchronize_in_another_module_is_no_wait_for_this_stream():
    # Without the early return the executor's synchronize follows the copies on the way out: ordered.
    no_return = COPY_SERVICE.replace("            if not self.remote.pending:\n                return\n", "")
    found = [f.primary.line for f in findings_of({"service.py": no_return.replace("AFTER_COPIES", "pass"),
                                                  "executor.py": EXECUTOR}, select={"SC101"})]
    assert found == []
    # A synchronize in an unrelated module (a checkpoint saver) says nothing about the copy stream.
    saver = "import torch\n\ndef save(state):\n    torch.cuda.synchronize()\n    return state\n"
    lone = COPY_SERVICE.replace("            if not self.remote.pending:\n                return\n"
                                "            self.remote.execute()\n", "")
    found, line = (
        [(f.primary.line, f.extra["path"]) for f in findings_of(
            {"service.py": lone.replace("AFTER_COPIES", "pass"), "saver.py": saver}, select={"SC101"})],
        line_of(lone.replace("AFTER_COPIES", "pass"), "dst.copy_"))
    assert found == [(line, "dst")]


STASH = """
    import torch

    def stash(tensors, d2h_stream):
        def execute():
            WAIT
            with torch.cuda.stream(d2h_stream):
                for tensor in tensors:
                    host = torch.empty(tensor.shape, device="cpu", pin_memory=True)
                    host.copy_(tensor, non_blocking=True)
        return execute
"""


def test_a_closure_reading_the_enclosing_functions_input_on_a_side_stream():
    # torchrec's memory stashing: `execute` (run later, from a hook) reads the tensors `stash` was handed; they
    # were made on the current stream, which the copy stream must wait for first.
    racy = STASH.replace("WAIT", "pass")
    assert [(rule, kind, line, path, producer) for rule, kind, line, path, producer, _ in _found(racy)] == [
        ("SC101", "RAW", line_of(racy, "host.copy_"), "tensor", "outside")]
    assert _found(STASH.replace("WAIT", "d2h_stream.wait_stream(torch.cuda.current_stream())")) == []


RECORDING_HELPER = """
    class Launcher:
        def launch(self, plan, torch_stream, done_event):
            plan.run()
            done_event.record(stream=torch_stream)
"""

SELF_MOVES = """
    import torch
    from launcher import Launcher

    class Executor:
        def __init__(self, launcher: Launcher):
            self.launcher = launcher
            self.pack_stream = None
            self.copy_stream = None
            self.events = []

        def set_streams(self, pack_stream, copy_stream, events):
            self.pack_stream = pack_stream
            self.copy_stream = copy_stream
            self.events = events

        def run(self, plans):
            for i, plan in enumerate(plans):
                self.launcher.launch(plan, self.pack_stream, self.events[i % 2])
                self.events[i % 2].synchronize()

        def self_moves(self, receives, sends):
            self.copy_stream.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(self.copy_stream):
                for req in receives:
                    req.dest.copy_(sends[req.key], non_blocking=True)
            AFTER
"""


def test_events_a_helper_records_on_another_stream_are_no_wait_for_the_copy_stream():
    # Megatron's NVSHMEM copy service with `self.torch_copy_stream.synchronize()` deleted: `self.events` are
    # recorded by the launcher on the pack stream (`record(stream=...)`, the event handed in as an argument), so
    # their synchronize in `run` does not cover the copy stream; before, an event recorded nowhere in the scan
    # ordered everything.
    racy = SELF_MOVES.replace("AFTER", "pass")
    found = [(f.rule, f.kind, f.primary.path, f.primary.line, f.extra["path"], f.extra["writer_stream"],
              f.extra["consumer"]) for f in findings_of({"launcher.py": RECORDING_HELPER, "executor.py": racy})]
    assert found == [("SC101", "RAW", "executor.py", line_of(racy, "req.dest.copy_"), "req.dest", "self.copy_stream",
                      "outside")]


def test_the_copy_streams_own_synchronize_orders_the_moves():
    fixed = SELF_MOVES.replace("AFTER", "self.copy_stream.synchronize()")
    assert findings_of({"launcher.py": RECORDING_HELPER, "executor.py": fixed}) == []


COMM = """
    import torch
    from torch.overrides import handle_torch_function, has_torch_function_unary

    def all_reduce(tensor, op=None, group=None):
        if has_torch_function_unary(tensor):
            return handle_torch_function(all_reduce, (tensor,), tensor, op=op, group=group)
        return torch.distributed.all_reduce(tensor, op=op, group=group)
"""
REDUCE = """
    import torch

    from comm import all_reduce

    def reduce_grad(state, grad):
        with torch.cuda.stream(state.all_reduce_stream):
            all_reduce(grad, group=state.inter_node_pg)
"""


def test_a_process_group_handed_to_torch_function_dispatch_is_no_input():
    # torch's own collectives start with `handle_torch_function(all_reduce, ..., group=group)`: a dispatch to
    # `__torch_function__` overrides, not a device op reading the group (FSDP1's `_reduce_grad` in torch 2.13)
    findings = findings_of({"comm.py": COMM, "fsdp.py": REDUCE})
    assert [(f.rule, f.kind, f.primary.path, f.primary.line, f.extra["path"]) for f in findings] == [
        ("SC106", "WAR", "fsdp.py", line_of(REDUCE, "all_reduce(grad"), "grad")]


# Two kernels' launchers that each take a shared side stream into a local of the same name (vLLM's amd and nvidia
# fused_qkvr_prep, each `kv_stream = aux_stream()`); FILL makes the current stream wait for it or not.
LAUNCHER = """
    import torch
    from helpers import aux_stream

    def prepare(cache, qkv):
        kv_stream = aux_stream()
        kv_stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(kv_stream):
            cache.copy_(qkv * 2)
        WAIT
        return cache
"""
WAITS = "torch.cuda.current_stream().wait_stream(kv_stream)"


def _launcher(wait):
    return LAUNCHER.replace("WAIT", WAITS if wait else "pass")


def test_a_twin_in_another_file_waiting_for_a_local_of_the_same_name_is_no_wait_for_this_one():
    racy = _launcher(wait=False)
    found = [(f.rule, f.kind, f.primary.path, f.primary.line, f.extra["path"])
             for f in findings_of({"amd/prep.py": racy, "nvidia/prep.py": _launcher(wait=True)}, select={"SC101"})]
    assert found == [("SC101", "RAW", "amd/prep.py", line_of(racy, "cache.copy_"), "cache")]


def test_a_caller_in_another_file_that_waits_for_the_stream_after_the_call_hands_it_over():
    caller = """
        import torch
        from amd.prep import prepare
        from helpers import aux_stream

        def forward(cache, qkv):
            out = prepare(cache, qkv)
            kv_stream = aux_stream()
            torch.cuda.current_stream().wait_stream(kv_stream)
            return out
    """
    assert findings_of({"amd/prep.py": _launcher(wait=False), "model.py": caller}, select={"SC101"}) == []


# torchrec 1.9.2's maglev `_InputDataAwaitable` (input_dist.py:316): `__init__` all-to-alls into the elements of its
# parameter `out_bufs` on a side stream, records an event there and keeps both on `self`; `wait()` hands the
# elements of `self._out_bufs` on. Another event wait in the program (the copy event) must not stand for the kept one.
AWAITABLE = """
    import torch
    import torch.distributed as dist

    class DataAwaitable:
        def __init__(self, out_bufs, in_bufs, copy_done, stream):
            stream.wait_event(copy_done)
            stream.wait_stream(torch.cuda.current_stream())
            done = torch.cuda.Event()
            with torch.cuda.stream(stream):
                for out_buf, in_buf in zip(out_bufs, in_bufs):
                    dist.all_to_all_single(out_buf, in_buf)
                done.record(stream)
            self._out_bufs = out_bufs
            self._in_bufs = in_bufs
            self._done = done

        def wait(self):
            WAIT
            received = []
            for buf in self._out_bufs:
                received.append(buf.view(-1, 4))
            return received
"""


def test_elements_of_a_kept_parameter_handed_on_by_a_sibling_without_the_kept_event_are_unordered():
    racy = AWAITABLE.replace("WAIT", "pass")
    findings = findings_of({"m.py": racy})
    assert summary_of(findings) == [("SC101", "m.py", line_of(racy, "dist.all_to_all_single"), "RAW")]
    reads = [(r.role, r.line) for r in findings[0].related if r.role == "read"]
    assert reads == [("read", line_of(racy, "for buf in self._out_bufs"))]  # where `wait()` takes them
    assert "`DataAwaitable.wait` (through `self._out_bufs`)" in findings[0].message


def test_the_sibling_waiting_the_kept_event_orders_them():
    fixed = AWAITABLE.replace("WAIT", "torch.cuda.current_stream().wait_event(self._done)")
    assert findings_of({"m.py": fixed}) == []


def test_a_caller_waiting_the_stream_after_construction_orders_them():
    caller = AWAITABLE.replace("WAIT", "pass") + """
    def launch(out_bufs, in_bufs, copy_done, stream):
        awaitable = DataAwaitable(out_bufs, in_bufs, copy_done, stream)
        torch.cuda.current_stream().wait_stream(stream)
        return awaitable
    """
    assert findings_of({"m.py": caller}, select={"SC101"}) == []


def test_the_sibling_waiting_the_kept_stream_orders_them():
    fixed = AWAITABLE.replace("WAIT", "torch.cuda.current_stream().wait_stream(self._stream)").replace(
        "self._done = done", "self._done = done\n            self._stream = stream")
    assert findings_of({"m.py": fixed}) == []


def test_a_wait_elsewhere_in_the_program_does_not_stand_for_the_sibling_s():
    racy = AWAITABLE.replace("WAIT", "pass")
    other = """
        import torch

        def drain(stream):
            torch.cuda.current_stream().wait_stream(stream)
    """
    found = summary_of(findings_of({"m.py": racy, "other.py": other}, select={"SC101"}))
    assert found == [("SC101", "m.py", line_of(racy, "dist.all_to_all_single"), "RAW")]
