"""Per-function summaries composed over the call graph, parameters bound to the caller's arguments.

Two summaries, each computed once per function, bottom-up, without recursion (call chains of any depth):
- **orderings performed**: every (waiter, target) a call of the function always orders, its callees' included,
  in the function's own frame (`CURRENT_STREAM` is the stream it is called on, `param:s` its parameter `s`). At a
  call site they are translated into the caller's frame (`call_orderings`). Orderings under a condition in the
  callee, and incidental host reads (`.item()`, `.tolist()` in a helper), are left out: a caller cannot count
  on them.
- **parameter lifetimes**: the tensors its parameters hold that it uses on a side stream (inside a region of a
  stream other than its current one) and the streams it records them for (`record_stream`), its callees' included,
  streams in its own frame (`parameter_lifetimes`): a caller that frees what it passed needs that record.
- **parameter accesses**: what the function reads and writes through its parameters (`def fill(buf): buf.zero_()`)
  and, at a call site, the same accesses on the caller's argument paths (`bound_accesses`): a tensor handed to a
  helper is read or written where the helper does it, and only if it does. Values that travel through calls
  (results, kept parameters, handed-out elements) are added there by call_values.py.
Beside them, the events a call records for its caller (`call_records`) and the streams that wait for an event
anywhere (`event_waiters`), which tell whether a recorded event hands a write off to its reader (races.py).
"""

from __future__ import annotations

import builtins
from dataclasses import replace
from typing import TYPE_CHECKING, Callable, Iterable

from .call_values import handed_out, value_accesses
from .collectives import reads_in_place
from .element_flow import element_parameters
from .extract import split_index
from .facts import Access, Call
from .orderings import ANY_STREAM, EVENT, Ordering, event_id, orderings_of, recording_stream, site_stream
from .streams import CURRENT_STREAM, HOST, PARAM, UNKNOWN, stream_id

if TYPE_CHECKING:
    from .callgraph import Edge, Function
    from .program import Program

Pair = tuple[str, str]  # (waiter, target)
BUILTIN_NAMES = frozenset(dir(builtins))


def argument_for(callee: "Function", call: Call, param: str) -> str | None:
    """The caller's argument text bound to `callee`'s parameter `param` at `call` (None when not given)."""
    params = list(callee.facts.params)
    if params and params[0] in ("self", "cls") and not _called_unbound(call):
        params = params[1:]
    keyword = f"{param}="
    for arg in call.args:
        if arg.startswith(keyword):
            return arg[len(keyword):] or None
    positional = [a for a in call.args if "=" not in a]
    if param in params and params.index(param) < len(positional):
        return positional[params.index(param)] or None
    return None


def _called_unbound(call: Call) -> bool:
    head = call.callee.split(".", 1)[0]
    return head[:1].isupper() and "." in call.callee  # `Class.method(obj, ...)`


def translate(program: "Program", caller: "Function", call: Call, callee: "Function", stream: str) -> str:
    """A stream id of the callee's frame as the caller sees it at `call`."""
    if stream == CURRENT_STREAM:
        return site_stream(program, caller, call.region)
    if stream.startswith(PARAM):
        arg = argument_for(callee, call, stream[len(PARAM):])
        if arg is None:
            return UNKNOWN
        bound = stream_id(program, caller, arg)
        return site_stream(program, caller, call.region) if bound == CURRENT_STREAM else bound
    return stream


def performed(program: "Program", fid: str) -> frozenset[Pair]:
    """Every (waiter, target) that calling `fid` orders, in its own frame."""
    table = program.memo("summaries.performed", lambda: {})
    if fid not in table:
        _bottom_up(program, fid, table, _own_pairs, _call_pairs, program.all_edges_of)
    return table[fid]


def call_orderings(program: "Program", caller: "Function", call: Call, edges: Iterable["Edge"]) -> list[Ordering]:
    """The orderings a call performs, in the caller's frame, placed at the call."""
    found = []
    for edge in edges:
        callee = program.functions[edge.callee]
        # sorted: a summary is a set, and ordered_by reads orderings in sequence (a set's order would follow the
        # hash seed, and with it the findings)
        for waiter, target in sorted(performed(program, edge.callee)):
            found.append(Ordering(
                "call", translate(program, caller, call, callee, waiter),
                translate(program, caller, call, callee, target), call.line, call.column, call.region))
    return found


