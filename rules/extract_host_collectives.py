"""Collectives that agree on host values: a blocking collective on a tensor the function made on the host and then
reads on the host (`FunctionFacts.host_collectives`, read by cross_process.py).

    flag = torch.tensor([int(ok)], dtype=torch.int32)           # a factory with no device, or device="cpu"
    dist.all_reduce(flag, op=dist.ReduceOp.MIN, group=group)     # no async_op=True: returns when every rank sent
    return bool(flag.item())                                     # the agreed value, read on the host

Such a call (vLLM's `_all_ranks_true`, `tp_agree`) lets every rank go on only once all have reached it, and says
nothing about the device work queued before it: for the peers it is a host barrier. A collective on a device tensor
(NCCL enqueues it after the current stream's work) is none, nor is one whose result the host never reads (the
placement alone may be wrong: `torch.set_default_device`).

Besides, the spans over which a local or `self.` path holds a device group (`group = get_tp_group().device_group`,
`FunctionFacts.device_groups`): a barrier or agreement over it runs on NCCL (cross_process.py).

Both are made at the end of a file's pass, before the hazard collector drops the uses and placements of names no
hazard rule looks at (the flag and the group are among them).
"""

from __future__ import annotations

from .collectives import outputs_of
from .facts import FunctionFacts, Placement

HOST_READS = frozenset({"item", "tolist", "numpy"})
# Receivers of the functional collectives (`dist.all_reduce`, `torch.distributed.broadcast`); a ProcessGroup's own
# methods (`pg.allreduce([t])`) return a Work and are asynchronous without a flag.
MODULE_RECEIVERS = ("", "dist", "torch.distributed", "distributed", "c10d")
# vLLM's GroupCoordinator names its NCCL (device) ProcessGroup so, beside its `cpu_group` (gloo).
DEVICE_GROUP = "device_group"


def host_collectives(fn: FunctionFacts) -> list[tuple[str, str, int, int]]:
    """(callee, tensor path, line, column) of each blocking collective in `fn` whose written tensor `fn` placed on
    the host (the latest placement before the call) and reads on the host after it."""
    found = []
    launched_async = {(work.line, work.column) for work in fn.async_works}
    for call in fn.calls:
        receiver, _, last = call.callee.rpartition(".")
        rows = outputs_of(call.callee)
        if rows is None or receiver not in MODULE_RECEIVERS or "async_op" in call.true_args \
                or (call.line, call.column) in launched_async:
            continue
        tensor = _written(call.args, rows.positions, rows.keywords)
        if not tensor or _placed(fn.placements, tensor, call.line) != "host":
            continue
        if any(use.path == tensor and use.how == "host" and use.arg in HOST_READS and use.line >= call.line
               and (use.line, use.column) != (call.line, call.column) for use in fn.uses):
            found.append((call.callee, tensor, call.line, call.column))
    return found


def _written(args: tuple[str, ...], positions: tuple[int, ...], keywords: tuple[str, ...]) -> str:
    positional = [a for a in args if "=" not in a]
    for index in positions:
        if index < len(positional) and positional[index]:
            return positional[index]
    for arg in args:
        name, _, value = arg.partition("=")
        if value and name in keywords:
            return value
    return ""


def _placed(placements: list[Placement], path: str, line: int) -> str:
    bound = [p for p in placements if p.path == path and p.line <= line]
    if not bound:
        return ""
    where = max(bound, key=lambda p: p.line).where
    return "host" if where in ("host", "pinned") else where


def device_group_spans(fn: FunctionFacts) -> list[tuple[str, int, int]]:
    """`fn.device_groups` with each binding's end: the line of the next binding of the same path (0: none)."""
    spans = []
    for path, line, _ in fn.device_groups:
        later = [use.start_line or use.line for use in fn.uses
                 if use.path == path and use.how == "rebind" and (use.start_line or use.line) > line]
        spans.append((path, line, min(later, default=0)))
    return spans
