"""Reads on a side stream of tensors whose producer the scan does not see: the producer is taken to be the current
stream, before the function that reads was called.

Two kinds of tensor have such a producer:
- gradients (`p.grad`, `p.main_grad`): written by the backward pass, on the stream that was current when it ran;
- tensors a function gets from outside (a parameter's path, or a `self.` attribute) that nothing in the scanned
  program writes: they were made by code the scan does not hold (a caller in a user's script, a model's forward,
  a library). On the current stream is where all such code runs unless it says otherwise.
A side stream that reads one needs to wait for the current stream first, somewhere on the reader's way (before the
read, before the `with`, before the call that reaches it, or in a caller before that). One finding per stream
region, naming its first such read and up to `MAX_READS_SHOWN` more.
"""

from __future__ import annotations

from typing import Iterable, NamedTuple

from streamcheck.findings import ROLE_READ, Finding

from .aliasing import from_outside
from .extract_names import NOT_TENSOR_WORDS
from .facts import Access
from .hazard_flow import HOST_WORDS
from .orderings import COMM, WORK, orderings_of
from .program import Function, Program
from .races import Context, contexts, matching, may_leave_the_current_stream, ordered_before
from .rule import location, way_of
from .streams import CURRENT_STREAM, UNKNOWN, as_code, display, stream_words
from .torch_api import TORCH_CALLABLES

MAX_READS_SHOWN = 3

# Attributes that autograd writes (on the stream current when backward ran) before hooks and optimizers read them.
AUTOGRAD_OUTPUTS = frozenset({"grad", "main_grad"})
AUTOGRAD, OUTSIDE = "autograd", "outside"
# Tensor methods that queues, containers and modules have too: a read by one of them does not say the path holds a
# tensor (a pairing with a write says so; a read alone does not).
NOT_ONLY_TENSOR_METHODS = frozenset({
    "put", "add", "sort", "index", "count", "values", "type", "float", "half", "double", "bfloat16", "apply_",
    "share_memory_", "requires_grad_", "register_hook", "pin_memory", "copy",
})
# Tensor methods whose arguments are tensors (the source of a copy), unlike `x.div_(self.factor)`.
TENSOR_ARGUMENT_METHODS = frozenset({"copy_", "set_", "index_copy_", "masked_scatter_", "lerp_", "addcmul_",
                                     "addcdiv_", "matmul", "mm", "bmm"})
# Tensor methods whose argument can only be a tensor (the source of a copy): what they read is a tensor whatever its
# name says (`host[:n].copy_(valid_sampled_tokens_count)`).
TENSOR_SOURCE_METHODS = frozenset({"copy_", "set_"})
# Operators: `self.count + n` reads ints as often as tensors.
ARITHMETIC = frozenset({"Add", "Sub", "Mult", "Div", "FloorDiv", "Mod", "Pow", "MatMult", "BitAnd", "BitOr",
                        "BitXor", "LShift", "RShift", "+", "-", "*", "/", "//", "%", "**", "@"})
# Copies whose source, when it comes from outside, is taken as host memory being uploaded (a prefetcher's batch).
UPLOADS = frozenset({"to", "cuda", "pin_memory"})


class OutsideRead(NamedTuple):
    reader: Function
    read: Access
    context: Context
    producer: str  # AUTOGRAD or OUTSIDE


def reads_of_outside_producers(program: Program, rule_id: str) -> Iterable[Finding]:
    by_region: dict[tuple, list[OutsideRead]] = {}
    for reader, read in program.all_accesses():
        if read.kind != "read" or not may_leave_the_current_stream(program, reader, read):
            continue  # (every context below would be the current stream's)
        producer = _producer(program, reader, read)
        if producer is None:
            continue
        for ctx in contexts(program, reader, read):
            if ctx.stream in (CURRENT_STREAM, UNKNOWN) or not all(edge.exact for edge in ctx.chain):
                continue  # no producer site to pair with: only a chain the call graph is sure of
            if producer == OUTSIDE and ctx.chain and not read.path.startswith("self."):
                continue  # a callee's parameter is its caller's argument: judged at the call (a bound access)
            if ordered_before(program, ctx, CURRENT_STREAM) or _collective_waited_before(program, reader, read):
                continue  # a `fut.wait()` / `work.wait()` first (a DDP comm hook): the data came through a
                # collective launched after the producer
            if _produced_here_first(reader, read):
                continue
            region_fn = ctx.region_fn or reader
            key = (region_fn.id, ctx.region, ctx.stream, producer)
            by_region.setdefault(key, []).append(OutsideRead(reader, read, ctx, producer))
            break
    for reads in by_region.values():
        yield _finding(program, rule_id, sorted(reads, key=lambda r: (len(r.context.chain), r.reader.file.path,
                                                                      r.read.line, r.read.column, r.read.op)))


