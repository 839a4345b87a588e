"""SC104's hand-over query (rules/kept_from_a_side_stream.py), reduced from vLLM 0.33.0's PPHandler (pp_utils.py):
tensors allocated on the broadcast stream, kept in `self.queue` with the event recorded there, and waited on the
main stream by another method. Each racy source is the real function less one of its `record_stream` calls; the
real function gives no finding. Exact outcomes: (rule, path, line, kind, tensor)."""

from __future__ import annotations

import textwrap

from static_helpers import findings_of, line_of

RECEIVE = textwrap.dedent("""
import torch
from dataclasses import dataclass


@dataclass
class PendingRecv:
    event: torch.cuda.Event
    sampled_tokens: torch.Tensor
    num_sampled: torch.Tensor
    num_rejected: torch.Tensor
    draft_tokens: torch.Tensor | None = None


class PPHandler:
    def __init__(self, device):
        self.main_stream = torch.cuda.current_stream(device)
        self.broadcast_stream = torch.cuda.Stream(device)
        self.queue = []

    def receive(self, n, recv_drafts):
        with torch.cuda.stream(self.broadcast_stream):
            self.broadcast_stream.wait_stream(self.main_stream)
            sampled_tokens = torch.empty(n, 4, dtype=torch.int64, device=self.device)
            combined = torch.empty(2, n, dtype=torch.int32, device=self.device)
            torch.distributed.broadcast(sampled_tokens, src=0)
            torch.distributed.broadcast(combined, src=0)
            draft_tokens = None
            if recv_drafts:
                draft_tokens = sampled_tokens.new_empty(n, 3)
                torch.distributed.broadcast(draft_tokens, src=0)
            event = self.broadcast_stream.record_event()
            num_sampled, num_rejected = combined.unbind(dim=0)
            sampled_tokens.record_stream(self.main_stream)
            combined.record_stream(self.main_stream)
            if draft_tokens is not None:
                draft_tokens.record_stream(self.main_stream)
        self.queue[-1] = PendingRecv(event, sampled_tokens, num_sampled, num_rejected, draft_tokens)

    def get_prev_sampled_outputs(self):
        slot = self.queue.pop(0)
        self.queue.append(None)
        self.main_stream.wait_event(slot.event)
        return dict(sampled_tokens=slot.sampled_tokens, num_sampled=slot.num_sampled)
""")


def _without(line: str) -> str:
    assert line in RECEIVE
    return RECEIVE.replace(line + "\n", line[:len(line) - len(line.lstrip())] + "pass\n")


def _summary(source: str):
    return [(f.rule, f.primary.path, f.primary.line, f.kind, f.extra["path"])
            for f in findings_of({"pp_utils.py": source}, {"SC104"})]


STORE = line_of(RECEIVE, "self.queue[-1] = PendingRecv(")


def test_every_kept_tensor_recorded_for_the_consumer_stream_is_clean():
    assert _summary(RECEIVE) == []


def test_an_unrecorded_side_allocation_kept_with_its_event():
    racy = _without("            sampled_tokens.record_stream(self.main_stream)")
    assert _summary(racy) == [("SC104", "pp_utils.py", STORE, "FREE", "sampled_tokens")]


def test_views_kept_with_the_event_stand_for_their_base():
    racy = _without("            combined.record_stream(self.main_stream)")
    assert _summary(racy) == [("SC104", "pp_utils.py", STORE, "FREE", "combined")]


def test_a_conditional_allocation_unrecorded():
    racy = _without("                draft_tokens.record_stream(self.main_stream)")
    assert _summary(racy) == [("SC104", "pp_utils.py", STORE, "FREE", "draft_tokens")]


def test_no_consumer_waiting_the_event_on_another_stream_is_no_hand_over():
    alone = _without("            sampled_tokens.record_stream(self.main_stream)").replace(
        "        self.main_stream.wait_event(slot.event)\n", "")
    assert _summary(alone) == []


def test_a_waiter_that_takes_out_only_the_event_drops_the_element_and_uses_nothing():
    # TRL 1.13.0's activation offload: `_, ev = self.fwd_stash[id]; self.s0.wait_event(ev); del self.fwd_stash[id]`
    # keeps the side-stream copy alive until the side stream is done and never reads it on s0
    consumer = ("    def get_prev_sampled_outputs(self):\n"
                "        for k in list(self.queue):\n"
                "            {taken} = self.queue[k]\n"
                "            self.main_stream.wait_event(ev)\n"
                "            del self.queue[k]\n")
    racy = _without("            sampled_tokens.record_stream(self.main_stream)")
    racy = racy[:racy.index("    def get_prev_sampled_outputs")]
    assert _summary(racy + consumer.format(taken="ev, _, _, _, _")) == []
    assert _summary(racy + consumer.format(taken="ev, tokens, _, _, _")) == [
        ("SC104", "pp_utils.py", STORE, "FREE", "sampled_tokens")]
