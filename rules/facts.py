"""Per-file facts: everything the rules need from one source file, in a JSON-serializable form.

A file is parsed once (`extract_facts`); rules and the whole-program view read only these facts, never the source.
Positions are 1-based lines and columns as in the source; `FileFacts.lines` keeps the stripped text of every line
that a fact points at, which is what findings show as snippets.

Fact kinds, per function:
- `Call`     a call site: the callee's dotted text (`self.fetch`, `torch.cuda.synchronize`, `?.all_gather_coalesced`)
- `Access`   a device write (`copy_`, another in-place method, `out=`) or read (argument of a call, receiver of a
             tensor method, operand) of an access path such as `param.ds_secondary_tensor`
- `Sync`     an ordering operation: wait_stream, wait_event, synchronize, record, host_sync (`.item()`...),
             record_stream
- `Region`   a `with <...>.stream(s):` body; other facts carry the index of their innermost region (or -1)
New kinds (non_blocking copies, async collective handles, frees) are added as new lists on FunctionFacts with a
default of empty, so older caches still load.
"""

from __future__ import annotations

from dataclasses import MISSING, dataclass, field, fields
from operator import attrgetter
from typing import Any, Callable

from .options import StaticOptions

MODULE_SCOPE = "<module>"
NO_REGION = -1


class ParseFailure(Exception):
    """The source is not valid Python; `line` and `column` are 1-based (0 when unknown)."""

    def __init__(self, message: str, line: int = 0, column: int = 0) -> None:
        super().__init__(message)
        self.message = message
        self.line = line
        self.column = column

    def __str__(self) -> str:
        return f"{self.message} (line {self.line}, column {self.column})"


@dataclass(frozen=True)
class Call:
    line: int
    column: int
    callee: str
    region: int = NO_REGION
    # The innermost conditional block (if/else branch, loop body, except handler) holding the call, as
    # (first line, last line); (0, 0) when the call runs whenever its function does. Used to tell whether an
    # ordering dominates a later access.
    block: tuple[int, int] = (0, 0)
    # Functions passed as arguments (`register_hook(fn)`, `wrap(dist.allgather_fn)(...)`): they may run from here.
    func_args: tuple[str, ...] = ()
    # Access paths of the arguments ("" where an argument is no plain path), positional first, then `name=path`
    # for keywords: a callee's accesses to its parameters are the caller's accesses to these paths.
    args: tuple[str, ...] = ()
    # The arguments given as the constant True, by keyword (`non_blocking`) or position (`2`): a helper's flag that
    # makes its copy asynchronous (call_values.py).
    true_args: tuple[str, ...] = ()


@dataclass(frozen=True)
class Access:
    kind: str  # "write" | "read"
    path: str  # `param.ds_secondary_tensor`, `self.buf`, `x`; views, `.data` and subscripts are stripped
    line: int
    column: int
    op: str  # the method or callee that performs it: "copy_", "out=", "all_gather_into_tensor", "+"
    region: int = NO_REGION
    collective: bool = False  # read by a collective (runs on the communication library's stream)
    # For a plain name that a nested function (or any function, for a module global) uses from an enclosing
    # scope: the qualname of the function that binds it (MODULE_SCOPE for globals); "" for the function's own.
    owner: str = ""
    # The text of a last subscript that picks one element (`buf[1 - cur]` -> "1 - cur"); "" for the whole path.
    # Accesses with different index texts are taken as different tensors (double buffers).
    index: str = ""
    # A new tensor bound to the path (`y = x.to(...)`), written by its producing kernel: not a write into what the
    # path held before, so a caller's argument is not written when a helper rebinds its parameter this way.
    fresh: bool = False


@dataclass(frozen=True)
class Sync:
    # "wait_stream" | "wait_event" | "synchronize" | "host_sync" | "record" | "record_stream" | "wait" (`x.wait()` on
    # something not named an event: a work handle, a future, or an event the engine recognises by its records)
    kind: str
    receiver: str  # dotted text of the object the method is called on ("" for plain functions)
    line: int
    column: int
    arg: str = ""
    region: int = NO_REGION
    block: tuple[int, int] = (0, 0)  # as for Call
    method: str = ""  # the method called: `wait` of an event vs `wait_event` of a stream, `wait` of a work


