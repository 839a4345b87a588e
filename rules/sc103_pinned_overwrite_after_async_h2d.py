"""SC103: a host buffer is overwritten while a non_blocking host-to-device copy may still be reading it."""

from __future__ import annotations

from typing import Iterable

from streamcheck.findings import ROLE_READ, ROLE_WRITE, Finding

from .hazard_flow import direction, host_blocked_between, uses_after
from .program import Program
from .rule import Rule, location

UNTRACKED = frozenset({"rebind", "escape", "free"})


class PinnedOverwriteAfterAsyncH2D(Rule):
    """
    What it does:
        Finds a host-to-device copy made with `non_blocking=True` (`dev.copy_(host, non_blocking=True)`,
        `host.to(device, non_blocking=True)`, `host.cuda(non_blocking=True)`) whose pinned source the same
        function then overwrites on the host (an in-place op, `copy_`, `host[...] = ...`, `out=host`, a reader
        filling it: `readinto`, `async_pread`, ...) with no synchronize in between. Where a tensor lives comes
        from how the function (or its class, for `self.` attributes) created it, else from its name.

    Why it is bad:
        A copy from pinned memory is a DMA that runs when the stream gets to it, after `copy_` returned. If the
        host refills the buffer first (the next batch, the next NVMe block), the device receives the new data, or
        a mix of old and new. Typical in hand-written prefetchers and offload loops that reuse one pinned buffer.

    Example:
        host = torch.empty(n, pin_memory=True)
        for batch in loader:
            host.copy_(batch)                        # refills while the last copy may still read it
            dev.copy_(host, non_blocking=True)

    Fix:
        Record an event after the copy and `event.synchronize()` before refilling the buffer (or
        `torch.cuda.current_stream().synchronize()`); or double-buffer and synchronize on the buffer about to be
        reused.
    """

    id = "SC103"
    summary = "pinned host buffer overwritten while a non_blocking host-to-device copy may still read it"

    VALID = [
        # The event recorded after the copy is synchronized before the refill.
        """
import torch

def upload(dev, n):
    host = torch.ones(n, pin_memory=True)
    dev.copy_(host, non_blocking=True)
    done = torch.cuda.Event()
    done.record()
    done.synchronize()
    host.fill_(7.0)
""",
        # Reading the source again is fine; so is rebinding the name to a new buffer.
        """
import torch

def upload(batch):
    host = batch.pin_memory()
    dev = host.to("cuda", non_blocking=True)
    print(host.sum())
    host = torch.zeros(4, pin_memory=True)
    host.fill_(1.0)
    return dev
""",
        # A device-to-device copy: the source is no host buffer.
        """
import torch

def move(a):
    dev = torch.empty(4, device="cuda")
    src = torch.ones(4, device="cuda")
    dev.copy_(src, non_blocking=True)
    src.zero_()
""",
    ]

    INVALID = [
        """
import torch

def upload(n):
    host = torch.ones(n, pin_memory=True)
    dev = torch.empty(n, device="cuda")
    dev.copy_(host, non_blocking=True)
    host.fill_(7.0)  # expect: SC103
""",
        # A reader refills the pinned buffer that a `.cuda(non_blocking=True)` copy reads.
        """
import torch

class Swapper:
    def __init__(self, n):
        self.pinned_buffer = torch.empty(n).pin_memory()

    def swap_in(self, handle, path):
        dev = self.pinned_buffer.cuda(non_blocking=True)
        handle.async_pread(self.pinned_buffer, path)  # expect: SC103
        return dev
""",
        """
import torch

def upload(batches, dev):
    host = torch.empty(dev.shape, pin_memory=True)
    dev.copy_(host, non_blocking=True)
    host[0] = 1.0  # expect: SC103
""",
    ]

    def check(self, program: Program) -> Iterable[Finding]:
        for function in program.functions.values():
            facts = function.facts
            copy_lines = {(c.line, c.dst) for c in facts.async_copies}
            for copy in facts.async_copies:
                if not copy.src or direction(program, function, copy) != "h2d":
                    continue
                for use in uses_after(facts, copy.src, copy.line, copy.end_line):
                    if use.how in UNTRACKED:
                        break
                    if use.how != "write" or (use.line, use.path) in copy_lines:
                        continue  # reads race with nothing; a later non_blocking copy into it is stream-ordered
                    if host_blocked_between(program, function, copy.line, use.line, {copy.src}):
                        break
                    how = {"[]=": "`[...] =`", "out=": "`out=`"}.get(use.arg, f"`{use.arg}`")
                    yield Finding(
                        rule=self.id,
                        message=(f"`{copy.src}` is overwritten on the host by {how} while the non_blocking "
                                 f"host-to-device copy from it (line {copy.line}) may still be reading it: no "
                                 f"synchronize in between"),
                        primary=location(function, use.line, use.column, ROLE_WRITE,
                                         f"host write in {facts.qualname}"),
                        related=(location(function, copy.line, copy.column, ROLE_READ,
                                          f"non_blocking {copy.op} reads `{copy.src}` (on the current stream)"),),
                        fix=(f"Record an event after the copy at line {copy.line} and call `event.synchronize()` "
                             f"(or `torch.cuda.current_stream().synchronize()`) before line {use.line}."),
                        kind="WAR",
                        symbol=facts.qualname,
                        extra={"path": copy.src, "copy_line": copy.line},
                    )
                    break
