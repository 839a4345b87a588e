"""Which accesses may touch the same tensor, judged from their access paths alone (no values are tracked).

Two accesses share a key when they
- name the same attribute path of `self` owned by the same class (the topmost class that assigns it: `self.buf`
  in a class and its subclasses, but not in a sibling that assigns its own),
- name the same local path in the same function (`x`, `p.grad` with the same local `p`), a plain name counting as
  the enclosing function's (or the module's) where it is bound there (closures, globals), or
- end in the same attribute name that is specific enough to identify a tensor (`param.ds_secondary_tensor` and
  `p.ds_secondary_tensor`) within one program. Generic names (`.data`, `.grad`, `.weight`, see
  StaticOptions.generic_attributes) never match by name alone: on DeepSpeed 0.13.4, name-only pairing gives 127
  candidates, 123 of them on such names.
"""

from __future__ import annotations

import ast

from .facts import NO_REGION, Access, exclusive
from .program import Function, Program
from .extract import split_index
from .summaries import argument_for


def access_keys(program: Program, function: Function, access: Access) -> set[tuple]:
    parts = access.path.split(".")
    if len(parts) == 1:
        scope = f"{function.file.path}::{access.owner}" if access.owner else function.id
        return {("local", scope, access.path)} | _attribute_keys_of_local(program, function, access)
    keys: set[tuple] = set()
    if parts[-1] not in program.options.all_generic_attributes:
        keys.add(("attr", program.component(function.file), parts[-1]))
    if parts[0] in ("self", "cls"):
        keys.add(self_key(program, function, access.path))
    else:
        keys.add(("local", function.id, access.path))
    return keys | _attribute_keys_of_local(program, function, access)


def _attribute_keys_of_local(program: Program, function: Function, access: Access) -> set[tuple]:
    """A local that holds an element or a view of an attribute of `self` (`bucket = self.ipg_buckets[dtype]`,
    `new = bucket.buffer[i].narrow(...)`: FunctionFacts.derived) touches that attribute's path; a parameter touches
    what the callers pass for it when that is such a path, where the function reads it under its own stream region
    (`self.average_tensor(bucket.buffer[k].narrow(0, 0, n))`). Two functions that reach one bucket this way share
    its key, where their locals alone never pair (DeepSpeed #8080's IPG bucket, filled by one method and reduced
    by another)."""
    def build() -> set[tuple]:
        root, dot, rest = access.path.partition(".")
        found: set[tuple] = set()
        for path in _attribute_paths(function, access.path, access.line) | held_containers(function, access):
            found.add(self_key(program, function, path))
        # (only under the function's own stream region: elsewhere the callers' bound accesses (summaries.py) stand
        # for it on each caller's stream, and a key shared by every call site would pair one site's tensor with
        # another site's stream)
        if access.region != NO_REGION and root in function.facts.params and root not in ("self", "cls"):
            for caller, call in program.call_sites.get(function.id, ()):
                arg = argument_for(function, call, root)
                if arg is None:
                    continue
                path, _index = split_index(arg)
                for resolved in _attribute_paths(caller, path + dot + rest, call.line):
                    found.add(self_key(program, caller, resolved))
        if access.region == NO_REGION and not program.region_chains(function.id):
            found |= _named_by_callers(program, function, access)
        return found
    return program.memo(("aliasing.attribute_keys", function.id, access.path, access.line), build)


def _named_by_callers(program: Program, function: Function, access: Access) -> set[tuple]:
    """A parameter (or a view of one: FunctionFacts.derived) that a caller hands an attribute of `self` under a
    local name (`buffer = self._prefetch_buffer`, `self._finalize_prefetch(buffer, out)`: vLLM's Qwen4Exp PLE
    prefetch): the access touches that attribute, here, after what the function orders before it. Only on the
    current stream (no region around the access, none reaching the function): where a region does, the callers
    bind the access on their own streams (summaries.bound_accesses), as for an argument spelled as the attribute."""
    found: set[tuple] = set()
    params = set(function.facts.params) - {"self", "cls"}
    for held in derived_paths(function, access.path, access.line):
        root, dot, rest = held.partition(".")
        if root not in params:
            continue
        for caller, call in program.call_sites.get(function.id, ()):
            arg = argument_for(function, call, root)
            path = split_index(arg)[0] if arg else ""
            if not path or "." in path:
                continue
            named = as_attribute(caller, path, call.line)
            if named != path and named.startswith("self.") and named.count(".") == 1:
                found.add(self_key(program, caller, named + dot + rest))
    return found


