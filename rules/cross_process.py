"""Memory other processes read, and the host steps that let them (SC107).

Two ways put a device buffer in another process's hands:
- symmetric memory: a tensor passed to `symm_mem.rendezvous(t, group)` (torch.distributed._symmetric_memory) is
  mapped into the peer processes of the group; their kernels read and write it through the peer and multicast
  pointers of the handle the call returns. The code that makes such a buffer usually initialises it on the device
  (`buf.fill_(sentinel)`, `flags.zero_()`) and then tells the peers it is ready with a host-side barrier;
- a CUDA IPC export: `reduce_tensor(t)` (torch.multiprocessing.reductions) gives the arguments another process
  rebuilds the tensor from. The exporting function fills the buffer and hands the export out (`yield chunk`,
  `return args`), and the other process maps and reads it as soon as it gets it.
Both hand-overs are host steps: they say nothing about the device work queued before them unless the host first
waited for that work.

What counts as "shared": the first argument of a `rendezvous` or `reduce_tensor` call in the function, or, for a
`self.` attribute, in any method of the class (the buffer is usually made in `__init__` and armed elsewhere); and
the locals bound to elements or views of those (`for t in (self.recv, self.gather)`: FunctionFacts.derived).

What hands it over: a `return <value>` or `yield <value>` of a function that exports with `reduce_tensor`; a
host agreement, a blocking collective on a tensor the function made on the host and reads back on the host
(`flag = torch.tensor([ok])`, `dist.all_reduce(flag, group=g)`, `flag.item()`: FunctionFacts.host_collectives),
which lets every rank go on once all reached it, as a barrier does (a collective on a device tensor is enqueued
after the current stream's work and is none); a call of a function of the scanned program that reaches a host
barrier or agreement, itself or through exactly resolved calls, before any host wait of its own (vLLM's
`_all_ranks_true`, `tp_agree`): the hand-over is at the call; and a host barrier, a call of `barrier` or
`monitored_barrier` (`dist.barrier(group=g)`, `group_coordinator.barrier()`). Left out are
- the symmetric-memory handle's own `handle.barrier()`, a kernel on the current stream, ordered after the writes
  before it;
- a barrier or agreement that says it is NCCL's (`device_ids=...`, a `device_group`, or a `group=` path bound to
  one: `group = get_tp_group().device_group`, FunctionFacts.device_groups): ProcessGroupNCCL enqueues it after the
  current stream's work and blocks the host until it completes on every rank;
- a method-form `group.barrier()` that the function follows with a device-wide synchronize: a ProcessGroup's
  `barrier()` returns an unwaited Work, and with NCCL the synchronize after it waits for the barrier kernel, which
  ran after every rank's earlier work (DeepGEMM's symmetric buffer: `zero_()`, `group.barrier()`,
  `torch.cuda.synchronize()`).
"""

from __future__ import annotations

from dataclasses import dataclass

from .facts import Call, FunctionFacts
from .hazard_flow import host_blocked_between
from .program import Function, Program

RENDEZVOUS = "rendezvous"
EXPORT = "reduce_tensor"
BARRIERS = frozenset({"barrier", "monitored_barrier"})
# Spellings that say a barrier runs on NCCL, which orders it after the current stream's queued work.
NCCL_SIGNS = ("device_ids=", "device_group")
DEVICE_WIDE = ("torch.cuda", "torch.accelerator", "get_accelerator()", "torch.xpu", "torch.npu")


def _last(callee: str) -> str:
    return callee.rsplit(".", 1)[-1]


def _receiver(callee: str) -> str:
    return callee.rsplit(".", 1)[0] if "." in callee else ""


@dataclass(frozen=True)
class HandOver:
    """Where other processes are let at the shared memory: `what` names the statement for a finding."""

    line: int
    column: int
    what: str


def _rendezvous_calls(facts: FunctionFacts) -> list[Call]:
    return [call for call in facts.calls if _last(call.callee) == RENDEZVOUS and call.args]


def _sharing_calls(facts: FunctionFacts) -> list[Call]:
    return [call for call in facts.calls if _last(call.callee) in (RENDEZVOUS, EXPORT) and call.args]


def _shared_argument(call: Call) -> str:
    first = call.args[0]
    return first.split("=", 1)[1] if first.startswith("tensor=") else first


