"""SC104's first query: a tensor of the current stream used inside a side-stream region (or in a function only run
on one) and released by the same function with no `record_stream(side)` and no wait for the side stream between the
use and the release (the rule's docstring says which releases count and why)."""

from __future__ import annotations

from typing import Iterable

from streamcheck.findings import ROLE_FREE, ROLE_READ, ROLE_STREAM_CONTEXT, Finding

from .facts import NO_REGION, RETURNED, FunctionFacts, Region, Use
from .fresh_block_on_side_stream import allocation_before
from .hazard_flow import host_blocked_between, stream_ordered_between, uses_after
from .program import CURRENT_STREAM, Function, Program
from .rule import called_on_one_side_stream, location
from .streams import display
from .summaries import call_lifetimes

CALLEE_REGION = -2  # the region index of a use by a callee on its own side stream (no region of this function)
DATA_USES = frozenset({"read", "write", "host", "stream"})
STORAGE_FREES = frozenset({"resize_", "storage().resize_", "untyped_storage().resize_"})  # free the block itself
FREES = {"del": "`del`", "del[]": "`del` of its container item", ".data=": "`.data = ...`", "resize_": "`resize_`",
         "storage().resize_": "`storage().resize_`", "untyped_storage().resize_": "`untyped_storage().resize_`"}


def releases_after_side_use(program: Program, rule_id: str) -> Iterable[Finding]:
    for function in program.functions.values():
        facts = function.facts
        if not facts.uses:
            continue
        regions = [(index, region) for index, region in enumerate(facts.regions)
                   if program.stream_id(function, region) != CURRENT_STREAM]
        whole = called_on_one_side_stream(program, function)
        if whole is not None:  # its body runs inside a caller's region: `current_stream()` there is that stream
            regions.append((NO_REGION, whole[0]))
        for index, region in regions:
            inside: dict[str, Use] = {}
            for use in sorted(facts.uses, key=lambda u: (u.line, u.column)):
                if use.region == index and use.how in DATA_USES and use.path not in inside:
                    inside[use.path] = use
            for path, first_use in inside.items():
                context = whole[1] if index == NO_REGION else location(
                    function, region.line, region.column, ROLE_STREAM_CONTEXT, f"switches to `{region.stream}`")
                finding = _release(program, rule_id, function, index, region, path, first_use, context)
                if finding is not None:
                    yield finding
        yield from _released_after_callee_use(program, rule_id, function)


def _released_after_callee_use(program: Program, rule_id: str, function: Function) -> Iterable[Finding]:
    """The same for a tensor the function hands to a helper that uses it on a side stream in a region of its own
    (DeepSpeed's `move_key(state, key)` copies `state[key]` out on the copy stream) and then releases itself
    (`del state[key]`): the helper's `record_stream` of its parameter (summaries.parameter_lifetimes) is the
    record, a wait in the function between the call and the release the ordering."""
    seen: set[str] = set()
    for call, how, path, stream in call_lifetimes(program, function):
        if how != "side" or path in seen or path.startswith("self."):
            continue
        seen.add(path)
        region = Region(display(stream), call.line, call.column, call.line)
        first_use = Use(path, "read", call.line, call.column, call.region)
        context = location(function, call.line, call.column, ROLE_STREAM_CONTEXT,
                           f"`{call.callee}` uses it on `{display(stream)}`")
        finding = _release(program, rule_id, function, CALLEE_REGION, region, path, first_use, context, stream)
        if finding is not None:
            yield finding


def _release(program: Program, rule_id: str, function: Function, index: int, region: Region, path: str,
             first_use: Use, context, stream_id: str = "") -> Finding | None:
    """`stream_id`: the side stream's id when `region` stands for a callee's (CALLEE_REGION)."""
    facts = function.facts
    bound_inside = any(  # allocated on the side stream itself
        u.path == path and u.region == index and u.how == "rebind" and u.arg != "None" and u.line < first_use.line
        for u in facts.uses)
    if bound_inside or any(u.path == path and u.how == "record_stream" for u in facts.uses) or any(
            how == "record" and recorded == path for _, how, recorded, _ in call_lifetimes(program, function)):
        return None  # recorded here, or by a helper it is passed to
    if path.startswith("self.") and _bound_on_stream(program, function, path,
                                                     stream_id or program.stream_id(function, region),
                                                     first_use.line):
        return None
    local = "." not in path
    fresh = [p for p in facts.placements if p.path == path and p.line < region.line]
    allocated_here = local and bool(fresh) and max(fresh, key=lambda p: p.line).fresh
    release: Use | None = None
    stored = False
    later = list(uses_after(facts, path, first_use.line))
    for position, use in enumerate(later):
        if use.how == "escape" and local and _stored(facts, use) and (
                allocated_here or _allocated_by_helper(program, function, index, region, path)):
            # Stored for other code (`state[key] = buf`, `dest.data = buf`): freed there, later, by code that
            # does not know a side stream used the block; only a record or a wait before it leaves orders that.
            release, stored = use, True
            break
        if use.how == "escape" and not _storage_freed_later(later[position + 1:]):
            return None  # handed on: whoever holds it last frees it, after what it waits for
        if use.how == "escape":
            continue  # ... unless this function frees the storage itself afterwards (below)
        if use.how == "free" and (allocated_here or not local or use.arg != "del"):
            release = use
            break
        if use.how == "rebind" and (allocated_here or (not local and use.arg == "None")
                                    or (not local and _replaced_by_helper(program, function, use, path))):
            release = use  # `t = ...` dropping the local's only reference, `param.grad = None`
            break
        if use.how in ("rebind", "free"):
            return None
    if release is None:
        if not allocated_here or any(u.path == path and u.how == "escape" for u in facts.uses):
            return None
        line, column, how = facts.end_line, 1, "the end of the function"
    else:
        line, column = release.start_line or release.line, release.start_column or release.column
        how = "storing it for other code" if stored else FREES.get(release.arg, "rebinding it")
    if line <= region.end_line:  # released inside the region: only blocking the host orders it
        if host_blocked_between(program, function, first_use.line, line, set()):
            return None
    elif stream_ordered_between(program, function, region.end_line,
                                facts.end_line + 1 if stored or not release else line):
        return None  # (a stored block is freed after the function: a wait up to its end orders that)
    stream = region.stream
    return Finding(
        rule=rule_id,
        message=(f"`{path}` is used on stream `{stream}` and released by {how} with no "
                 f"`record_stream({stream})` and no wait for `{stream}`: the allocator may hand its memory "
                 f"to new work while the side stream still uses it"),
        primary=location(function, line, column, ROLE_FREE, f"release in {facts.qualname}"),
        related=(
            location(function, first_use.line, first_use.column, ROLE_READ, f"used on `{stream}`"),
            context,
        ),
        fix=(f"Call `{path}.record_stream({stream})` after its use on the side stream, or "
             f"`torch.cuda.current_stream().wait_stream({stream})` before line {line}."),
        kind="FREE",
        symbol=facts.qualname,
        extra={"path": path, "stream": stream},
    )