def self_key(program: Program, function: Function, path: str) -> tuple:
    parts = path.split(".")
    return ("self", program.attr_owner(function.file.path, function.owner, parts[1]), ".".join(parts[1:]))


def _attribute_paths(function: Function, path: str, line: int) -> set[str]:
    """The `self.` paths below an attribute (`self.x.y`) that `path` stands for through derived locals."""
    return {p for p in derived_paths(function, path, line)
            if p != path and p.split(".", 1)[0] in ("self", "cls") and p.count(".") > 1}
    # (`self.x` alone is a container: its key already exists)


def held_containers(function: Function, access: Access) -> set[str]:
    """The attribute containers (`self.x`) whose element the accessed local itself is (`for k, (out, done) in
    self._buffers.items(): out[:n].copy_(kv)`, vLLM's engram prefetch): a tensor op on the local touches the
    container's element, which another method takes out by key (`out, done = self._buffers[k]`, read as
    `self._buffers`: extract_bindings `_through_container`). Only the element itself: a path below it (`op.tensor`)
    is the container's path below (`_attribute_paths`)."""
    if "." in access.path:
        return set()
    return {source for local, source, bound in function.facts.derived
            if local == access.path and source.count(".") == 1 and source.split(".", 1)[0] in ("self", "cls")
            and bound <= access.line and not exclusive(function.facts, bound, access.line)}


def as_attribute(function: Function, path: str, line: int) -> str:
    """`path` spelled with the attribute a local names at `line` (FunctionFacts.attribute_names, `counts_cpu =
    self.valid_sampled_token_count_cpu`: `counts_cpu[]` -> `self.valid_sampled_token_count_cpu[]`), else as is."""
    head = path.split(".", 1)[0].split("[", 1)[0]
    bound = [(at, attribute) for local, attribute, at in function.facts.attribute_names
             if local == head and at <= line]
    return max(bound)[1] + path[len(head):] if bound else path


DERIVED_STEPS = 4  # `op` <- `by_id` <- `local_recvs` <- `self.recv_ops` (Megatron's NCCL copy service)


def derived_paths(function: Function, path: str, line: int) -> set[str]:
    """`path` and what it stands for through the function's derived locals (FunctionFacts.derived) bound before
    `line`, not in the other arm of an if/else, a few steps up (`op.tensor` -> `by_id.tensor` -> ...)."""
    found, frontier = {path}, {path}
    for _ in range(DERIVED_STEPS - 1):
        reached = set()
        for current in frontier:
            root, dot, rest = current.partition(".")
            if root not in ("self", "cls"):
                reached.update(source + dot + rest for local, source, bound in function.facts.derived
                               if local == root and bound <= line and not exclusive(function.facts, bound, line))
        frontier = reached - found
        if not frontier:
            break
        found |= frontier
    return found


def from_outside(program: Program, function: Function, access: Access) -> bool:
    """Whether the access touches what outlives the call: an attribute of `self`, a tensor a parameter holds (the
    function's, or an enclosing function's that a closure reads: torchrec's `execute_stash` over `tensors`), or
    their elements and views held by locals (`for op in self.recv_ops: op.tensor.copy_(...)`, a few steps of
    FunctionFacts.derived bound before the access, not in the other arm of an if/else)."""
    params = set(function.facts.params) - {"self", "cls"}
    if access.owner:  # a name the function does not bind: an enclosing function's (or the module's)
        enclosing = program.functions.get(f"{function.file.path}::{access.owner}")
        return enclosing is not None and access.path.split(".", 1)[0] in enclosing.facts.params
    params |= _enclosing_params(program, function)
    return any(p.startswith("self.") or p.split(".", 1)[0] in params
               for p in derived_paths(function, access.path, access.line))


def _enclosing_params(program: Program, function: Function) -> set[str]:
    """The parameters of the functions `function` is nested in, less the names it binds itself."""
    if "." not in function.facts.qualname:
        return set()
    return program.memo(("aliasing.enclosing", function.id), lambda: _enclosing(program, function))


