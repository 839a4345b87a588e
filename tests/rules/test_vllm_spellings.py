"""vLLM 0.33.0's spellings of the shapes the engine knows, reduced from the functions of the mutation benchmark's
sites (issue 14): a local that names an attribute (`state = self._slot_mapping_staging`, `draft: torch.Tensor =
self._draft_token_ids`) is that attribute where a tensor op uses it. Each racy source is the real function less its
wait; its twin with the wait gives no finding. Exact outcomes: (rule, path, line, kind)."""

from __future__ import annotations

import textwrap

from static_helpers import facts_of, findings_of, line_of, program_of, summary_of
from streamcheck.rules.orderings import orderings_of


def _variant(source: str, ordering: str) -> str:
    return textwrap.dedent(source).replace("ORDERING", ordering)


# --- gpu_model_runner.py `_copy_draft_token_ids_to_cpu`: an annotated binding ------------------------------------
DRAFTS = """
import torch

class Runner:
    def copy_drafts(self, num_reqs):
        draft_token_ids: torch.Tensor = self._draft_token_ids
        default_stream = torch.cuda.current_stream()
        with torch.cuda.stream(self.draft_copy_stream):
            ORDERING
            self.draft_cpu[:num_reqs].copy_(draft_token_ids, non_blocking=True)
            self.draft_event.record()

    def get_drafts(self, n):
        self.draft_event.synchronize()
        return self.draft_cpu[:n].tolist()
"""


def test_an_annotated_local_naming_an_attribute_is_read_as_the_attribute():
    racy = _variant(DRAFTS, "pass")
    findings = findings_of({"runner.py": racy})
    assert summary_of(findings) == [("SC101", "runner.py", line_of(racy, "copy_(draft_token_ids"), "RAW")]
    assert findings[0].extra["path"] == "self._draft_token_ids"
    assert findings_of({"runner.py": _variant(DRAFTS, "self.draft_copy_stream.wait_stream(default_stream)")}) == []


# --- vllm/distributed/kv_transfer/kv_connector/v1/hisparse/worker.py `_stage_row_mirror_mapping` -----------------
STAGING = """
import torch

class Worker:
    def stage_rows(self, num_tokens):
        state = self._slot_mapping_staging
        slots = self.slot_mapping
        main_stream = torch.cuda.current_stream()
        ORDERING
        with torch.cuda.stream(state.stream):
            state.slots[:num_tokens].copy_(slots[:num_tokens], non_blocking=True)
            state.event.record(state.stream)

    def rows(self):
        state = self._slot_mapping_staging
        torch.cuda.current_stream().wait_event(state.event)
        return state.slots.sum()
"""


def test_a_local_naming_an_attribute_reaches_the_streams_and_tensors_held_on_it():
    racy = _variant(STAGING, "pass")
    copy = line_of(racy, "state.slots[:num_tokens].copy_")
    findings = findings_of({"worker.py": racy})
    assert sorted(summary_of(findings)) == [("SC101", "worker.py", copy, "RAW"), ("SC106", "worker.py", copy, "WAR")]
    assert sorted(f.extra["path"] for f in findings) == ["self._slot_mapping_staging.slots", "self.slot_mapping"]
    assert findings_of({"worker.py": _variant(STAGING, "state.stream.wait_stream(main_stream)")}) == []


def test_a_size_taken_from_a_parameter_is_no_tensor_read():
    # `num_reqs = self.batch.num_reqs` handed to a factory (as in pp_utils.py `receive`): only a tensor's own ops,
    # collectives and `out=` read the path a local names.
    source = textwrap.dedent("""
        import torch

        class Receiver:
            def receive(self):
                num_reqs = self.batch.num_reqs
                with torch.cuda.stream(self.broadcast_stream):
                    combined = torch.empty(2, num_reqs, dtype=torch.int32, device="cuda")
                    torch.distributed.broadcast(combined, src=0)
                return combined
    """)
    assert findings_of({"recv.py": source}) == []


def test_a_rebound_local_no_longer_names_the_attribute():
    source = textwrap.dedent("""
        import torch

        class Sender:
            def send(self):
                x = self.buffer
                x.add_(1)
                x = self.other
                with torch.cuda.stream(self.side):
                    self.out.copy_(x, non_blocking=True)
    """)
    [facts] = facts_of({"send.py": source})
    [fn] = [f for f in facts.functions if f.name == "send"]
    assert [(a.kind, a.path, a.op) for a in fn.accesses] == [
        ("write", "self.buffer", "add_"), ("write", "self.out", "copy_"), ("read", "self.other", "copy_")]


