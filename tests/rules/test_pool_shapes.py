"""The HOST and WAR shapes of issue 14's session-5 pools, reduced from the real code each was built for.

Each racy source is the real function less its ordering; its twin with the ordering gives no finding. Exact
outcomes: (rule, path, line, kind), and the related locations that say where the copy or allocation was."""

from __future__ import annotations

import textwrap

import pytest

from static_helpers import findings_of, line_of, summary_of


def _variant(source: str, ordering: str) -> str:
    return textwrap.dedent(source).replace("ORDERING", ordering)


def _related(finding):
    return [(loc.role, loc.line) for loc in finding.related]


# --- SC102 across a return: torchrec's _cuda_to_cpu_safe / _safe_tolist ---------------------------------------
RETURNED = """
import torch

def _cuda_to_cpu_safe(tensor):
    src = tensor.contiguous()
    cpu_buf = torch.empty(src.shape, dtype=src.dtype, device="cpu")
    cpu_buf.copy_(src, non_blocking=True)
    ORDERING
    return cpu_buf

def _safe_tolist(tensor):
    if not tensor.is_cuda:
        return tensor.tolist()
    return _cuda_to_cpu_safe(tensor).tolist()
"""


def test_a_returned_copy_read_on_the_host_by_the_caller():
    racy = _variant(RETURNED, "pass")
    findings = findings_of({"jagged.py": racy}, {"SC102"})
    assert summary_of(findings) == [("SC102", "jagged.py", line_of(racy, "return _cuda_to_cpu_safe"), "HOST")]
    assert _related(findings[0]) == [("write", line_of(racy, "cpu_buf.copy_")),
                                     ("call", line_of(racy, "return _cuda_to_cpu_safe"))]
    assert "the result of `_cuda_to_cpu_safe(...)`" in findings[0].message
    assert "`.tolist()`" in findings[0].message


def test_a_returned_copy_synchronized_before_the_return_is_clean():
    fixed = _variant(RETURNED, "torch.cuda.current_stream(src.device).synchronize()")
    assert findings_of({"jagged.py": fixed}, {"SC102"}) == []


# --- SC102 through a constructor: DeepSpeed's _PendingSplitPlan -------------------------------------------------
KEPT = """
import torch

class _PendingSplitPlan:
    def __init__(self, host_splits, ready_event):
        self._host_splits = host_splits
        self._ready_event = ready_event
        self._plan = None

    def wait(self):
        if self._plan is None:
            ORDERING
            input_splits, output_splits = self._host_splits.tolist()
            self._plan = (input_splits, output_splits)
        return self._plan

def start_split_plan(device_splits, host_splits, ready_event, copy_stream):
    copy_stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(copy_stream):
        host_splits.copy_(device_splits, non_blocking=True)
        ready_event.record(copy_stream)
    return _PendingSplitPlan(
        host_splits=host_splits,
        ready_event=ready_event,
    )
"""


def test_a_kept_copy_read_on_the_host_by_a_method_before_the_event_wait():
    racy = _variant(KEPT, "pass")
    findings = findings_of({"auto_ep.py": racy}, {"SC102"})
    assert summary_of(findings) == [("SC102", "auto_ep.py", line_of(racy, "self._host_splits.tolist()"), "HOST")]
    assert _related(findings[0]) == [("write", line_of(racy, "host_splits.copy_")),
                                     ("call", line_of(racy, "return _PendingSplitPlan("))]
    assert "`self._host_splits`, which `_PendingSplitPlan.__init__` keeps" in findings[0].message


def test_a_kept_copy_read_after_the_event_synchronize_is_clean():
    fixed = _variant(KEPT, "self._ready_event.synchronize()")
    assert findings_of({"auto_ep.py": fixed}, {"SC102"}) == []


# --- SC106: a side stream fills a block the current stream just allocated ---------------------------------------
HELPER = """
import torch

copy_stream = torch.cuda.Stream()

def _alloc_reload_buffer(like_tensor, compute_stream):
    buf = torch.empty_like(like_tensor, device="cuda")
    ORDERING
    return buf

def move_back_key(state, key):
    buf = _alloc_reload_buffer(state["offloaded"], torch.cuda.current_stream())
    with torch.cuda.stream(copy_stream):
        buf.copy_(state["offloaded"], non_blocking=True)
    buf.record_stream(copy_stream)
    state[key] = buf
"""