def _handles(facts: FunctionFacts) -> set[str]:
    """The names and `self.` paths this function binds to a rendezvous' result (a symmetric-memory handle)."""
    at = {(call.line, call.column) for call in _rendezvous_calls(facts)}
    return {name for name, line, column in facts.call_results if (line, column) in at}


def _of_class(program: Program, function: Function) -> list[FunctionFacts]:
    if function.owner is None:
        return [function.facts]
    return [method.facts for method in program.functions_of_class(function)]


def shared_tensors(program: Program, function: Function) -> set[str]:
    """The paths `function` can reach shared memory by: rendezvous and export arguments (of the class, for
    `self.`), and what is bound to their elements and views."""
    def build() -> set[str]:
        shared = {_shared_argument(call) for call in _sharing_calls(function.facts)}
        for facts in _of_class(program, function):
            shared |= {path for call in _sharing_calls(facts)
                       if (path := _shared_argument(call)).startswith("self.")}
        shared.discard("")
        for local, path, _ in function.facts.derived:
            if path in shared:
                shared.add(local)
        return shared
    return program.memo(f"shared_tensors:{function.id}", build)


def hand_overs(program: Program, function: Function) -> list[HandOver]:
    """Where `function` lets other processes at its shared memory while the device may still be working: its host
    barriers and host agreements, its calls of functions that reach one before any host wait, and its returns
    and yields if it exports a buffer."""
    found = _own_host_hand_overs(program, function)
    found += _hand_overs_through_calls(program, function)
    if any(_last(call.callee) == EXPORT for call in function.facts.calls):
        found += [HandOver(line, column, "the return or yield that hands the export out")
                  for line, column in function.facts.hand_backs]
    return sorted(found, key=lambda h: (h.line, h.column))


def may_hand_over(program: Program, function: Function) -> bool:
    """Whether the function calls a barrier, makes a host agreement, exports a buffer, or calls (exactly resolved)
    a function that may reach a host barrier or agreement (a cheap test before the queries)."""
    facts = function.facts
    if facts.host_collectives or any(_last(call.callee) in BARRIERS or _last(call.callee) == EXPORT
                                     for call in facts.calls):
        return True
    handing = _may_hand_over_through_calls(program)
    return function.id in handing


def _own_host_hand_overs(program: Program, function: Function) -> list[HandOver]:
    """The host barriers of `function` and its blocking collectives on host tensors (facts.host_collectives),
    less those that say they are NCCL's."""
    found = [HandOver(call.line, call.column, f"`{call.callee}(...)`")
             for call in _host_barriers(program, function)]
    if function.facts.host_collectives:
        calls = {(call.line, call.column): call for call in function.facts.calls}
        for callee, tensor, line, column in function.facts.host_collectives:
            call = calls.get((line, column))
            if call is not None and (any(sign in arg for arg in call.args for sign in NCCL_SIGNS)
                                     or _over_device_group(program, function, call)):
                continue
            found.append(HandOver(line, column, f"the host agreement `{callee}(...)` of `{tensor}`"))
    return found


def _may_hand_over_through_calls(program: Program) -> frozenset[str]:
    """Every function with a chain of exactly resolved calls to a function with a host barrier or agreement of
    its own (host waits on the way are not looked at here: `_unwaited_hand_over` decides those)."""
    def build() -> frozenset[str]:
        seeds = [fid for fid, function in program.functions.items()
                 if (function.facts.host_collectives or any(_last(c.callee) in BARRIERS for c in function.facts.calls))
                 and _own_host_hand_overs(program, function)]
        if not seeds:
            return frozenset()
        callers: dict[str, set[str]] = {}
        for fid in program.functions:
            for _call, edges in program.exact_edges_of(fid):
                for edge in edges:
                    callers.setdefault(edge.callee, set()).add(fid)
        found: set[str] = set()
        stack = list(seeds)
        while stack:
            for caller in callers.get(stack.pop(), ()):
                if caller not in found:
                    found.add(caller)
                    stack.append(caller)
        return frozenset(found)
    return program.memo("cross_process.through_calls", build)


