"""The facts pass's calls and tensor accesses: each call recorded, and in detailed files the syncs it makes and the
tensors it reads or writes. A part of extract.py's visitor."""

from __future__ import annotations

import ast
import builtins

from .collectives import TENSOR_KEYWORDS, Outputs, outputs_of
from .extract_names import (
    BLOCKING_HOST_METHODS,
    HOST_DATA_FACTORIES,
    HOST_ONLY_FUNCTIONS,
    HOST_ONLY_METHODS,
    METADATA_ARG_FUNCTIONS,
    METADATA_ARG_METHODS,
    METADATA_METHODS,
    STORING_METHODS,
    VIEW_METHODS,
)
from .extract_paths import NO_PATH_NAMES, access_path, arg_text, dotted, elements, index_of
from .facts import MODULE_SCOPE, Access, Call, Sync
from .options import matches_name
from .torch_api import INIT_FUNCTIONS, TENSOR_INPLACE_METHODS, TENSOR_METHODS

PYTHON_BUILTINS = frozenset(name for name in dir(builtins) if not name.startswith("_"))
SYNC_ARG_KEYWORDS = ("stream", "event")  # `Event.record(stream=)`, `Stream.wait_event(event=)`, `wait_stream(stream=)`
HOST_CHECKS = ("log", "warn", "print", "assert")  # callee names (less leading `_`) that only look at their arguments
_NAME, _CONSTANT = ast.Name, ast.Constant


