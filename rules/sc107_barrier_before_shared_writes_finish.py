"""SC107: memory shared with other processes is written on the device, then a host barrier lets them read it early."""

from __future__ import annotations

from typing import Iterable

from streamcheck.findings import ROLE_READ, ROLE_WRITE, Finding

from .cross_process import BARRIERS, host_barriers, shared_tensors
from .hazard_flow import host_blocked_between
from .program import Program
from .rule import Rule, insert_edit, location


class BarrierBeforeSharedWritesFinish(Rule):
    """
    What it does:
        Finds a device write (`fill_`, `zero_`, `copy_`, any in-place op) into symmetric memory, a tensor handed
        to `symm_mem.rendezvous(t, group)` in the function or, for a `self.` attribute, anywhere in its class,
        followed in the same function by a host-side barrier (`dist.barrier(group=g)`, `tp_group.barrier()`,
        `monitored_barrier`) with no synchronize in between: no device, stream or event `synchronize()`, no
        blocking read, no call that does one. The symmetric-memory handle's own `handle.barrier()` is a kernel on
        the current stream and orders the writes before it; it is not reported (cross_process.py).

    Why it is bad:
        The write is only queued when the barrier runs. The barrier tells the peer processes that the buffer is
        ready, and their kernels then read it (or write into it) through the peer and multicast pointers while
        this rank's `fill_` may not have run yet: the peers see stale sentinels or flags, a Lamport all-reduce
        takes garbage for data, or a one-shot kernel waits forever. It shows only when this rank's stream is
        busy at start-up, on some runs, on some ranks.

    Known problems:
        The scan cannot tell a group's backend. `dist.barrier` over an NCCL group is itself enqueued after the
        current stream's work and blocks the host until it completed on every rank, so there the finding is a
        false alarm; a barrier written with `device_ids=` or over a `device_group` is taken as NCCL and not
        reported. Writes made in a callee before the barrier are not seen.

    Example:
        buf = symm_mem.empty(n, device="cuda")
        handle = symm_mem.rendezvous(buf, group.group_name)
        buf.fill_(-1)                    # queued on the current stream
        dist.barrier(group=cpu_group)    # peers go on and read buf through handle.buffer_ptrs

    Fix:
        Wait for the device before the barrier: `torch.cuda.synchronize()` (or the current stream's
        `synchronize()`) right before it.
    """

    id = "SC107"
    summary = "symmetric memory written on the device, then a host barrier lets the peer processes read it early"

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
        # A tensor no one shares: a barrier after its write orders nothing anyone reads.
        """
import torch.distributed as dist

def save(t, group):
    t.zero_()
    dist.barrier(group=group)
""",
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
    ]

    def check(self, program: Program) -> Iterable[Finding]:
        for function in program.functions.values():
            facts = function.facts
            if not any(call.callee.rsplit(".", 1)[-1] in BARRIERS for call in facts.calls):
                continue
            shared = shared_tensors(program, function)
            writes = [access for access in facts.accesses
                      if access.kind == "write" and not access.fresh and access.path in shared]
            if not writes:
                continue
            reported: set[int] = set()
            for barrier in host_barriers(program, function):
                pending = [write for write in writes if write.line < barrier.line and write.line not in reported
                           and not host_blocked_between(program, function, write.line, barrier.line, set())]
                if not pending:
                    continue
                write = pending[0]
                reported.update(w.line for w in pending)
                yield Finding(
                    rule=self.id,
                    message=(f"`{write.path}` is symmetric memory the peer processes read, written by `{write.op}` "
                             f"on the device, and the barrier at line {barrier.line} lets them go on while the "
                             f"write may still be queued: no synchronize in between"),
                    primary=location(function, write.line, write.column, ROLE_WRITE,
                                     f"device write in {facts.qualname}"),
                    related=(location(function, barrier.line, barrier.column, ROLE_READ,
                                      f"`{barrier.callee}(...)`: from here the other processes read it"),),
                    fix=(f"Call `torch.cuda.synchronize()` before the barrier at line {barrier.line}, so the write "
                         f"is done when the peers are let go."),
                    kind="RAW",
                    symbol=facts.qualname,
                    extra={"path": write.path, "writer_stream": "current", "reader_stream": "other processes",
                           "fix_edit": insert_edit(function, barrier.line, barrier.column, "torch.cuda.synchronize()",
                                                   f"before the barrier at line {barrier.line}", safe=False)},
                )