def _hand_overs_through_calls(program: Program, function: Function) -> list[HandOver]:
    """Calls of `function` whose callee (exactly resolved) reaches a host hand-over with no host wait before it:
    the peers go on at the call as at a barrier in the caller."""
    if function.id not in _may_hand_over_through_calls(program):
        return []
    found = []
    for call, edges in program.exact_edges_of(function.id):
        inner = next((what for edge in edges if (what := _unwaited_hand_over(program, edge.callee, set()))), None)
        if inner is not None:
            found.append(HandOver(call.line, call.column, f"`{call.callee}(...)` (which reaches {inner})"))
    return found


def _unwaited_hand_over(program: Program, fid: str, visiting: set[str]) -> str | None:
    """The first host hand-over that calling `fid` reaches before any host wait, in it or (through exactly resolved
    calls) in its callees, in words (`dist.all_reduce(...)` of the host tensor `flag` in `tp_agree`); None when
    there is none."""
    table = program.memo("cross_process.unwaited", lambda: {})
    if fid in table:
        return table[fid]
    if fid in visiting:
        return None  # (a cycle: the chain's first entry decides)
    visiting.add(fid)
    function = program.functions[fid]
    candidates = [(h.line, h.column, f"{h.what} in `{function.facts.qualname}`")
                  for h in _own_host_hand_overs(program, function)]
    if fid in _may_hand_over_through_calls(program):
        for call, edges in program.exact_edges_of(fid):
            inner = next((what for edge in edges if edge.callee != fid
                          and (what := _unwaited_hand_over(program, edge.callee, visiting))), None)
            if inner is not None:
                candidates.append((call.line, call.column, inner))
    start = function.facts.line - 1
    found = next((what for line, _column, what in sorted(candidates)
                  if not host_blocked_between(program, function, start, line, set())), None)
    visiting.discard(fid)
    table[fid] = found
    return found


def _host_barriers(program: Program, function: Function) -> list[Call]:
    facts = function.facts
    handles = _handles(facts)
    for other in _of_class(program, function):
        handles |= {name for name in _handles(other) if name.startswith("self.")}
    found = []
    for call in facts.calls:
        if _last(call.callee) not in BARRIERS:
            continue
        receiver = _receiver(call.callee)
        if receiver in handles or any(sign in arg for arg in call.args for sign in NCCL_SIGNS) \
                or _over_device_group(program, function, call):
            continue
        if receiver not in ("dist", "torch.distributed") and _device_synchronize_after(facts, call.line):
            continue
        found.append(call)
    return found


def _device_synchronize_after(facts: FunctionFacts, line: int) -> bool:
    return any(sync.kind == "synchronize" and sync.line > line and sync.receiver.startswith(DEVICE_WIDE)
               for sync in facts.syncs)


def _over_device_group(program: Program, function: Function, call: Call) -> bool:
    """Whether the group a functional barrier or collective runs over (`group=g`; a barrier's first argument) is
    a path that holds a device group at the call (`g = get_tp_group().device_group` earlier in the function, not
    under a condition the call is outside of; for `self.g`, every method of the class that binds it binds it so):
    an NCCL group, as if the call said `device_group` itself."""
    group = _group_argument(call)
    if not group:
        return False
    facts = function.facts
    for path, line, until in facts.device_groups:
        if path == group and line < call.line and (not until or call.line < until) and not any(
                first <= line <= last and not first <= call.line <= last for first, last in facts.guarded):
            return True
    if not group.startswith("self.") or function.owner is None:
        return False
    attribute = group.split(".", 2)[1] if group.count(".") == 1 else ""
    binders = [other for other in _of_class(program, function) if attribute in other.self_assigns]
    return bool(binders) and all(any(path == group and not until for path, _line, until in other.device_groups)
                                 for other in binders)


def _group_argument(call: Call) -> str:
    """The path given as a functional call's `group=` (or, for `dist.barrier(g)`, its first argument); "" for a
    method of a group object or anything not a plain path."""
    if _receiver(call.callee) not in ("dist", "torch.distributed", ""):
        return ""
    for arg in call.args:
        name, _, value = arg.partition("=")
        if name == "group" and value:
            return value
    positional = [arg for arg in call.args if "=" not in arg]
    return positional[0] if positional and _last(call.callee) in BARRIERS else ""
