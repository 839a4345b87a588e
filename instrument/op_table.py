"""What each operator touches: the one table both backends read.

The dispatch mode (dispatch.py) calls `roles_of_schema` for every OpOverload it meets; the C++ hook
(native_hook/plans.h) calls `roles_of_name` once per operator it meets and keeps the answer. So the rules below exist
once, in Python, and the two backends cannot drift apart.

Roles are read off the schema's alias annotations:
- an argument whose alias set is written (`Tensor(a!) self`, `out=`) is written;
- an argument with a read-only alias set (`Tensor(a) self` of `view`, `t`, `split`) is a view input: no data moves;
- every other tensor argument (tensor lists and optionals) is read, unless this table says it gives only metadata;
- a return without alias information is a fresh tensor the op wrote; an aliased, not written return is a view.

Arguments that give only metadata (shape, dtype, device, strides), never data, are not reads:
- factory-like ops (`aten::zeros_like`, `aten::new_empty`, matched with their `aten::` namespace): their `self`;
- the `other` of `view_as`, `expand_as`, `reshape_as`, `type_as`, `to.other`, `align_as` (the native hook sees these
  composite ops before they decompose: `x.data = y.data.view_as(z)` reads no data of z);
- queries: an op that writes nothing and returns only sizes, strides, flags or a dtype (`size`, `stride`, `dim`,
  `is_contiguous`, `is_floating_point`, `result_type`, `_version`, ...), unless it answers from the data
  (`item`, `is_nonzero`, `equal`, `allclose`, ...: DATA_QUERIES);
- in-place ops that change only metadata or autograd state (`set_`, `set_data` behind `x.data = y`, `resize_`,
  `as_strided_`, `squeeze_`, `requires_grad_`, `retain_grad`, ...): nothing at all.

Special kinds: `aten::record_stream` is annotated as writing `self` but only informs the allocator (the
record_stream event); `c10d::*` ops are collectives (collectives.py reads their arguments by name).
"""

from __future__ import annotations

import torch

SKIP, ACCESS, RECORD_STREAM, COLLECTIVE = "skip", "access", "record_stream", "collective"
NONE, READ, WRITE, VIEW = "none", "read", "write", "view"  # argument roles
FRESH = "fresh"  # return role (NONE / VIEW otherwise)

# In-place by schema (or reading by schema), but only the tensor's metadata, autograd state or the allocator's
# bookkeeping changes.
METADATA_ONLY_OPS = frozenset(
    "aten::" + name
    for name in (
        "set_", "set_data", "resize_", "resize_as_", "resize_as_sparse_", "as_strided_", "squeeze_", "unsqueeze_",
        "transpose_", "t_", "swapdims_", "swapaxes_", "detach_", "requires_grad_", "retain_grad", "rename_",
        "_coalesced_", "is_pinned", "_assert_tensor_metadata", "_shape_as_tensor", "_new_zeros_with_same_feature_meta",
        "_has_compatible_shallow_copy_type", "is_nonzero_",
    )
)

# Per operator, the arguments that give only metadata.
METADATA_ARGUMENTS: dict[str, frozenset] = {
    "aten::" + name: frozenset(args)
    for name, args in (
        ("view_as", ("other",)), ("expand_as", ("other",)), ("reshape_as", ("other",)), ("type_as", ("other",)),
        ("to", ("other",)), ("align_as", ("other",)),
    )
}

# What a query may return: none of these carries data of the tensor it was asked about.
QUERY_RETURN_TYPES = frozenset({"int", "bool", "SymInt", "List[int]", "SymInt[]", "int[]", "ScalarType",
                                "QScheme", "Layout", "Device", "MemoryFormat"})

# Queries that answer from the data (or ops of TorchScript's list and dict types, which take tensors as elements).
DATA_QUERIES = frozenset(
    "aten::" + name
    for name in (
        "item", "_local_scalar_dense", "is_nonzero", "equal", "allclose", "Bool", "Int", "IntImplicit", "Float",
        "FloatImplicit", "Complex", "ComplexImplicit", "ScalarImplicit", "_tensor_to_list", "eq", "ne",
        "__contains__", "count", "index", "len", "get", "values", "_nested_tensor_from_mask_left_aligned",
        "_cslt_sparse_mm_search", "_use_cudnn_ctc_loss", "_use_miopen_ctc_loss", "_choose_qparams_per_tensor",
        "_fused_sdp_choice", "_debug_has_internal_overlap", "q_scale", "q_zero_point", "q_per_channel_axis",
    )
)


def holds_tensors(type_str: str) -> bool:
    return "Tensor" in type_str


def is_factory_like(qualified_name: str) -> bool:
    """`aten::zeros_like`, `aten::new_empty`: the input gives shape and dtype only."""
    if not qualified_name.startswith("aten::"):
        return False
    name = qualified_name[6:]
    return name.endswith("_like") or name.startswith("new_")


def is_query(name: str, schema) -> bool:
    """Writes nothing and returns only metadata-like values (sizes, flags, a dtype)."""
    if not schema.returns or name in DATA_QUERIES:
        return False
    for arg in schema.arguments:
        if arg.alias_info is not None and arg.alias_info.is_write:
            return False
    return all(str(ret.type) in QUERY_RETURN_TYPES for ret in schema.returns)


def roles_of_schema(schema, namespace: str = "aten") -> tuple[str, tuple[str, ...], tuple[str, ...]]:
    """(kind, one role per argument, one role per return) of an operator schema."""
    name = schema.name if "::" in schema.name else f"{namespace}::{schema.name}"
    n_args, n_returns = len(schema.arguments), len(schema.returns)
    if name == "aten::record_stream":
        return RECORD_STREAM, (NONE,) * n_args, (NONE,) * n_returns
    if name.startswith("c10d::"):
        return COLLECTIVE, (NONE,) * n_args, (NONE,) * n_returns
    if name in METADATA_ONLY_OPS or is_query(name, schema):
        return SKIP, (NONE,) * n_args, (NONE,) * n_returns
    metadata = METADATA_ARGUMENTS.get(name, frozenset())
    if is_factory_like(name):
        metadata = metadata | {"self"}
    args = []
    for arg in schema.arguments:
        role = NONE
        if holds_tensors(str(arg.type)):
            alias = arg.alias_info
            if alias is not None and alias.is_write:
                role = WRITE
            elif alias is not None:
                role = VIEW
            elif arg.name not in metadata:
                role = READ
        args.append(role)
    returns = []
    for ret in schema.returns:
        role = NONE
        if holds_tensors(str(ret.type)):
            alias = ret.alias_info
            if alias is None:
                role = FRESH
            elif not alias.is_write:
                role = VIEW
        returns.append(role)
    touches = READ in args or WRITE in args or FRESH in returns
    return (ACCESS if touches else SKIP), tuple(args), tuple(returns)


def roles_of_name(name: str, overload: str) -> tuple[str, tuple[str, ...], tuple[str, ...]]:
    """The C++ hook's entry: the roles of operator `name` (qualified) and `overload` ("" for the default)."""
    return roles_of_schema(torch._C._get_schema(name, overload))
