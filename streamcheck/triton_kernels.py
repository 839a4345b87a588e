"""Which arguments a Triton kernel writes, read from its body: the lint and the instrumenter share it (issue 14).

A launch `kernel[grid](x, out, n)` runs on the current stream and reads its tensor arguments; which of them it
writes is in the kernel's body: `tl.store(out_ptr + offs, y)`, `tl.atomic_add(ptr, v)`, or a store through a
block pointer or a tensor descriptor made from a parameter (`tl.make_block_ptr(base=out_ptr, ...)`,
`desc.store(...)`). A pointer parameter reaches a store through pointer arithmetic (`out_ptr + row * stride`,
`ptrs = base + offs[:, None]`, `out_ptr += pid * n`: the pointer is the left operand, as Triton code writes it)
and through the pointer helpers (`tl.multiple_of`, `tl.advance`, `.to(...)`); a value loaded through a pointer
(`idx = tl.load(ids_ptr + i)`) is data, not that pointer, and `tl.constexpr` parameters are never pointers. A
kernel that hands a pointer to another kernel of the file (`_store_tile(out_ptr, ...)`, a `@triton.jit` helper)
writes what that one stores.

Which parameters it loads through is read the same way (`tl.load`, atomics, `desc.load(...)`): a launch of a kernel
of another module reads those arguments and writes the stored ones (the lint binds them at the launch through the
call graph, rules/callgraph.py). The instrumenter reads a launched `JITFunction`'s source the same way
(instrument/launches.py).
"""

from __future__ import annotations

import ast
import textwrap
from typing import Callable

__all__ = ["KernelWrites", "kernel_writes", "writes_of_source"]

# Stores and read-modify-writes of triton.language, by the position of their pointer argument (0).
STORES = frozenset({"store", "atomic_add", "atomic_max", "atomic_min", "atomic_and", "atomic_or", "atomic_xor",
                    "atomic_xchg", "atomic_cas"})
# Loads and read-modify-writes, by the position of their pointer argument (0).
LOADS = frozenset({"load"}) | (STORES - {"store"})
# Calls whose result is the same pointer (moved, hinted or cast): their first argument (or `base=`) carries it.
POINTER_HELPERS = frozenset({"make_block_ptr", "advance", "multiple_of", "max_contiguous", "max_constancy",
                             "make_tensor_descriptor", "cast"})
HELPER_ROUNDS = 4  # kernels calling kernels: how many rounds the stores of helpers are carried up


class KernelWrites:
    """A kernel's parameters in order, those its body stores through and those it loads through."""

    def __init__(self, params: list[str], written: set[str], loaded: set[str] | None = None) -> None:
        self.params = params
        self.written = written
        self.loaded = loaded if loaded is not None else set()

    def written_arguments(self, call: ast.Call) -> list[ast.expr]:
        """The launch's arguments bound to a parameter the kernel stores through."""
        return self._arguments(call, self.written)

    def loaded_arguments(self, call: ast.Call) -> list[ast.expr]:
        """The launch's arguments bound to a parameter the kernel loads through."""
        return self._arguments(call, self.loaded)

    def _arguments(self, call: ast.Call, names: set[str]) -> list[ast.expr]:
        bound = [arg for position, arg in enumerate(call.args)
                 if position < len(self.params) and self.params[position] in names]
        return bound + [k.value for k in call.keywords if k.arg in names]


def kernel_writes(tree: ast.Module) -> dict[str, KernelWrites]:
    """name -> KernelWrites for every module-level `@triton.jit` (or `@jit`) function of the tree."""
    kernels = {node.name: node for node in tree.body
               if isinstance(node, ast.FunctionDef) and any(_is_jit(d) for d in node.decorator_list)}
    found = {name: KernelWrites(_params(node), set()) for name, node in kernels.items()}
    parts = {name: _parts(node) for name, node in kernels.items()}  # (walked once, not twice a round)
    for _ in range(HELPER_ROUNDS):
        changed = False
        for name, node in kernels.items():
            written, loaded = _pointer_params(node, found, parts[name])
            if (written, loaded) != (found[name].written, found[name].loaded):
                found[name].written, found[name].loaded, changed = written, loaded, True
        if not changed:
            break
    return found


def writes_of_source(source: str, helper: Callable[[str], KernelWrites | None]) -> KernelWrites | None:
    """The KernelWrites of the function whose source this is (a `JITFunction`'s `src`, which starts at its
    `def`), the kernels it calls found by `helper(name)`; None when the source is no function."""
    try:
        tree = ast.parse(textwrap.dedent(source))
    except SyntaxError:
        return None
    node = next((n for n in tree.body if isinstance(n, ast.FunctionDef)), None)
    if node is None:
        return None
    called = {n.func.id for n in ast.walk(node) if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)}
    others = {name: found for name in sorted(called) if (found := helper(name)) is not None}
    return KernelWrites(_params(node), *_pointer_params(node, others))


def _walk(root: ast.AST) -> list[ast.AST]:
    """The nodes of ast.walk(root) in its order (breadth first, fields in order), less the leaves that are no
    statement and no call (names, constants, contexts, operators: a leaf has no descendants, so the others keep
    their order), without its generators: vLLM 0.33.0 has 849 kernels, in plain files too (kernel_writes over its
    3 231 files: 1.7 s -> 0.35 s CPU, with the parts listed once per file)."""
    found = [root]
    index = 0
    leaves = _LEAVES
    while index < len(found):
        node = found[index]
        index += 1
        for name in node._fields:
            value = getattr(node, name, None)
            if value.__class__ is list:
                for item in value:
                    if item.__class__ not in leaves and isinstance(item, ast.AST):
                        found.append(item)
            elif value.__class__ not in leaves and isinstance(value, ast.AST):
                found.append(value)
    return found


