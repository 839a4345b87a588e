"""P2POps that a nested function builds into a list of its enclosing function (extract_hazards.py `_p2p`).

    def execute(self):
        ops, staging = [], []
        def build_ops():                      # a closure: `ops` and `staging` belong to execute
            for tensor, peer in self._ops:
                buf = torch.empty_like(tensor, device="cpu")
                ops.append(P2POp(dist.irecv, buf, peer))
                staging.append((tensor, buf))
        build_ops()
        reqs = batch_isend_irecv(ops)         # receives into what `staging` holds
        for req in reqs:
            req.wait()
        for dst, buf in staging:
            dst.copy_(buf)

The closure's appends to `ops` are appends to execute's list, so execute's `batch_isend_irecv(ops)` launches them.
The closure's own `buf` means nothing in execute: what execute can reach of it is the enclosing containers the
closure put it in while it held that op's tensor (`staging`), and those stand for the op's tensor at the launch.
A tensor path the enclosing function binds itself (`buf` of execute, used in the closure) stands for itself.

Known problems: only a closure defined before the launch is seen (its facts are made when the visitor gets to
it); it is taken as called before the launch.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

from .facts import MODULE_SCOPE, FunctionFacts


@dataclass(frozen=True)
class ClosureOp:
    closure: FunctionFacts  # the nested function that made the op
    tensor: str  # the op's tensor, as the closure names it
    sent: bool
    line: int  # of the P2POp call
    shared: bool  # the tensor's name belongs to the enclosing function: it stands for itself there


def _root(path: str) -> str:
    return path.split(".", 1)[0]


@dataclass
class ClosureOps:
    # enclosing function's qualname -> its list the ops went into -> the ops
    made: dict[str, dict[str, list[ClosureOp]]] = field(default_factory=dict)
    # id(function facts) -> (tensor path, container path, line) of `container.append(t)`, `.append((a, t))`
    stored: dict[int, list[tuple[str, str, int]]] = field(default_factory=dict)

    def note_op(self, fn: FunctionFacts, dest: str, tensor: str, sent: bool, line: int,
                owner_of: Callable[[str], str]) -> None:
        """`dest.append(P2POp(op, tensor, ...))` in `fn`: kept when `dest` is a list of an enclosing function."""
        owner = owner_of(_root(dest))
        if owner and owner != MODULE_SCOPE:
            shared = owner_of(_root(tensor)) == owner
            self.made.setdefault(owner, {}).setdefault(dest, []).append(ClosureOp(fn, tensor, sent, line, shared))

    def note_store(self, fn: FunctionFacts, container: str, tensors: list[str], line: int) -> None:
        for tensor in tensors:
            self.stored.setdefault(id(fn), []).append((tensor, container, line))

    def tensors_of(self, enclosing: FunctionFacts, ops: str) -> list[tuple[str, bool]]:
        """(path in `enclosing`, sent) for the closures' ops that went into its list `ops`."""
        found: list[tuple[str, bool]] = []
        for op in self.made.get(enclosing.qualname, {}).get(ops, ()):
            paths = [op.tensor] if op.shared else self._containers(op, ops)
            for path in paths:
                if (path, op.sent) not in found:
                    found.append((path, op.sent))
        return found

    def _containers(self, op: ClosureOp, ops: str) -> list[str]:
        """The enclosing function's containers the closure stored the op's tensor in while the name held it."""
        fn = op.closure
        local = set(fn.params) | {u.path for u in fn.uses if u.how == "rebind" and "." not in u.path}
        rebinds = sorted(u.start_line or u.line for u in fn.uses if u.how == "rebind" and u.path == op.tensor)
        start = max((line for line in rebinds if line <= op.line), default=fn.line)
        end = min((line for line in rebinds if line > op.line), default=fn.end_line + 1)
        return list(dict.fromkeys(
            container for tensor, container, line in self.stored.get(id(fn), ())
            if tensor == op.tensor and start <= line < end and container != ops
            and _root(container) not in local | {"self", "cls"}))
