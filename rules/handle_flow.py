"""Async handles as values: returned inside dicts, lists and tuples, stored in containers, taken out again (SC105).

A point-to-point helper keeps its handles in a dict by direction and returns it; its callers merge it, return it in
a tuple beside the buffers, and the schedule takes it apart, queues each receive's handle and waits it in a later
iteration (Megatron's `_p2p_ops` -> `P2PCommunicator._communicate` -> `send_forward_recv_forward` -> the
interleaved 1F1B schedule). Over FunctionFacts.handle_flow (extract_handle_flow.py) each function gets what its
locals and containers may hold: a set of entries (key, op, launcher, line, column), one per launch whose handle
may be there, under the dict key it was stored at ("" for the value itself, "*" for an element of a list).
- a launch bound to a local (`req = dist.irecv(t, src)`) is an entry of that local;
- `c[k] = v` puts v's handles under key k, `c.append(v)` under "*", `c.update(d)` / `c.extend(d)` merges d's;
- `c.pop(k)`, `c.get(k)`, `c[k]` take the entries under k (and under "*"; all of them for a key that is no string
  constant), as do `for x in c` / `c.values()` / `c.items()`;
- a call's result is what its callees return (union over the call's edges; a local bound to functions,
  `p2p_func = _p2p_ops`, calls those); `a, b = f()` takes f's returned tuple apart by position;
- a nested function reads the enclosing function's locals that it does not bind itself.
The flow is insensitive to order within a function (`reqs = None` after waiting them does not empty `reqs`).

The query: a local bound to the handle of a launch in another function (a receive, a collective; not a send)
taken out of a container (`h = pending.pop(0)`, `popleft()`, `popitem()`: the local is then its last holder) that
nothing uses before it is bound again or the function ends (in a loop, before the body comes round to the binding
again): the handle is dropped unwaited, and nothing can order the current stream after the launch any more. A
send's handle is left out (ProcessGroupNCCL keeps a sent tensor alive until its work completes; only a write of it
could race), and so are a local a nested function reads (it may wait it there) and a drop followed by a
device-wide synchronize. Only files with detailed facts (prefilter.py) have the rows: a schedule whose code names
no stream word is not followed.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator

from streamcheck.findings import ROLE_READ, ROLE_WRITE, Finding

from .extract_handle_flow import ANY_KEY, MERGED
from .extract_handles import P2P_SEND
from .facts import exclusive
from .program import Function, Program
from .rule import location

Entry = tuple[str, str, str, int, int]  # (key, op, launcher id, line, column)
Holdings = dict[str, set[Entry]]
_SEND_OPS = frozenset({P2P_SEND, "send"})


@dataclass(frozen=True)
class DroppedHandle:
    function: Function
    local: str
    container: str
    line: int
    column: int
    launch: Entry  # a receive whose handle the local may hold


def flow_of(program: Program) -> "_Flow":
    """The program's handle flow (memoized): what each function's locals may hold."""
    return program.memo("handle_flow", lambda: _Flow(program))


def dropped_handles(program: Program) -> Iterator[DroppedHandle]:
    flow = flow_of(program)
    for function in program.functions.values():
        rows = function.facts.handle_flow
        if not any(r[0] == "bind" and any(o[0] == "take" and o[3] for o in r[2]) for r in rows):
            continue
        yield from _dropped_in(flow, function)


def _dropped_in(flow: "_Flow", function: Function) -> Iterator[DroppedHandle]:
    facts = function.facts
    rows = facts.handle_flow
    captured = {r[1] for r in rows if r[0] == "captured"}
    mentions = [r for r in rows if r[0] == "mention" and not r[4]]
    bindings: dict[str, list[int]] = {}
    for r in rows:
        if r[0] == "bind":
            bindings.setdefault(r[1], []).append(r[3])
        elif r[0] == "unpack":
            for name in r[1]:
                bindings.setdefault(name, []).append(r[4])
    for r in rows:
        if r[0] != "bind" or r[1] in captured:
            continue
        local, line = r[1], r[3]
        takes = [o for o in r[2] if o[0] == "take" and o[3]]  # taken out: the local is the handle's last holder
        if not takes:
            continue
        held = set().union(*(flow.value(function, o) for o in takes))
        # (a launch of this function's own is SC105's use-before-wait query's: it follows the tensor itself)
        receives = sorted(e for e in held if not e[0] and e[1] not in _SEND_OPS and e[2] != function.id)
        if not receives:
            continue
        later = [b for b in bindings.get(local, ()) if b > line]
        stop = min(later) if later else facts.end_line + 1
        loops = [(a, b) for a, b in facts.loops if a <= line <= b]
        first = max(loops)[0] if loops and not any(b <= max(loops)[1] for b in later) else line
        own = bindings.get(local, ())
        if any(line < m[2] < stop and not exclusive(facts, line, m[2])  # (the other arm of an if binds its own)
               or first <= m[2] < line and not any(first <= b < m[2] for b in own)  # the next iteration, before
               for m in mentions if m[1] == local):                                # the body binds it again
            continue
        if any(line < s.line < stop or first <= s.line < line for s in facts.syncs if _drains_device(s)):
            continue  # a device-wide synchronize waits every stream, the communication library's too
        container = next(o[1] for o in takes)
        yield DroppedHandle(function, local, container, line, r[4], receives[0])


class _Flow:
    """What each function's locals and containers may hold, and what each function returns (memoized)."""

    def __init__(self, program: Program) -> None:
        self.program = program
        self._holdings: dict[str, Holdings] = {}
        self._returns: dict[str, dict[int, set[Entry]]] = {}
        self._busy: set[str] = set()

    def value(self, function: Function, operand: list) -> set[Entry]:
        return self._operand(function, self.holdings(function), operand)

    def holdings(self, function: Function) -> Holdings:
        fid = function.id
        if fid not in self._holdings:
            self._evaluate(function)
        return self._holdings.get(fid, {})

    def returns(self, fid: str) -> dict[int, set[Entry]]:
        if fid not in self._returns and fid not in self._busy:
            self._evaluate(self.program.functions[fid])
        return self._returns.get(fid, {})

    def _evaluate(self, function: Function) -> None:
        fid, facts = function.id, function.facts
        self._busy.add(fid)
        env: Holdings = {}
        for work in facts.async_works:
            if work.handle.isidentifier():
                env.setdefault(work.handle, set()).add(("", work.op, fid, work.line, work.column))
        rows = facts.handle_flow
        returns: dict[int, set[Entry]] = {}
        for _ in range(3):  # values go round through containers and loops; three passes reach a fixpoint here
            size = sum(map(len, env.values()))
            for r in rows:
                if r[0] == "bind":
                    _add(env, r[1], set().union(*(self._operand(function, env, o) for o in r[2])))
                elif r[0] == "unpack":
                    results = self._call_returns(function, env, r[2], r[3])
                    for position, name in enumerate(r[1]):
                        if name and results.get(position):
                            _add(env, name, results[position])
                elif r[0] == "store":
                    value = set().union(*(self._operand(function, env, o) for o in r[3]))
                    key = r[2]
                    _add(env, r[1], value if key == MERGED else {(key,) + e[1:] for e in value if not e[0]})
            if sum(map(len, env.values())) == size:
                break
        for r in rows:
            if r[0] == "return":
                single = len(r[1]) == 1
                for position, operands in enumerate(r[1]):
                    value = set().union(*(self._operand(function, env, o) for o in operands))
                    if value:
                        returns.setdefault(-1 if single else position, set()).update(value)
        self._holdings[fid] = env
        self._returns[fid] = returns
        self._busy.discard(fid)

    def _operand(self, function: Function, env: Holdings, operand: list) -> set[Entry]:
        kind = operand[0]
        if kind == "name":
            return self._named(function, env, operand[1])
        if kind == "take":
            key = operand[2]
            return {("",) + e[1:] for e in self._named(function, env, operand[1])
                    if e[0] and (e[0] == ANY_KEY or not key or e[0] == key)}
        if kind == "call":  # a launch stored as it is made (`reqs["send"] = dist.isend(t, peer)`), or a callee's result
            launched = {("", w.op, function.id, w.line, w.column) for w in function.facts.async_works
                        if (w.line, w.column) == (operand[1], operand[2])}
            return launched | self._call_returns(function, env, operand[1], operand[2]).get(-1, set())
        return set()

    def _named(self, function: Function, env: Holdings, name: str) -> set[Entry]:
        if name in env:
            return env[name]
        parent = self._enclosing(function)
        if parent is not None and not any(r[0] in ("bind", "unpack") and (r[1] == name or name in r[1])
                                          for r in function.facts.handle_flow):
            return self.holdings(parent).get(name, set())
        return set()

    def _enclosing(self, function: Function) -> Function | None:
        qualname = function.facts.qualname
        if "." not in qualname:
            return None
        return self.program.functions.get(f"{function.file.path}::{qualname.rsplit('.', 1)[0]}")

    def _call_returns(self, function: Function, env: Holdings, line: int, column: int) -> dict[int, set[Entry]]:
        callees: list[str] = []
        for call, edges in self._calls(function).get((line, column), ()):
            callees += [e.callee for e in edges]
            if not edges and call.callee.isidentifier():  # `p2p_func(...)`, a local bound to functions
                for r in function.facts.handle_flow:
                    if r[0] == "bind" and r[1] == call.callee:
                        callees += [f for o in r[2] if o[0] == "name"
                                    for f in self.program.functions_named(function, o[1])]
        found: dict[int, set[Entry]] = {}
        for callee in dict.fromkeys(callees):
            for position, value in self.returns(callee).items():
                found.setdefault(position, set()).update(value)
        return found

    def _calls(self, function: Function) -> dict[tuple[int, int], list]:
        key = f"handle_flow_calls:{function.id}"
        def build():
            table: dict[tuple[int, int], list] = {}
            for call, edges in self.program.calls_of(function.id):
                table.setdefault((call.line, call.column), []).append((call, edges))
            return table
        return self.program.memo(key, build)