def _own_pairs(program: "Program", function: "Function") -> set[Pair]:
    return {(o.waiter, o.target) for o in orderings_of(program, function)
            if o.kind != "host_sync"
            and not ((o.target == ANY_STREAM or o.waiter == HOST) and _guarded(function, o.line))}


def _guarded(function: "Function", line: int) -> bool:
    """Under a condition in `function`. A caller counts on a synchronize of the host (device-wide, or of one
    event) only when the call always does it: communication wrappers synchronize under `if profiling:`, FSDP's
    rate limiter under `if free_event:`, and crediting that would hide every race behind them. A targeted wait of
    one stream for another (`s.wait_stream(t)`) counts under a condition too: it is never incidental."""
    return any(first <= line <= last for first, last in function.facts.guarded)


def _call_pairs(program: "Program", function: "Function", call: Call, edge: "Edge", callee_value) -> set:
    guarded = _guarded(function, call.line)
    callee = program.functions[edge.callee]
    return {(translate(program, function, call, callee, w), translate(program, function, call, callee, t))
            for w, t in callee_value if not (guarded and (t == ANY_STREAM or w == HOST))}


SIDE_USES = frozenset({"read", "write", "host", "stream"})
Lifetime = tuple[str, str, str]  # ("side" | "record", parameter, stream id in the function's frame)


def parameter_lifetimes(program: "Program", fid: str) -> frozenset[Lifetime]:
    """("side", p, s): the function (or an exact callee) uses what its parameter `p` holds on stream s, a stream
    other than its current one; ("record", p, s): it calls `p.record_stream(s)` (or `p[k].record_stream(s)`)."""
    table = program.memo("summaries.lifetimes", lambda: {})
    if fid not in table:
        _bottom_up(program, fid, table, _own_lifetimes, _call_lifetimes, program.exact_edges_of)
    return table[fid]


def _own_lifetimes(program: "Program", function: "Function") -> set[Lifetime]:
    from .orderings import named_stream

    params = set(function.facts.params) - {"self", "cls"}
    found: set[Lifetime] = set()
    for use in function.facts.uses:
        root = use.path.split(".", 1)[0]
        if root not in params or "." in use.path:
            continue  # the parameter itself: `state[key]` is a `state` use; `p.grad` may be another tensor's
        here = site_stream(program, function, use.region)
        if use.how in SIDE_USES and use.region >= 0 and here not in (CURRENT_STREAM, UNKNOWN):
            found.add(("side", root, here))
        elif use.how == "record_stream" and use.arg:
            found.add(("record", root, named_stream(program, function, use.arg, here)))
    return found


def _call_lifetimes(program: "Program", function: "Function", call: Call, edge: "Edge", callee_value) -> set:
    callee = program.functions[edge.callee]
    params = set(function.facts.params) - {"self", "cls"}
    found = set()
    for how, param, stream in callee_value:
        arg = argument_for(callee, call, param)
        if arg is None:
            continue
        root = split_index(arg)[0]
        # a local list rebuilt from the elements of a parameter passes those elements on (element_flow.py)
        for held in [root] if root in params else sorted(element_parameters(program, function).get(root, ())):
            found.add((how, held, translate(program, function, call, callee, stream)))
    return found


def call_lifetimes(program: "Program", function: "Function") -> list[tuple[Call, str, str, str]]:
    """(call, how, argument path, stream in `function`'s frame) for what each exact call does to the lifetime of
    a tensor `function` passes it (see parameter_lifetimes)."""
    def build() -> list[tuple[Call, str, str, str]]:
        found = []
        for call, edges in program.exact_edges_of(function.id):
            for edge in edges:
                callee = program.functions[edge.callee]
                for how, param, stream in sorted(parameter_lifetimes(program, edge.callee)):
                    arg = argument_for(callee, call, param)
                    if arg:
                        found.append((call, how, split_index(arg)[0], translate(program, function, call, callee,
                                                                                 stream)))
        return found

    return program.memo(("summaries.call_lifetimes", function.id), build)


def parameter_accesses(program: "Program", fid: str) -> frozenset[Access]:
    """Accesses `fid` makes (itself or through exact callees) to paths rooted in its parameters."""
    table = program.memo("summaries.params", lambda: {})
    if fid not in table:
        _bottom_up(program, fid, table, _own_param_accesses, _call_param_accesses, program.exact_edges_of)
    return table[fid]


