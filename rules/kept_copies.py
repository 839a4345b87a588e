"""Where a helper's non_blocking device-to-host copy lands on `self` of its caller, and where a helper reads such a
kept attribute on the host: the helper halves of SC102's "kept on `self` by the copy" (host_read_after_escape.py).

vLLM hands its pinned buffers to module-level helpers on both sides. The copy: `copy_num_valid_draft_tokens(
self._num_valid_draft_tokens_cpu, stream, event, ...)` copies into its parameter inside `with stream(...)`, and
`self.draft_tokens_np = async_copy_to_np(draft_tokens)` keeps what the helper returns
(`x.to("cpu", non_blocking=True).numpy()`). The read: `update_scheduler_for_invalid_drafts(event,
self._num_valid_draft_tokens_cpu, ...)` synchronizes the event, then reads its parameter with `.item()`. Without
the helpers' names for them these are the same as a method's own copy into `self.x` and another method's read of
`self.x`, which SC102 follows.

Only one call level is followed on each side, and only a parameter (or result) the helper neither waits for after
the copy nor before the read (a host wait in the helper orders everything after it).
"""

from __future__ import annotations

from typing import Iterator

from .aliasing import as_attribute
from .facts import RETURNED, AsyncCopy, Call, Sync
from .hazard_flow import host_blocked_between
from .program import Function, Program
from .summaries import argument_for


def kept_by_callers(program: Program, helper: Function, copy: AsyncCopy) -> Iterator[tuple[Function, Call, str]]:
    """(caller, call, `self.x`): a caller keeps on `self` what `helper`'s copy fills, when the helper returns with
    no host wait after the copy: the copy's destination is a parameter the caller binds to `self.x`, or the
    helper returns the copy's result (or a view of it, `.numpy()`) and the caller binds the call to `self.x`."""
    root = copy.dst.split(".", 1)[0].split("[", 1)[0]
    param = root if root == copy.dst and root in helper.facts.params and root not in ("self", "cls") else ""
    returned = _returns_copy(helper, copy)
    if not (param or returned):
        return
    if host_blocked_between(program, helper, copy.line, helper.facts.end_line + 1, {copy.dst}):
        return
    for caller, call in program.call_sites.get(helper.id, ()):
        kept = ""
        if param:
            argument = argument_for(helper, call, param) or ""
            kept = as_attribute(caller, argument, call.line) if argument else ""
        if returned and not kept:
            kept = next((path for path, line, column in caller.facts.call_results
                         if (line, column) == (call.line, call.column)), "")
        if _is_self_attribute(kept):
            yield caller, call, kept


def host_reads_in_helpers(program: Program, method: Function, attribute: str) -> Iterator[tuple[Call, Function, Sync]]:
    """(call, helper, read): `method` hands `attribute` to a helper that reads that parameter on the host with no
    host wait before the read in the helper."""
    for call, edges in program.exact_edges_of(method.id):
        for edge in edges:
            helper = program.functions[edge.callee]
            for param in helper.facts.params:
                argument = argument_for(helper, call, param)
                if not argument or as_attribute(method, argument, call.line) != attribute:
                    continue
                for sync in helper.facts.syncs:
                    if sync.kind == "host_sync" and _reads(sync.receiver, param) \
                            and not host_blocked_between(program, helper, helper.facts.line, sync.line, {param}):
                        yield call, helper, sync
                        break


def _returns_copy(helper: Function, copy: AsyncCopy) -> bool:
    """Whether `helper` returns the copy's destination, or the result of the copy's call or of a method chained on
    it (`return x.to("cpu", non_blocking=True).numpy()`: both calls start where the copy does)."""
    if any(u.how == "escape" and u.arg == RETURNED and u.path == copy.dst for u in helper.facts.uses):
        return True
    return any(row[0] == "return" and len(row[1]) == 1 and ["call", copy.line, copy.column] in row[1][0]
               for row in helper.facts.handle_flow)


def _is_self_attribute(path: str) -> bool:
    return path.startswith("self.") and path.count(".") == 1 and "[" not in path


def _reads(receiver: str, path: str) -> bool:
    return receiver == path or receiver.startswith((path + ".", path + "["))
