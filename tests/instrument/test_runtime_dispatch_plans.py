"""Read/write sets from op schemas (instrument/dispatch.py), checked on CPU tensors."""

from __future__ import annotations

import torch

from streamcheck.instrument.dispatch import (
    ACCESS,
    COLLECTIVE,
    RECORD_STREAM,
    SKIP,
    build_plan,
    byte_range,
    fresh_outputs,
    tensor_accesses,
)

aten = torch.ops.aten


def ids(tensors):
    return [id(t) for t in tensors]


def test_in_place_op_writes_self_and_reads_the_other_argument():
    a, b = torch.zeros(4), torch.ones(4)
    plan = build_plan(aten.add_.Tensor)
    assert (plan.kind, plan.reads, plan.writes, plan.fresh_returns) == (ACCESS, ((1, "other"),), ((0, "self"),), ())
    reads, writes = tensor_accesses(plan, (a, b), {})
    assert ids(reads) == [id(b)] and ids(writes) == [id(a)]


def test_out_argument_is_a_keyword_only_write():
    a, b, out = torch.zeros(4), torch.ones(4), torch.empty(4)
    plan = build_plan(aten.add.out)
    assert plan.writes == ((-1, "out"),)
    reads, writes = tensor_accesses(plan, (a, b), {"out": out})
    assert ids(reads) == [id(a), id(b)] and ids(writes) == [id(out)]
    assert fresh_outputs(plan, out) == []  # the return aliases `out`: not a second write


def test_view_ops_touch_no_data():
    for op in (aten.view.default, aten.t.default, aten.split.Tensor, aten.detach.default, aten.unbind.int):
        assert build_plan(op).kind == SKIP, op


def test_factory_like_ops_read_nothing_and_write_their_output():
    x = torch.ones(3)
    for op, args in ((aten.zeros_like.default, (x,)), (aten.new_empty.default, (x, [2])),
                     (aten.empty_like.default, (x,))):
        plan = build_plan(op)
        assert plan.kind == ACCESS and plan.reads == () and plan.fresh_returns == (0,), op
        out = op(*args)
        assert ids(fresh_outputs(plan, out)) == [id(out)]


def test_metadata_only_in_place_ops_are_skipped():
    for op in (aten.set_.source_Storage_storage_offset, aten.resize_.default, aten.as_strided_.default,
               aten.squeeze_.default, aten.is_pinned.default):
        assert build_plan(op).kind == SKIP, op


def test_record_stream_is_an_event_not_a_write():
    assert build_plan(aten.record_stream.default).kind == RECORD_STREAM


def test_collectives_are_handed_to_the_collective_hooks():
    assert build_plan(torch.ops.c10d.allreduce_.default).kind == COLLECTIVE
    assert build_plan(torch.ops.c10d._allgather_base_.default).name == "c10d::_allgather_base_"


def test_tensor_lists_and_optional_entries_are_walked():
    xs, ys = [torch.zeros(2), torch.zeros(2)], [torch.ones(2), torch.ones(2)]
    plan = build_plan(aten._foreach_add_.List)
    reads, writes = tensor_accesses(plan, (xs, ys), {})
    assert ids(writes) == ids(xs) and ids(reads) == ids(ys)
    target, index, values = torch.zeros(5), torch.tensor([1, 3]), torch.ones(2)
    plan = build_plan(aten.index_put_.default)
    reads, writes = tensor_accesses(plan, (target, [None, index], values), {})
    assert ids(writes) == [id(target)] and ids(reads) == [id(index), id(values)]


def test_multi_return_op_writes_every_fresh_return():
    x = torch.randn(2, 4)
    plan = build_plan(aten.native_layer_norm.default)
    assert plan.fresh_returns == (0, 1, 2) and not plan.single_return
    out = aten.native_layer_norm.default(x, [4], None, None, 1e-5)
    assert ids(fresh_outputs(plan, out)) == ids(out)


def test_byte_ranges_of_views_are_offsets_within_one_storage():
    buf = torch.zeros(16, dtype=torch.float32)
    base = buf.untyped_storage().data_ptr()
    assert byte_range(buf) == (base, 0, 64)
    assert byte_range(buf[4:8]) == (base, 16, 32)
    assert byte_range(buf[3:8]) == (base, 12, 32)
    # a strided view spans from its first to one past its last element
    grid = buf.view(4, 4)
    assert byte_range(grid[:, 1]) == (base, 4, 4 + (3 * 4 + 1) * 4)
    assert byte_range(grid.t()) == (base, 0, 64)
    assert byte_range(buf[5:5]) is None
