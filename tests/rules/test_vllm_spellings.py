"""vLLM 0.33.0's spellings of the shapes the engine knows, reduced from the functions of the mutation benchmark's
sites (issue 14): a local that names an attribute (`state = self._slot_mapping_staging`, `draft: torch.Tensor =
self._draft_token_ids`) is that attribute where a tensor op uses it. Each racy source is the real function less its
wait; its twin with the wait gives no finding. Exact outcomes: (rule, path, line, kind)."""

from __future__ import annotations

import textwrap

from static_helpers import facts_of, findings_of, line_of


def _variant(source: str, ordering: str) -> str:
    return textwrap.dedent(source).replace("ORDERING", ordering)


def _summary(findings):
    return [(f.rule, f.primary.path, f.primary.line, f.kind) for f in findings]


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
    assert _summary(findings) == [("SC101", "runner.py", line_of(racy, "copy_(draft_token_ids"), "RAW")]
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
    assert sorted(_summary(findings)) == [("SC101", "worker.py", copy, "RAW"), ("SC106", "worker.py", copy, "WAR")]
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