def test_a_helper_allocation_filled_on_a_side_stream_without_a_wait():
    racy = _variant(HELPER, "pass")
    findings = findings_of({"offload.py": racy}, {"SC106"})
    assert summary_of(findings) == [("SC106", "offload.py", line_of(racy, "buf.copy_("), "WAR")]
    assert _related(findings[0]) == [("write", line_of(racy, "buf = _alloc_reload_buffer(")),
                                     ("stream context", line_of(racy, "with torch.cuda.stream(copy_stream)"))]
    assert "returned by `_alloc_reload_buffer`, which allocates it on the current stream" in findings[0].message


def test_a_helper_allocation_whose_helper_makes_the_side_stream_wait_is_clean():
    fixed = _variant(HELPER, "copy_stream.wait_stream(compute_stream)")
    assert findings_of({"offload.py": fixed}, {"SC106"}) == []


# torchrec's EvalPipelineCPUSparse: the wait inside the region waits for the region's own stream.
INSIDE = """
import torch

class Pipeline:
    def __init__(self, device):
        self._device = device
        self._memcpy_stream = torch.cuda.Stream()

    def copy(self, embeddings):
        gpu_values = torch.empty_like(embeddings, device=self._device)
        ORDERING
        with torch.cuda.stream(self._memcpy_stream):
            SELF_WAIT
            gpu_values.copy_(embeddings, non_blocking=True)
        return gpu_values
"""


def test_a_wait_inside_the_region_waits_for_nothing():
    racy = textwrap.dedent(INSIDE).replace("ORDERING", "pass").replace(
        "SELF_WAIT", "self._memcpy_stream.wait_stream(torch.cuda.current_stream())")
    findings = findings_of({"pipeline.py": racy}, {"SC106"})
    assert summary_of(findings) == [("SC106", "pipeline.py", line_of(racy, "gpu_values.copy_("), "WAR")]
    assert _related(findings[0]) == [("write", line_of(racy, "gpu_values = torch.empty_like(")),
                                     ("stream context", line_of(racy, "with torch.cuda.stream("))]
    assert (f"the `wait_stream` at line {line_of(racy, 'wait_stream(torch.cuda.current_stream())')} runs inside "
            f"the region") in findings[0].message


def test_a_wait_taken_before_the_region_orders_the_fill():
    fixed = textwrap.dedent(INSIDE).replace(
        "ORDERING", "self._memcpy_stream.wait_stream(torch.cuda.current_stream())").replace("SELF_WAIT", "pass")
    assert findings_of({"pipeline.py": fixed}, {"SC106"}) == []


def test_a_wait_in_only_one_of_two_callers_leaves_the_other_call_unordered():
    source = textwrap.dedent("""
        import torch

        class Pipeline:
            def __init__(self):
                self._memcpy_stream = torch.cuda.Stream()

            def _fill(self, embeddings):
                gpu_values = torch.empty_like(embeddings, device="cuda")
                with torch.cuda.stream(self._memcpy_stream):
                    gpu_values.copy_(embeddings, non_blocking=True)
                return gpu_values

            def progress(self, embeddings):
                self._memcpy_stream.wait_stream(torch.cuda.current_stream())
                return self._fill(embeddings)

            def fill_pipeline(self, embeddings):
                return self._fill(embeddings)
    """)
    findings = findings_of({"pipeline.py": source}, {"SC106"})
    assert summary_of(findings) == [("SC106", "pipeline.py", line_of(source, "gpu_values.copy_("), "WAR")]
    waited = source.replace("    def fill_pipeline(self, embeddings):\n",
                            "    def fill_pipeline(self, embeddings):\n"
                            "        self._memcpy_stream.wait_stream(torch.cuda.current_stream())\n")
    assert waited != source
    assert findings_of({"pipeline.py": waited}, {"SC106"}) == []



