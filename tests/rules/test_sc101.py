"""SC101 on small programs: the exact finding where the hazard is, none where an ordering covers it."""

from __future__ import annotations

from streamcheck.findings import ROLE_CALL, ROLE_READ, ROLE_STREAM_CONTEXT, ROLE_WRITE

from static_helpers import findings_of, split_outside_reads, line_of

STORE = """
import torch
import torch.distributed as dist

class Init:
    def convert(self, param):
        def all_gather_coalesced(params):
            flat = torch.cat([p.ds_secondary_tensor for p in params])
            return dist.all_gather_into_tensor(self.buffer, flat, async_op=True)
        param.all_gather_coalesced = all_gather_coalesced

    def partition_sec(self, param, full):
        if param.ds_secondary_tensor is not None:
            param.ds_secondary_tensor.copy_(full.view(-1))
            {after_write}
"""

COORDINATOR = """
import torch

class Coordinator:
    def fetch(self, params):
        {before_region}
        with torch.cuda.stream(self.allgather_stream):
            {in_region}
            handle = params[0].all_gather_coalesced(params)
        return handle
"""


def _hpz(after_write="pass", before_region="pass", in_region="pass"):
    return {
        "pkg/__init__.py": "",
        "pkg/store.py": STORE.replace("{after_write}", after_write),
        "pkg/coordinator.py": COORDINATOR.replace("{before_region}", before_region).replace("{in_region}", in_region),
    }


def _summary(findings):
    return [(f.rule, f.kind, f.primary.path, f.primary.line) for f in findings]


def test_hpz_shape_across_files_is_reported_with_its_explanation():
    sources = _hpz()
    [finding] = findings_of(sources)
    write_line = line_of(sources["pkg/store.py"], ".copy_(full")
    assert _summary([finding]) == [("SC101", "RAW", "pkg/store.py", write_line)]
    assert finding.symbol == "Init.partition_sec"
    assert finding.primary.role == ROLE_WRITE
    assert finding.primary.snippet == "param.ds_secondary_tensor.copy_(full.view(-1))"
    related = [(loc.role, loc.path, loc.line) for loc in finding.related]
    assert related == [
        (ROLE_READ, "pkg/store.py", line_of(sources["pkg/store.py"], "torch.cat([p.ds_secondary_tensor")),
        (ROLE_STREAM_CONTEXT, "pkg/coordinator.py", line_of(sources["pkg/coordinator.py"], "with torch.cuda.stream")),
        (ROLE_CALL, "pkg/coordinator.py", line_of(sources["pkg/coordinator.py"], "params[0].all_gather_coalesced")),
    ]
    assert all(loc.snippet for loc in finding.related)
    assert finding.extra["writer_stream"] == ""
    assert finding.extra["reader_stream"] == "self.allgather_stream"
    assert finding.extra["path"] == "param.ds_secondary_tensor"
    assert "self.allgather_stream.wait_stream(torch.cuda.current_stream())" in finding.fix


def test_a_wait_for_the_current_stream_inside_the_region_is_a_wait_for_itself():
    # Inside `with torch.cuda.stream(s):` the current stream *is* s: the wait orders nothing (the wrong wait).
    sources = _hpz(in_region="self.allgather_stream.wait_stream(torch.cuda.current_stream())")
    assert _summary(findings_of(sources)) == [
        ("SC101", "RAW", "pkg/store.py", line_of(sources["pkg/store.py"], ".copy_(full"))]


def test_a_wait_for_the_default_stream_inside_the_region():
    sources = _hpz(in_region="self.allgather_stream.wait_stream(torch.cuda.default_stream())")
    assert findings_of(sources) == []


def test_wait_before_entering_the_region():
    sources = _hpz(before_region="self.allgather_stream.wait_stream(torch.cuda.current_stream())")
    assert findings_of(sources) == []


def test_a_wait_of_another_stream_does_not_order_the_region():
    sources = _hpz(before_region="self.other_stream.wait_stream(torch.cuda.current_stream())")
    assert len(findings_of(sources)) == 1


