"""torch 2.13's collective names (`all_gather_single`, `reduce_scatter_single`; the `_into_tensor` / `_tensor`
spellings are deprecated there) write their first argument like the old ones: FSDP1's unshard all-gathers with
`dist.all_gather_single(padded_unsharded_flat_param, sharded_flat_param, pg)`."""

from __future__ import annotations

import pytest

from static_helpers import facts_of, findings_of, line_of

GATHER = """
import torch
import torch.distributed as dist

class Gather:
    def gather(self, shard):
        self.comm_stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(self.comm_stream):
            dist.{collective}(self.full, shard)

    def use(self):
        return self.full.sum()
"""


@pytest.mark.parametrize("collective", ["all_gather_single", "reduce_scatter_single"])
def test_first_argument_is_written_by_the_collective(collective):
    source = GATHER.replace("{collective}", collective)
    [facts] = facts_of({"pkg/gather.py": source})
    gather = next(f for f in facts.functions if f.qualname == "Gather.gather")
    assert [(a.kind, a.path, a.op, a.region, a.collective) for a in gather.accesses] == [
        ("write", "self.full", collective, 0, True), ("read", "shard", collective, 0, True)]
    # the reader on the current stream never waits for the collective's stream
    [finding] = findings_of({"pkg/gather.py": source})
    assert (finding.rule, finding.kind, finding.primary.path, finding.primary.line) == (
        "SC101", "RAW", "pkg/gather.py", line_of(source, f"dist.{collective}("))
    assert (finding.extra["path"], finding.extra["writer_stream"], finding.extra["reader_stream"]) == (
        "self.full", "self.comm_stream", "")