# torchrec's memory stashing restore (memory_stashing.py): the stashed storage is re-allocated with `resize_` on the
# current stream, a tensor is pointed at it (`set_`, `.data =`) and filled on the H2D stream through a second view,
# in two closures that share the stash's event list.
RESTORE = """
import torch

def chunked_copy_(dst, src):
    dst.copy_(src, non_blocking=True)

def stash_tensors(tensors, d2h_stream, h2d_stream):
    stash_data = []
    storages = []
    stash_done_events = []

    def execute_stash():
        with torch.cuda.stream(d2h_stream):
            for tensor in tensors:
                cpu_buffer = torch.empty(tensor.shape, device="cpu", pin_memory=True)
                chunked_copy_(cpu_buffer, tensor)
                tensor.record_stream(d2h_stream)
                stash_data.append((tensor, cpu_buffer, tensor.untyped_storage().size()))
                storages.append(tensor.untyped_storage())
            for tensor, _, _ in stash_data:
                tensor.untyped_storage().resize_(0)
        stash_done_event = torch.cuda.Event()
        stash_done_event.record(d2h_stream)
        stash_done_events.append(stash_done_event)

    def restore(sync_event=None):
        if stash_done_events and not stash_done_events[-1].query():
            stash_done_events[-1].synchronize()
        for (hbm_ref, _cpu_buf, size), orig_stor in zip(stash_data, storages):
            orig_stor.resize_(size)
            ref = torch.tensor([], dtype=hbm_ref.dtype, device="cuda")
            ref.set_(orig_stor, 0, hbm_ref.shape, hbm_ref.stride())
            hbm_ref.data = ref
        if sync_event is not None:
            EVENT_WAIT
        else:
            STREAM_WAIT
        for hbm_ref, cpu_buf, _ in stash_data:
            tmp = torch.tensor([], dtype=hbm_ref.dtype, device=hbm_ref.device)
            tmp.set_(hbm_ref.untyped_storage(), hbm_ref.storage_offset(), hbm_ref.shape, hbm_ref.stride())
            with torch.cuda.stream(h2d_stream):
                chunked_copy_(tmp, cpu_buf)
            hbm_ref.record_stream(h2d_stream)

    return execute_stash, restore
"""
EVENT_WAIT = "h2d_stream.wait_event(sync_event)"
STREAM_WAIT = "h2d_stream.wait_stream(torch.cuda.current_stream())"


@pytest.mark.parametrize("deleted", ["EVENT_WAIT", "STREAM_WAIT"])
def test_a_storage_resized_on_the_current_stream_and_filled_through_a_view_on_a_side_stream(deleted):
    racy = textwrap.dedent(RESTORE).replace("EVENT_WAIT", EVENT_WAIT).replace("STREAM_WAIT", STREAM_WAIT).replace(
        {"EVENT_WAIT": EVENT_WAIT, "STREAM_WAIT": STREAM_WAIT}[deleted], "pass")
    findings = findings_of({"memory_stashing.py": racy}, {"SC106"})
    assert summary_of(findings) == [("SC106", "memory_stashing.py", line_of(racy, "chunked_copy_(tmp, cpu_buf)"),
                                     "WAR")]
    assert _related(findings[0]) == [("write", line_of(racy, "orig_stor.resize_(size)")),
                                     ("stream context", line_of(racy, "with torch.cuda.stream(h2d_stream)"))]
    assert "allocated by `resize_` as `orig_stor`, whose memory it views," in findings[0].message


def test_a_storage_resized_then_filled_after_the_side_stream_waits_on_every_way_is_clean():
    fixed = textwrap.dedent(RESTORE).replace("EVENT_WAIT", EVENT_WAIT).replace("STREAM_WAIT", STREAM_WAIT)
    assert findings_of({"memory_stashing.py": fixed}, {"SC106"}) == []