def test_a_wait_that_may_be_skipped_does_not_order_the_read():
    sources = _hpz(in_region="if self.careful: torch.cuda.current_stream().wait_stream(self.compute)")
    assert len(findings_of(sources)) == 1


def test_synchronize_after_the_write():
    # DeepSpeed 0.13.5's fix.
    assert findings_of(_hpz(after_write="torch.cuda.current_stream().synchronize()")) == []
    assert findings_of(_hpz(after_write="torch.cuda.synchronize()")) == []


def test_a_synchronize_in_a_branch_after_the_write_counts():
    # An ordering on some path is credited: the lint reports what nothing orders (DeepSpeed guards 22 of its
    # synchronizes with `if not get_accelerator().resolves_data_dependency():`).
    sources = _hpz(after_write="if self.debug: torch.cuda.synchronize()")
    assert findings_of(sources) == []


def test_event_recorded_after_the_write_and_waited_before_the_read():
    sources = _hpz(after_write="self.done.record()", in_region="self.allgather_stream.wait_event(self.done)")
    assert findings_of(sources) == []


def test_a_wait_in_an_exactly_resolved_callee_before_the_read():
    sources = {"m.py": """
        import torch

        class Fetcher:
            def release(self, p, full):
                p.staging_shard.copy_(full)

            def order(self):
                self.side.wait_stream(torch.cuda.current_stream())

            def fetch(self, params):
                self.order()
                with torch.cuda.stream(self.side):
                    return torch.cat([p.staging_shard for p in params])
    """}
    assert findings_of(sources) == []
    # Called inside the region, the callee's current stream is the side stream itself: it waits for nothing.
    inside = sources["m.py"].replace("self.order()\n                with", "with").replace(
        "return torch.cat", "self.order()\n                    return torch.cat")
    assert [f.primary.line for f in findings_of({"m.py": inside})] == [line_of(inside, "p.staging_shard.copy_")]


def test_write_and_read_on_the_same_stream_context():
    sources = {"m.py": """
        import torch

        class Worker:
            def produce(self, p, full):
                with torch.cuda.stream(self.side):
                    p.staging_shard.copy_(full)

            def consume(self, params):
                with torch.cuda.stream(self.side):
                    return torch.cat([p.staging_shard for p in params])
    """}
    # No pair: written and read on one stream. (`full`, an input, is copied on the side stream with no wait.)
    assert split_outside_reads(findings_of(sources)) == ([], [("full", 7)])


def test_write_on_a_side_stream_read_later_on_the_current_stream():
    source = """
        import torch

        class Prefetcher:
            def prefetch(self, host):
                with torch.cuda.stream(self.copy_stream):
                    self.staged.copy_(host, non_blocking=True)
                {after_region}

            def step(self, model):
                return model(self.staged)
    """
    racy = source.replace("{after_region}", "pass")
    [finding] = findings_of({"m.py": racy})
    assert _summary([finding]) == [("SC101", "RAW", "m.py", line_of(racy, "self.staged.copy_"))]
    assert finding.extra["writer_stream"] == "self.copy_stream"
    assert finding.extra["reader_stream"] == ""
    assert [(loc.role, loc.line) for loc in finding.related] == [
        (ROLE_READ, line_of(racy, "model(self.staged)")), (ROLE_STREAM_CONTEXT, line_of(racy, "with torch.cuda"))]
    fixed = source.replace("{after_region}", "torch.cuda.current_stream().wait_stream(self.copy_stream)")
    assert findings_of({"m.py": fixed}) == []


def test_generic_attributes_need_the_same_owner():
    by_name_only = {"m.py": """
        import torch

        def load(p, full):
            p.weight.copy_(full)

        def fetch(module, s):
            with torch.cuda.stream(s):
                return module.weight * 2
    """}
    assert findings_of(by_name_only) == []
    same_class = """
        import torch

        class Layer:
            def load(self, full):
                self.weight.copy_(full)

            def fetch(self):
                with torch.cuda.stream(self.side):
                    return self.weight * 2
    """
    assert _summary(findings_of({"m.py": same_class})) == [("SC101", "RAW", "m.py", line_of(same_class, "copy_"))]