def _producer(program: Program, reader: Function, read: Access) -> str | None:
    if "." in read.path and read.path.rsplit(".", 1)[-1] in AUTOGRAD_OUTPUTS:
        return AUTOGRAD
    outside = from_outside(program, reader, read)
    op = read.op.split(" ", 1)[0]
    if op in NOT_ONLY_TENSOR_METHODS or op in ARITHMETIC:
        return None  # `self.queue.put(x)`, `module.float()`: no sign the receiver is a tensor at all
    if not _copied_from(reader, read) and any(word in read.path.rsplit(".", 1)[-1].lower()
                                              for word in NOT_TENSOR_WORDS):
        return None  # `self.dp_process_group`, `world_size` handed down to a collective wrapper
    if _uploads(program, reader, read) or any(word in read.path.rsplit(".", 1)[-1].lower() for word in HOST_WORDS):
        return None  # `batch.to(device)`, `dst.copy_(host_buf)` on a copy stream: host memory, made by no stream
    if outside and _tensor_position(reader, read) and not any(
            not _rebound_later(reader, read, writer, write) and not _same_op(reader, read, writer, write)
            and not _another_objects_field(read, write)
            for writer, write in matching(program, reader, read, "write")):
        return OUTSIDE
    return None


def _another_objects_field(read: Access, write: Access) -> bool:
    """A field of `self` read, and a field of that name bound on another object (`self._model_runner_output.
    pooler_output = ...` in vLLM's other async pooling output): the binding puts a tensor made elsewhere under
    that object's name; it writes no memory, and it is not the producer of the reader's own field. (Two classes'
    own `self.<field>` are told apart where the pairs are made: races.matching.)"""
    return write.op == "=" and write.path.count(".") > 1 and read.path.count(".") == 1 \
        and read.path.split(".", 1)[0] in ("self", "cls")


def _copied_from(reader: Function, read: Access) -> bool:
    """The read is the source of a copy (`host[:n].copy_(counts)`), where only a tensor can stand, not one of its
    keywords (`non_blocking=self.use_streams`)."""
    if read.op.split(" ", 1)[0] not in TENSOR_SOURCE_METHODS:
        return False
    call = _call_holding(reader, read)
    return call is not None and not any(arg.partition("=")[2] == read.path for arg in call.args if "=" in arg)


def _same_op(reader: Function, read: Access, writer: Function, write: Access) -> bool:
    """The read's own op writing the tensor in place (`dist.broadcast(t)`, `t.add_(x)`): it writes after it
    reads, so it is not the producer of what it read."""
    return writer is reader and (write.line, write.column, write.op) == (read.line, read.column, read.op)


def _rebound_later(reader: Function, read: Access, writer: Function, write: Access) -> bool:
    """`activation = activation.clone()` after the read of the parameter: a new tensor under the old name, not
    the producer of what was read (TRL's pack hook)."""
    return (writer is reader and write.fresh and "." not in read.path
            and (write.line, write.column) > (read.line, read.column))


def _uploads(program: Program, reader: Function, read: Access) -> bool:
    """`batch.to(device)`, `x.cuda()`: a copy to the device of what is taken as host memory. (`x.to("cpu")` is a
    download of device memory: a read like any other, also made in a helper the read was bound through: vLLM's
    `async_copy_to_np(x)`, `return x.to("cpu", non_blocking=True).numpy()`.)"""
    op, _, made_in = read.op.partition(" in ")
    if op not in UPLOADS:
        return False
    if made_in:
        return not any(a.op == op and "cpu" in fn.file.lines.get(a.line, "").lower()
                       for fn in _functions_named(program, made_in) for a in fn.facts.accesses)
    return "cpu" not in reader.file.lines.get(read.line, "").lower()


def _functions_named(program: Program, qualname: str) -> list[Function]:
    table = program.memo("outside_producers.by_qualname", lambda: _by_qualname(program))
    return table.get(qualname, [])