@dataclass(frozen=True)
class Region:
    stream: str  # the stream expression's source text, e.g. `self.__allgather_stream`
    line: int
    column: int
    end_line: int
    parent: int = NO_REGION


# --- hazard facts (SC102-SC105): filled by extract_hazards.py ---------------------------------------------------
RETURNED = "<return>"  # the arg of a Use escaping through `return` / `yield`


@dataclass(frozen=True)
class Use:
    """A mention of a local name or attribute path, in program order, by what it does to the tensor.

    how: "read" (device op or host op, depending on where the tensor lives), "host" (`.numpy()`, `.tolist()`,
    `.item()`), "write" (in-place method, `out=`, `x[...] = v`, `x += v`, filled by a reader), "stream" (the
    source of a non_blocking copy: ordered on the stream, not on the host), "rebind" (`x = ...`; arg "None" for
    `x = None`), "free" (`del x`,
    `x.data = ...`, `x.resize_(...)`, `x.storage().resize_(0)`), "alloc" (`x.untyped_storage().resize_(n)`,
    `stor.resize_(n)`, n not 0: a block handed out on the current stream), "escape" (returned or stored elsewhere),
    "record_stream" (arg: the stream), "wait" (`x.wait()`, also through `for h in x`). An escape's arg is where
    it went when that is one path (`obj.f = x`, `y = x`), RETURNED for `return x` / `yield x`, else empty.
    """

    path: str
    how: str
    line: int
    column: int
    region: int = NO_REGION
    block: tuple[int, int] = (0, 0)
    arg: str = ""
    # Bindings and frees take effect when their statement ends: `line`/`column` is that end (for ordering) and
    # these are the statement's start (for reports); 0 when the same.
    start_line: int = 0
    start_column: int = 0
    # The element index text of a subscripted use (`bufs[i % 2]` -> "i % 2", as Access.index); for an escape into
    # a local container's element (`bufs[(i + 1) % 2] = buf`, arg "bufs"), that element's index.
    index: str = ""


@dataclass(frozen=True)
class Placement:
    """`path = <expr>` where the expression says where the tensor lives ("pinned", "host", "device" or "") and
    whether it is a fresh allocation (a factory, a copy, an arithmetic result)."""

    path: str
    where: str
    line: int
    fresh: bool = False
    region: int = NO_REGION


@dataclass(frozen=True)
class AsyncCopy:
    """A `non_blocking=True` copy: `dst.copy_(src, ...)`, `dst = src.to(target, ...)`, `.cpu(...)`, `.cuda(...)`.
    The direction is decided by the rules from placements (the file may not say it here)."""

    op: str  # "copy_" | "to" | "cpu" | "cuda"
    dst: str  # "" when the result is not bound to a path
    src: str
    target: str  # `.to(...)`'s device text
    line: int
    column: int
    end_line: int
    region: int = NO_REGION
    block: tuple[int, int] = (0, 0)


@dataclass(frozen=True)
class AsyncWork:
    """A collective called with `async_op=True`: its handle (a name, or the list it was appended to) and the
    tensors it reads or writes until the handle is waited."""

    op: str
    handle: str  # "" when the handle is dropped
    tensors: tuple[str, ...]
    line: int
    column: int
    end_line: int
    block: tuple[int, int] = (0, 0)
    region: int = NO_REGION  # the innermost stream region it is launched in: the stream a wait on it follows
    # Other paths holding its tensors at the launch (containers they went into, bases they view, loop containers):
    # extract_handles.py.
    aliases: tuple[str, ...] = ()
    # False for a launch that is asynchronous without the flag (a ProcessGroup method: `group.recv([buf], peer)`)
    flagged: bool = True

    @property
    def launch_text(self) -> str:
        """How a finding names the launch: `all_reduce(..., async_op=True)`, `recv(...)`."""
        return f"{self.op}(..., async_op=True)" if self.flagged else f"{self.op}(...)"