def test_local_tensor_in_one_function():
    source = """
        import torch

        def run(x, y, s):
            x.copy_(y)
            with torch.cuda.stream(s):
                z = x * 2
            x.add_(1)
            return z
    """
    # The add_ after the region is not consumed by the region's read (program order) ...
    assert _summary(findings_of({"m.py": source}, {"SC101"})) == [
        ("SC101", "RAW", "m.py", line_of(source, "x.copy_(y)"))]
    # ... it overwrites what the side stream may still be reading: SC106's write-after-read.
    assert _summary(findings_of({"m.py": source}, {"SC106"})) == [("SC106", "WAR", "m.py", line_of(source, "x.add_(1)"))]


def test_stream_picked_into_a_local_is_tied_to_its_attribute():
    source = """
        import torch

        class Reducer:
            def average(self, t):
                stream = self.reduction_stream
                if self.overlap:
                    stream.wait_stream(torch.cuda.current_stream())

            def accumulate(self, p, g):
                p.grad_accum_buffer.add_(g)

            def reduce(self, params):
                self.average(params[0])
                stream = self.reduction_stream if self.overlap else torch.cuda.current_stream()
                with torch.cuda.stream(stream):
                    return torch.cat([p.grad_accum_buffer for p in params])
    """
    assert findings_of({"m.py": source}) == []
    unordered = source.replace("                self.average(params[0])\n", "")
    assert _summary(findings_of({"m.py": unordered})) == [
        ("SC101", "RAW", "m.py", line_of(unordered, "grad_accum_buffer.add_"))]


def test_a_stream_handed_in_by_the_caller_counts_as_ordered_where_the_program_waits_on_it():
    source = """
        import torch

        def writeback(handle, shard):
            handle.local_shard_buffer.copy_(shard)

        def wait_for_compute(compute, pre_unshard_stream):
            {wait}

        def unshard(handle, pre_unshard_stream):
            with torch.cuda.stream(pre_unshard_stream):
                return handle.local_shard_buffer.to(torch.float16)
    """
    waited = source.replace("{wait}", "pre_unshard_stream.wait_stream(compute)")
    assert findings_of({"m.py": waited}) == []
    never_waited = source.replace("{wait}", "pass")
    assert _summary(findings_of({"m.py": never_waited})) == [
        ("SC101", "RAW", "m.py", line_of(never_waited, "local_shard_buffer.copy_"))]


def test_a_synchronize_in_every_caller_after_the_writing_call():
    sources = _hpz()
    sources["pkg/release.py"] = """
        import torch

        def release_all(init, params, full):
            for p in params:
                init.partition_sec(p, full)
            {after_call}
    """
    synced = dict(sources, **{"pkg/release.py": sources["pkg/release.py"].replace(
        "{after_call}", "torch.cuda.current_stream().synchronize()")})
    # The only call of partition_sec is a by-name one from release_all, which synchronizes after it.
    assert findings_of(synced) == []
    unsynced = dict(sources, **{"pkg/release.py": sources["pkg/release.py"].replace("{after_call}", "pass")})
    assert len(findings_of(unsynced)) == 1


def test_a_synchronize_in_the_caller_after_the_consumer_ran_does_not_count():
    sources = _hpz()
    sources["pkg/step.py"] = """
        import torch

        def step(init, coordinator, params, full):
            init.partition_sec(params[0], full)
            coordinator.fetch(params)
            torch.cuda.synchronize()
    """
    assert _summary(findings_of(sources)) == [
        ("SC101", "RAW", "pkg/store.py", line_of(sources["pkg/store.py"], ".copy_(full"))]


