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

What hands it over: a `return <value>` or `yield <value>` of a function that exports with `reduce_tensor`; and a
host barrier, a call of `barrier` or `monitored_barrier` (`dist.barrier(group=g)`, `group_coordinator.barrier()`),
except
- the symmetric-memory handle's own `handle.barrier()`, a kernel on the current stream, ordered after the writes
  before it;
- a barrier that says it is NCCL's (`device_ids=...`, a `device_group`): ProcessGroupNCCL enqueues the barrier
  after the current stream's work and blocks the host until it completes on every rank;
- a method-form `group.barrier()` that the function follows with a device-wide synchronize: a ProcessGroup's
  `barrier()` returns an unwaited Work, and with NCCL the synchronize after it waits for the barrier kernel, which
  ran after every rank's earlier work (DeepGEMM's symmetric buffer: `zero_()`, `group.barrier()`,
  `torch.cuda.synchronize()`).
"""

from __future__ import annotations

from dataclasses import dataclass

from .facts import Call, FunctionFacts
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
    barriers, and its returns and yields if it exports a buffer."""
    found = [HandOver(call.line, call.column, f"`{call.callee}(...)`")
             for call in _host_barriers(program, function)]
    if any(_last(call.callee) == EXPORT for call in function.facts.calls):
        found += [HandOver(line, column, "the return or yield that hands the export out")
                  for line, column in function.facts.hand_backs]
    return sorted(found, key=lambda h: (h.line, h.column))


def may_hand_over(facts: FunctionFacts) -> bool:
    """Whether the function calls a barrier or exports a buffer (a cheap test before the queries)."""
    return any(_last(call.callee) in BARRIERS or _last(call.callee) == EXPORT for call in facts.calls)


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
        if receiver in handles or any(sign in arg for arg in call.args for sign in NCCL_SIGNS):
            continue
        if receiver not in ("dist", "torch.distributed") and _device_synchronize_after(facts, call.line):
            continue
        found.append(call)
    return found


def _device_synchronize_after(facts: FunctionFacts, line: int) -> bool:
    return any(sync.kind == "synchronize" and sync.line > line and sync.receiver.startswith(DEVICE_WIDE)
               for sync in facts.syncs)