@dataclass
class FunctionFacts:
    qualname: str  # `Class.method`, `outer.inner`, or MODULE_SCOPE for module- and class-level code
    name: str
    cls: str | None  # qualname of the class this is a method of
    line: int
    end_line: int
    calls: list[Call] = field(default_factory=list)
    accesses: list[Access] = field(default_factory=list)
    syncs: list[Sync] = field(default_factory=list)
    regions: list[Region] = field(default_factory=list)
    # Local names bound to stream-looking expressions (`stream = self.reduction_stream`), so `with stream(stream)`
    # and `stream.wait_stream(...)` can be tied to the stream they name.
    stream_aliases: dict[str, list[str]] = field(default_factory=dict)
    # (local, line, value text) of each of those bindings: which stream a name holds on each way through an if/else
    # (`if overlap: stream = self.s1` / `else: stream = current_stream()`, races.ways_through_branches).
    stream_bindings: list[tuple[str, int, str]] = field(default_factory=list)
    params: list[str] = field(default_factory=list)  # parameter names, in order
    # Plain names a nested function's syncs use from an enclosing function's scope -> that function's qualname
    # (`stash_done_events[-1].synchronize()` in one closure, `stash_done_events.append(ev)` in its sibling): one
    # event container for both (orderings.event_id). Module globals are not listed.
    outer_names: dict[str, str] = field(default_factory=dict)
    # The parameters annotated as nothing but a tensor (`torch.Tensor`, `torch.Tensor | None`), detailed files
    # only: a read of one handed to code the scan cannot see is a tensor read (outside_producers.py).
    tensor_params: list[str] = field(default_factory=list)
    # Attributes this method assigns on `self` (`self.buf = ...`): the class that first assigns an attribute owns
    # it, so sibling classes that each assign their own `self.buf` hold different tensors.
    self_assigns: list[str] = field(default_factory=list)
    # Hazard facts (extract_hazards.py): only for names and paths that a hazard rule can care about.
    uses: list[Use] = field(default_factory=list)
    placements: list[Placement] = field(default_factory=list)
    async_copies: list[AsyncCopy] = field(default_factory=list)
    async_works: list[AsyncWork] = field(default_factory=list)
    # Collectives whose flag is a variable (`async_op=async_op`, `_coalescing_manager(..., async_ops=async_op) as
    # cm`) and whose handle this function stores on an object's field: only the travelling-handle query follows
    # them (travelling_handles.py); where they are launched nothing checks them (the flag is unknown there).
    handed_works: list[AsyncWork] = field(default_factory=list)
    # (first, last) line of an `if` body and of its `else`: code in one never runs after code in the other.
    branches: list[tuple[int, int, int, int]] = field(default_factory=list)
    # (path, first, last) of the arm of an if/else on which the path tested is None (`if h is not None:` ... the
    # `else`; `if not h:` / `if h is None:` ... the body): a handle there is no handle in flight (SC105).
    none_arms: list[tuple[str, int, int]] = field(default_factory=list)
    # (first, last) line of if/else arms that bind a local name (`stream = self.s1` / `stream = current`): the branch
    # chooses a value, and an ordering in one arm may belong to that choice (races.ways_through_branches).
    choosing: list[tuple[int, int]] = field(default_factory=list)
    # (first, last) line of conditional blocks that end in return / raise / continue / break: code in one never
    # runs before code after it.
    exits: list[tuple[int, int]] = field(default_factory=list)
    # ... of them, those that end in `return`: the caller gets the results there, before code after the block.
    returns: list[tuple[int, int]] = field(default_factory=list)
    # (first, last) line of blocks under a condition (if/else, except, case; not loop bodies): what a caller can
    # count on a call to do leaves these out (summaries.py).
    guarded: list[tuple[int, int]] = field(default_factory=list)
    # (first, last, names) of each `if` body and `else` arm: the names and attribute paths its test reads
    # (`if all_reduce_group is not None:` -> ("all_reduce_group",)), so that two blocks under tests of unrelated
    # names can be told apart (guards.py). Detailed files only: guards.py reads them in a function with stream
    # regions, which plain files never have.
    guard_tests: list[tuple[int, int, tuple[str, ...]]] = field(default_factory=list)
    # (first, last) line of `for` and `while` loops: what a launch leaves to the next iteration (SC105).
    loops: list[tuple[int, int]] = field(default_factory=list)
    # (local, container path, line): `data = self._context.batches.pop(k)` takes an element out of a container
    # another function may have filled on a side stream (free_after_handoff.py).
    taken: list[tuple[str, str, int]] = field(default_factory=list)
    # (local, line): a local of `taken` bound again to something else (`event = self.s1.record_event()` after
    # `tensor, event = self._fwd_stash.pop(k)`): from that line on it is not the container's element
    # (orderings.event_id).
    rebound: list[tuple[str, int]] = field(default_factory=list)
    # (local, path, line): a local bound to elements or a view of another path (`for op in self.recv_ops`,
    # `local = [op for op in self.ops if ...]`, `view = req.dest[a:b]`), or made a view of its memory
    # (`local.set_(path.untyped_storage(), ...)`, `local.data = path`): what is written through the local is
    # written into that path (outside_consumers.py).
    derived: list[tuple[str, str, int]] = field(default_factory=list)
    # (local, path, line): from `line` on, the local is another name for an attribute path (`cur = self._cur`,
    # bindings.py `_through_container`); path "" from where it is bound to something else. A call the local is
    # handed to touches that attribute (summaries.bound_accesses).
    attribute_names: list[tuple[str, str, int]] = field(default_factory=list)
    # What travels through calls (call_values.py), detailed files only: (local, line, column) of a local bound to
    # the result of the call at (line, column); the locals `return` hands back (`return state`, `return a, b`);
    # (name, container path, line) for a local or parameter kept in a container of `self` (`self._tensors[tag] =
    # tensor`, `self._queue.append(x)`); the containers of `self` an element is returned out of
    # (`return self._tensors.pop(k)`).
    call_results: list[tuple[str, int, int]] = field(default_factory=list)
    returned: list[str] = field(default_factory=list)
    # (op, flag parameter) of each `return` that hands back a new tensor a kernel makes on the function's current
    # stream (`return batch.to(device, non_blocking=non_blocking)`): with a flag parameter the copy is asynchronous
    # only where a caller passes `True` for it (call_values.py).
    made_results: list[tuple[str, str]] = field(default_factory=list)
    keeps: list[tuple[str, str, int]] = field(default_factory=list)
    hands_out: list[str] = field(default_factory=list)
    # The attribute of `self` every `return` of an accessor hands back (`return self.gpu_chunk`: ["gpu_chunk"]);
    # one name per return, empty when any return gives something else (call_values.py reads a call of it as a
    # read of that attribute of the receiver).
    hands_back: list[str] = field(default_factory=list)
    # The access path each `return` hands back as written, "" for a return of anything else (`return
    # group.hsdp_wbuf`; "self" for `return self.data[a:b]`, a view of the object's own tensor: a call of such an
    # accessor reads its receiver, call_values.py).
    returned_paths: list[str] = field(default_factory=list)
    # (line, column) of every `return <value>` and `yield <value>` statement: where the caller gets what the function
    # made (an exported IPC buffer goes out to another process from there: cross_process.py).
    hand_backs: list[tuple[int, int]] = field(default_factory=list)
    # (callee, tensor path, line, column) of each blocking collective on a tensor the function made on the host and
    # reads on the host after it (`flag = torch.tensor([ok])`, `dist.all_reduce(flag, group=g)`, `flag.item()`): an
    # agreement that lets the other ranks go on like a host barrier (extract_host_collectives.py, cross_process.py).
    host_collectives: list[tuple[str, str, int, int]] = field(default_factory=list)
    # (path, line, until) of each binding of a local or `self.` path to a ProcessGroup named a device group
    # (`group = get_tp_group().device_group`: vLLM's NCCL group of a coordinator); the path holds it from `line` up
    # to the next binding of it at line `until` (0: to the function's end). A barrier over it is NCCL's
    # (cross_process.py).
    device_groups: list[tuple[str, int, int]] = field(default_factory=list)
    # (how, container, element, others, line, column): containers keeping tensors with an event, the drops of
    # their elements and the waits on those events (extract_keeps.py, kept_with_events.py).
    kept_events: list[tuple[str, str, str, str, int, int]] = field(default_factory=list)
    # How values move between locals, containers, calls and returns (extract_handle_flow.py; rows as lists):
    # what the handle-flow query (handle_flow.py) follows async handles through.
    handle_flow: list[list] = field(default_factory=list)
    # (inner, outer, line, slot): the local `inner` is an element of the local container `outer` (slot -1), or the
    # slot-th part of a tuple element of it (`outer.append((a, b))`, `for a, b in outer`): extract_elements.py,
    # element_flow.py.
    elements: list[tuple[str, str, int, int]] = field(default_factory=list)
    # A Triton kernel (`@triton.jit` at module level), in any file: its accesses are the stores and loads through
    # its parameters (streamcheck/triton_kernels.py), which a launch from another file binds to its arguments
    # (callgraph.py resolves `kernel[grid](...)` to it; summaries.py).
    kernel: bool = False
    # (attribute, class text) of each `self.<attribute> = <parameter>` whose parameter is annotated with a class
    # (`self.embedding_method = embedding_method`, `embedding_method: "EmbeddingMethod"`): calls of
    # `self.<attribute>.m(...)` run that class family's `m` (callgraph.py).
    attribute_classes: list[tuple[str, str]] = field(default_factory=list)

    _parts = {
        "calls": Call, "accesses": Access, "syncs": Sync, "regions": Region, "uses": Use, "placements": Placement,
        "async_copies": AsyncCopy, "async_works": AsyncWork, "handed_works": AsyncWork,
    }

    def to_dict(self) -> dict[str, Any]:
        """The function's facts for the facts cache: the identity fields, and every other field that is not empty
        (most of a function's 40-odd lists are: writing only the others makes DeepSpeed 0.19.8's cache a third
        smaller, and from_dict need not build the empty ones). Each fact is a row of its field values."""
        # (every extracted file's functions go through here into the facts cache: the field names and the rows'
        # getters are looked up once, not per function and fact; vLLM 0.33.0: 0.56 s -> 0.31 s)
        data: dict[str, Any] = {}
        rows = _row_getters()
        for name in _field_names(FunctionFacts):
            value = getattr(self, name)
            if not value and name not in _IDENTITY:
                continue
            getter = rows.get(name)
            data[name] = value if getter is None else [list(getter(item)) for item in value]
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "FunctionFacts":
        """The inverse of to_dict (a field the entry lacks takes its default)."""
        convert = _from_json()
        return cls(**{key: convert[key](value) for key, value in data.items() if key in convert})  # (older keys: dropped)


