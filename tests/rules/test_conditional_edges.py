"""Orderings that a CUDA run does not always make: a host synchronize a helper makes only when the caller takes a
branch (a profiling timer), a synchronize under a test for another device (`is_xpu()`); and a field of another
object that only shares a name with the one a side stream reads."""

from __future__ import annotations

from static_helpers import findings_of, line_of, summary_of

TIMED = """
    import torch

    class Timer:
        def __init__(self):
            self.end_event = torch.cuda.Event()

        def stop(self):
            self.end_event.record()
            self.end_event.synchronize()

    class Step:
        def __init__(self):
            self.side = torch.cuda.Stream()
            self.timer = Timer()
            self.buf = torch.empty(8, device="cuda")

        def log(self, profiling):
            {guard}self.timer.stop()

        def fill(self, x, profiling):
            self.buf.copy_(x)
            self.log(profiling)

        def run(self, x, profiling):
            self.fill(x, profiling)
            with torch.cuda.stream(self.side):
                return self.buf.sum()
"""


def test_a_host_sync_a_helper_makes_only_under_a_condition_orders_nothing_for_its_callers():
    # (DeepSpeed's comm log_wrapper synchronizes its timer's event only when comm logging is on)
    racy = TIMED.format(guard="if profiling:\n                ")
    assert summary_of(findings_of({"m.py": racy})) == [("SC101", "m.py", line_of(racy, "self.buf.copy_(x)"), "RAW")]


def test_the_same_helper_called_on_every_path_orders_the_write():
    assert findings_of({"m.py": TIMED.format(guard="")}) == []


PLATFORM = """
    import torch
    from vllm.platforms import current_platform

    def broadcast(main, side, tokens, overlap):
        tokens.add_(1)
        if {test}:
            main.synchronize()
        with torch.cuda.stream(side):
            torch.distributed.broadcast(tokens, src=0)
"""


def test_a_synchronize_only_another_device_runs_is_no_edge_of_a_cuda_run():
    racy = PLATFORM.format(test="current_platform.is_xpu()")
    assert summary_of(findings_of({"m.py": racy})) == [("SC101", "m.py", line_of(racy, "tokens.add_(1)"), "RAW")]


def test_a_synchronize_under_any_other_condition_still_counts():
    assert findings_of({"m.py": PLATFORM.format(test="overlap")}) == []


POOLING = """
    import torch

    class PoolingOutput:
        def __init__(self, pooler_output, main_stream, copy_stream):
            self.pooler_output = pooler_output
            self.copy_event = torch.cuda.Event()
            with torch.cuda.stream(copy_stream):
                {wait}
                self.pooler_output_cpu = self.pooler_output.to("cpu", non_blocking=True)
                self.copy_event.record()

        def get_output(self):
            self.copy_event.synchronize()
            return self.pooler_output_cpu

    class OtherRunnerOutput:
        def __init__(self, output, pooled, main_stream, copy_stream):
            self._output = output
            with torch.cuda.stream(copy_stream):
                copy_stream.wait_stream(main_stream)
                self._output.pooler_output = torch.stack(pooled).to("cpu", non_blocking=True)
"""


def test_another_objects_field_of_the_same_name_is_not_the_producer_of_an_input():
    racy = POOLING.format(wait="pass")
    [finding] = findings_of({"m.py": racy})
    assert (finding.rule, finding.kind, finding.primary.line, finding.extra["path"], finding.extra["producer"]) \
        == ("SC101", "RAW", line_of(racy, "self.pooler_output.to("), "self.pooler_output", "outside")


def test_the_input_waited_for_before_the_copy_is_ordered():
    assert findings_of({"m.py": POOLING.format(wait="copy_stream.wait_stream(main_stream)")}) == []


# FSDP2's foreach_reduce (torch 2.13 _fsdp_collectives.py:680 deleted): the all-reduce stream waits for the
# reduce-scatter stream inside the HSDP block, for that block's own all-reduce; the hook block, under a test of
# another name, runs on the all-reduce stream on the 1-d FSDP way too, where that wait never ran.
REDUCE = """
    import torch
    import torch.distributed as dist

    def reduce(inp, rs_stream, ar_stream, ar_group, hook, n):
        rs_stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(rs_stream):
            out = torch.empty(n, device="cuda")
            out.copy_(inp)
            if {group_test}:
                ar_stream.wait_stream(rs_stream)
                with torch.cuda.stream(ar_stream):
                    dist.all_reduce(out, group=ar_group)
        if hook is not None:
            {hook_wait}with torch.cuda.stream(ar_stream):
                hook(out)
        return out
"""


def test_a_wait_for_its_own_blocks_work_does_not_order_a_block_under_another_test():
    racy = REDUCE.format(group_test="ar_group is not None", hook_wait="")
    assert summary_of(findings_of({"m.py": racy})) == [("SC101", "m.py", line_of(racy, "out.copy_(inp)"), "RAW")]


def test_the_block_under_another_test_that_waits_itself_is_ordered():
    fixed = REDUCE.format(group_test="ar_group is not None",
                          hook_wait="ar_stream.wait_stream(rs_stream)\n            ")
    assert findings_of({"m.py": fixed}) == []


def test_a_wait_under_a_test_of_the_same_name_still_counts():
    # (correlated guards: `if hook is not None:` twice is one choice made twice)
    assert findings_of({"m.py": REDUCE.format(group_test="hook is not None and ar_group", hook_wait="")}) == []


def test_a_wait_in_the_block_that_also_holds_the_write_still_counts():
    # (the write and its wait run together: the way without the block has neither)
    source = """
        import torch

        def reduce(inp, rs_stream, ar_stream, ar_group, hook, n):
            out = torch.empty(n, device="cuda")
            rs_stream.wait_stream(torch.cuda.current_stream())
            if ar_group is not None:
                with torch.cuda.stream(rs_stream):
                    out.copy_(inp)
                ar_stream.wait_stream(rs_stream)
                with torch.cuda.stream(ar_stream):
                    out.add_(1)
            if hook is not None:
                with torch.cuda.stream(ar_stream):
                    hook(out)
            return out
    """
    assert findings_of({"m.py": source}) == []