def test_a_storage_resized_to_zero_is_no_allocation():
    source = textwrap.dedent("""
        import torch

        def refill(t, src, side):
            t.untyped_storage().resize_(0)
            with torch.cuda.stream(side):
                t.copy_(src, non_blocking=True)
    """)
    assert findings_of({"m.py": source}, {"SC106"}) == []
    grown = source.replace("resize_(0)", "resize_(src.numel() * 4)")
    assert summary_of(findings_of({"m.py": grown}, {"SC106"})) == [("SC106", "m.py", line_of(grown, "t.copy_("),
                                                                   "WAR")]

def test_an_allocation_inside_the_region_or_on_the_host_is_no_foreign_block():
    source = textwrap.dedent("""
        import torch

        def stage(batch, side):
            host = torch.empty_like(batch, device="cpu")
            with torch.cuda.stream(side):
                made_here = torch.empty_like(batch, device="cuda")
                made_here.copy_(batch, non_blocking=True)
                host.copy_(batch, non_blocking=True)
            return made_here, host
    """)
    assert findings_of({"stage.py": source}, {"SC106"}) == []


# --- SC106: a side stream nothing makes wait overwrites an outside tensor ----------------------------------------
# Megatron's hybrid optimizer: the copy-back hook uploads into the model's params on its own stream.
HYBRID = """
import torch

class HybridOptimizer:
    def __init__(self, params):
        self._h2d_stream = torch.cuda.Stream()
        self.gpu_param_of = {}

    def copy_back(self, params):
        ORDERING
        with torch.cuda.stream(self._h2d_stream):
            for param in params:
                gpu_param = self.gpu_param_of[param]
                gpu_param.data.copy_(param.data, non_blocking=True)
        torch.cuda.current_stream().wait_stream(self._h2d_stream)
"""


def test_a_never_waiting_side_stream_overwrites_a_tensor_taken_out_of_a_container():
    racy = _variant(HYBRID, "pass")
    findings = findings_of({"hybrid.py": racy}, {"SC106"})
    assert summary_of(findings) == [("SC106", "hybrid.py", line_of(racy, "gpu_param.data.copy_"), "WAR")]
    assert _related(findings[0]) == [("stream context", line_of(racy, "with torch.cuda.stream(self._h2d_stream)"))]
    assert findings[0].message.startswith("`gpu_param` (taken out of `self.gpu_param_of`) comes from outside")


def test_the_side_stream_waiting_for_the_current_one_first_is_clean():
    fixed = _variant(HYBRID, "self._h2d_stream.wait_stream(torch.cuda.current_stream())")
    assert findings_of({"hybrid.py": fixed}, {"SC106"}) == []


def test_a_wait_of_the_stream_in_another_method_leaves_the_overwrite_to_the_engine():
    elsewhere = _variant(HYBRID, "pass") + textwrap.dedent("""
        def before_step(self):
            self._h2d_stream.wait_stream(torch.cuda.current_stream())
    """).replace("\ndef", "\n    def").replace("\n    self.", "\n        self.")
    assert "    def before_step" in elsewhere
    assert findings_of({"hybrid.py": elsewhere}, {"SC106"}) == []


# torchrec's maglev input dist: the stream is handed down three calls from the driver that owns it.
MAGLEV = """
import torch

def inplace_copy_to_gpu(sources, destinations, memcpy_stream):
    with torch.cuda.stream(memcpy_stream):
        ORDERING
        for destination, source in zip(destinations, sources):
            destination.copy_(source, non_blocking=True)

def input_size_dist(sources, destinations, memcpy_stream):
    inplace_copy_to_gpu(sources, destinations, memcpy_stream)

def input_dist(sources, destinations, memcpy_stream):
    input_size_dist(sources, destinations, memcpy_stream)

class InputDistDriver:
    def __init__(self):
        self._memcpy_stream = torch.cuda.Stream()

    def exchange(self, sources, destinations):
        memcpy_stream = self._memcpy_stream
        input_dist(sources, destinations, memcpy_stream)
"""