@dataclass(frozen=True)
class ClassFacts:
    qualname: str
    bases: tuple[str, ...]  # dotted source text of each base
    line: int


@dataclass(frozen=True)
class AttrFunction:
    """`obj.<attr> = <function>`: later calls of `<anything>.<attr>(...)` may run that function.

    Or a forwarding lambda stored on an object of a known class (`opt.step = lambda c=None: step(opt, c)`, `opt:
    "Stage3"`; or on `self`): an instance override, so calls of `self.<attr>(...)` in that class family run
    `function` with the lambda's call arguments (`args`, in which `params` name the call's arguments and
    `receiver` the object) (callgraph.py)."""

    attr: str
    function: str  # qualname in this file, or an imported dotted name
    line: int
    receiver: str = ""  # a forwarder's object: `self` or a parameter name
    receiver_class: str = ""  # ... its class: the enclosing class of `self`, or the parameter's annotation text
    params: tuple[str, ...] = ()  # ... the lambda's parameters
    args: tuple[str, ...] = ()  # ... the argument texts of the call the lambda makes (Call.args' form)


@dataclass
class FileFacts:
    path: str
    module: str  # dotted module name guessed from the path (`deepspeed.runtime.zero.partition_parameters`)
    is_package: bool  # an `__init__.py`
    detailed: bool  # accesses, syncs and regions were extracted (the file passed the token prefilter)
    imports: dict[str, str] = field(default_factory=dict)  # local name -> dotted target (`.x` / `..y`: relative)
    star_imports: list[str] = field(default_factory=list)
    classes: list[ClassFacts] = field(default_factory=list)
    functions: list[FunctionFacts] = field(default_factory=list)
    attr_functions: list[AttrFunction] = field(default_factory=list)
    lines: dict[int, str] = field(default_factory=dict)  # stripped text of every line a fact points at

    def snippet(self, line: int) -> str:
        return self.lines.get(line, "")

    def to_dict(self) -> dict[str, Any]:
        data = {f.name: getattr(self, f.name) for f in fields(self) if f.name not in ("functions", "lines")}
        data["classes"] = [_row(c) for c in self.classes]
        data["attr_functions"] = [_row(a) for a in self.attr_functions]
        data["functions"] = [fn.to_dict() for fn in self.functions]
        data["lines"] = {str(k): v for k, v in self.lines.items()}
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "FileFacts":
        return cls(
            path=data["path"],
            module=data["module"],
            is_package=data["is_package"],
            detailed=data["detailed"],
            imports=dict(data.get("imports", {})),
            star_imports=list(data.get("star_imports", ())),
            classes=[_build(ClassFacts, c) for c in data.get("classes", ())],
            functions=[FunctionFacts.from_dict(f) for f in data.get("functions", ())],
            attr_functions=[_build(AttrFunction, a) for a in data.get("attr_functions", ())],
            lines={int(k): v for k, v in data.get("lines", {}).items()},
        )


