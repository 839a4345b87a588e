"""Handles a helper launches and returns in a list, as async works of the caller that binds the list (SC105).

    def isend_tensor_dict(self, tensor_dict, dst):          # the launcher
        handles = []
        for tensor in _split(tensor_dict):
            handles.append(torch.distributed.isend(tensor, dst))
        return handles

    def send_tensor_dict(self, tensor_dict, dst):           # the caller: a blocking send
        handles = self.isend_tensor_dict(tensor_dict, dst)
        for handle in handles:
            handle.wait()                                  # without it, the caller's tensors are still in flight

The caller's `handles` holds the launcher's works (handle_flow.py follows the values through the call), and the
launch's tensor is part of the launcher's parameter `tensor_dict` (directly, or taken out of it by a helper:
handles_at_exit.py `_argument_source`), so at the call it is the caller's argument for that parameter. Each such
(op, argument) is an `AsyncWork` of the caller at the call, whose handle is the bound local: the at-exit query
(handles_at_exit.py) then asks whether the caller waits or hands the list on before it returns, as for its own
launches.

Only a local the caller iterates or waits (extract_handle_flow.py `lists_from_calls`) is taken: its uses are the
ones kept, so a caller that merely hands the list on (`self._pending = handles[1:]`, `return handles`) is not
asked about. Only the direct callee's launches are mapped (a launch returned through two calls is not: its
parameter is not the caller's argument), and only tensors of the launcher's parameters (not of `self`).
"""

from __future__ import annotations

from typing import Callable

from .extract_handle_flow import lists_from_calls
from .facts import AsyncWork
from .handle_flow import flow_of
from .program import Function, Program
from .summaries import argument_for

# (launcher, its work) -> the launcher's parameter the work's tensor is part of, or None
ParamOf = Callable[[Function, AsyncWork], "str | None"]


def returned_works(program: Program, function: Function, param_of: ParamOf) -> list[AsyncWork]:
    facts = function.facts
    lists = lists_from_calls(facts)
    if not lists:
        return []
    flow = flow_of(program)
    calls = {}
    works: list[AsyncWork] = []
    for row in facts.handle_flow:
        if row[0] != "bind" or row[1] not in lists:
            continue
        for operand in row[2]:
            if operand[0] != "call":
                continue
            if not calls:
                calls = {(c.line, c.column): (c, edges) for c, edges in program.calls_of(function.id)}
            call, edges = calls.get((operand[1], operand[2]), (None, ()))
            callees = {edge.callee for edge in edges}
            for _key, op, launcher_id, line, column in sorted(flow.value(function, operand)):
                if launcher_id == function.id or launcher_id not in callees:
                    continue
                launcher = program.functions[launcher_id]
                work = next((w for w in launcher.facts.async_works if (w.line, w.column) == (line, column)), None)
                param = param_of(launcher, work) if work is not None else None
                arg = argument_for(launcher, call, param) if param else None
                if arg and not any(w.op == op and w.tensors == (arg,) for w in works):
                    works.append(AsyncWork(op, row[1], (arg,), call.line, call.column, row[3], call.block,
                                           call.region))
    return works