def test_a_local_naming_a_parameter_stays_a_local():
    # vLLM's `async_tensor_h2d`: `t = data` may be a host list or array as often as a tensor, so the parameter is
    # not taken as read where the local is (its copies would be taken as device reads of an outside producer).
    source = textwrap.dedent("""
        import torch

        def to_device(data, out):
            t = data
            return out.copy_(t, non_blocking=True)

        class Bitmask:
            def apply(self, grammar_bitmask):
                with torch.cuda.stream(self.copy_stream):
                    to_device(grammar_bitmask, out=self.bitmask)
                torch.cuda.current_stream().wait_stream(self.copy_stream)
    """)
    assert findings_of({"h2d.py": source}) == []
    [facts] = facts_of({"h2d.py": source})
    [fn] = [f for f in facts.functions if f.name == "to_device"]
    assert [(a.kind, a.path, a.op) for a in fn.accesses] == [("write", "out", "copy_")]


# --- vllm/v1/worker/gpu/pp_utils.py `PPHandler`: a captured main stream, an in-place broadcast over lines --------
PP_HANDLER = """
import torch

class PPHandler:
    def __init__(self, device):
        self.main_stream = torch.cuda.current_stream(device)
        self.broadcast_stream = torch.cuda.Stream(device)

    def broadcast_drafts(self, draft_tokens):
        with torch.cuda.stream(self.broadcast_stream):
            ORDERING
            torch.distributed.broadcast(
                draft_tokens, src=self.last_rank, group=self.broadcast_group
            )
            draft_tokens.record_stream(self.broadcast_stream)

    def receive(self):
        with torch.cuda.stream(self.broadcast_stream):
            self.broadcast_stream.wait_stream(self.main_stream)
            sampled = torch.empty(4, 8, device="cuda")
            torch.distributed.broadcast(sampled, src=self.last_rank)
            sampled.copy_(self.offsets)
            event = self.broadcast_stream.record_event()
            sampled.record_stream(self.main_stream)
        self.queue.append((event, sampled))
"""


def test_a_broadcast_over_lines_of_a_parameter_needs_the_main_stream_first():
    # The broadcast reads `draft_tokens` in place: its own write is not the tensor's producer, and the call starts a
    # line above the argument. The other method's wait on the main stream orders only that method's reads.
    racy = _variant(PP_HANDLER, "pass")
    findings = findings_of({"pp.py": racy})
    assert summary_of(findings) == [("SC101", "pp.py", line_of(racy, "draft_tokens, src="), "RAW")]
    assert findings[0].extra["path"] == "draft_tokens"
    assert findings[0].extra["reader_stream"] == "self.broadcast_stream"
    assert findings[0].extra["producer"] == "outside"
    assert findings_of({"pp.py": _variant(PP_HANDLER, "self.broadcast_stream.wait_stream(self.main_stream)")}) == []
    one_line = racy.replace("broadcast(\n                draft_tokens, src=self.last_rank, group=self.broadcast_group\n"
                            "            )", "broadcast(draft_tokens, src=self.last_rank)")
    assert summary_of(findings_of({"pp.py": one_line})) == [
        ("SC101", "pp.py", line_of(one_line, "broadcast(draft_tokens"), "RAW")]


def test_a_wait_for_a_captured_current_stream_inside_a_region_is_no_self_wait():
    # `self.main_stream` was taken in `__init__`: inside `with stream(self.broadcast_stream)` it is still the main
    # stream, so `receive`'s wait orders its read of `self.offsets` (a tensor made outside the scan).
    racy = _variant(PP_HANDLER, "pass").replace(
        "            self.broadcast_stream.wait_stream(self.main_stream)\n            sampled =",
        "            sampled =")
    drafts, add = line_of(racy, "draft_tokens, src="), line_of(racy, "sampled.copy_(self.offsets)")
    # (with no wait of the broadcast stream left anywhere, SC106 also sees the broadcast overwrite draft_tokens)
    assert sorted((f.rule, f.primary.line, f.kind, f.extra["path"]) for f in findings_of({"pp.py": racy})) == [
        ("SC101", drafts, "RAW", "draft_tokens"), ("SC101", add, "RAW", "self.offsets"),
        ("SC106", drafts, "WAR", "draft_tokens")]
    program = program_of({"pp.py": _variant(PP_HANDLER, "pass")})
    receive = program.functions["pp.py::PPHandler.receive"]
    [wait] = [o for o in orderings_of(program, receive) if o.kind == "wait_stream"]
    assert (wait.waiter, wait.target) == ("self.broadcast_stream@pp.py::PPHandler", "")


