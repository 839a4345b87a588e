"""SC102-SC105 beyond their own examples: the exact finding (rule, line, kind, related places, message), orderings
through calls and classes, and the false-positive shapes found on DeepSpeed, Megatron-core and FSDP."""

from __future__ import annotations

import textwrap

from static_helpers import findings_of, line_of, summary_of

HAZARDS = {"SC102", "SC103", "SC104", "SC105"}


def _found(sources: dict[str, str]):
    return findings_of(sources, HAZARDS)


def _lines_of(source: str, text: str) -> list[int]:
    return [n for n, line in enumerate(textwrap.dedent(source).splitlines(), 1) if text in line]


# --- SC102 ----------------------------------------------------------------------------------------------------------
D2H = """
import torch

class Offload:
    def __init__(self, n):
        self.cpu_grads = torch.empty(n, pin_memory=True)

    def wait_for_copies(self):
        torch.cuda.current_stream().synchronize()

    def offload(self, grad):
        self.cpu_grads.copy_(grad, non_blocking=True)
        self.wait_for_copies()
        return self.cpu_grads.sum()

    def offload_racy(self, grad):
        self.cpu_grads.copy_(grad, non_blocking=True)
        self.log(grad)
        return self.cpu_grads.sum()

    def log(self, grad):
        print(grad.shape)
"""


def test_sc102_exact_finding_and_ordering_through_a_helper():
    [finding] = _found({"offload.py": D2H})
    _, racy_read = _lines_of(D2H, "return self.cpu_grads.sum()")
    _, racy_copy = _lines_of(D2H, "self.cpu_grads.copy_(grad, non_blocking=True)")
    assert summary_of([finding]) == [("SC102", "offload.py", racy_read, "HOST")]
    assert finding.symbol == "Offload.offload_racy"
    assert [(r.role, r.line) for r in finding.related] == [("write", racy_copy)]
    assert finding.related[0].snippet == "self.cpu_grads.copy_(grad, non_blocking=True)"
    assert finding.message.startswith("`self.cpu_grads` is read on the host while the non_blocking device-to-host")
    assert finding.extra == {"path": "self.cpu_grads", "copy_line": racy_copy}


def test_sc102_direction_from_the_name_and_from_device_placements():
    source = """
    import torch

    def to_host(dev_tensor, host_buffer):
        host_buffer.copy_(dev_tensor, non_blocking=True)
        return host_buffer[0] + 1

    def device_to_device(x):
        y = torch.empty(4, device="cuda")
        y.copy_(x, non_blocking=True)
        return y[0] + 1
    """
    assert summary_of(_found({"m.py": source})) == [("SC102", "m.py", line_of(source, "return host_buffer[0]"), "HOST")]


def test_sc102_item_on_the_host_buffer_is_a_read_not_a_sync():
    source = """
    import torch

    def peek(d):
        h = torch.empty(1, pin_memory=True)
        h.copy_(d, non_blocking=True)
        return h.item()

    def peek_first(d):
        h = torch.empty(4, pin_memory=True)
        h.copy_(d, non_blocking=True)
        first = h[0].item()
        return h[1] + first
    """
    findings = _found({"m.py": source})
    assert [(f.rule, f.primary.line) for f in findings] == [
        ("SC102", line_of(source, "return h.item()")), ("SC102", line_of(source, "first = h[0].item()"))]
    assert all("read by `.item()`" in f.message for f in findings)


# --- SC103 ----------------------------------------------------------------------------------------------------------
def test_sc103_exact_finding_in_a_prefetch_loop():
    source = """
    import torch

    def prefetch(batches, dev):
        host = torch.empty(dev.shape, pin_memory=True)
        for batch in batches:
            dev.copy_(host, non_blocking=True)
            torch.add(batch, 1, out=host)
    """
    [finding] = _found({"p.py": source})
    assert summary_of([finding]) == [("SC103", "p.py", line_of(source, "out=host"), "WAR")]
    assert [(r.role, r.line) for r in finding.related] == [("read", line_of(source, "dev.copy_(host"))]
    assert "overwritten on the host by `out=`" in finding.message


def test_sc103_not_before_an_event_synchronize_or_in_the_other_branch():
    source = """
    import torch

    def upload(host, dev, reuse):
        host = host.pin_memory()
        if reuse:
            dev.copy_(host, non_blocking=True)
        else:
            host.zero_()
        event = torch.cuda.Event()
        dev.copy_(host, non_blocking=True)
        event.record()
        event.synchronize()
        host.zero_()
    """
    assert _found({"u.py": source}) == []


# --- SC104 ----------------------------------------------------------------------------------------------------------
def test_sc104_exact_finding_with_stream_and_use():
    source = """
    import torch

    def run(side, n):
        t = torch.ones(n, device="cuda")
        with torch.cuda.stream(side):
            total = t.sum()
        t = torch.zeros(n, device="cuda")
        return total, t
    """
    [finding] = _found({"r.py": source})
    assert summary_of([finding]) == [("SC104", "r.py", line_of(source, "t = torch.zeros"), "FREE")]
    assert [(r.role, r.line) for r in finding.related] == [
        ("read", line_of(source, "total = t.sum()")), ("stream context", line_of(source, "with torch.cuda"))]
    assert finding.extra == {"path": "t", "stream": "side"}
    assert "released by rebinding it" in finding.message


def test_sc104_current_stream_regions_and_waits_through_calls_are_no_side_stream_use():
    source = """
    import torch

    def run(n):
        t = torch.ones(n, device="cuda")
        with torch.cuda.stream(torch.cuda.current_stream()):
            total = t.sum()
        del t
        return total

    class Prefetch:
        def join(self):
            torch.cuda.current_stream().wait_stream(self.side)

        def run(self, n):
            t = torch.ones(n, device="cuda")
            with torch.cuda.stream(self.side):
                total = t.sum()
            self.join()
            del t
            return total
    """
    assert _found({"r.py": source}) == []


# --- SC105 ----------------------------------------------------------------------------------------------------------
def test_sc105_exact_finding_for_a_wrapped_collective():
    source = """
    import torch.distributed as dist

    def gather(out, shard, group):
        handle = instrument_w_nvtx(dist.allgather_fn)(out, shard, group=group, async_op=True)
        result = out.view(-1).float()
        handle.wait()
        return result
    """
    [finding] = _found({"g.py": source})
    assert summary_of([finding]) == [("SC105", "g.py", line_of(source, "result = out.view"), "RAW")]
    assert [(r.role, r.line) for r in finding.related] == [("call", line_of(source, "handle = instrument"))]
    assert finding.extra == {"path": "out", "handle": "handle", "collective": "instrument_w_nvtx()"}


def test_sc105_dropped_handle_and_assert_shaped_exclusion():
    source = """
    import torch.distributed as dist

    def fire_and_forget(t):
        dist.all_reduce(t, async_op=True)
        t.mul_(2)

    def either(t, out, flag):
        if flag:
            handle = dist.all_reduce(t, async_op=True)
        else:
            t.mul_(2)
    """
    findings = _found({"f.py": source})
    first_mul = _lines_of(source, "t.mul_(2)")[0]
    # the other arm's `t.mul_(2)` is no use after the launch; but `either` returns with the caller's `t` still
    # being reduced and `handle` never waited (handles_at_exit.py): one finding at the launch
    launch = _lines_of(source, "handle = dist.all_reduce")[0]
    assert summary_of(findings) == [("SC105", "f.py", first_mul, "WAR"), ("SC105", "f.py", launch, "RAW")]
    assert "its handle (dropped)" in findings[0].message
    assert "either returns while the async `all_reduce`" in findings[1].message