def _storage_freed_later(uses: list[Use]) -> bool:
    """A later `x.untyped_storage().resize_(0)` / `x.resize_(...)` of the same tensor before it is rebound: that
    frees the block whatever else still holds a reference (torchrec's stash appends each tensor to a list, then
    frees the storage of every element it appended), so handing the tensor on does not end the query there."""
    for use in uses:
        if use.how == "rebind":
            return False
        if use.how == "free" and use.arg in STORAGE_FREES:
            return True
    return False


def _replaced_by_helper(program: Program, function: Function, rebind: Use, path: str) -> bool:
    """`self.splits = move_to_cpu(self.splits)`: the attribute rebound to what a scanned helper makes of it, a new
    tensor (Megatron's `maybe_move_tensor_to_cpu`): the old one loses the attribute's reference."""
    start = rebind.start_line or rebind.line
    for call, edges in program.exact_edges_of(function.id):
        if start <= call.line <= rebind.line and path in call.args:
            if any(_returns_new_tensor(program.functions[edge.callee]) for edge in edges):
                return True
    return False


def _returns_new_tensor(callee: Function) -> bool:
    """Some `return x` of the callee returns a tensor it made (`x = t.to("cpu")`, or `x = y` of such a y)."""
    facts = callee.facts
    fresh = {p.path for p in facts.placements if p.fresh}
    copied = {u.arg for u in facts.uses if u.how == "escape" and u.path in fresh and u.arg}
    return any(u.how == "escape" and u.arg == RETURNED and "." not in u.path and u.path in fresh | copied
               for u in facts.uses)


def _bound_on_stream(program: Program, function: Function, path: str, stream: str, used: int) -> bool:
    """Whether some method of the class assigns `path` a new tensor inside a region of `stream`: then it is
    allocated on that stream and its release there is ordered by the stream itself. (Not a binding of this
    function after the use at line `used`: that one is the release, `self.x = move(self.x)`.)"""
    for other in program.functions_of_class(function):
        for use in other.facts.uses:
            if other is function and use.line >= used:
                continue
            if use.path == path and use.how == "rebind" and use.arg != "None" and use.region >= 0 \
                    and program.stream_id(other, other.facts.regions[use.region]) == stream:
                return True
    return False


def _stored(facts: FunctionFacts, escape: Use) -> bool:
    """An escape that stores the tensor in long-lived state (an attribute, `.data`, a container item: `obj.f = x`,
    `dest.data = x`, `state[key] = x`), freed later by unrelated code; not a return or a call's argument (a
    constructor's): those go to the caller, whose own reads must wait for the side stream anyway (measured: such
    hand-outs gave 6 findings on unmodified torchrec test utilities and pipelines and no mutation site)."""
    if any(s.kind == "store" and s.line == escape.line for s in facts.syncs):
        return False  # stored with an event recorded here (`stash[k] = (buf, s.record_event())`): its keeper waits it
    return escape.arg not in ("", RETURNED) or any(
        u.how == "write" and u.arg == "[]=" and u.line == escape.line for u in facts.uses)


def _allocated_by_helper(program: Program, function: Function, index: int, region: Region, path: str) -> bool:
    """`buf = _alloc_reload_buffer(...)` before the region: a scanned helper's fresh block of the current stream.
    (Only for a stored block: a helper-made local dropped at the end is not judged, as the end may lie on
    another path than the region's, and the helper may record it.)"""
    if index == NO_REGION:
        return False
    allocation = allocation_before(program, function, path, (region.line, region.column))
    return allocation is not None and allocation.stream == CURRENT_STREAM