# --- vllm/models/inkling/nvidia/ops/qkvr_prep.py `qkvr_prep`: a Triton launch in a helper called on a side stream --
QKVR = """
import torch
import triton

@triton.jit
def _kv_kernel(qkvr_ptr, cache_ptr, tokens, eps, BLOCK):
    pass

def _run_tiled_kv(qkvr: torch.Tensor, key_cache: torch.Tensor, *, eps: float) -> None:
    tokens = qkvr.shape[0]
    _kv_kernel[(triton.cdiv(tokens, 64),)](
        qkvr,
        key_cache,
        tokens,
        eps,
        BLOCK=64,
    )

def qkvr_prep(qkvr: torch.Tensor, key_cache: torch.Tensor, eps: float):
    kv_stream = aux_stream()
    current_stream = torch.cuda.current_stream()
    ORDERING
    with torch.cuda.stream(kv_stream):
        _run_tiled_kv(qkvr, key_cache, eps=eps)
    current_stream.wait_stream(kv_stream)
"""


def test_a_kernel_launch_reads_its_tensor_arguments():
    # `_kv_kernel[grid](...)` reads the tensors it is given (parameters annotated as tensors; `tokens`, `eps` are
    # numbers): called under `kv_stream`, the caller's inputs need the current stream first.
    racy = _variant(QKVR, "pass")
    findings = findings_of({"qkvr.py": racy})
    assert summary_of(findings) == [("SC101", "qkvr.py", line_of(racy, "_run_tiled_kv(qkvr, key_cache"), "RAW")]
    assert findings[0].extra["path"] == "qkvr"
    assert findings[0].extra["reader_stream"] == "kv_stream"
    assert findings_of({"qkvr.py": _variant(QKVR, "kv_stream.wait_stream(current_stream)")}) == []
    [facts] = facts_of({"qkvr.py": racy})
    [helper] = [f for f in facts.functions if f.name == "_run_tiled_kv"]
    assert [(a.kind, a.path, a.op) for a in helper.accesses] == [
        ("read", "qkvr", "_kv_kernel[]"), ("read", "key_cache", "_kv_kernel[]")]


# --- gpu_model_runner.py `_copy_draft_token_ids_to_cpu` / `_get_draft_token_ids_cpu`: a D2H kept on self ------------
DRAFTS_TO_HOST = """
import torch

class Runner:
    def copy_drafts(self, draft_token_ids):
        default_stream = torch.cuda.current_stream()
        num_reqs = draft_token_ids.shape[0]
        with torch.cuda.stream(self.draft_copy_stream):
            self.draft_copy_stream.wait_stream(default_stream)
            self.draft_token_ids_cpu[:num_reqs].copy_(draft_token_ids, non_blocking=True)
            self.draft_event.record()

    def get_drafts(self, n):
        ORDERING
        return self.draft_token_ids_cpu[:n].tolist()
"""


def test_a_host_read_in_another_method_of_a_copy_kept_on_self_needs_a_wait():
    racy = _variant(DRAFTS_TO_HOST, "pass")
    copy = line_of(racy, "copy_(draft_token_ids")
    every = findings_of({"runner.py": racy})
    # (the hand-out to the current stream's readers is outside_consumers.py's SC101, there before this shape)
    assert sorted(summary_of(every)) == [("SC101", "runner.py", copy, "RAW"),
                                       ("SC102", "runner.py", line_of(racy, ".tolist()"), "HOST")]
    findings = [f for f in every if f.rule == "SC102"]
    assert findings[0].extra["path"] == "self.draft_token_ids_cpu"
    assert [(r.role, r.line) for r in findings[0].related] == [("write", copy)]
    assert findings_of({"runner.py": _variant(DRAFTS_TO_HOST, "self.draft_event.synchronize()")}) == []


