"""SC107: memory shared with other processes is written on the device, then handed over before the write is done."""

from __future__ import annotations

from typing import Iterable

from streamcheck.findings import ROLE_READ, ROLE_WRITE, Finding

from .cross_process import hand_overs, may_hand_over, shared_tensors
from .hazard_flow import host_blocked_between
from .program import Program
from .rule import Rule, insert_edit, location


# A symmetric buffer armed, then a helper's host agreement (vLLM's `_all_ranks_true`: a CPU all_reduce read with
# `.item()`) lets the peers go on: INVALID as is, VALID with the fill waited for or the agreement on the device.
HOST_AGREEMENT = """
import torch
import torch.distributed as dist
import torch.distributed._symmetric_memory as symm_mem

def all_ranks_true(group, ok):
    flag = torch.tensor(int(ok), dtype=torch.int32, device="cpu")
    dist.all_reduce(flag, op=dist.ReduceOp.MIN, group=group)
    return bool(flag.item())

def arm(n, group):
    buf = symm_mem.empty(n, device="cuda")
    handle = symm_mem.rendezvous(buf, group.group_name)
    buf[:64].zero_()  # expect: SC107
    if not all_ranks_true(group, handle is not None):
        return None
    return handle
"""


class SharedMemoryHandedOverEarly(Rule):
    """
    What it does:
        Finds a device write (`fill_`, `zero_`, `copy_`, any in-place op) into memory other processes read, then
        the step that lets them read it, in the same function, with no synchronize in between (no device, stream
        or event `synchronize()`, no blocking read, no call that does one):
        - symmetric memory, a tensor handed to `symm_mem.rendezvous(t, group)` in the function or, for a `self.`
          attribute, anywhere in its class, followed by a host-side barrier (`dist.barrier(group=g)`,
          `tp_group.barrier()`, `monitored_barrier`). The symmetric-memory handle's own `handle.barrier()` is a
          kernel on the current stream and orders the writes before it; it is not reported. A host agreement
          counts as such a barrier: a blocking collective on a host tensor read back on the host (`flag =
          torch.tensor([ok])`, `dist.all_reduce(flag, group=g)`, `flag.item()`), and so does the call of a helper
          of the scanned program that makes one or a host barrier before any host wait (vLLM's `_all_ranks_true`);
        - a CUDA IPC export, a tensor given to `reduce_tensor(t)`, followed by a `return` or `yield` of the
          exporting function, which hands the export (or the news that the buffer is full) to the consumer.
        A write later in a loop body reaches a hand-over earlier in it on the next turn (a buffer refilled and
        yielded chunk by chunk). The models are in cross_process.py. The runtime twin, SC204, sees the same
        race in a run, at the host barrier or the multiprocessing queue put or send that hands the memory over.

    Why it is bad:
        The write is only queued when the barrier runs. The barrier tells the peer processes that the buffer is
        ready, and their kernels then read it (or write into it) through the peer and multicast pointers while
        this rank's `fill_` may not have run yet: the peers see stale sentinels or flags, a Lamport all-reduce
        takes garbage for data, or a one-shot kernel waits forever. It shows only when this rank's stream is
        busy at start-up, on some runs, on some ranks.

    Known problems:
        The scan cannot tell a group's backend. `dist.barrier` over an NCCL group is itself enqueued after the
        current stream's work and blocks the host until it completed on every rank, so there the finding is a
        false alarm; a barrier written with `device_ids=` or over a `device_group` (also through a local or an
        attribute bound to one: `group = get_tp_group().device_group`) is taken as NCCL and not reported; a
        group handed in as an argument is not followed. A helper in a file the scan only reads for its calls (no
        stream, sync or collective word) is not looked into. Writes made in a callee before the hand-over are not
        seen, nor exports of another tensor on the same storage (`base.set_(slot.untyped_storage())`). A
        returning exporter whose caller synchronizes before it sends the export on is reported all the same.

    Example:
        buf = symm_mem.empty(n, device="cuda")
        handle = symm_mem.rendezvous(buf, group.group_name)
        buf.fill_(-1)                    # queued on the current stream
        dist.barrier(group=cpu_group)    # peers go on and read buf through handle.buffer_ptrs

    Fix:
        Wait for the device before the hand-over: `torch.cuda.synchronize()` (or the current stream's
        `synchronize()`) right before the barrier, the `return` or the `yield`.
    """

    id = "SC107"
    summary = ("memory other processes read (symmetric memory, a CUDA IPC export) written on the device, then "
               "handed over (a host barrier, the export returned) before a synchronize")

    VALID = [
        # The device finished the fill before the peers are let go.
        """
import torch
import torch.distributed as dist
import torch.distributed._symmetric_memory as symm_mem

def arm(n, group):
    buf = symm_mem.empty(n, device="cuda")
    handle = symm_mem.rendezvous(buf, group.group_name)
    buf.fill_(-1)
    torch.cuda.synchronize()
    dist.barrier(group=group)
    return handle
""",
        # The handle's own barrier is a kernel on the current stream, after the fill.
        """
import torch.distributed._symmetric_memory as symm_mem

def arm(n, group):
    buf = symm_mem.empty(n, device="cuda")
    buf.zero_()
    handle = symm_mem.rendezvous(buf, group.group_name)
    handle.barrier()
    return handle
""",
        # An NCCL barrier (device_ids=) is enqueued after the current stream's work and blocks until it is done.
        """
import torch.distributed as dist
import torch.distributed._symmetric_memory as symm_mem

class Mailbox:
    def __init__(self, n, group, device):
        self.box = symm_mem.empty(n, device=device)
        self.handle = symm_mem.rendezvous(self.box, group)
        self.box.fill_(0)
        dist.barrier(group=group, device_ids=[device.index])
""",
        # The barrier's group is a local bound to a coordinator's device group: NCCL's (vLLM's all_reduce_mhc).
        """
import torch
import torch.distributed as dist
import torch.distributed._symmetric_memory as symm_mem

def arm(n, tp):
    group = tp.device_group
    box = symm_mem.empty(n, device="cuda")
    handle = symm_mem.rendezvous(box, group)
    box.view(torch.int16).fill_(-32768)
    dist.barrier(group=group)
    return handle
""",
        # A ProcessGroup's unwaited barrier() followed by a device synchronize (DeepGEMM's symmetric buffer).
        """
import torch
import torch.distributed._symmetric_memory as symm_mem

class Buffer:
    def __init__(self, n, group):
        self.group = group
        self.buffer = symm_mem.empty(n, device="cuda")
        self.handle = symm_mem.rendezvous(self.buffer, group=group)
        self.buffer.zero_()
        self.group.barrier()
        torch.cuda.synchronize()
""",
        # The exporter drains its copies before it yields the chunk (vLLM's packed IPC producer).
        """
import torch
from torch.multiprocessing.reductions import reduce_tensor

def produce(tensors, size):
    buf = torch.empty(size, dtype=torch.uint8, device="cuda")
    _, args = reduce_tensor(buf)
    used = 0
    for t in tensors:
        if used + t.numel() > size:
            torch.cuda.current_stream().synchronize()
            yield args, used
            used = 0
        buf[used:used + t.numel()].copy_(t)
        used += t.numel()
    torch.cuda.current_stream().synchronize()
    yield args, used
""",
        # A tensor no one shares: a barrier after its write orders nothing anyone reads.
        """
import torch.distributed as dist

def save(t, group):
    t.zero_()
    dist.barrier(group=group)
""",
    ]

    VALID += [
        # The fill is waited for before the call of the helper.
        HOST_AGREEMENT.replace("  # expect: SC107", "\n    torch.cuda.synchronize()"),
        # A helper whose all_reduce is on a device tensor: NCCL enqueues it after the current stream's work, no
        # host agreement.
        HOST_AGREEMENT.replace("  # expect: SC107", "").replace('device="cpu"', 'device="cuda"'),
    ]

    INVALID = [
        """
import torch.distributed as dist
import torch.distributed._symmetric_memory as symm_mem

def arm(n, group, cpu_group):
    buf = symm_mem.empty(n, device="cuda")
    handle = symm_mem.rendezvous(buf, group.group_name)
    buf.fill_(-1)  # expect: SC107
    dist.barrier(group=cpu_group)
    return handle
""",
        # The buffer is shared in __init__ and armed in another method; the barrier is a coordinator's method.
        """
import torch
import torch.distributed._symmetric_memory as symm_mem

class Lamport:
    def __init__(self, n, tp, group_name):
        self.tp = tp
        self.buf_in = symm_mem.empty(n, device="cuda")
        self.handle = symm_mem.rendezvous(self.buf_in, group_name)

    def arm(self):
        self.buf_in.view(torch.int16).fill_(-0x8000)  # expect: SC107
        self.tp.barrier()
""",
        # Each element of a tuple of shared buffers (for t in (...)) is written before the barrier.
        """
import torch
import torch.distributed._symmetric_memory as symm_mem

class TwoShot:
    def __init__(self, n, group):
        self.recv = symm_mem.empty(n, device="cuda")
        self.gather = symm_mem.empty(n, device="cuda")
        handles = [symm_mem.rendezvous(t, group) for t in (self.recv, self.gather)]
        for t in (self.recv, self.gather):
            t.fill_(0)  # expect: SC107
        torch.distributed.barrier(group=group)
""",
        # The hand-over is a helper's host agreement: an all_reduce of a CPU tensor, read with `.item()`, lets the
        # peers go on like a host barrier (vLLM's `_all_ranks_true` after a symmetric buffer's `zero_()`).
        HOST_AGREEMENT,
        # A refilled IPC buffer yielded chunk by chunk: the copy of one turn reaches the next turn's yield.
        """
import torch
from torch.multiprocessing.reductions import reduce_tensor

def produce(tensors, size):
    buf = torch.empty(size, dtype=torch.uint8, device="cuda")
    _, args = reduce_tensor(buf)
    used = 0
    for t in tensors:
        if used + t.numel() > size:
            yield args, used
            used = 0
        buf[used:used + t.numel()].copy_(t)  # expect: SC107
        used += t.numel()
""",
    ]

    def check(self, program: Program) -> Iterable[Finding]:
        for function in program.functions.values():
            facts = function.facts
            if not may_hand_over(program, function):
                continue
            shared = shared_tensors(program, function)
            writes = [access for access in facts.accesses
                      if access.kind == "write" and not access.fresh and access.path in shared]
            if not writes:
                continue
            reported: set[int] = set()
            for hand_over in hand_overs(program, function):
                pending = [write for write in writes if write.line not in reported
                           and _reaches_unwaited(program, function, write.line, hand_over.line)]
                if not pending:
                    continue
                write = pending[0]
                reported.update(w.line for w in pending)
                yield Finding(
                    rule=self.id,
                    message=(f"`{write.path}` is memory other processes read, written by `{write.op}` on the "
                             f"device, and {hand_over.what} at line {hand_over.line} lets them read it while the "
                             f"write may still be queued: no synchronize in between"),
                    primary=location(function, write.line, write.column, ROLE_WRITE,
                                     f"device write in {facts.qualname}"),
                    related=(location(function, hand_over.line, hand_over.column, ROLE_READ,
                                      f"{hand_over.what}: from here other processes read it"),),
                    fix=(f"Call `torch.cuda.synchronize()` before line {hand_over.line}, so the write is done "
                         f"when the other processes get the memory."),
                    kind="RAW",
                    symbol=facts.qualname,
                    extra={"path": write.path, "writer_stream": "current", "reader_stream": "other processes",
                           "fix_edit": insert_edit(function, hand_over.line, hand_over.column,
                                                   "torch.cuda.synchronize()", f"before line {hand_over.line}",
                                                   safe=False)},
                )


def _reaches_unwaited(program: Program, function, write: int, hand_over: int) -> bool:
    """Whether the write at line `write` can reach the hand-over with no host wait on the way: later in the
    function, or earlier in a loop around both (the next turn), through the loop's end and start."""
    if write < hand_over:
        return not host_blocked_between(program, function, write, hand_over, set())
    loops = [(first, last) for first, last in function.facts.loops if first <= hand_over and write <= last]
    return any(not host_blocked_between(program, function, write, last + 1, set())
               and not host_blocked_between(program, function, first - 1, hand_over, set())
               for first, last in loops)