def _by_qualname(program: Program) -> dict[str, list[Function]]:
    table: dict[str, list[Function]] = {}
    for fn in program.functions.values():
        table.setdefault(fn.facts.qualname, []).append(fn)
    return table


def _tensor_position(reader: Function, read: Access) -> bool:
    """Read where only a tensor can stand: by a collective, a torch function, as the receiver of a tensor method
    (the call starts where the receiver does), or inside a callee (bound at the call). An argument of a tensor
    method is as often a number (`x.div_(self.factor)`)."""
    op = read.op.split(" ", 1)[0]
    imports = reader.file.imports
    if " in " in read.op or op in TENSOR_ARGUMENT_METHODS:
        return True
    if read.path in reader.facts.tensor_params:
        return True  # a parameter annotated as nothing but a tensor, handed to a kernel wrapper (`gemm(x, w, out)`)
    call = _call_holding(reader, read)
    if read.collective:  # a library's collective (`dist.all_reduce`), not a method of that name on an object
        return call is not None and ("." not in call.callee or call.callee.split(".", 1)[0] in imports)
    receiver = (read.path + ".", read.path + "[")
    if any((c.line, c.column) == (read.line, read.column) and c.callee.startswith(receiver)
           for c in reader.facts.calls):
        return True
    return call is not None and op in TORCH_CALLABLES \
        and imports.get(call.callee.split(".", 1)[0], "").startswith("torch")


def _call_holding(reader: Function, read: Access):
    """The call of the read's op that holds it as an argument: the last one that starts at or before it, on its
    line or, for a call spread over lines (`dist.broadcast(\n    t, src=...)`), passing its path."""
    op = read.op.split(" ", 1)[0]
    calls = [c for c in reader.facts.calls if c.callee.rsplit(".", 1)[-1] == op
             and (c.line, c.column) <= (read.line, read.column)
             and (c.line == read.line or read.path in (a.rsplit("=", 1)[-1] for a in c.args))]
    return max(calls, key=lambda c: (c.line, c.column)) if calls else None


def _collective_waited_before(program: Program, reader: Function, read: Access) -> bool:
    return any((o.target == COMM or o.target.startswith(WORK)) and (o.line, o.column) < (read.line, read.column)
               for o in orderings_of(program, reader))


def _produced_here_first(reader: Function, read: Access) -> bool:
    """Written on the same stream, earlier in the same region: this stream is its producer."""
    return any(w.kind == "write" and w.path == read.path and w.region == read.region
               and (w.line, w.column) < (read.line, read.column) for w in reader.facts.accesses)


def _finding(program: Program, rule_id: str, reads: list[OutsideRead]) -> Finding:
    first = reads[0]
    reader, read, ctx = first.reader, first.read, first.context
    reader_code = as_code(ctx.stream)
    where = (f"before the `with` at {ctx.region_fn.file.path}:{ctx.region_fn.facts.regions[ctx.region].line}"
             if ctx.region_fn is not None else f"before the read at {reader.file.path}:{read.line}")
    if first.producer == AUTOGRAD:
        produced = "is written by autograd (the backward pass) on the current stream"
    else:
        produced = (f"comes from outside `{reader.facts.qualname}` and nothing in the scan writes it, so it was "
                    f"made on the current stream")
    others = [location(r.reader, r.read.line, r.read.column, ROLE_READ, f"{r.read.op} of `{r.read.path}`")
              for r in reads[1:1 + MAX_READS_SHOWN]]
    return Finding(
        rule=rule_id,
        message=(f"`{read.path}` {produced}, and is read by `{read.op}` in `{reader.facts.qualname}` on "
                 f"{stream_words(ctx.stream)} with no wait for the current stream before it"),
        primary=location(reader, read.line, read.column, ROLE_READ, f"{read.op} in {reader.facts.qualname}"),
        related=tuple(others + way_of(program, ctx, ctx)),
        fix=(f"Make `{reader_code}` wait for the current stream before the read: "
             f"`{reader_code}.wait_stream(torch.cuda.current_stream())` {where}."),
        kind="RAW",
        symbol=reader.facts.qualname,
        extra={"path": read.path, "writer_stream": "", "reader_stream": display(ctx.stream),
               "consumer": "collective" if read.collective else "device op", "producer": first.producer},
    )
