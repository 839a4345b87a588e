"""One test per class of false finding seen on real code before the static engine (issue 13), each the smallest
source of that shape: clean where the code is ordered, and (where the class has one) the racy twin still found."""

from __future__ import annotations

from static_helpers import findings_of, line_of


def _lines(sources, select=None):
    return [(f.rule, f.primary.path, f.primary.line) for f in findings_of(sources, select)]


# --- non-tensor objects taken for tensors -----------------------------------------------------------------------
def test_an_in_place_looking_method_that_torch_tensor_does_not_have_is_no_write():
    source = """
        import torch

        class SymInt:
            def __int__(self):
                return self.node.int_()

            def fetch(self, side):
                with torch.cuda.stream(side):
                    return torch.cat([self.node])
    """
    # Nothing writes `self.node` (no pairing with line 6): the one finding is the read of a tensor made outside
    # the scan, on the current stream (outside_producers.py).
    found = findings_of({"m.py": source})
    assert [(f.rule, f.primary.line, f.extra["producer"], f.related) for f in found][:1] == [
        ("SC101", 10, "outside", found[0].related)]
    assert len(found) == 1 and all(r.line != 6 for r in found[0].related)


def test_torch_nn_init_writes_its_argument_not_the_module():
    source = """
        import torch
        import torch.nn as nn

        class Layer:
            def reset(self):
                nn.init.xavier_uniform_(self.weight_shard)

            def fetch(self, side):
                with torch.cuda.stream(side):
                    return self.weight_shard * 2
    """
    assert _lines({"m.py": source}) == [("SC101", "m.py", line_of(source, "xavier_uniform_"))]
    [finding] = findings_of({"m.py": source})
    assert finding.extra["path"] == "self.weight_shard"


# --- orderings not credited -------------------------------------------------------------------------------------
def test_a_named_stream_synchronize_after_the_write():
    source = """
        import torch

        class Store:
            def release(self, p, full):
                p.staged_shard.copy_(full)
                {sync}

            def fetch(self, params):
                with torch.cuda.stream(self.side):
                    return torch.cat([p.staged_shard for p in params])
    """
    racy = source.replace("{sync}", "pass")
    assert _lines({"m.py": racy}) == [("SC101", "m.py", line_of(racy, "copy_(full)"))]
    synced = source.replace("{sync}", "self.compute_stream.synchronize()")
    # The host waits for a stream the write did not run on: still racy ...
    assert _lines({"m.py": synced}) == [("SC101", "m.py", line_of(synced, "copy_(full)"))]
    # ... but the current stream's own synchronize (by any spelling) orders it.
    for spelling in ("torch.cuda.current_stream(p.device).synchronize()", "torch.cuda.default_stream().synchronize()"):
        assert _lines({"m.py": source.replace("{sync}", spelling)}) == [], spelling


def test_the_current_stream_of_a_device_is_no_side_stream():
    source = """
        import torch

        def quantize(tensor, scale):
            with torch.cuda.stream(torch.cuda.current_stream(tensor.device)):
                out = tensor * scale
            del tensor
            return out
    """
    assert _lines({"m.py": source}) == []


def test_an_event_waited_through_the_container_it_was_stored_in():
    source = """
        import torch

        class Prefetcher:
            def prefetch(self, module):
                self.copy_stream.wait_stream(torch.cuda.current_stream())
                with torch.cuda.stream(self.copy_stream):
                    module.staged_weight.copy_(module.weight, non_blocking=True)
                    event = torch.cuda.Event()
                    event.record()
                    self.events.append(event)

            def forward(self, module, x):
                {wait}
                return x @ module.staged_weight
    """
    racy = source.replace("{wait}", "pass")
    assert _lines({"m.py": racy}, {"SC101"}) == [("SC101", "m.py", line_of(racy, "staged_weight.copy_"))]
    waited = source.replace("{wait}", "self.events.popleft().wait()")
    assert _lines({"m.py": waited}, {"SC101"}) == []