# --- gpu_model_runner.py `_copy_valid_sampled_token_count` / `_get_valid_sampled_token_count`: locals for all ------
COUNTS = """
import torch

class Runner:
    def copy_counts(self, next_token_ids: torch.Tensor, valid_sampled_tokens_count: torch.Tensor) -> None:
        default_stream = torch.cuda.current_stream()
        with torch.cuda.stream(self.count_copy_stream):
            COPY_ORDERING
            counts = valid_sampled_tokens_count
            counts_cpu = self.count_cpu
            counts_cpu[: counts.shape[0]].copy_(counts, non_blocking=True)
            self.count_event.record()
        self.prev = next_token_ids.unsqueeze(1)

    def get_counts(self) -> list[int]:
        sampled_count_event = self.count_event
        counts_cpu = self.count_cpu
        HOST_ORDERING
        return counts_cpu[: self.prev.shape[0]].tolist()
"""


def _counts(copy_ordering: str, host_ordering: str) -> str:
    return textwrap.dedent(COUNTS).replace("COPY_ORDERING", copy_ordering).replace("HOST_ORDERING", host_ordering)


def test_a_local_naming_a_parameter_annotated_as_a_tensor_is_that_tensor_whatever_its_name():
    # `counts = valid_sampled_tokens_count`: a parameter annotated as nothing but a tensor is a tensor (unlike
    # `t = data` above), and the source of a copy is one even where its name says `count`.
    racy = _counts("pass", "sampled_count_event.synchronize()")
    findings = findings_of({"runner.py": racy})
    assert summary_of(findings) == [("SC101", "runner.py", line_of(racy, "copy_(counts"), "RAW")]
    assert findings[0].extra["path"] == "valid_sampled_tokens_count"
    fixed = _counts("self.count_copy_stream.wait_stream(default_stream)", "sampled_count_event.synchronize()")
    assert findings_of({"runner.py": fixed}) == []


def test_a_host_read_through_locals_naming_the_kept_copy_and_its_event_needs_the_event_synchronized():
    racy = _counts("self.count_copy_stream.wait_stream(default_stream)", "pass")
    every = findings_of({"runner.py": racy})
    findings = [f for f in every if f.rule == "SC102"]
    assert summary_of(findings) == [("SC102", "runner.py", line_of(racy, ".tolist()"), "HOST")]
    assert [(r.role, r.line) for r in findings[0].related] == [("write", line_of(racy, "copy_(counts"))]


# --- gpu_model_runner.py `AsyncGPUModelRunnerOutput.__init__`: a stream parameter that another constructor waits --
OUTPUTS = """
import torch

class AsyncOutput:
    def __init__(self, sampled_token_ids: torch.Tensor, async_output_copy_stream: torch.cuda.Stream):
        self._sampled_token_ids = sampled_token_ids
        default_stream = torch.cuda.current_stream()
        with torch.cuda.stream(async_output_copy_stream):
            ORDERING
            self.sampled_token_ids_cpu = self._sampled_token_ids.to("cpu", non_blocking=True)
            self.ready.record()

    def get_output(self):
        self.ready.synchronize()
        return self.sampled_token_ids_cpu.tolist()

class AsyncPoolingOutput:
    def __init__(self, pooler_output: torch.Tensor, async_output_copy_stream: torch.cuda.Stream):
        self._pooler_output = pooler_output
        default_stream = torch.cuda.current_stream()
        with torch.cuda.stream(async_output_copy_stream):
            async_output_copy_stream.wait_stream(default_stream)
            self.pooler_output_cpu = self._pooler_output.to("cpu", non_blocking=True)
            self.ready.record()

    def get_output(self):
        self.ready.synchronize()
        return self.pooler_output_cpu.tolist()
"""


def test_a_wait_opening_another_functions_region_does_not_order_a_stream_parameter_of_the_same_name():
    racy = _variant(OUTPUTS, "pass")
    assert summary_of(findings_of({"outputs.py": racy})) == [
        ("SC101", "outputs.py", line_of(racy, "self._sampled_token_ids.to("), "RAW")]
    assert findings_of({"outputs.py": _variant(OUTPUTS, "async_output_copy_stream.wait_stream(default_stream)")}) == []