class CallsAndAccesses(ast.NodeVisitor):
    """The visitor's methods for calls and accesses; they use the visitor's state (extract.py `_FactsVisitor`):
    `facts`, `fn`, `region`, `blocks`, `frames`, `detailed`, the option name sets, `_keep_line`."""

    def visit_Call(self, node: ast.Call) -> None:
        func = node.func
        if func.__class__ is _NAME:
            callee = func.id
        else:  # (a detailed file's hazard collector has just spelled it: extract_hazards.py `_call`)
            seen, callee = self.callee_of
            if seen is not node:
                callee = dotted(func)
        # (one loop over the arguments, not five generators, and the common arguments, a name or a constant, told
        # apart here without _function_value and arg_text: a call's facts are made for every call of every file,
        # 150 000 in vLLM 0.33.0's plain files alone)
        func_args, args, true_args = [], [], []
        some_path = False  # whether an argument is a path (else `args` is empty)
        for i, a in enumerate(node.args):
            kind = a.__class__
            if kind is _NAME:  # `f(x)`: hands x over, and its path is its name (none for self or cls)
                func_args.append(a.id)
                text = "" if a.id in NO_PATH_NAMES else a.id
            elif kind is _CONSTANT:
                text = ""
                if a.value is True:
                    true_args.append(str(i))
            else:
                if text := _function_value(a):
                    func_args.append(text)
                text = arg_text(a)
            some_path = some_path or bool(text)
            args.append(text)
        for k in node.keywords:
            if k.arg:
                value = k.value
                kind = value.__class__
                if kind is _NAME:
                    text = "" if value.id in NO_PATH_NAMES else value.id
                elif kind is _CONSTANT:
                    text = ""
                else:
                    text = arg_text(value)
                some_path = some_path or bool(text)
                args.append(f"{k.arg}={text}")
        for k in node.keywords:
            if k.arg and k.value.__class__ is _CONSTANT and k.value.value is True:
                true_args.append(k.arg)
        line = node.lineno
        self.fn.calls.append(Call(line, node.col_offset + 1, callee, self.region, self.blocks[-1],
                                  tuple(func_args), tuple(args) if some_path else (), tuple(true_args)))
        kept = self.facts.lines
        if line not in kept and 0 < line <= len(self.src_lines):  # (_keep_line, inlined)
            kept[line] = self.src_lines[line - 1].strip()
        if self.detailed:
            self._call_facts(node, callee)
        self.generic_visit(node)

    def _call_facts(self, node: ast.Call, callee: str) -> None:
        method = node.func.attr if node.func.__class__ is ast.Attribute else None
        if method:  # (callee is `dotted(node.func)`: the receiver's text, a dot and the method)
            last, receiver = method, callee[:-len(method) - 1]
        else:
            last, receiver = callee.rsplit(".", 1)[-1], ""
        line, col = node.lineno, node.col_offset + 1
        sync_kind = self._sync_kind(node, callee, method, receiver)
        if sync_kind:
            # `ev.record(stream=s)`, `s.wait_event(event=ev)`: the keyword spellings of the one argument
            named = next((k.value for k in node.keywords if k.arg in SYNC_ARG_KEYWORDS), None)
            arg = dotted(node.args[0]) if node.args else dotted(named) if named is not None else ""
            if method == "record_event":
                # `s.record_event()` records a new event on s: the event is the call's value (named by the
                # assignment that takes it, bindings.py), the stream its argument; `s.record_event(ev)` records ev
                receiver, arg = (arg, receiver) if arg else (dotted(node), receiver)
            self.fn.syncs.append(
                Sync(sync_kind, receiver, line, col, arg, self.region, self.blocks[-1], method or last))
            self._note_outer_name(receiver)
            self._note_outer_name(arg)
        on_module = receiver.split(".", 1)[0] in self.facts.imports  # `torch.add(...)`, `dist.all_reduce(...)`
        tensor_method = bool(method) and not on_module and method in TENSOR_METHODS
        if method and on_module:
            if method in INIT_FUNCTIONS and node.args:  # `torch.nn.init.xavier_uniform_(w)` writes `w`
                self._access("write", node.args[0], line, col, method)
        elif method in TENSOR_INPLACE_METHODS:
            self._access("write", node.func.value, line, col, method)
        elif tensor_method and method not in METADATA_METHODS and method not in VIEW_METHODS and not sync_kind \
                and method not in METADATA_ARG_METHODS and not _to_meta(node, method):
            self._access("read", node.func.value, line, col, method)
        for kw in node.keywords:
            if kw.arg == "out":
                for elt in elements(kw.value):
                    self._access("write", elt, line, col, "out=")
        if method in STORING_METHODS and len(node.args) == 1 and isinstance(node.args[0], ast.Name):
            # `events.append(event)`: kept only if `event` turns out to be recorded here (_drop_unrecorded_stores)
            self.fn.syncs.append(Sync("store", receiver, line, col, node.args[0].id, self.region, self.blocks[-1],
                                      method))
            self._note_outer_name(receiver)
            if receiver.startswith("self.") and receiver.count(".") == 1:  # kept for call_values.py
                self.fn.keeps.append((node.args[0].id, receiver, line))
        host_only = callee in HOST_ONLY_FUNCTIONS or (method in HOST_ONLY_METHODS and not on_module)
        if host_only or sync_kind:
            return
        if matches_name(callee, self.stream_names) or last in ("Stream", "Event", "current_stream"):
            return  # naming a stream or event touches no tensor
        if last in HOST_DATA_FACTORIES and self._is_torch_function(callee):
            return  # `torch.tensor(values)`: Python numbers or host arrays copied in, no device read
        if method in METADATA_ARG_METHODS or last in METADATA_ARG_FUNCTIONS or (tensor_method and (method in (
                "to", "cuda", "type") or method in VIEW_METHODS)):
            return  # `x.view_as(z)`, `torch.empty_like(z)`, `x.to(z)`: only z's shape, dtype and device are looked at
        collective = matches_name(callee, self.collectives)
        if not collective and self._is_distributed(callee):
            return  # `dist.get_world_size(group)`, `dist.barrier()`: process groups and ranks, no tensor data
        if isinstance(node.func, ast.Subscript):
            self._launched(node, line, col, callee)
            return
        if not (collective or tensor_method or self._is_torch_function(callee)):
            self._handed_off(node, line, col, last)
            return  # a hand-off to other code: what the callee does with it is the callee's (summaries.py)
        # The table's argument positions are those of the communication libraries' functions (`dist.x`, a name
        # imported from one); a method of the same name (`params.all_gather_coalesced()`) has its own.
        written = outputs_of(callee) if collective and (
            "." not in callee or callee.split(".", 1)[0] in self.facts.imports) else None
        for position, arg in enumerate(node.args):
            if written and position >= written.tensor_positions:
                break  # `dist.all_reduce(t, op, group)`: the rest are no tensors
            self._argument(arg, line, col, last, collective, written, position in written.positions if written
                           else False)
        for kw in node.keywords:
            if kw.arg not in (None, "out") and (not collective or kw.arg in TENSOR_KEYWORDS):
                self._argument(kw.value, line, col, last, collective, written,
                               kw.arg in written.keywords if written else False)

    def _launched(self, node: ast.Call, line: int, col: int, callee: str) -> None:
        """`kernel[grid](x, out, n, ...)`: a Triton (or Numba) kernel launched on the current stream reads its tensor
        arguments: parameters annotated as tensors, locals this function wrote and locals taken out of an
        attribute's container (`out, done = self._buffers[k]`; ints and strides are no tensors). A kernel of this
        file also writes the arguments its body stores through (streamcheck/triton_kernels.py), any tensor path."""
        tensors = self.tensor_params.get(id(self.fn), set()) | self.written_locals.get(id(self.fn), set()) | set(
            self.taken_from.get(id(self.fn), ()))  # (an element of an attribute's container: `_access` reads it so)
        kernel = node.func.value if isinstance(node.func, ast.Subscript) else None
        written = self.kernels[kernel.id].written_arguments(node) if isinstance(kernel, ast.Name) \
            and kernel.id in self.kernels else []
        for arg in node.args:
            if isinstance(arg, ast.Name) and arg.id in tensors and not any(arg is w for w in written):
                self._access("read", arg, line, col, callee)
        for arg in written:  # (an output is stored, not read: a read here would pair with the launch's own write)
            self._access("write", arg, line, col, callee)

    def _handed_off(self, node: ast.Call, line: int, col: int, callee: str) -> None:
        """A local this function wrote, handed to other code (`self._module.compute(ctx, data)`): read by it on
        the stream current at the call. Only locals written here (a kernel's output, an awaited result), so the
        pair stays in this function; never a builtin (`len(x)`, `isinstance(x, T)`), a logger, or a constructor
        (`Batch(x, y)` stores them for whoever takes the object: the hand-off is that one's)."""
        receiver = dotted(node.func.value).rsplit(".", 1)[-1] if isinstance(node.func, ast.Attribute) else ""
        name = callee.rsplit(".", 1)[-1].lstrip("_")  # `_assert_in_training_states(state, ...)` checks on the host
        if callee in PYTHON_BUILTINS or callee.lstrip("_")[:1].isupper() or receiver in ("logger", "logging") \
                or name.startswith(HOST_CHECKS):
            return
        # ... and locals taken out of a container that another function filled (torchrec's
        # `data = self._context.module_input_post_prefetch.pop(name)`): read as that container (_access).
        written = self.written_locals.get(id(self.fn), set())
        taken = self.taken_from.get(id(self.fn), ())
        # ... and parameters annotated as nothing but a tensor: code that gets one reads it (DeepSeek's `with
        # torch.cuda.stream(stream): tf32_hc_prenorm_gemm(x, ...)`, and that wrapper's `_impl(x, ...)`), so the
        # caller's producer pairs with the read (outside_producers.py)
        written = written | self.only_tensor_params.get(id(self.fn), set())
        if not written and not taken:
            return
        for arg in list(node.args) + [k.value for k in node.keywords if k.arg]:
            if isinstance(arg, ast.Name) and (arg.id in written or arg.id in taken):
                self._access("read", arg, line, col, callee)

    def _argument(self, arg: ast.AST, line: int, col: int, op: str, collective: bool, written: Outputs | None,
                  is_output: bool) -> None:
        """A device op's argument: read; a collective's output written (and read too when it works in place)."""
        for elt in elements(arg):
            if not is_output or written.in_place:
                self._access("read", elt, line, col, op, collective)
            if is_output:
                self._access("write", elt, line, col, op, collective)

    def _is_distributed(self, callee: str) -> bool:
        head, _, rest = callee.partition(".")
        target = f"{self.facts.imports.get(head, head)}.{rest}"
        return target.startswith("torch.distributed.") and target.count(".") == 2

    def _is_torch_function(self, callee: str) -> bool:
        """`torch.cat`, `F.linear` (F imported from torch), `cat` imported from torch: a device op on its args."""
        head = callee.split(".", 1)[0]
        target = self.facts.imports.get(head, "")
        if callee.rsplit(".", 1)[-1].lstrip("_").startswith(HOST_CHECKS):
            return False  # torch's own helpers (`_assert_in_training_states(state, ...)` in FSDP): host checks
        return target == "torch" or target.startswith("torch.")

    def _sync_kind(self, node: ast.Call, callee: str, method: str | None, receiver: str) -> str:
        last = callee.rsplit(".", 1)[-1]
        if last == "wait_stream":
            return "wait_stream"
        if last == "wait_event" or (last == "wait" and "event" in receiver.lower()):
            return "wait_event"
        if matches_name(callee, self.sync_callables):
            return "synchronize"
        if last in ("record", "record_event") and method:
            return "record"
        if last == "record_stream":
            return "record_stream"
        if method in BLOCKING_HOST_METHODS and not any(k.arg == "non_blocking" for k in node.keywords):
            return "host_sync"
        if method == "wait" and receiver and not receiver.split(".", 1)[0] in self.facts.imports:
            return "wait"
        return ""

    def _access(self, kind: str, expr: ast.AST, line: int, col: int, op: str, collective: bool = False,
                at: tuple[int, int] | None = None, fresh: bool = False) -> None:
        path = access_path(expr)
        if path is None:
            return
        root, dot, rest = path.partition(".")
        alias = self.aliases.get(id(self.fn), {}).get(root)
        if alias and (collective or op in TENSOR_METHODS or op == "out="):
            # a local bound to an attribute path (bindings.py `_through_container`), where only a tensor can
            # stand: not an argument of other calls (`torch.empty(n, d)` with `n = self.batch.num_reqs`)
            path = alias + dot + rest if rest else alias
            root, dot, rest = path.partition(".")
        container = self.taken_from.get(id(self.fn), {}).get(root)
        if container:  # taken out of an attribute's container (bindings.py `_through_container`)
            path = container + dot + rest if rest else container
        if at is None and isinstance(expr, ast.AST) and hasattr(expr, "lineno"):
            line, col = expr.lineno, expr.col_offset + 1
        owner = self._owner(path) if "." not in path else ""
        if kind == "write" and "." not in path:
            self.written_locals.setdefault(id(self.fn), set()).add(path)  # for _handed_off, without a scan
        self.fn.accesses.append(
            Access(kind, path, line, col, op, self.region, collective, owner, index_of(expr), fresh))
        self._keep_line(line)

    def _owner(self, name: str) -> str:
        """The scope a plain name belongs to when the current function does not bind it ("" when it does)."""
        if len(self.frames) == 1 or name in self.frames[-1][1]:
            return ""
        for qualname, bound in reversed(self.frames[:-1]):
            if name in bound:
                return qualname
        return ""

    def _note_outer_name(self, text: str) -> None:
        """FunctionFacts.outer_names: the root of a sync's receiver or argument, when an enclosing function (not
        the module) binds it."""
        root = text.split(".", 1)[0].split("[", 1)[0]
        owner = self._owner(root) if root.isidentifier() and root not in ("self", "cls") else ""
        if owner and owner != MODULE_SCOPE:
            self.fn.outer_names[root] = owner

    def visit_Name(self, node: ast.Name) -> None:
        # (extract.py's generic_visit of detailed files inlines this for the names it visits: change both)
        if not isinstance(node.ctx, ast.Load):
            self.frames[-1][1].add(node.id)

    def visit_BinOp(self, node: ast.BinOp) -> None:
        if self.detailed:
            for operand in (node.left, node.right):
                self._access("read", operand, node.lineno, node.col_offset + 1, type(node.op).__name__)
        self.generic_visit(node)


def _function_value(node: ast.AST) -> str:
    """The function an argument may hand over, as text: a name or attribute (`hook`, `self._post_forward`), or the
    function a `functools.partial(f, ...)` binds (`register_hook(functools.partial(_post_backward_hook, state,
    handle))` hands over `_post_backward_hook`); "" for anything else."""
    if isinstance(node, ast.Call) and dotted(node.func).rsplit(".", 1)[-1] == "partial" and node.args:
        node = node.args[0]
    if isinstance(node, (ast.Name, ast.Attribute)) and (text := dotted(node)) != "?":
        return text
    return ""


def _to_meta(node: ast.Call, method: str) -> bool:
    """`x.to("meta")`, `x.to(device="meta")`: a tensor of the same shape on no device; no data is read."""
    if method != "to":
        return False
    values = list(node.args[:1]) + [k.value for k in node.keywords if k.arg == "device"]
    return any(isinstance(v, ast.Constant) and v.value == "meta" for v in values)