def test_a_work_wait_orders_the_collective_not_the_compute_stream():
    # hpZ's coordinator waits for earlier all-gathers (`handle.wait()`) inside the all-gather stream's region:
    # that orders nothing about the compute stream's copy.
    source = """
        import torch
        import torch.distributed as dist

        class Coordinator:
            def release(self, param, full):
                param.secondary_shard.copy_(full)

            def fetch(self, params):
                with torch.cuda.stream(self.allgather_stream):
                    self.inflight.pop(params[0]).wait()
                    return dist.all_gather_into_tensor(self.out, params[0].secondary_shard, async_op=True)
    """
    assert _lines({"m.py": source}, {"SC101"}) == [("SC101", "m.py", line_of(source, "copy_(full)"))]


def test_record_stream_in_a_loop_over_the_tensors():
    source = """
        import torch

        def run(x, side):
            mix = torch.empty_like(x)
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                mix.copy_(x * 2)
            for tensor in (x, mix):
                tensor.record_stream(side)
            return mix
    """
    assert _lines({"m.py": source}, {"SC104"}) == []


# --- hand-offs counted as reads ---------------------------------------------------------------------------------
def test_a_tensor_handed_to_a_constructor_or_a_dict_with_its_event_is_no_host_read():
    source = """
        import torch

        class Pending:
            def __init__(self, host, event):
                self.host, self.event = host, event

        def start(device_splits, copy_stream):
            host_splits = torch.empty(device_splits.shape, pin_memory=True)
            with torch.cuda.stream(copy_stream):
                host_splits.copy_(device_splits, non_blocking=True)
                ready = torch.cuda.Event()
                ready.record(copy_stream)
            {handoff}
    """
    for handoff in ("return Pending(host=host_splits, event=ready)", "return {'host': host_splits, 'event': ready}"):
        assert _lines({"m.py": source.replace("{handoff}", handoff)}, {"SC102"}) == [], handoff
    read = source.replace("{handoff}", "return host_splits.tolist()")
    assert _lines({"m.py": read}, {"SC102"}) == [("SC102", "m.py", line_of(read, "host_splits.tolist()"))]


# --- container indices ------------------------------------------------------------------------------------------
def test_two_halves_of_a_double_buffer_are_two_tensors():
    source = """
        import torch

        def step(bufs, batch, side, cur):
            side.wait_stream(torch.cuda.current_stream())
            bufs[{written}].copy_(batch)
            with torch.cuda.stream(side):
                return bufs[cur].sum()
    """
    assert _lines({"m.py": source.replace("{written}", "1 - cur")}) == []
    same = source.replace("{written}", "cur")
    assert _lines({"m.py": same}) == [("SC101", "m.py", line_of(same, "copy_(batch)"))]


# --- names matched across unrelated classes ---------------------------------------------------------------------
def test_sibling_classes_that_each_assign_their_own_attribute():
    source = """
        import torch

        class Base:
            pass

        class Writer(Base):
            def __init__(self):
                self.buf = torch.zeros(4)

            def fill(self, x):
                self.buf.copy_(x)

        class Reader(Base):
            def __init__(self):
                self.buf = torch.zeros(4)

            def fetch(self, side):
                with torch.cuda.stream(side):
                    return self.buf * 2
    """
    assert _lines({"m.py": source}) == []
    # Assigned by the base class they share, `self.buf` is one tensor of the family: the pair is a race.
    shared = """
        import torch

        class Base:
            def __init__(self):
                self.buf = torch.zeros(4)

        class Writer(Base):
            def fill(self, x):
                self.buf.copy_(x)

        class Reader(Base):
            def fetch(self, side):
                with torch.cuda.stream(side):
                    return self.buf * 2
    """
    assert _lines({"m.py": shared}) == [("SC101", "m.py", line_of(shared, "self.buf.copy_(x)"))]


def test_a_method_of_a_builtin_or_a_queue_is_not_resolved_by_name():
    source = """
        import torch

        class ParameterDict:
            def fromkeys(self, keys):
                self.table.copy_(keys)

        class Engine:
            def put(self, batch):
                self.table.copy_(batch)

        class Offload:
            def step(self, names, side):
                with torch.cuda.stream(side):
                    table = dict.fromkeys(names)
                    self.param_queue.put(table)
    """
    assert _lines({"m.py": source}) == []