def bound_accesses(program: "Program", function: "Function") -> list[Access]:
    """The accesses `function`'s calls make to its own paths through the callees' parameters, at the calls."""
    def build() -> list[Access]:
        found: list[Access] = []
        if not function.file.detailed:
            return found  # a file the prefilter passed over holds no access facts for its calls to bind
        # A local handed to a helper can only race where the function itself switches streams or runs under a
        # region; an attribute of `self` can race from anywhere.
        on_streams = bool(function.facts.regions or program.region_chains(function.id))
        # ... and a local taken out of a container another function filled (`state = self.saved.pop(tag)`) is that
        # container's element: what a helper does to it, it does to the container
        taken = {local: (container, line) for local, container, line in function.facts.taken}
        taken.update(handed_out(program, function))  # ... or handed out of one by a helper (call_values.py)
        for call, edges in program.calls_of(function.id):
            if not call.args:
                continue
            held = on_streams or any(a.startswith("self.") or a in taken for a in call.args)
            if held:
                exact = [e for e in edges if e.exact and has_access_facts(program, e.callee)]
                for edge in exact:
                    found.extend(_as_taken(bind(program, function, call, edge,
                                                parameter_accesses(program, edge.callee)), taken))
            if not edges and _calls_a_value(function, call):
                named = _named_args(function, call)
                for arg, as_named in zip(call.args, named.args):
                    if as_named and "=" not in as_named and (held or as_named != arg):
                        path, index = split_index(as_named)
                        found.append(Access("read", path, call.line, call.column, call.callee, call.region,
                                            index=index))
        return found + value_accesses(program, function)

    return program.memo(("summaries.bound", function.id), build)


def has_access_facts(program: "Program", fid: str) -> bool:
    """Whether what `fid` does to its parameters is known: a function of a detailed file (prefilter.py), a Triton
    kernel (any file: FunctionFacts.kernel), or a function of a plain file that launches one through exact calls
    (an op wrapper `def scale(x, out): _scale_kernel[grid](x, out)`: its parameter accesses are the kernel's)."""
    function = program.functions[fid]
    return function.file.detailed or function.facts.kernel or bool(parameter_accesses(program, fid))


def _named_args(function: "Function", call: Call) -> Call:
    """The call with each argument that is another name for an attribute there (`cur = self._cur_batch`,
    FunctionFacts.attribute_names) spelled as that attribute: a module the local is handed to reads the attribute,
    which other methods write (torchrec's TrainPipelineBase hands `self._cur_batch`, filled on the memcpy stream
    by another method, to the model under a local name). (A scanned helper's accesses stay the local's: bound to
    the attribute they would pair with every access of it in the class, whatever call path each is on.)"""
    names = function.facts.attribute_names
    if not names or not call.args:
        return call
    args = []
    for arg in call.args:
        key, eq, value = arg.partition("=") if "=" in arg else ("", "", arg)
        root, sep, rest = value.partition(".")
        head = root.split("[", 1)[0]
        bound = [(line, path) for local, path, line in names if local == head and line <= call.line]
        path = max(bound)[1] if bound else ""
        args.append(f"{key}{eq}{path}{root[len(head):]}{sep}{rest}" if path else arg)
    return call if tuple(args) == tuple(call.args) else replace(call, args=tuple(args))


def _as_taken(accesses: list[Access], taken: dict[str, tuple[str, int]]) -> list[Access]:
    """The accesses with a local taken out of a container (from its line on) read as that container's."""
    if not taken:
        return accesses
    found = []
    for access in accesses:
        root, dot, rest = access.path.partition(".")
        container, line = taken.get(root, ("", 0))
        found.append(replace(access, path=container + dot + rest) if container and access.line >= line else access)
    return found


def _calls_a_value(function: "Function", call: Call) -> bool:
    """A call of a callable object the scan cannot see into (`model(x)`, `self.module(x)`): a module's forward
    or a kernel wrapper that consumes its tensor arguments. Constructors, builtins and imported library functions
    are hand-offs, not reads."""
    parts = call.callee.split(".")
    if parts[0] in function.file.imports or not call.callee.replace(".", "_").isidentifier():
        return False
    if len(parts) == 1:
        return parts[0] in function.facts.params or not parts[0][:1].isupper() and parts[0] not in BUILTIN_NAMES
    return parts[0] == "self" and len(parts) == 2


