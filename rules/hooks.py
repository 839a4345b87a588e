"""Functions that run as hooks: their current stream is the invoker's, not the registering code's.

Autograd runs a gradient hook (`register_hook`, `register_post_accumulate_grad_hook`, DeepSpeed's
`register_grad_hook`), a module hook or a queued callback on the stream of the backward op that triggers it, which is
the forward op's stream and need not be the default stream. So inside a hook (and in what it calls) `default_stream()`
names another stream than `current_stream()`: a wait for the default stream does not order the gradient the hook
reads (DeepSpeed PR #7898's fix turned `wait_stream(default_stream())` into `wait_stream(current_stream())` there).
Elsewhere the engine keeps reading `default_stream()` as the current stream: nothing in a plain call says otherwise.
"""

from __future__ import annotations

from collections import deque
from dataclasses import replace
from typing import TYPE_CHECKING, Callable

if TYPE_CHECKING:
    from .program import Program

QUEUE = "queue_callback"  # `Variable._execution_engine.queue_callback(fn)`: fn runs when the backward pass ends
CALLBACK_REGISTRARS = frozenset({QUEUE, "saved_tensors_hooks", "register_multi_grad_hook"})


# The registrars whose name lacks "hook": with that word, a substring test that turns away most calls unsplit.
_NAMED_WITHOUT_HOOK = tuple(sorted(name for name in CALLBACK_REGISTRARS if "hook" not in name))


def is_hook_registrar(callee: str) -> bool:
    """`param.register_hook`, `module.register_forward_pre_hook`, `register_grad_hook(param, fn)`, ..."""
    if "hook" not in callee and not callee.endswith(_NAMED_WITHOUT_HOOK):
        return False
    last = callee.rsplit(".", 1)[-1]
    return (last.startswith("register") and "hook" in last) or last in CALLBACK_REGISTRARS


def _handed_over(program: "Program", registrar: Callable[[str], bool]) -> set[str]:
    """The functions handed to calls whose callee `registrar` accepts (the function ids); `registrar` sees only
    callees is_hook_registrar accepts."""
    found: set[str] = set()
    for function, call in _registrar_calls(program):
        if not registrar(call.callee):
            continue
        for ref in call.func_args:  # the function handed over, resolved as if it were called here
            as_call = replace(call, callee=ref, func_args=(), args=())
            found.update(fid for fid, _ in program.resolve(function, as_call) if fid in program.functions)
    return found


def _registrar_calls(program: "Program") -> list:
    """(function, call) for every call that registers a hook or a callback, in one pass over the program's calls
    (vLLM 0.33.0: two passes with a split of every callee took 0.4 s of SC101's 2.5 s)."""

    def find() -> list:
        return [(function, call) for function in program.functions.values() for call in function.facts.calls
                if is_hook_registrar(call.callee)]

    return program.memo("hooks.registrar_calls", find)


def hook_run_functions(program: "Program") -> frozenset[str]:
    """The functions handed to a hook registrar, and what they call (exactly resolved), as function ids."""
    return program.memo("hooks.run", lambda: _hook_run_functions(program))


def end_of_backward_callbacks(program: "Program") -> frozenset[str]:
    """The functions handed to `Variable._execution_engine.queue_callback` (also through `functools.partial`), as
    function ids: autograd runs each once, when the backward pass ends, before `backward()` returns to its caller."""
    return program.memo("hooks.callbacks", lambda: frozenset(_handed_over(
        program, lambda callee: callee.rsplit(".", 1)[-1] == QUEUE)))


def hook_roots(program: "Program") -> frozenset[str]:
    """The functions handed to a hook registrar themselves (not what they call), as function ids."""
    return program.memo("hooks.roots", lambda: frozenset(_handed_over(program, is_hook_registrar)))


def _hook_run_functions(program: "Program") -> frozenset[str]:
    hooks = hook_roots(program)
    seen, queue = set(hooks), deque(hooks)
    while queue:
        fid = queue.popleft()
        for _, edges in program.calls_of(fid):
            for edge in edges:
                if edge.exact and edge.callee not in seen:
                    seen.add(edge.callee)
                    queue.append(edge.callee)
    return frozenset(seen)