def test_super_looks_only_upwards():
    source = """
        import torch

        class Module:
            def __init__(self):
                pass

            def fetch(self, side):
                with torch.cuda.stream(side):
                    super().__init__()

        class Conv(Module):
            def __init__(self):
                super().__init__()
                self.bias_shard.uniform_()

            def forward(self, x):
                return x + self.bias_shard
    """
    assert _lines({"m.py": source}) == []


def test_the_current_stream_kept_in_a_local_before_the_region_is_the_outer_stream():
    source = """
        import torch

        def to_device(host_batch, copy_stream):
            current_stream = torch.cuda.current_stream()
            staged = host_batch.to("cuda", non_blocking=True)
            total = staged.sum()
            with torch.cuda.stream(copy_stream):
                copy_stream.wait_stream({waited})
                staged.copy_(host_batch, non_blocking=True)
            return staged, total
    """
    # Taken before the `with`, the local is the outer stream: the copy stream waits for it.
    assert _lines({"m.py": source.replace("{waited}", "current_stream")}, {"SC106"}) == []
    # Read inside the `with`, current_stream() is the copy stream itself: a wait for nothing.
    racy = source.replace("{waited}", "torch.cuda.current_stream()")
    assert _lines({"m.py": racy}, {"SC106"}) == [("SC106", "m.py", line_of(racy, "staged.copy_"))]


def test_views_of_a_non_blocking_copy_handed_out_by_return_are_no_host_read():
    source = """
        import torch

        def async_copy_to_np(x):
            return {returned}
    """
    for returned in ('x.to("cpu", non_blocking=True).numpy()', 'list(x.to("cpu", non_blocking=True))'):
        assert _lines({"m.py": source.replace("{returned}", returned)}, {"SC102"}) == [], returned
    read = source.replace("{returned}", 'x.to("cpu", non_blocking=True).tolist()')
    assert _lines({"m.py": read}, {"SC102"}) == [("SC102", "m.py", line_of(read, "tolist()"))]


def test_a_tensor_set_to_another_storage_is_covered_by_that_storage_record_stream():
    source = """
        import torch

        def restore(hbm_ref, cpu_buf, h2d_stream):
            tmp = torch.tensor([], dtype=hbm_ref.dtype, device=hbm_ref.device)
            {alias}
            with torch.cuda.stream(h2d_stream):
                tmp.copy_(cpu_buf, non_blocking=True)
            hbm_ref.record_stream(h2d_stream)
    """
    aliased = source.replace("{alias}", "tmp.set_(hbm_ref.untyped_storage(), 0, hbm_ref.shape, hbm_ref.stride())")
    assert _lines({"m.py": aliased}, {"SC104"}) == []
    own = source.replace("{alias}", "pass")  # its own memory: dropped at the end with no record_stream of its own
    assert [rule for rule, _, _ in _lines({"m.py": own}, {"SC104"})] == ["SC104"]


# --- one field name in two classes --------------------------------------------------------------------------------
STAGING = """
    import torch

    class Packer:
        def __init__(self):
            self.pack_stream = torch.cuda.Stream()
            self.staging = torch.empty(8, device="cuda")

        def pack(self, x):
            self.pack_stream.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(self.pack_stream):
                self.staging.copy_(x)
            torch.cuda.current_stream().wait_stream(self.pack_stream)
    {sender}
        def send(self):
            self.send_stream.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(self.send_stream):
                torch.distributed.send(self.staging, dst=1)

    def step(packer, sender, x):
        packer.pack(x)
        sender.send()
"""


def test_a_field_of_the_same_name_in_another_class_is_another_tensor():
    # Sender's own staging buffer, not the Packer's: the pack stream's write does not reach the send stream's read
    source = STAGING.format(sender="""
    class Sender:
        def __init__(self):
            self.send_stream = torch.cuda.Stream()
            self.staging = torch.zeros(8, device="cuda")
""")
    assert _lines({"m.py": source}) == []


def test_the_same_field_of_one_class_still_pairs():
    # send as a method of the Packer: its staging buffer, written on the pack stream, read on the send stream
    source = STAGING.format(sender="""
        def __post_init__(self):
            self.send_stream = torch.cuda.Stream()
""")
    assert _lines({"m.py": source}) == [("SC101", "m.py", line_of(source, "self.staging.copy_(x)"))]