def _enclosing(program: Program, function: Function) -> set[str]:
    own = set(function.facts.params) | {local for local, _source, _line in function.facts.derived} | {
        a.path for a in function.facts.accesses if a.kind == "write" and "." not in a.path}
    found: set[str] = set()
    qualname = function.facts.qualname
    while "." in qualname:
        qualname = qualname.rsplit(".", 1)[0]
        outer = program.functions.get(f"{function.file.path}::{qualname}")
        if outer is not None:
            found |= set(outer.facts.params) - {"self", "cls"}
    return found - own


def same_element(first: Access, second: Access) -> bool:
    """Whether two accesses under one key may touch the same tensor: the same index text, or one of them the whole
    container (`bufs[cur]` and `bufs[1 - cur]` are the two halves of a double buffer)."""
    if not first.index or not second.index or first.index == second.index:
        return True
    a, b = _interval(first.index), _interval(second.index)
    if a is None and b is None:
        return False  # two different element indices
    if a is None or b is None:
        return True  # an element and a slice: may overlap
    return a[0] < b[1] and b[0] < a[1]


def _interval(index: str) -> tuple[int, int] | None:
    """A slice's bounds evaluated with every name set to one large value (`0:N`, `N:2 * N`), or None for an
    element index or bounds that do not evaluate. Two slices of one size name overlap at that value exactly when
    they overlap for any large size (bounds are linear in it in the code this is for)."""
    if ":" not in index:
        return None
    lower, _, upper = index.partition(":")
    try:
        return _evaluate(lower), _evaluate(upper)
    except (ValueError, SyntaxError, TypeError, ZeroDivisionError):
        return None


def _evaluate(text: str) -> int:
    """A bound's value with every name set to one large size; only + - * // of ints and names (nothing is run)."""

    def value(node: ast.AST) -> int:
        if isinstance(node, ast.Constant) and type(node.value) is int and abs(node.value) < 1 << 31:
            return node.value
        if isinstance(node, (ast.Name, ast.Attribute)):
            return 1_000_003
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
            return -value(node.operand)
        if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Add, ast.Sub, ast.Mult, ast.FloorDiv)):
            left, right = value(node.left), value(node.right)
            if isinstance(node.op, ast.Add):
                return left + right
            if isinstance(node.op, ast.Sub):
                return left - right
            if isinstance(node.op, ast.Mult):
                return left * right
            return left // right
        raise ValueError(text)

    return value(ast.parse(text, mode="eval").body)


HOLDERS = ("append", "insert", "appendleft")  # `chunks.append(Chunk(x))`: the constructed object goes into chunks


def object_of(program: Program, anchor: Function, chain: tuple, function: Function, access: Access) -> str | None:
    """The local of `anchor` (the function an access's context starts in) whose object the access touches, when
    the engine can tell: the receiver of the method call that reaches an access to `self.<attr>` (`global_k[i]
    .load_to_gpu()`: `global_k`), the local a constructed object is put into (`global_o.append(SequenceChunk(x))`:
    `global_o`), or the root of a direct access's path (`global_k.gpu_chunk`). Two accesses of one function body
    through two different locals are two objects: DeepSpeed FPDT keeps the chunks of q, k, v and the layernorm
    output in lists of SequenceChunk objects whose methods all name the same `self.gpu_chunk` and `self.cpu_chunk`."""
    root, dot, _rest = access.path.partition(".")
    if not chain:
        return root if dot and root not in ("self", "cls") and not access.owner else None
    edge = chain[0]
    callee = program.functions[edge.callee]
    if root != "self" or not dot or not callee.owner or (callee.file.path, callee.owner) != (function.file.path,
                                                                                           function.owner):
        return None  # not an attribute of the object the first call is made on
    call = edge.call
    if callee.facts.name == "__init__":
        made = {(line, column): local for local, line, column in anchor.facts.call_results}
        if (call.line, call.column) in made:
            return made[(call.line, call.column)]
        holders = [c for c in anchor.facts.calls if c.line == call.line and c.column < call.column
                   and c.callee.rsplit(".", 1)[-1] in HOLDERS]
        receiver = max(holders, key=lambda c: c.column).callee.rpartition(".")[0] if holders else ""
    else:
        receiver = call.callee.rpartition(".")[0].replace("[]", "")
    return receiver if receiver.isidentifier() and receiver not in ("self", "cls") else None
