"""Which parameters' elements a function's local containers hold: the elements of a list are one abstract location.

A helper handed a list of tensors often rebuilds it before it reaches the code that uses the tensors on a side
stream: `for tensor in bucket: small_bucket.append(tensor)` and then `self.allreduce_and_copy(small_bucket)`;
`split_buckets = split_half_float_double(grads)` and then `for bucket in split_buckets:
self.allreduce_no_retain(bucket)` (DeepSpeed ZeRO-1/2's gradient reduction). What the innermost helper does to the
elements of its parameter (uses them on a side stream, records them: summaries.parameter_lifetimes), the outer ones
do to the elements of theirs.

The links, flow-insensitive and both ways (a container and its element stand for one another): the element rows of
the facts pass (FunctionFacts.elements: appends, tuple slots, `setdefault`), the loops, comprehensions and views it
reads without slots (FunctionFacts.derived), and a local bound to what an exact callee returns when that holds the
elements of one of its parameters (`split_half_float_double(tensors)` returns lists of `tensors`' elements). Tuple
slots are kept one level deep, so that `dtype_bucket.append((grad, grad_param))` followed by `for grad, grad_param
in dtype_bucket` does not mix the gradients with their index tuples.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .extract import split_index
from .extract_elements import ELEMENT

if TYPE_CHECKING:
    from .program import Function, Program

def element_parameters(program: "Program", function: "Function") -> dict[str, frozenset[str]]:
    """local -> the parameters whose elements it holds (or is one of), for locals that are no parameter."""
    table = program.memo("element_flow.parameters", lambda: {})
    if function.id not in table:
        table[function.id] = {}  # (a cycle of helpers returning each other's lists: the one in progress has none)
        carried = _carried(program, function)
        params = set(function.facts.params)
        table[function.id] = {local: frozenset(p for p, slot in found if slot == ELEMENT)
                              for local, found in carried.items()
                              if local not in params and any(slot == ELEMENT for _, slot in found)}
    return table[function.id]


def _carried(program: "Program", function: "Function") -> dict[str, set[tuple[str, int]]]:
    """local -> (parameter, slot) pairs it carries: slot ELEMENT for the parameter's elements themselves, k >= 0
    for elements that are tuples whose k-th part is one."""
    facts = function.facts
    params = [p for p in facts.params if p not in ("self", "cls")]
    if not params:
        return {}
    slotted = {(inner, outer, line) for inner, outer, line, _ in facts.elements}
    links = list(facts.elements)
    links += [(local, source, line, ELEMENT) for local, source, line in facts.derived
              if "." not in source and (local, source, line) not in slotted]
    links += _returned_elements(program, function)
    carried: dict[str, set[tuple[str, int]]] = {p: {(p, ELEMENT)} for p in params}
    changed = True
    while changed:
        changed = False
        for inner, outer, _line, slot in links:
            into_outer = carried.get(inner, set()) if slot == ELEMENT else {
                (p, slot) for p, s in carried.get(inner, ()) if s == ELEMENT}
            into_inner = carried.get(outer, set()) if slot == ELEMENT else {
                (p, ELEMENT) for p, s in carried.get(outer, ()) if s in (slot, ELEMENT)}
            for name, found in ((outer, into_outer), (inner, into_inner)):
                if name in params or not found:
                    continue  # a parameter holds what the caller passes, nothing more
                held = carried.setdefault(name, set())
                if not found <= held:
                    held |= found
                    changed = True
    return carried


def _returned_elements(program: "Program", function: "Function") -> list[tuple[str, str, int, int]]:
    """(local, argument, line, ELEMENT) for `local = helper(arg)` where an exact callee returns a local holding the
    elements of the parameter `arg` is bound to."""
    results = {(line, column): local for local, line, column in function.facts.call_results if "." not in local}
    for _inner, outer, _line, _slot in function.facts.elements:
        if outer.startswith("<call@"):  # `for bucket in split_half_float_double(grads):`
            line, column = outer[len("<call@"):-1].split(":")
            results.setdefault((int(line), int(column)), outer)
    if not results:
        return []
    from .summaries import argument_for

    found = []
    for call, edges in program.exact_edges_of(function.id):
        local = results.get((call.line, call.column))
        if local is None:
            continue
        for edge in edges:
            callee = program.functions[edge.callee]
            returned = set(callee.facts.returned)
            if not returned:
                continue
            held = element_parameters(program, callee)
            for param in {p for r in returned for p in held.get(r, ())}:
                arg = argument_for(callee, call, param)
                if arg and "." not in split_index(arg)[0]:
                    found.append((local, split_index(arg)[0], call.line, ELEMENT))
    return found