def test_an_event_recorded_after_the_write_and_handed_to_a_waiting_consumer():
    source = """
        import torch

        class Copier:
            def pre_forward(self, module):
                with torch.cuda.stream(self.copy_stream):
                    for p in module.parameters():
                        p.low_precision_copy.copy_(p)
                    event = torch.cuda.Event()
                    event.record()
                    self.events[module].append(event)

            def module_pre_forward(self, module):
                {wait}

            def forward(self, module, x):
                return x @ module.weight.low_precision_copy
    """
    waited = source.replace("{wait}", "event = self.events[module].popleft()\n                event.wait()")
    assert findings_of({"m.py": waited}) == []
    never_waited = source.replace("{wait}", "pass")
    assert _summary(findings_of({"m.py": never_waited})) == [
        ("SC101", "RAW", "m.py", line_of(never_waited, "p.low_precision_copy.copy_(p)"))]


def test_closure_read_in_a_backward_hook_before_the_host_sync():
    # Scenario 27: the write and the hook share a local of the enclosing function; backward() runs the hook
    # before the synchronize, so the synchronize orders nothing for it.
    source = """
        import torch

        def main(w, src, side):
            sec = torch.zeros(16, device="cuda")

            def prefetch(grad):
                with torch.cuda.stream(side):
                    return sec * 2

            w.register_hook(prefetch)
            loss = (w * src).sum()
            sec.copy_(src)
            loss.backward()
            torch.cuda.synchronize()
    """
    [finding] = findings_of({"m.py": source})
    assert (finding.primary.line, finding.symbol) == (line_of(source, "sec.copy_(src)"), "main")
    assert [(loc.role, loc.line) for loc in finding.related] == [
        (ROLE_READ, line_of(source, "return sec * 2")), (ROLE_STREAM_CONTEXT, line_of(source, "with torch.cuda"))]
    synced_first = source.replace("            loss.backward()\n            torch.cuda.synchronize()\n",
                                  "            torch.cuda.synchronize()\n            loss.backward()\n")
    assert findings_of({"m.py": synced_first}) == []


def test_a_helper_called_only_before_the_write_reads_before_it():
    # Megatron's start_grad_sync: check_grads reads the bucket, then the bucket is all-reduced on the
    # communication stream. Called from elsewhere too, the helper's read may follow the write.
    source = """
        import torch
        import torch.distributed as dist

        class Bucket:
            def check(self):
                return self.grad_data.norm()

            def start(self, side):
                self.check()
                side.wait_stream(torch.cuda.current_stream())
                with torch.cuda.stream(side):
                    dist.all_reduce(self.grad_data)
            {after}
    """
    assert findings_of({"m.py": source.replace("{after}", "")}) == []
    later = source.replace("{after}", "\n            def after(self):\n                return self.check()\n")
    assert [(f.rule, f.primary.line) for f in findings_of({"m.py": later})] == [
        ("SC101", line_of(later, "dist.all_reduce"))]


RECORDED_BY_STREAM = """
    import torch

    def stage(x, y, side, other):
        other.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(other):
            x.copy_(y)
        ev = torch.cuda.Event()
        RECORDING.record_event(ev)
        side.wait_event(ev)
        with torch.cuda.stream(side):
            return x * 2
"""


def test_an_event_a_stream_records_with_record_event_covers_that_stream_only():
    # `s.record_event(ev)` records `ev` on s (vLLM's prefetch offloader forks its copy stream this way). Read
    # the other way round, `ev` was recorded nowhere and its wait ordered every stream.
    on_current = RECORDED_BY_STREAM.replace("RECORDING", "torch.cuda.current_stream()")
    found = [(f.rule, f.kind, f.primary.line, f.extra["writer_stream"], f.extra["reader_stream"],
              [(r.role, r.line) for r in f.related][:1]) for f in findings_of({"m.py": on_current})]
    assert found == [("SC101", "RAW", line_of(on_current, "x.copy_(y)"), "other", "side",
                      [(ROLE_READ, line_of(on_current, "return x * 2"))])]
    assert findings_of({"m.py": RECORDED_BY_STREAM.replace("RECORDING", "other")}) == []