def _subclasses(kind: type) -> set[type]:
    return {kind}.union(*(_subclasses(sub) for sub in kind.__subclasses__()))


_LEAVES = frozenset({ast.Name, ast.Constant} | _subclasses(ast.expr_context) | _subclasses(ast.operator)
                    | _subclasses(ast.cmpop) | _subclasses(ast.unaryop) | _subclasses(ast.boolop))


def _is_jit(decorator: ast.expr) -> bool:
    """`@triton.jit`, `@triton.jit(do_not_specialize=[...])`, `@jit` (imported from triton)."""
    if isinstance(decorator, ast.Call):
        decorator = decorator.func
    if isinstance(decorator, ast.Attribute):
        return decorator.attr == "jit" and isinstance(decorator.value, ast.Name) and decorator.value.id == "triton"
    return isinstance(decorator, ast.Name) and decorator.id == "jit"


def _params(node: ast.FunctionDef) -> list[str]:
    args = node.args
    return [a.arg for a in args.posonlyargs + args.args + args.kwonlyargs]


def _pointer_candidates(node: ast.FunctionDef) -> set[str]:
    """Parameters that can hold a pointer: not `tl.constexpr` (block sizes, flags)."""
    args = node.args
    return {a.arg for a in args.posonlyargs + args.args + args.kwonlyargs
            if not (a.annotation is not None and _last(a.annotation) == "constexpr")}


def _parts(kernel: ast.FunctionDef) -> tuple[list[ast.AST], list[ast.Call]]:
    """The kernel's assignments and its calls, in ast.walk's order."""
    nodes = _walk(kernel)
    return ([node for node in nodes if isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign))],
            [node for node in nodes if node.__class__ is ast.Call])


def _pointer_params(kernel: ast.FunctionDef, others: dict[str, KernelWrites],
                    parts: tuple[list[ast.AST], list[ast.Call]] | None = None) -> tuple[set[str], set[str]]:
    """(the parameters the kernel stores through, those it loads through); `parts`: _parts(kernel), when the
    caller has them already."""
    statements, calls = _parts(kernel) if parts is None else parts
    params = _pointer_candidates(kernel)
    carried: dict[str, set[str]] = {}  # a local -> the parameters whose pointer it holds

    def roots(expr: ast.AST | None) -> set[str]:
        if isinstance(expr, ast.Name):
            return {expr.id} if expr.id in params else set(carried.get(expr.id, ()))
        if isinstance(expr, ast.BinOp) and isinstance(expr.op, (ast.Add, ast.Sub)):
            return roots(expr.left)  # `out_ptr + row * stride + offs`: the pointer is written first, offsets after
        if isinstance(expr, ast.Subscript):  # `ptrs[:, None]`
            return roots(expr.value)
        if isinstance(expr, ast.IfExp):
            return roots(expr.body) | roots(expr.orelse)
        if isinstance(expr, ast.Call) and isinstance(expr.func, ast.Attribute) and expr.func.attr == "to":
            return roots(expr.func.value)  # `ptr.to(tl.pointer_type(tl.float16))`
        if isinstance(expr, ast.Call) and _last(expr.func) in POINTER_HELPERS:
            base = next((k.value for k in expr.keywords if k.arg == "base"), expr.args[0] if expr.args else None)
            return roots(base)
        return set()  # a load, a constant, any other call: data, not a pointer

    for _ in range(2):  # twice: a pointer moved at the end of a loop body is used at its top
        for statement in statements:
            value = statement.value
            targets = statement.targets if isinstance(statement, ast.Assign) else [statement.target]
            for target in targets:
                if isinstance(target, ast.Name):
                    carried.setdefault(target.id, set()).update(roots(value))
                    if isinstance(statement, ast.AugAssign) and target.id in params:
                        carried[target.id].add(target.id)
    written: set[str] = set()
    loaded: set[str] = set()
    for node in calls:
        last = _last(node.func)
        if last in STORES or last in LOADS:
            pointer = node.args[0] if node.args else next(
                (k.value for k in node.keywords if k.arg in ("pointer", "ptr")), None)
            # `desc.store(offsets, value)`: the descriptor is the receiver
            if isinstance(node.func, ast.Attribute) and isinstance(node.func.value, ast.Name) \
                    and node.func.value.id not in ("tl", "triton"):
                pointer = node.func.value
            if last in STORES:
                written |= roots(pointer)
            if last in LOADS:
                loaded |= roots(pointer)
        elif isinstance(node.func, ast.Name) and node.func.id in others:
            helper = others[node.func.id]
            for arg in helper.written_arguments(node):
                written |= roots(arg)
            for arg in helper.loaded_arguments(node):
                loaded |= roots(arg)
    return {name for name in written if name in params}, {name for name in loaded if name in params}


def _last(func: ast.expr) -> str:
    if isinstance(func, ast.Attribute):
        return func.attr
    return func.id if isinstance(func, ast.Name) else ""