def _drains_device(sync) -> bool:
    """`torch.cuda.synchronize()`, `get_accelerator().synchronize()`: not a stream's or an event's."""
    receiver = sync.receiver.lower()
    return sync.kind == "synchronize" and "stream" not in receiver and "event" not in receiver


def _add(env: Holdings, name: str, value: set[Entry]) -> None:
    if value:
        env.setdefault(name, set()).update(value)


def finding(rule: str, program: Program, dropped: DroppedHandle) -> Finding:
    function, facts = dropped.function, dropped.function.facts
    _, op, launcher_id, launch_line, launch_column = dropped.launch
    launcher = program.functions[launcher_id]
    work = next((w for w in launcher.facts.async_works if w.line == launch_line), None)
    tensor = work.tensors[0] if work is not None and work.tensors else ""
    what = f" into `{tensor}`" if tensor else ""
    return Finding(
        rule=rule,
        message=(f"`{dropped.local}`, taken from `{dropped.container}`, may be the handle of the `{op}` that "
                 f"{launcher.facts.qualname} launched{what}: it is dropped without a wait, so nothing orders the "
                 f"current stream after the `{op}`, and the tensor it writes may be read before it is written"),
        primary=location(function, dropped.line, dropped.column, ROLE_READ,
                         f"`{dropped.local}` taken from `{dropped.container}` in {facts.qualname}, never waited"),
        related=(location(launcher, launch_line, launch_column, ROLE_WRITE, f"{op}(...) in {launcher.facts.qualname}"),),
        fix=f"Call `{dropped.local}.wait()` after line {dropped.line}, before the tensor it writes is used.",
        kind="RAW",
        symbol=facts.qualname,
        extra={"path": dropped.container, "handle": dropped.local, "collective": op},
    )