def test_a_stream_handed_down_through_calls_is_the_one_its_owner_never_makes_wait():
    racy = _variant(MAGLEV, "pass")
    findings = findings_of({"maglev.py": racy}, {"SC106"})
    assert summary_of(findings) == [("SC106", "maglev.py", line_of(racy, "destination.copy_"), "WAR")]
    # The loop variable is named with the lists it iterates.
    assert findings[0].message.startswith(
        "`destination` (bound by the loop over `destinations`, `sources`) comes from outside `inplace_copy_to_gpu`")


def test_a_stream_handed_down_that_waits_inside_the_region_on_the_outer_stream_is_clean():
    fixed = _variant(MAGLEV, "pass").replace(
        "    with torch.cuda.stream(memcpy_stream):\n",
        "    current_stream = torch.cuda.current_stream()\n    with torch.cuda.stream(memcpy_stream):\n"
        "        memcpy_stream.wait_stream(current_stream)\n")
    assert "memcpy_stream.wait_stream(current_stream)" in fixed
    assert findings_of({"maglev.py": fixed}, {"SC106"}) == []


def test_a_stream_whose_callers_are_unknown_or_a_buffer_its_class_allocates_there_is_left_alone():
    handed_in = textwrap.dedent("""
        import torch

        def upload(dst, src, copy_stream):
            with torch.cuda.stream(copy_stream):
                dst.copy_(src, non_blocking=True)
    """)
    owned = textwrap.dedent("""
        import torch

        class Prefetcher:
            def __init__(self, n):
                self.stream = torch.cuda.Stream()
                with torch.cuda.stream(self.stream):
                    self.staged = torch.empty(n, device="cuda")

            def load(self, host_batch):
                with torch.cuda.stream(self.stream):
                    self.staged.copy_(host_batch, non_blocking=True)
                torch.cuda.current_stream().wait_stream(self.stream)
                return self.staged
    """)
    assert findings_of({"upload.py": handed_in}, {"SC106"}) == []
    assert findings_of({"prefetch.py": owned}, {"SC106"}) == []


# --- SC105: a handle object whose wait() produces the output (Megatron's fp32 reduce-scatter) --------------------
FP32 = """
import torch

class _ReduceScatterWithFP32AccumulationWorkHandle:
    def __init__(self, all_to_all_handle, all_to_all_output_tensor, output_tensor, world_size):
        self.all_to_all_handle = all_to_all_handle
        self.all_to_all_output_tensor = all_to_all_output_tensor
        self.output_tensor = output_tensor
        self.world_size = world_size

    def wait(self):
        if self.all_to_all_handle is not None:
            self.all_to_all_handle.wait()
        output_tensor_in_fp32 = torch.sum(
            self.all_to_all_output_tensor.view((self.world_size, -1)), dim=0, dtype=torch.float32
        )
        self.output_tensor.copy_(output_tensor_in_fp32)

def reduce_scatter_with_fp32_accumulation(output_tensor, input_tensor, group, async_op):
    world_size = group.size()
    all_to_all_output_tensor = torch.empty_like(input_tensor)
    all_to_all_handle = torch.distributed.all_to_all_single(
        output=all_to_all_output_tensor, input=input_tensor, group=group, async_op=async_op
    )
    reduce_scatter_handle = _ReduceScatterWithFP32AccumulationWorkHandle(
        all_to_all_handle, all_to_all_output_tensor, output_tensor, world_size
    )
    if async_op:
        return reduce_scatter_handle
    else:
        ORDERING
"""


def test_a_handle_object_left_unwaited_leaves_its_output_unwritten():
    racy = _variant(FP32, "pass")
    findings = findings_of({"fp32.py": racy}, {"SC105"})
    built = line_of(racy, "reduce_scatter_handle = _ReduceScatterWithFP32AccumulationWorkHandle(")
    assert summary_of(findings) == [("SC105", "fp32.py", built, "RAW")]
    assert _related(findings[0]) == [("read", len(racy.splitlines()))]
    assert "still writes `output_tensor`, which its caller holds" in findings[0].message


def test_a_handle_object_waited_on_the_synchronous_path_is_clean():
    fixed = _variant(FP32, "reduce_scatter_handle.wait()")
    assert findings_of({"fp32.py": fixed}, {"SC105"}) == []
