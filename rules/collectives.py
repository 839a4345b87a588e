"""Which arguments a collective writes: the one table both the facts and the hazard rules read.

A collective called without `async_op=True` is ordered on the stream that launches it (the launching stream waits
for the communication stream before its next kernel), so its outputs are written on that stream; with
`async_op=True` they are written on the communication stream until the handle is waited (SC105's business).
Names are matched on the callee's last name, so DeepSpeed's `dist.allgather_fn` and torch's
`dist.all_gather_into_tensor` read the same row.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Outputs:
    positions: tuple[int, ...] = ()  # positional arguments written
    keywords: tuple[str, ...] = ()  # keyword arguments written
    in_place: bool = False  # the written argument is also read (all-reduce, broadcast)
    tensor_positions: int = 2  # positional arguments that hold tensors (the rest: op, group, src, dst, async_op)


_FIRST_OUT = Outputs((0,), ("output", "output_tensor", "output_tensor_list", "tensor_list", "output_tensors",
                            "output_tensor_lists", "out"))
_IN_PLACE = Outputs((0,), ("tensor", "tensors", "tensor_list"), in_place=True, tensor_positions=1)

COLLECTIVE_OUTPUTS: dict[str, Outputs] = {
    # `all_gather_single` / `reduce_scatter_single`: torch 2.13's names (`_into_tensor` / `_tensor` deprecated)
    **dict.fromkeys(("all_gather", "all_gather_into_tensor", "all_gather_single", "_all_gather_base",
                     "all_gather_coalesced", "allgather_fn", "all_gather_base", "reduce_scatter",
                     "reduce_scatter_tensor", "reduce_scatter_single",
                     "_reduce_scatter_base", "reduce_scatter_fn", "reduce_scatter_coalesced", "all_to_all",
                     "all_to_all_single"), _FIRST_OUT),
    **dict.fromkeys(("all_reduce", "all_reduce_coalesced", "allreduce_fn", "inference_all_reduce", "broadcast",
                     "reduce"), _IN_PLACE),
    "recv": Outputs((0,), ("tensor",), tensor_positions=1),
    "irecv": Outputs((0,), ("tensor",), tensor_positions=1),
    "send": Outputs((), (), tensor_positions=1),
    "isend": Outputs((), (), tensor_positions=1),
    "gather": Outputs((), ("gather_list",), tensor_positions=1),
    "scatter": Outputs((0,), ("tensor",)),
}


# Keyword arguments of a collective that hold tensors (`group=`, `op=`, `async_op=`, `quantize=` do not).
TENSOR_KEYWORDS = frozenset({
    "tensor", "tensors", "tensor_list", "input", "output", "input_tensor", "output_tensor", "input_tensor_list",
    "output_tensor_list", "output_tensors", "input_tensors", "output_tensor_lists", "gather_list", "scatter_list",
    "out",
})


def outputs_of(callee: str) -> Outputs | None:
    """The row for a collective's dotted callee text, or None (all its tensor arguments are only read)."""
    return COLLECTIVE_OUTPUTS.get(callee.rsplit(".", 1)[-1])


def launched_async(function, access) -> bool:
    """Whether `access` is a tensor of an `async_op=True` collective launched at its line (its ordering travels
    with the handle: SC105's business in the launching function, the handle's wait elsewhere)."""
    return any(work.line <= access.line <= work.end_line and access.path in work.tensors
               for work in function.facts.async_works)


def reads_in_place(function, write) -> bool:
    """Whether `write` also reads what it overwrites, at the same place: an in-place collective's tensor
    (`dist.all_reduce(t)`), which extract.py records as a read and a write."""
    return any(a.kind == "read" and a.path == write.path and (a.line, a.column) == (write.line, write.column)
               for a in function.facts.accesses)