def exclusive(facts: FunctionFacts, first: int, second: int) -> bool:
    """Whether lines `first` and `second` are in the two arms of one if/else: code in one never runs with the
    other (an ordering in one arm orders nothing for the other's code)."""
    for body_start, body_end, else_start, else_end in facts.branches:
        if body_start <= first <= body_end and else_start <= second <= else_end:
            return True
        if else_start <= first <= else_end and body_start <= second <= body_end:
            return True
    return False


def quick_init(kind: type) -> type:
    """Give a frozen dataclass an `__init__` that stores its fields in the instance's `__dict__` (the generated one
    calls `object.__setattr__` for every field): a Use takes 0.68 us instead of 1.68 with one `object.__setattr__`
    bound once (and more with the generated one, which looks it up for every field), and the facts pass
    makes about 900 k facts on vLLM 0.33.0 (most uses are dropped again at the end of their file). The same
    parameters, defaults and frozen instances."""
    if hasattr(kind, "__post_init__") or any(f.default_factory is not MISSING or not f.init or f.kw_only
                                              for f in fields(kind)):
        return kind  # the generated one knows those; these facts have none
    names = [f.name for f in fields(kind)]
    defaults = {f"_default_{f.name}": f.default for f in fields(kind) if f.default is not MISSING}
    parameters = ", ".join(f"{n}=_default_{n}" if f"_default_{n}" in defaults else n for n in names)
    # (into the instance's __dict__ directly, as pickle restores it: a frozen dataclass only guards __setattr__)
    body = "\n    _d = self.__dict__" + "".join(f"\n    _d[{n!r}] = {n}" for n in names)
    namespace = {**defaults}
    exec(f"def __init__(self, {parameters}):{body}", namespace)
    namespace["__init__"].__qualname__ = f"{kind.__qualname__}.__init__"
    kind.__init__ = namespace["__init__"]
    return kind


