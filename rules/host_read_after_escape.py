"""The host reads the destination of a non_blocking device-to-host copy in another function than the copy's,
before anything waits for the copy (SC102 across a return or a constructor).

SC102 follows the copied-into name inside the copying function and stops where it leaves (returned, handed to a
constructor): the wait is then the receiver's job. This module follows it to the receiver:
- **returned:** a function returns the destination with no host wait after the copy, and a caller reads the
  call's result on the host in the same expression (`_cuda_to_cpu_safe(t).tolist()`, `f(t).sum().item()`:
  torchrec's helper, whose
  stream synchronize is what makes the list right);
- **kept by a constructor:** the destination is handed to a class of the scan whose `__init__` stores the
  parameter on `self` (`self._host_splits = host_splits`), and a method of that class reads the attribute on the
  host (`.tolist()`, `.item()`, `.numpy()`) with no host wait before it in the method (DeepSpeed's
  `_PendingSplitPlan.wait`, whose `self._ready_event.synchronize()` is the wait).
- **kept on `self` by the copy:** the destination is an attribute of `self`, the copying method returns with no host
  wait after the copy, and another method of the class reads the attribute on the host with no host wait before
  the read in that method (vLLM's model runner copies draft tokens on a side stream in one method and reads them
  in another after `self.draft_token_ids_event.synchronize()`), either of them through a local naming the attribute
  (`counts_cpu = self.valid_sampled_token_count_cpu`), and either of them through a helper one call away
  (kept_copies.py: the copy into the helper's parameter or result, the host read of the helper's parameter).
A host wait (a stream, event or device synchronize, a blocking read of a device tensor, a call that always does
one) between the copy and the escape in the copying function, or before the read in the reading method, orders it.
"""

from __future__ import annotations

from typing import Iterable, Iterator, NamedTuple

from streamcheck.findings import ROLE_CALL, ROLE_READ, ROLE_WRITE, Finding

from .aliasing import as_attribute
from .facts import NO_REGION, RETURNED, AsyncCopy, Call, Sync, Use
from .hazard_flow import direction, host_blocked_between
from .kept_copies import host_reads_in_helpers, kept_by_callers
from .program import Function, Program
from .rule import location
from .summaries import argument_for


CALL_LINES = 8  # how far below a call's first line one of its arguments may sit


class Escape(NamedTuple):
    function: Function  # the copying function
    copy: AsyncCopy
    line: int  # where the destination leaves it (the return, the constructor call)
    column: int


def host_reads_after_escape(program: Program, rule_id: str) -> Iterable[Finding]:
    for function in program.functions.values():
        for copy in function.facts.async_copies:
            if not copy.dst or direction(program, function, copy) != "d2h":
                continue
            for caller, call, attribute in kept_by_callers(program, function, copy):
                if not host_blocked_between(program, caller, call.line, caller.facts.end_line + 1, {attribute}):
                    yield from _read_by_sibling_methods(program, rule_id, caller, copy, attribute, (function, call))
            if copy.dst.startswith("("):
                continue  # the result of a call bound to no path: only a caller keeping it names it
            kept = as_attribute(function, copy.dst, copy.line)  # also through a local naming the attribute
            if _kept_on_self(kept) and not host_blocked_between(program, function, copy.line,
                                                                function.facts.end_line + 1, {copy.dst, kept}):
                yield from _read_by_sibling_methods(program, rule_id, function, copy, kept)
            for use in _escapes(function, copy):
                if host_blocked_between(program, function, copy.line, use.line, {copy.dst}):
                    continue
                escape, how = Escape(function, copy, use.line, use.column), use.arg
                if how == RETURNED:
                    yield from _read_by_callers(program, rule_id, escape)
                else:
                    yield from _read_by_kept_attribute(program, rule_id, escape)


def _escapes(function: Function, copy: AsyncCopy) -> Iterator[Use]:
    """Each use after the copy where its destination leaves the function: returned (arg RETURNED), or handed to
    a call (arg "": a constructor, when the call resolves to one)."""
    for use in function.facts.uses:
        if use.path == copy.dst and use.how == "escape" and use.line > copy.end_line and use.arg in (RETURNED, ""):
            yield use


def _read_by_callers(program: Program, rule_id: str, escape: Escape) -> Iterator[Finding]:
    for caller, call in program.call_sites.get(escape.function.id, ()):
        result = f"{call.callee}()"
        for sync in caller.facts.syncs:
            if sync.kind == "host_sync" and sync.line == call.line and _reads(sync.receiver, result):
                yield _finding(program, rule_id, escape, caller, sync, (caller, call), None,
                               f"the result of `{call.callee}(...)`, returned while the copy may still run")


def _read_by_kept_attribute(program: Program, rule_id: str, escape: Escape) -> Iterator[Finding]:
    for call, edges in program.exact_edges_of(escape.function.id):
        if not 0 <= escape.line - call.line <= CALL_LINES:
            continue  # the argument sits on the call's lines (a call spread over several lines starts above it)
        for edge in edges:
            init = program.functions[edge.callee]
            if init.facts.name != "__init__":
                continue
            for attribute in _kept_as(init, call, escape.copy.dst):
                for method in program.functions_of_class(init):
                    for sync in method.facts.syncs:
                        if sync.kind != "host_sync" or not _reads(sync.receiver, attribute):
                            continue
                        if host_blocked_between(program, method, method.facts.line, sync.line, {attribute}):
                            continue
                        yield _finding(program, rule_id, escape, method, sync, (escape.function, call), None,
                                       f"`{attribute}`, which `{init.facts.qualname}` keeps from the copy's "
                                       f"destination")


