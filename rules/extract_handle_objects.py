"""Work-handle objects whose `wait()` produces a tensor: a construction is a launch (for SC105).

Some code wraps a collective's work in a class of its own whose `wait()` finishes the job on the host's behalf:
Megatron's `_ReduceScatterWithFP32AccumulationWorkHandle` waits the all-to-all and then copies the fp32 sum into
the `output_tensor` it was constructed with. Until that `wait()` runs, the output holds nothing: a function that
builds the handle and neither waits it nor hands it on leaves its caller's tensor unwritten, and a touch of the
tensor before the wait reads it too early, exactly as with a collective's own handle.

So, within one file: a class with a `wait` method that writes `self.X`, where `__init__` stores its parameter P on
`self.X`; a local bound to a construction of that class is an `AsyncWork` of the constructing function (handle: the
local; tensor: the argument given for P), and SC105's queries (a touch before the wait, left in flight at the
function's end) apply to it.
"""

from __future__ import annotations

from .facts import AsyncWork, FunctionFacts


def synthesize_handle_objects(functions: list[FunctionFacts]) -> None:
    """Add to each function the async works of the handle objects it constructs (before the uses are filtered)."""
    produced = _produced_by_wait(functions)
    if not produced:
        return
    for fn in functions:
        for call in fn.calls:
            params = produced.get(call.callee)
            if not params:
                continue
            handle = _bound_local(fn, call.line)
            tensors = tuple(dict.fromkeys(t for t in (_argument(call.args, params, p) for p in params[1]) if t))
            if handle and tensors:
                fn.async_works.append(AsyncWork(call.callee, handle, tensors, call.line, call.column, call.line,
                                                call.block, call.region))


def _produced_by_wait(functions: list[FunctionFacts]) -> dict[str, tuple[list[str], list[str]]]:
    """Class name -> (its `__init__`'s parameters, those `wait()` writes through `self.`)."""
    inits = {fn.cls: fn for fn in functions if fn.name == "__init__" and fn.cls}
    found = {}
    for fn in functions:
        if fn.name != "wait" or fn.cls not in inits or "." in fn.cls:
            continue
        written = {a.path for a in fn.accesses if a.kind == "write" and a.path.startswith("self.")}
        init = inits[fn.cls]
        params = [u.path for u in init.uses if u.how == "escape" and u.arg in written and u.path in init.params]
        if params:
            found[fn.cls] = (init.params, list(dict.fromkeys(params)))
    return found


def _bound_local(fn: FunctionFacts, line: int) -> str:
    """The plain local a statement starting on `line` binds (`h = Handle(...)`), else ""."""
    for use in fn.uses:
        if use.how == "rebind" and (use.start_line or use.line) == line and "." not in use.path \
                and not use.path.startswith("("):
            return use.path
    return ""


def _argument(args: tuple[str, ...], signature: tuple[list[str], list[str]], param: str) -> str:
    """The argument path a construction gives for `__init__`'s parameter `param` ("" when none or no path)."""
    params = [p for p in signature[0] if p not in ("self", "cls")]
    for arg in args:
        if arg.startswith(f"{param}="):
            return arg[len(param) + 1:]
    positional = [a for a in args if "=" not in a]
    index = params.index(param) if param in params else len(positional)
    return positional[index] if index < len(positional) else ""