for _kind in (Call, Access, Sync, Region, Use, Placement, AsyncCopy, AsyncWork, ClassFacts, AttrFunction):
    quick_init(_kind)

def _row(item) -> list:
    """A fact as a list of its field values, in field order: half the size of a dict in the facts cache."""
    return [getattr(item, name) for name in _field_names(type(item))]


def _row_getters() -> dict[str, Callable[[Any], tuple]]:
    """FunctionFacts field -> a getter of its facts' field values as a tuple (`_row`'s values), for the fact lists."""
    if not _ROW_GETTERS:
        for key, kind in FunctionFacts._parts.items():
            names = _field_names(kind)
            _ROW_GETTERS[key] = attrgetter(*names) if len(names) > 1 else (lambda item, n=names[0]: (getattr(item, n),))
    return _ROW_GETTERS


_ROW_GETTERS: dict[str, Callable[[Any], tuple]] = {}

# FunctionFacts' identity: always written to the cache, even when empty or false.
_IDENTITY = frozenset({"qualname", "name", "cls", "line", "end_line"})


def _tuples(rows: list) -> list[tuple]:
    return [tuple(row) for row in rows]


def _from_json() -> dict[str, Callable[[Any], Any]]:
    """FunctionFacts field -> what makes its value out of the JSON of to_dict (lists where the facts hold tuples).
    A field not here is a list of tuples (_tuples)."""
    if not _FROM_JSON:
        keep = lambda value: value  # noqa: E731 - identity fields; JSON's own lists and dicts are fresh
        _FROM_JSON.update(dict.fromkeys(_IDENTITY, keep))
        _FROM_JSON.update(dict.fromkeys(
            ("params", "tensor_params", "self_assigns", "returned", "hands_out", "hands_back", "returned_paths"), list))
        _FROM_JSON["outer_names"] = dict
        _FROM_JSON["stream_aliases"] = lambda value: {key: list(names) for key, names in value.items()}
        _FROM_JSON["guard_tests"] = lambda value: [(first, last, tuple(names)) for first, last, names in value]
        _FROM_JSON["handle_flow"] = lambda value: [list(row) for row in value]
        _FROM_JSON["kernel"] = bool
        for key, kind in FunctionFacts._parts.items():
            _FROM_JSON[key] = lambda value, kind=kind: [_build(kind, item) for item in value]
        for name in _field_names(FunctionFacts):
            _FROM_JSON.setdefault(name, _tuples)
    return _FROM_JSON


