"""SC102 through helpers one call away (rules/kept_copies.py), reduced from vLLM 0.33.0: a helper copies into its
parameter, which the caller binds to `self.x` (ngram_proposer_gpu.copy_num_valid_draft_tokens), or returns the
copy's `.numpy()` view, which the caller keeps on `self` (async_utils.async_copy_to_np in spec_decode/utils.py);
another method reads the attribute on the host, itself or through a helper's parameter
(update_scheduler_for_invalid_drafts). Each racy source is the real shape less its wait; its twin with the wait
gives no finding. Exact outcomes: (rule, path, line, kind)."""

from __future__ import annotations

import textwrap

from static_helpers import findings_of, line_of, summary_of


def _variant(source: str, ordering: str) -> str:
    return textwrap.dedent(source).replace("ORDERING", ordering)


# --- ngram_proposer_gpu.py: the copy into a helper's parameter, the read in a helper ------------------------------
PARAMETERS = """
import torch

def update_scheduler(event, counts_cpu, out):
    ORDERING
    for i in range(len(out)):
        out[i] = int(counts_cpu[i].item())

def copy_counts(counts_cpu, copy_stream, event, counts, n):
    default_stream = torch.cuda.current_stream()
    with torch.cuda.stream(copy_stream):
        copy_stream.wait_stream(default_stream)
        counts_cpu[:n].copy_(counts[:n], non_blocking=True)
        event.record()

class Runner:
    def __init__(self, n):
        self._counts_cpu = torch.empty(n, dtype=torch.int32, device="cpu", pin_memory=True)
        self._event = torch.cuda.Event()
        self._stream = torch.cuda.Stream()

    def update_states(self, out):
        update_scheduler(self._event, self._counts_cpu, out)

    def propose(self, counts):
        copy_counts(self._counts_cpu, self._stream, self._event, counts, 4)
"""


def test_a_copy_into_a_helpers_parameter_read_by_a_helper_of_another_method():
    racy = _variant(PARAMETERS, "pass")
    findings = findings_of({"ngram.py": racy}, {"SC102"})
    assert summary_of(findings) == [("SC102", "ngram.py", line_of(racy, "counts_cpu[i].item()"), "HOST")]
    related = [(r.role, r.line) for r in findings[0].related]
    assert related == [("write", line_of(racy, "non_blocking=True")),
                       ("call", line_of(racy, "copy_counts(self._counts_cpu")),
                       ("call", line_of(racy, "update_scheduler(self._event"))]
    assert findings[0].extra["fix_edit"]["insert"] == "torch.cuda.synchronize()"
    assert findings_of({"ngram.py": _variant(PARAMETERS, "event.synchronize()")}, {"SC102"}) == []


def test_a_host_wait_in_the_calling_method_after_the_helper_orders_the_copy():
    fixed = _variant(PARAMETERS, "pass").replace(
        "copy_counts(self._counts_cpu, self._stream, self._event, counts, 4)",
        "copy_counts(self._counts_cpu, self._stream, self._event, counts, 4)\n"
        "        self._event.synchronize()")
    assert findings_of({"ngram.py": fixed}, {"SC102"}) == []


# --- spec_decode/utils.py: a helper's returned `.numpy()` view kept on `self` -------------------------------------
RETURNED = """
import torch

def async_copy_to_np(x):
    return x.to("cpu", non_blocking=True, copy=True).numpy()

class DraftTokensHandler:
    def __init__(self, device=None):
        self.copy_stream = torch.cuda.Stream(device)
        self.copy_event = torch.cuda.Event(blocking=True)
        self.draft_tokens_np = None

    def set_draft_tokens(self, draft_tokens):
        self.copy_stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(self.copy_stream):
            self.draft_tokens_np = async_copy_to_np(draft_tokens)
            draft_tokens.record_stream(self.copy_stream)
            self.copy_event.record()

    def get_draft_tokens(self):
        ORDERING
        return self.draft_tokens_np.tolist()
"""


def test_a_helpers_returned_copy_kept_on_self_and_read_by_another_method():
    racy = _variant(RETURNED, "pass")
    findings = findings_of({"drafts.py": racy}, {"SC102"})
    assert summary_of(findings) == [("SC102", "drafts.py", line_of(racy, ".tolist()"), "HOST")]
    assert "the result of `.to()`" in findings[0].message
    assert [(r.role, r.line) for r in findings[0].related] == [
        ("write", line_of(racy, "non_blocking=True")), ("call", line_of(racy, "= async_copy_to_np("))]
    assert findings_of({"drafts.py": _variant(RETURNED, "self.copy_event.synchronize()")}, {"SC102"}) == []


def test_a_helper_that_waits_after_its_copy_hands_back_a_finished_copy():
    fixed = _variant(RETURNED, "pass").replace(
        '    return x.to("cpu", non_blocking=True, copy=True).numpy()',
        '    out = x.to("cpu", non_blocking=True, copy=True)\n'
        '    torch.cuda.current_stream().synchronize()\n'
        '    return out.numpy()')
    assert findings_of({"drafts.py": fixed}, {"SC102"}) == []