def _kept_on_self(destination: str) -> bool:
    """The copy's destination is an attribute of `self` (`self.draft_token_ids_cpu[:n].copy_(d, non_blocking=True)`):
    it stays there for every method of the class after the copying method returns."""
    return destination.startswith("self.") and destination.count(".") == 1


def _read_by_sibling_methods(program: Program, rule_id: str, function: Function, copy: AsyncCopy,
                             attribute: str, helper: tuple[Function, Call] | None = None) -> Iterator[Finding]:
    """Another method of the class reads the attribute on the host, itself or through a local naming it, with no
    host wait before it in that method (vLLM's `_get_draft_token_ids_cpu`, whose
    `self.draft_token_ids_event.synchronize()` is the wait; `_get_valid_sampled_token_count`, which reads
    `counts_cpu = self.valid_sampled_token_count_cpu` after `sampled_count_event.synchronize()`), or hands it to a
    helper that reads it so. `helper`: the copy is made by that function, called at that call of `function`."""
    copying, at = helper if helper else (function, None)
    escape = Escape(copying, copy, copy.end_line, copy.column)
    copied = (function, at) if at else None
    what = (f"`{attribute}`, which `{function.facts.qualname}` fills by the copy"
            + (f" in `{copying.facts.qualname}`" if at else "") + " and keeps on `self`")
    for method in program.functions_of_class(function):
        if method is function or method.facts.name == "__init__":
            continue  # (a constructor runs before any method of its object: vLLM's CpuGpuBuffer takes `.numpy()`)
        for sync in method.facts.syncs:
            if sync.kind != "host_sync" or not _reads(as_attribute(method, sync.receiver, sync.line), attribute):
                continue
            local = sync.receiver.split(".", 1)[0].split("[", 1)[0]
            if host_blocked_between(program, method, method.facts.line, sync.line, {attribute, local}):
                continue
            yield _finding(program, rule_id, escape, method, sync, copied, None, what, at_copy=not at)
        for call, reader, sync in host_reads_in_helpers(program, method, attribute):
            if not host_blocked_between(program, method, method.facts.line, call.line, {attribute}):
                yield _finding(program, rule_id, escape, reader, sync, copied, (method, call), what, at_copy=not at)


def _kept_as(init: Function, call: Call, argument: str) -> list[str]:
    """The `self.` attributes `__init__` stores the parameter bound to `argument` at `call` in."""
    params = [p for p in init.facts.params if argument_for(init, call, p) == argument]
    return [u.arg for u in init.facts.uses if u.how == "escape" and u.path in params and u.arg.startswith("self.")]


def _reads(receiver: str, path: str) -> bool:
    """`h.tolist()`, `h[0].item()`, `to_host(d).sum().item()`: a host read of `path` or of what is computed from
    it on the host."""
    return receiver == path or receiver.startswith((path + ".", path + "["))


def _finding(program: Program, rule_id: str, escape: Escape, reader: Function, read: Sync,
             called: tuple[Function, Call] | None, handed: tuple[Function, Call] | None, what: str,
             at_copy: bool = True) -> Finding:
    """`called`: the call that makes the copy (or hands its destination on); `handed`: the call that hands the kept
    attribute to the helper that reads it; `at_copy`: whether a fix may wait in the copying function (not in a
    helper whose caller keeps the destination: the helper does not know it is kept)."""
    copy = escape.copy
    calls = tuple(location(caller, call.line, call.column, ROLE_CALL, f"calls `{call.callee}`")
                  for caller, call in (pair for pair in (called, handed) if pair))
    return Finding(
        rule=rule_id,
        message=(f"{what}, is read by `.{read.method}()` on the host in `{reader.facts.qualname}` while the "
                 f"non_blocking device-to-host copy into {_named(copy)} (in `{escape.function.facts.qualname}`, "
                 f"line {copy.line}) may still be running: nothing waits for the copy in between"),
        primary=location(reader, read.line, read.column, ROLE_READ, f"host read in {reader.facts.qualname}"),
        related=(location(escape.function, copy.line, copy.column, ROLE_WRITE,
                          f"non_blocking {copy.op} into {_named(copy)}"),) + calls,
        fix=(f"Wait for the copy before the host reads it: record an event after the copy and call "
             f"`event.synchronize()` before line {read.line} of {reader.file.path} (or synchronize the copying "
             f"stream in `{escape.function.facts.qualname}` before the destination leaves it)."),
        kind="HOST",
        symbol=reader.facts.qualname,
        extra={"path": copy.dst, "copy_line": copy.line, "fix_edit": _fix_edit(escape, reader, read, at_copy)},
    )


def _named(copy: AsyncCopy) -> str:
    return f"the result of `.{copy.op}()`" if copy.dst.startswith("(") else f"`{copy.dst}`"


def _fix_edit(escape: Escape, reader: Function, read: Sync, at_copy: bool) -> dict:
    """A host wait (unsafe, as SC102's): in the copying function before the destination leaves it when the copy
    ran on its current stream, else a device synchronize before the read (the copy's stream is not in scope)."""
    if escape.copy.region == NO_REGION and at_copy:
        statement = "torch.cuda.current_stream().synchronize()"
        path, line, column = escape.function.file.path, escape.line, escape.column
        where = f"before the destination leaves `{escape.function.facts.qualname}` at line {line}"
    else:
        statement, path, line, column = "torch.cuda.synchronize()", reader.file.path, read.line, read.column
        where = f"before the host read at line {line}"
    return {"path": path, "line": line, "column": column, "insert": statement, "safe": False,
            "description": f"insert `{{statement}}` {where}"}