def _own_param_accesses(program: "Program", function: "Function") -> set[Access]:
    params = set(function.facts.params) - {"self", "cls"}
    return {a for a in program.own_accesses(function)
            if a.path.split(".", 1)[0] in params and not a.owner and not a.fresh
            # an in-place collective's write stays in the function that calls it: wrappers named like collectives
            # take objects as often as tensors
            and not (a.collective and a.kind == "write" and reads_in_place(function, a))}


def _call_param_accesses(program: "Program", function: "Function", call: Call, edge: "Edge", callee_value) -> set:
    params = set(function.facts.params) - {"self", "cls"}
    return {a for a in bind(program, function, call, edge, callee_value) if a.path.split(".", 1)[0] in params}


def bind(program: "Program", caller: "Function", call: Call, edge: "Edge", accesses) -> list[Access]:
    callee = program.functions[edge.callee]
    generic = program.options.all_generic_attributes
    found = []
    for access in sorted(accesses, key=_access_order):  # a summary is a set: bind in one order whatever the seed
        root, dot, rest = access.path.partition(".")
        if dot and access.path.rsplit(".", 1)[-1] not in generic:
            continue  # `param.ds_secondary_tensor` already pairs by its specific name wherever it is accessed
        arg = argument_for(callee, call, root)
        if arg is None:
            continue
        op = access.op if " in " in access.op else f"{access.op} in {callee.facts.qualname}"
        path, index = split_index(arg)
        if dot and index:
            index = ""  # `bufs[i].grad`: the element's attribute, not told apart by the index
        found.append(Access(access.kind, path + dot + rest, call.line, call.column, op, call.region,
                            access.collective, "", index or access.index))
    return found


def _access_order(access: Access) -> tuple:
    return (access.line, access.column, access.kind, access.path, access.op, access.index, access.region)


def _bottom_up(program: "Program", start: str, table: dict, own: Callable, through_call: Callable,
               edges_of: Callable) -> None:
    """Fill `table[fid]` for `start` and everything it calls: own facts plus each callee's value brought through
    the call. An explicit stack instead of recursion; a callee still being computed (a cycle) adds what it has."""
    partial: dict[str, set] = {}
    stack = [(start, False)]
    while stack:
        fid, expanded = stack.pop()
        if fid in table:
            continue
        function = program.functions[fid]
        if not expanded:
            if fid in partial:
                continue  # on the stack already: a cycle
            partial[fid] = set(own(program, function))
            stack.append((fid, True))
            for _call, edges in edges_of(fid):
                for edge in edges:
                    if edge.callee not in table and edge.callee not in partial:
                        stack.append((edge.callee, False))
            continue
        value = partial[fid]
        for call, edges in edges_of(fid):
            for edge in edges:
                callee_value = table.get(edge.callee, partial.get(edge.callee, ()))
                value |= through_call(program, function, call, edge, callee_value)
        table[fid] = frozenset(value)


def call_records(program: "Program", caller: "Function", call: Call, edges: Iterable["Edge"]) -> list[Pair]:
    """(event id, stream) of each record a callee makes on a stream the call hands it (Megatron's
    `group.record_offload_event(self.d2h_stream)`: `self._offload_event.record(stream)`), in the caller's frame."""
    found = []
    for edge in edges:
        callee = program.functions[edge.callee]
        for sync in callee.facts.syncs:
            if sync.kind == "record":
                stream = recording_stream(program, callee, sync)
                if stream.startswith(PARAM):
                    found.append((event_id(program, callee, sync.receiver),
                                  translate(program, caller, call, callee, stream)))
    return found


def event_waiters(program: "Program", event: str) -> frozenset[str]:
    """Every stream the program makes wait for `event` (an event id): by its own waits, and by the calls of helpers
    that wait on it for a stream they are handed (`group.wait_reload_event(torch.cuda.current_stream())`)."""
    def build() -> dict[str, frozenset[str]]:
        found: dict[str, set[str]] = {}
        for function in program.functions.values():
            for o in orderings_of(program, function):
                if o.target.startswith(EVENT):
                    if not o.waiter.startswith(PARAM):
                        found.setdefault(o.target[len(EVENT):], set()).add(o.waiter)
                        continue
                    for caller, call in program.call_sites.get(function.id, ()):
                        found.setdefault(o.target[len(EVENT):], set()).add(
                            translate(program, caller, call, function, o.waiter))
        return {k: frozenset(v) for k, v in found.items()}

    return program.memo("summaries.event_waiters", build).get(event, frozenset())
