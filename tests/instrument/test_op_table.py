"""The one table of what each op touches (instrument/op_table.py), read by both backends."""

from __future__ import annotations

import pytest
import torch

from streamcheck.instrument import op_table
from streamcheck.instrument.dispatch import ACCESS, SKIP, build_plan
from streamcheck.instrument.op_table import FRESH, NONE, READ, VIEW, WRITE, roles_of_name

aten = torch.ops.aten


@pytest.mark.parametrize("name, overload, expected", [
    ("aten::view_as", "", ("skip", (VIEW, NONE), (VIEW,))),
    ("aten::expand_as", "", ("skip", (VIEW, NONE), (VIEW,))),
    ("aten::reshape_as", "", ("skip", (VIEW, NONE), (VIEW,))),
    ("aten::type_as", "", ("access", (READ, NONE), (FRESH,))),
    ("aten::empty_like", "", ("access", (NONE,) + (NONE,) * 5, (FRESH,))),
    ("aten::new_zeros", "", ("access", (NONE,) * 6, (FRESH,))),
    ("aten::add_", "Tensor", ("access", (WRITE, READ, NONE), (NONE,))),
])
def test_roles_of_metadata_arguments_views_and_writes(name, overload, expected):
    kind, args, returns = roles_of_name(name, overload)
    assert (kind, args, returns) == expected


@pytest.mark.parametrize("name, overload", [
    ("aten::size", "int"), ("aten::stride", "int"), ("aten::sym_size", "int"), ("aten::dim", ""),
    ("aten::numel", ""), ("aten::is_floating_point", ""), ("aten::is_contiguous", ""), ("aten::result_type", "Tensor"),
    ("aten::_version", ""), ("aten::is_same_size", ""), ("aten::set_data", ""), ("aten::requires_grad_", ""),
    ("aten::retain_grad", ""), ("aten::resize_as_", ""), ("aten::set_", "source_Tensor"), ("aten::is_pinned", ""),
])
def test_queries_and_metadata_only_ops_touch_nothing(name, overload):
    assert roles_of_name(name, overload)[0] == "skip"


@pytest.mark.parametrize("name, overload", [
    ("aten::item", ""), ("aten::_local_scalar_dense", ""), ("aten::is_nonzero", ""), ("aten::equal", ""),
    ("aten::allclose", ""),
])
def test_queries_that_answer_from_the_data_read_it(name, overload):
    kind, args, _ = roles_of_name(name, overload)
    assert kind == "access" and READ in args


def test_factory_like_ops_still_read_their_other_tensor_arguments():
    kind, args, _ = roles_of_name("aten::randint_like", "Tensor")  # (self, Tensor high, ...): high's values count
    assert kind == "access" and args[:2] == (NONE, READ)


def test_dispatch_mode_plans_come_from_the_table():
    assert build_plan(aten.view_as.default).kind == SKIP  # the mode only watches what a view could have copied
    plan = build_plan(aten.type_as.default)
    assert (plan.kind, plan.reads, plan.fresh_returns) == (ACCESS, ((0, "self"),), (0,))
    assert build_plan(aten.size.int).kind == SKIP


def test_every_schema_gets_an_answer():
    """No aten/c10d schema makes the table raise (the C++ hook would switch itself off)."""
    count = 0
    for schema in torch._C._jit_get_all_schemas():
        if schema.name.startswith(("aten::", "c10d::")):
            kind, args, returns = roles_of_name(schema.name, schema.overload_name)
            assert kind in (op_table.SKIP, op_table.ACCESS, op_table.RECORD_STREAM, op_table.COLLECTIVE)
            assert (len(args), len(returns)) == (len(schema.arguments), len(schema.returns))
            count += 1
    assert count > 3000