_FROM_JSON: dict[str, Callable[[Any], Any]] = {}


def _build(kind: type, row: list | dict):
    """The inverse of `_row`; rows from older caches may lack trailing fields, which then take their defaults
    (and may be dicts by field name)."""
    if isinstance(row, dict):
        names = _field_names(kind)
        return kind(**{k: tuple(v) if isinstance(v, list) else v for k, v in row.items() if k in names})
    return kind(*(tuple(v) if isinstance(v, list) else v for v in row))


def _field_names(kind: type) -> tuple[str, ...]:
    names = _FIELD_NAMES.get(kind)
    if names is None:
        names = _FIELD_NAMES[kind] = tuple(f.name for f in fields(kind))
    return names


_FIELD_NAMES: dict[type, tuple[str, ...]] = {}


def module_name(path: str) -> tuple[str, bool]:
    """`a/b/c.py` -> ("a.b.c", False); `a/b/__init__.py` -> ("a.b", True). Leading `./` and `..` are dropped."""
    parts = [p for p in path.replace("\\", "/").split("/") if p not in ("", ".", "..")]
    if not parts:
        return "", False
    last = parts[-1]
    if last.endswith(".pyi"):
        last = last[:-4]
    elif last.endswith(".py"):
        last = last[:-3]
    is_package = last == "__init__"
    parts = parts[:-1] if is_package else parts[:-1] + [last]
    return ".".join(parts), is_package


def needs_detail(source: str, options: StaticOptions) -> bool:
    """Whether the file gets the detailed facts pass; the rest only feed the call graph (prefilter.py)."""
    from .prefilter import needs_detail as mentions_streams

    return mentions_streams(source, options)


def extract_facts(source: str, path: str, options: StaticOptions) -> FileFacts:
    """Parse `source` once and return its facts. Raises ParseFailure on invalid Python."""
    from .extract import extract

    return extract(source, path, options, detailed=needs_detail(source, options))
