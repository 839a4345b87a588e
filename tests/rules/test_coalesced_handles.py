"""SC105 through a coalescing manager's handle stored on the object (issue 14, session 9).

Reduced from Megatron-core 0.16.1 `distributed/param_and_grad_buffer.py` (`_ParamAndGradBucketGroup`):
`start_param_sync` all-gathers every bucket's `param_data` inside `with _coalescing_manager(..., async_ops=async_op)
as cm:` (the collectives themselves get `async_op=async_op`, a variable) and stores `cm` in
`self.param_gather_handle`; `finish_param_sync` waits it before it copies `bucket.param_data` of `for bucket in
self.buckets` into the params. Exact outcomes: (rule, path, line, kind), the buffer and handle the finding names."""

from __future__ import annotations

import textwrap

from static_helpers import findings_of, line_of

GROUP = """
import torch.distributed as dist
from torch.distributed import _coalescing_manager


class BucketGroup:
    def __init__(self, buckets, group):
        self.buckets = buckets
        self.group = group
        self.param_gather_handle = None
        self.param_gather_dispatched = False

    def start_param_sync(self, force_sync=False):
        if force_sync:
            if self.param_gather_handle is not None:
                self.param_gather_handle.wait()
                self.param_gather_handle = None
                return
        async_op = self.overlap and not force_sync
        with _coalescing_manager(self.group, async_ops=async_op) as cm:
            for idx, bucket in enumerate(self.buckets):
                local_view = self.shards[idx][self.rank]
                dist.all_gather_into_tensor(bucket.param_data, local_view, group=self.group, async_op=async_op)
        if async_op:
            self.param_gather_handle = cm
        else:
            self.param_gather_handle = None
        self.param_gather_dispatched = True

    def finish_param_sync(self):
        if not self.param_gather_dispatched:
            self.start_param_sync()
        if self.param_gather_handle is not None:
            WAIT
            self.param_gather_handle = None
            for bucket in self.buckets:
                for param in bucket.params:
                    start, end = bucket.param_to_index[param]
                    param_slice = bucket.param_data.view(-1)[start:end]
                    param.data.copy_(param_slice.view(param.data.shape))
                bucket.param_data.zero_()
"""


def _variant(wait: str) -> str:
    return textwrap.dedent(GROUP).replace("WAIT", wait)


def test_bucket_read_after_the_handle_is_cleared_unwaited():
    racy = _variant("pass")
    findings = findings_of({"param_and_grad_buffer.py": racy}, {"SC105"})
    assert [(f.rule, f.primary.path, f.primary.line, f.kind) for f in findings] == [
        ("SC105", "param_and_grad_buffer.py", line_of(racy, "param.data.copy_(param_slice"), "RAW")]
    [finding] = findings
    assert finding.extra["path"] == "self.buckets.param_data"
    assert finding.extra["handle"] == "self.param_gather_handle"
    # the launch it names is the coalescing manager's `with`, whose `cm` the handle is
    assert [(r.role, r.line) for r in finding.related] == [
        ("call", line_of(racy, "with _coalescing_manager(self.group"))]


def test_waited_handle_is_no_finding():
    # the call of start_param_sync before the wait waits only when forced: not what orders the copy; the wait does
    assert findings_of({"param_and_grad_buffer.py": _variant("self.param_gather_handle.wait()")}, {"SC105"}) == []


def test_handle_waited_by_a_helper_on_every_path_is_no_finding():
    # A helper that always waits the handle (no condition around its wait) orders the copy after the all-gather.
    source = _variant("self._wait_gather()") + textwrap.indent(textwrap.dedent("""
        def _wait_gather(self):
            self.param_gather_handle.wait()
    """), "    ")
    assert findings_of({"param_and_grad_buffer.py": source}, {"SC105"}) == []


def test_synchronous_coalescing_manager_handle_dropped_is_no_finding():
    # The manager's handle is never stored: nothing travels (the flag is a variable, so nothing is checked here).
    source = _variant("pass").replace("            self.param_gather_handle = cm\n", "            pass\n")
    assert findings_of({"param_and_grad_buffer.py": source}, {"SC105"}) == []
