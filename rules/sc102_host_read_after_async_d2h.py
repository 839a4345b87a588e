"""SC102: the host reads the destination of a non_blocking device-to-host copy before anything waits for it."""

from __future__ import annotations

from typing import Iterable

from streamcheck.findings import ROLE_READ, ROLE_WRITE, Finding

from .hazard_flow import direction, host_blocked_between, uses_after
from .host_read_after_escape import host_reads_after_escape
from .program import Program
from .rule import Rule, location

# What ends the tracking of the copied-into name: it now holds another tensor, or it left this function.
UNTRACKED = frozenset({"rebind", "escape", "free"})


class HostReadAfterAsyncD2H(Rule):
    """
    What it does:
        Finds a device-to-host copy made with `non_blocking=True` (`x.to("cpu", non_blocking=True)`,
        `x.cpu(non_blocking=True)`, `host.copy_(dev, non_blocking=True)` into a pinned or CPU tensor) whose
        destination the same function then uses on the host (`.numpy()`, `.tolist()`, `.item()`, indexing, any
        CPU op, passing it on) with no synchronize in between: no stream, event or device `synchronize()` and no
        blocking read of a device tensor (`.item()`, `.cpu()`). Where a tensor lives comes from how the function
        (or, for `self.` attributes, its class) created it (`pin_memory=True`, `device="cpu"`, `.cpu()`, a
        factory without a device), else from its name (`cpu`, `pinned`, `host`). A name that is returned, stored
        or rebound is not followed further in the function; where it goes is followed to its reader
        (host_read_after_escape.py): a destination returned while the copy may still run and read on the host by
        the caller in the same expression (`to_host(d).tolist()`), or handed to a class of the scan whose
        `__init__` keeps it on `self` and read on the host by a method with no synchronize before it there; or
        kept on `self` by one method and read on the host by another, also through a helper one call away on
        either side (a helper copying into its parameter, or returning the copy, that the caller keeps as
        `self.x`; a helper reading its parameter, to which a method hands `self.x`: kept_copies.py).

    Why it is bad:
        A non_blocking copy into pinned memory returns to Python before the copy ran; the host then reads
        whatever the buffer held before (stale or half-copied values). Nothing fails, the numbers are just wrong,
        and only sometimes: the bug hides whenever the GPU happens to be idle.

    Example:
        host = torch.empty(n, pin_memory=True)
        host.copy_(grad, non_blocking=True)
        total = host.sum()          # may sum the old contents

    Fix:
        Wait for the copy before the host touches the buffer: `torch.cuda.current_stream().synchronize()`, or
        record an event right after the copy and call `event.synchronize()` before the read (which lets other
        work overlap with the copy).
    """

    id = "SC102"
    summary = "host reads the destination of a non_blocking device-to-host copy before a synchronize"

    VALID = [
        # A stream synchronize before the read.
        """
import torch

def fetch(d):
    h = torch.empty(d.shape, pin_memory=True)
    h.copy_(d, non_blocking=True)
    torch.cuda.current_stream().synchronize()
    return h.sum()
""",
        # An event recorded after the copy and synchronized before the read.
        """
import torch

def fetch(d):
    h = d.to("cpu", non_blocking=True)
    done = torch.cuda.Event()
    done.record()
    done.synchronize()
    return h.tolist()
""",
        # A blocking read of a device tensor orders the host after the copy (same stream).
        """
import torch

def fetch(d, loss):
    h = d.cpu(non_blocking=True)
    value = loss.item()
    print(h.numpy(), value)
""",
        # Chained device-side use of a host-to-device copy.
        """
import torch

def norms(grads):
    return [g.to("cuda", non_blocking=True).double().norm(2) for g in grads]
""",
        # A host-to-device copy is no device-to-host copy; returning the buffer leaves the wait to the caller.
        """
import torch

def stage(batch):
    host = torch.empty(batch.shape, pin_memory=True)
    dev = host.to("cuda", non_blocking=True)
    out = batch.cpu(non_blocking=True)
    return out
""",
        # `a = h.numpy()` only makes a view: the data is read where `a` is used (after the caller's wait).
        """
import torch

def to_numpy(t):
    cpu = t.to(torch.device("cpu"), non_blocking=True)
    cpu = cpu.numpy()
    return cpu
""",
        # Stored in a container for a later wait (torch inductor's copy_args_to_cpu_if_needed).
        """
import torch

def stash(copies, name, arg):
    cpu_arg = torch.empty_strided((arg.numel(),), (1,), device="cpu", pin_memory=True)
    cpu_arg.copy_(arg.view(-1), non_blocking=True)
    copies[name] = (arg, cpu_arg)
""",
        # The read is in the other arm of an if/else.
        """
import torch

def fetch(d, fast):
    h = torch.empty(d.shape, pin_memory=True)
    if fast:
        h.copy_(d, non_blocking=True)
    else:
        print(h[0])
""",
    ]

    # A synchronize in a branch is an ordering on some path: credited, as everywhere in the engine (the lint
    # reports what nothing orders).
    VALID.append("""
import torch

class Offload:
    def __init__(self, n):
        self.cpu_grads = torch.empty(n, pin_memory=True)

    def offload(self, grad, check):
        self.cpu_grads.copy_(grad, non_blocking=True)
        if check:
            torch.cuda.synchronize()
        print(self.cpu_grads[0])
""")

    # Where the destination goes: the helper synchronizes before returning; the method synchronizes the event
    # recorded after the copy before it reads the kept buffer.
    VALID.append("""
import torch

def to_host(d):
    h = torch.empty(d.shape, pin_memory=True)
    h.copy_(d, non_blocking=True)
    torch.cuda.current_stream().synchronize()
    return h

def counts(d):
    return to_host(d).tolist()
""")
    VALID.append("""
import torch

class Pending:
    def __init__(self, host_splits, ready):
        self.host_splits = host_splits
        self.ready = ready

    def wait(self):
        self.ready.synchronize()
        return self.host_splits.tolist()

def start(device_splits, host_splits, ready, side):
    with torch.cuda.stream(side):
        host_splits.copy_(device_splits, non_blocking=True)
        ready.record(side)
    return Pending(host_splits, ready)
""")

    INVALID = [
        # Read in the same expression: the copy has surely not landed.
        """
import torch

def counts(tokens_per_expert):
    return tokens_per_expert.to("cpu", non_blocking=True).tolist()  # expect: SC102
""",
        """
import torch

def fetch(d):
    h = torch.empty(d.shape, pin_memory=True)
    h.copy_(d, non_blocking=True)
    return h.sum()  # expect: SC102
""",
        """
import torch

def losses(values):
    host = values.to("cpu", non_blocking=True)
    return host.tolist()  # expect: SC102
""",
        # Returned while the copy runs, read by the caller (torchrec's `_cuda_to_cpu_safe` less its synchronize).
        """
import torch

def to_host(d):
    h = torch.empty(d.shape, pin_memory=True)
    h.copy_(d, non_blocking=True)
    return h

def counts(d):
    return to_host(d).tolist()  # expect: SC102
""",
        # Kept by a constructor, read by a method before any wait (DeepSpeed's `_PendingSplitPlan.wait`).
        """
import torch

class Pending:
    def __init__(self, host_splits, ready):
        self.host_splits = host_splits
        self.ready = ready

    def wait(self):
        return self.host_splits.tolist()  # expect: SC102

def start(device_splits, host_splits, ready, side):
    with torch.cuda.stream(side):
        host_splits.copy_(device_splits, non_blocking=True)
        ready.record(side)
    return Pending(host_splits, ready)
""",
    ]

    # Through helpers one call away (vLLM's copy_num_valid_draft_tokens / update_scheduler_for_invalid_drafts): the
    # copy into the helper's parameter the caller binds to `self.counts_cpu`, the host read in the helper another
    # method hands it to. With `event.synchronize()` before the read in `update`, VALID.
    INVALID.append("""
import torch

def update(event, counts_cpu):
    return counts_cpu[0].item()  # expect: SC102

def copy_counts(counts_cpu, side, event, counts):
    with torch.cuda.stream(side):
        counts_cpu.copy_(counts, non_blocking=True)
        event.record()

class Runner:
    def propose(self, counts):
        copy_counts(self.counts_cpu, self.side, self.event, counts)

    def update_states(self):
        return update(self.event, self.counts_cpu)
""")
    VALID.append(INVALID[-1].replace("    return counts_cpu[0].item()  # expect: SC102",
                                     "    event.synchronize()\n    return counts_cpu[0].item()"))

    def check(self, program: Program) -> Iterable[Finding]:
        for function in program.functions.values():
            facts = function.facts
            copy_lines = {(c.line, c.dst) for c in facts.async_copies}
            for copy in facts.async_copies:
                if not copy.dst or direction(program, function, copy) != "d2h":
                    continue
                for use in uses_after(facts, copy.dst, copy.line, copy.end_line):
                    if use.how in UNTRACKED:
                        break
                    if use.how in ("stream", "wait", "record_stream") or (
                            use.arg == "copy_" and (use.line, use.path) in copy_lines):
                        continue  # ordered on the stream after the copy, or not a data access
                    if host_blocked_between(program, function, copy.line, use.line, {copy.dst}):
                        break
                    what = f"`.{use.arg}()`" if use.how == "host" else ("written" if use.how == "write" else "read")
                    verb = f"read by {what}" if use.how == "host" else what
                    name = f"the result of `.{copy.op}()`" if copy.dst.startswith("(") else f"`{copy.dst}`"
                    yield Finding(
                        rule=self.id,
                        message=(f"{name} is {verb} on the host while the non_blocking device-to-host copy "
                                 f"into it (line {copy.line}) may still be running: no synchronize in between"),
                        primary=location(function, use.line, use.column, ROLE_READ,
                                         f"host use in {facts.qualname}"),
                        related=(location(function, copy.line, copy.column, ROLE_WRITE,
                                          f"non_blocking {copy.op} into `{copy.dst}` (on the current stream)"),),
                        fix=(f"Call `torch.cuda.current_stream().synchronize()` (or `event.synchronize()` on an "
                             f"event recorded after the copy) before line {use.line}."),
                        kind="HOST",
                        symbol=facts.qualname,
                        extra={"path": copy.dst, "copy_line": copy.line},
                    )
                    break
        yield from host_reads_after_escape(program, self.id)
