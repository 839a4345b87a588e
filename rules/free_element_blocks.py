"""Blocks an element's methods allocate on a side stream and free again, read on the current stream in between
(SC104, the hand-off direction of free_after_handoff.py through objects held in a local list).

DeepSpeed 0.19.8's FPDT keeps its chunks as SequenceChunk objects in lists:

    with stream(offload_stream):
        global_k[i].load_to_gpu()            # gpu_chunk = torch.empty(...); ...; self.gpu_chunk = gpu_chunk
    ...
    with stream(compute_stream):             # the current stream
        attn(global_k[i].get_gpu_chunk())    # read through the accessor (call_values.py)
    compute_stream.synchronize()             # the host waits for the read before the free
    global_k[i].offload()                    # del self.gpu_chunk

The block belongs to the side stream's pool; once `offload` drops it, the side stream's next allocation (the next
chunk's `load_to_gpu`) may take it while the current stream's kernel still reads it. Reported, at the release,
when the host does not wait for the current stream between the last read before it and the release, no
`record_stream` is made, and the side stream does not wait for the current stream after the read (then its next
allocation is ordered after the read).
"""

from __future__ import annotations

from typing import Iterable

from streamcheck.findings import ROLE_FREE, ROLE_READ, ROLE_WRITE, Finding

from .facts import NO_REGION, Access, Call
from .orderings import orderings_of, site_stream, waits_for
from .program import CURRENT_STREAM, Function, Program
from .rule import location
from .streams import HOST, UNKNOWN, as_code, display


def frees_of_element_blocks(program: Program, rule_id: str) -> Iterable[Finding]:
    from .free_after_handoff import _waits_for_current_later

    for function in program.functions.values():
        if not function.facts.regions:
            continue
        made = _allocations(program, function)
        if not made:
            continue
        recorded = {u.path.split(".", 1)[0] for u in function.facts.uses if u.how == "record_stream"}
        reads = [a for a in program.accesses_in(function) if a.kind == "read"
                 and site_stream(program, function, a.region) == CURRENT_STREAM]
        for call, method, attr in _releases(program, function, made):
            receiver = _receiver(call)
            path = f"{receiver}.{attr}"
            stream, allocation, allocator = made[(receiver, attr)]
            before = [a for a in reads if a.path == path and (a.line, a.column) < (call.line, call.column)]
            if receiver in recorded or not before:
                continue
            last = max(before, key=lambda a: (a.line, a.column))
            if _host_waits_between(program, function, last.line, call.line) \
                    or _waits_for_current_later(program, function, stream, last.line):
                continue
            yield _finding(rule_id, function, call, method, path, stream, last, allocation, allocator)


def _allocations(program: Program, function: Function) -> dict[tuple[str, str], tuple[str, Call, Function]]:
    """(receiver, attribute) -> (side stream, call, method) for each `receiver[...].method()` called inside a
    region of a named side stream whose method binds `self.<attribute>` to a new tensor (a fresh write)."""
    found: dict[tuple[str, str], tuple[str, Call, Function]] = {}
    for call, edges in program.calls_of(function.id):
        receiver = _receiver(call)
        if call.region == NO_REGION or not receiver or len(edges) != 1:
            continue
        stream = site_stream(program, function, call.region)
        method = program.functions[edges[0].callee]
        if stream in (CURRENT_STREAM, UNKNOWN) or not method.owner or not method.file.detailed:
            continue
        for access in program.own_accesses(method):
            root, _, attr = access.path.partition(".")
            if access.kind == "write" and access.fresh and root == "self" and attr and "." not in attr \
                    and access.region == NO_REGION:
                found.setdefault((receiver, attr), (stream, call, method))
    return found


def _releases(program: Program, function: Function, made: dict) -> Iterable[tuple[Call, Function, str]]:
    """(call, method, attribute) for each `receiver[...].method()` whose method (of the allocating method's class)
    drops `self.<attribute>` (`del self.x`, `self.x = None`): the host's release, under any region."""
    for call in function.facts.calls:
        receiver = _receiver(call)
        if not receiver:
            continue
        for (held_by, attr), (_stream, _call, allocator) in sorted(made.items(), key=lambda item: item[0]):
            if held_by != receiver:
                continue
            name = call.callee.rsplit(".", 1)[-1]
            method = program.functions.get(f"{allocator.file.path}::{allocator.owner}.{name}")
            if method is not None and any(
                    u.path == f"self.{attr}" and (u.how == "free" or u.how == "rebind" and u.arg == "None")
                    for u in method.facts.uses):
                yield call, method, attr


def _receiver(call: Call) -> str:
    """The local a method is called on (`global_k[i].load_to_gpu()`: `global_k`), "" for anything else."""
    receiver = call.callee.rpartition(".")[0].replace("[]", "")
    return receiver if receiver.isidentifier() and receiver not in ("self", "cls") else ""


def _host_waits_between(program: Program, function: Function, first: int, last: int) -> bool:
    return any(first <= o.line < last and o.waiter == HOST and waits_for(program, o, CURRENT_STREAM)
               for o in orderings_of(program, function))


def _finding(rule_id: str, function: Function, call: Call, method: Function, path: str, stream: str, use: Access,
             allocation: Call, allocator: Function) -> Finding:
    code = as_code(stream)
    receiver = path.split(".", 1)[0]
    return Finding(
        rule=rule_id,
        message=(f"`{path}` is allocated on stream `{code}` by `{allocator.facts.qualname}`, read on the current "
                 f"stream and released by `{method.facts.qualname}` with no wait of the host for the current stream "
                 f"(or `record_stream`) in between: the allocator may give its memory to `{code}`'s next "
                 f"allocation while the current stream still reads it"),
        primary=location(function, call.line, call.column, ROLE_FREE, f"released by {method.facts.qualname}"),
        related=(location(function, use.line, use.column, ROLE_READ, f"{use.op} on the current stream"),
                 location(function, allocation.line, allocation.column, ROLE_WRITE,
                          f"allocated by {allocator.facts.qualname} on `{code}`")),
        fix=(f"Make the host wait for the current stream before the release at line {call.line} "
             f"(`torch.cuda.current_stream().synchronize()`), or record the block for it: "
             f"`{receiver}[...].{path.split('.', 1)[1]}.record_stream(torch.cuda.current_stream())` after the read."),
        kind="FREE",
        symbol=function.facts.qualname,
        extra={"path": path, "stream": display(stream), "allocated_on": code},
    )
