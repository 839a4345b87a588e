"""Tensors that travel through calls as values: a callee's result, a parameter a callee keeps, an element it hands
back. Megatron's activation offload (issue #7398) moves a D2H copy's output exactly so:

    with torch.cuda.stream(self.d2h_stream):
        state = self.offload(x)                      # offload writes cpu_backup and returns (dev, cpu_backup)
        group.push_tensor(tag, state)                # push_tensor: self._tensors[tag] = tensor
    ...
    tensor = self.groups[i].pop_tensor(tag)          # pop_tensor: return self._tensors.pop(tag)
    tensor = self.reload(tensor)                     # reload reads cpu_backup on the current stream

At each call the callee's facts (FunctionFacts.returned, keeps, hands_out) become accesses of the caller's paths:
- **result**: a local the callee writes on its own current stream and returns is written, for the caller, at the
  call and on the call's stream, when the call is made inside a stream region (`state` above);
- **kept**: what the caller wrote inside a stream region into the argument of a kept parameter is written into
  the receiver's container (`group._tensors`), as if the caller had stored it there itself; a result the caller
  keeps in a container of its own (`self.saved[tag] = state`) is written into that container;
- **handed out**: what the caller does later to the local bound to the handed-out element, it does to the
  receiver's container (`self.groups._tensors`); `_tensors` then pairs by its name with the store above
  (aliasing.access_keys);
- **handed back**: a call of an accessor (`chunks[k].get_gpu_chunk()`, every return `return self.gpu_chunk`,
  FunctionFacts.hands_back) reads that attribute of the receiver (`chunks.gpu_chunk`) at the call; one whose every
  return is a slice of the object's own tensor (`return self.data[start:end]`, FunctionFacts.returned_paths "self",
  Megatron FSDP's `get_shard_from_local_buffer()`) reads the receiver itself.
A call is followed through its exact edges, or through its one edge when the method's name resolves to a single
function of the program (`group.push_tensor`: the receiver is a local whose class the scan does not know).
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from .facts import NO_REGION, Access, Call

if TYPE_CHECKING:
    from .callgraph import Edge, Function
    from .program import Program


def value_accesses(program: "Program", function: "Function") -> list[Access]:
    """The accesses of `function`'s paths that its calls' values make (see the module's docstring)."""
    facts = function.facts
    results = {(line, column): local for local, line, column in facts.call_results}
    own = program.own_accesses(function)
    found: list[Access] = []
    for call, edges in program.calls_of(function.id):
        callee = _followed(program, edges)
        if callee is None:
            continue
        local = results.get((call.line, call.column))
        if local:
            written = _result_writes(program, callee, call, local)
            found.extend(written)
            # kept here (`self.saved[tag] = state`): the container holds the result too (extraction saw no write)
            found.extend(replace(a, path=container, index="") for a in written
                         for name, container, line in facts.keeps if name == local and line >= call.line)
        receiver = call.callee.rpartition(".")[0].replace("[]", "")  # `self.groups[i].pop_tensor`: self.groups
        if not receiver:
            continue
        found.extend(_accessor_read(callee, call, receiver))
        for param, container, _line in callee.facts.keeps:
            if param not in callee.facts.params:
                continue
            found.extend(_kept(program, function, callee, call, param, receiver + container[len("self"):],
                               own + found))
        if local:
            # later reads of the handed-out element are reads of the receiver's container (the bound ones were
            # read so by summaries.bound_accesses through `handed_out`)
            for path in _containers_handed_out(callee, receiver):
                found.extend(replace(a, path=path, index="", fresh=False) for a in own
                             if a.path == local and a.line >= call.line and a.kind == "read")
    return found


def _accessor_read(callee: "Function", call: Call, receiver: str) -> list[Access]:
    """`chunks[k].get_gpu_chunk()` where the method takes no arguments, touches no tensor itself and every return
    is `return self.gpu_chunk`: the caller reads `chunks.gpu_chunk` at the call, on the call's stream (the
    element's attribute, as summaries.bind names it). A method that works and then returns the attribute
    (`load(batch)`: copy into `self.staged`, return it) hands out a result, not an accessor's read."""
    attrs = set(callee.facts.hands_back)
    if "(" in receiver or call.args or callee.facts.regions:
        return []
    if set(callee.facts.returned_paths) == {"self"} and not any(a.kind == "write" for a in callee.facts.accesses):
        # `return self.data[a:b]` (a shard of the object's own tensor, after index arithmetic): the receiver's
        # tensor is read (index reads are no tensor work; a write would make it a worker, not an accessor)
        return [Access("read", receiver, call.line, call.column, callee.facts.name, call.region)]
    if len(attrs) != 1 or "" in attrs or callee.facts.accesses:
        return []
    return [Access("read", f"{receiver}.{attrs.pop()}", call.line, call.column, callee.facts.name, call.region)]


def handed_out(program: "Program", function: "Function") -> dict[str, tuple[str, int]]:
    """local -> (the receiver's container, line) for each local bound to an element a helper hands out
    (`tensor = self.groups[i].pop_tensor(tag)`: `self.groups._tensors`), as FunctionFacts.taken gives them for
    `x = self.c.pop(k)` written inline."""
    results = {(line, column): local for local, line, column in function.facts.call_results}
    found = {}
    for call, edges in program.calls_of(function.id):
        local = results.get((call.line, call.column))
        callee = _followed(program, edges) if local else None
        receiver = call.callee.rpartition(".")[0].replace("[]", "")
        if callee is not None and receiver:
            for path in _containers_handed_out(callee, receiver):
                found[local] = (path, call.line)
    return found


def _containers_handed_out(callee: "Function", receiver: str) -> list[str]:
    return [receiver + container[len("self"):] for container in callee.facts.hands_out]


def _followed(program: "Program", edges: list["Edge"]) -> "Function | None":
    exact = [e for e in edges if e.exact]
    if len(exact) == 1 or len(edges) == 1:
        callee = program.functions[(exact or edges)[0].callee]
        return callee if callee.file.detailed else None
    return None


def _result_writes(program: "Program", callee: "Function", call: Call, local: str) -> list[Access]:
    returned = set(callee.facts.returned)
    ops = [a.op for a in program.own_accesses(callee)
           if a.kind == "write" and a.path in returned and a.region == NO_REGION and not a.owner]
    # a kernel's result returned as it is made; a copy made asynchronous by the caller's flag only where it is
    ops += [op for op, flag in callee.facts.made_results if not flag or _given_true(callee, call, flag)]
    if not ops:
        return []
    return [Access("write", local, call.line, call.column, f"{ops[0]} in {callee.facts.qualname}", call.region,
                   fresh=True)]


def _given_true(callee: "Function", call: Call, param: str) -> bool:
    """Whether `call` passes the constant True for the callee's parameter `param` (by keyword or position)."""
    if param in call.true_args:
        return True
    params = [p for p in callee.facts.params if p not in ("self", "cls")]
    return param in params and str(params.index(param)) in call.true_args


def _kept(program: "Program", caller: "Function", callee: "Function", call: Call, param: str, path: str,
          accesses: list[Access]) -> list[Access]:
    from .summaries import argument_for

    arg = argument_for(callee, call, param)
    if not arg or "." in arg:
        return []
    # (a new tensor kept stays new: storing it overwrites no element another stream still uses)
    return [replace(a, path=path, index="") for a in accesses
            if a.kind == "write" and a.path == arg and a.region != NO_REGION and a.line <= call.line]
