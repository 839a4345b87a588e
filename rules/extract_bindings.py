"""The facts pass's bindings: assignments that alias a stream or a context, functions held by attributes
(`self.fn = helper`), attributes a method assigns, and a tensor made by a kernel and bound to a name. A part of
extract.py's visitor."""

from __future__ import annotations

import ast
from dataclasses import replace

from .extract_names import (COPYING_METHODS, HOST_ONLY_FUNCTIONS, NOT_PRODUCERS, NOT_TENSOR_WORDS, PRODUCING_METHODS,
                            VIEW_METHODS)
from .extract_handles import loop_bindings
from .extract_paths import access_path, arg_text, dotted, elements
from .facts import MODULE_SCOPE, NO_REGION, AttrFunction, Sync
from .streams import captures_current
from .torch_api import TORCH_CALLABLES

ALIAS = "="  # the op of a binding recorded as where an attribute's tensor comes from (see visit_Assign)


class Bindings(ast.NodeVisitor):
    """The visitor's methods for bindings; they use the visitor's state (extract.py `_FactsVisitor`): `facts`,
    `fn`, `region`, `defined`, `pending_attr_functions`, `detailed`, `only_tensor_params`, `_scope_name`,
    `_keep_line`, `_access`, `_is_torch_function`."""

    def visit_Assign(self, node: ast.Assign) -> None:
        if self._forwarding_lambda(node):
            return
        self._note_self_assigns(node.targets, node.value)
        if self.detailed and all(isinstance(target, ast.Name) for target in node.targets):
            # (every name of a chained assignment: vLLM's `current = stream = torch.cuda.current_stream()`)
            values = [node.value.body, node.value.orelse] if isinstance(node.value, ast.IfExp) else [node.value]
            for target, value in ((t, v) for t in node.targets for v in values):
                named_stream = "stream" in target.id.lower() and isinstance(value, (ast.Name, ast.Attribute))
                if not named_stream and not self._may_say_stream(value):
                    continue  # its text would not say "stream" (the unparse below is the costly part)
                text = ast.unparse(value)
                if ("stream" in text.lower() or named_stream) and len(text) < 200:  # `stream = self.s1 if ...`
                    self.fn.stream_aliases.setdefault(target.id, []).append(text)
                    self.fn.stream_bindings.append((target.id, node.lineno, text))
        elif self.detailed and len(node.targets) == 1 and dotted(node.targets[0]).count(".") == 1 \
                and dotted(node.targets[0]).startswith("self.") and self._stream_attribute_value(node):
            # every value a stream attribute is bound to, one list per attribute: a capture (`self.s0 =
            # torch.cuda.default_stream()`, streams._current_attribute), a constructor's parameter (`self._stream =
            # stream`, streams.handed_in), a new stream (`self._h2d_stream = torch.cuda.Stream()` after a capture)
            self.fn.stream_aliases.setdefault(dotted(node.targets[0]), []).append(ast.unparse(node.value)[:200])
        if isinstance(node.value, (ast.Name, ast.Attribute)):
            for target in node.targets:
                if isinstance(target, ast.Attribute):
                    self.pending_attr_functions.append(
                        (target.attr, dotted(node.value), self._scope_name(), node.lineno))
        self.generic_visit(node)
        if self.detailed and len(node.targets) > 1:
            for target in node.targets:  # `self._cur = cur = nxt`: `cur` is bound again
                self._unbind_names(target)
        if not self.detailed or len(node.targets) != 1:
            return
        self._name_recorded_event(node.targets[0], node.value)
        self._call_value(node.targets[0], node.value)
        self._packed(node.targets[0], node.value)
        self._through_container(node.targets[0], node.value)
        self._derived(node.targets[0], node.value)
        target, end = node.targets[0], (node.end_lineno or node.lineno, (node.end_col_offset or 0) + 1)
        if self._produces_tensor(node.value):
            # `y = x.to(dev, non_blocking=True)`, `y = torch.cat(...)`: a new tensor written by a kernel on the
            # stream current here (a hidden producer); taken as written where the statement ends.
            # `out, lse = torch.ops.ns.op(...)`: every name unpacked from the result is such a tensor.
            func = node.value.func
            op = func.attr if isinstance(func, ast.Attribute) else dotted(func)
            for name in target.elts if isinstance(target, ast.Tuple) else [target]:
                # `buf[i] = x.to(...)` copies the new tensor into buf's memory: a write, not a fresh binding
                self._access("write", name, *end, op.rsplit(".", 1)[-1], at=end,
                             fresh=not isinstance(name, ast.Subscript))
        elif self._bound_in_region(target, node.value):
            # `self.cached = gather(x)` / `self.cached = out` inside `with stream(s):` keeps a tensor of s's work
            # for later: a binding (op ALIAS) that tells where the attribute's tensor comes from, not a kernel's
            # write any race is paired with.
            self._access("write", target, *end, ALIAS, at=end, fresh=True)
        elif self._awaited_in_region(target, node.value):
            # `data = request.wait()` inside `with stream(s):` (torchrec's input dist): the awaited work ends on s,
            # so what it hands back is s's to order, like a kernel's output.
            self._access("write", target, *end, "wait", at=end, fresh=True)

    def _made_result(self, value: ast.AST) -> tuple[str, str] | None:
        """(op, flag parameter) when a returned value is a new tensor a kernel makes (FunctionFacts.made_results):
        `x.to(d, non_blocking=True)`, `torch.cat(xs)`, or a copy whose `non_blocking` is a parameter (torchrec's
        `_to_device`); `cast(T, v)` is `v`."""
        if isinstance(value, ast.Call) and dotted(value.func).rsplit(".", 1)[-1] == "cast" and len(value.args) == 2:
            value = value.args[1]
        if not isinstance(value, ast.Call):
            return None
        op = dotted(value.func).rsplit(".", 1)[-1]
        if isinstance(value.func, ast.Attribute) and op in COPYING_METHODS:
            flags = [k.value for k in value.keywords if k.arg == "non_blocking"]
            if flags and isinstance(flags[0], ast.Name) and flags[0].id in self.fn.params:
                return op, flags[0].id
        return (op, "") if self._produces_tensor(value) else None

    def _call_value(self, target: ast.AST, value: ast.AST) -> None:
        """What travels through calls (FunctionFacts.call_results, keeps; call_values.py): `state = self.offload(x)`
        binds a call's result; `self._tensors[tag] = tensor` keeps a local or a parameter in a container of `self`."""
        if isinstance(target, ast.Name) and isinstance(value, ast.Call):
            self.fn.call_results.append((target.id, value.lineno, value.col_offset + 1))
        elif isinstance(target, ast.Attribute) and isinstance(value, ast.Call) \
                and dotted(target).startswith("self.") and dotted(target).count(".") == 1:
            # `self._cur_batch = _to_device(...)`: the attribute holds the result (call_values.py)
            self.fn.call_results.append((dotted(target), value.lineno, value.col_offset + 1))
        elif isinstance(target, ast.Subscript) and isinstance(value, ast.Name):
            container = access_path(target.value)
            if container and container.startswith("self.") and container.count(".") == 1:
                self.fn.keeps.append((value.id, container, target.lineno))

    def visit_Return(self, node: ast.Return) -> None:
        """`return state` / `return a, b` (FunctionFacts.returned); `return self._tensors.pop(tag)` hands an element
        of a container of `self` out (FunctionFacts.hands_out)."""
        if self.detailed and node.value is not None:
            self.fn.returned.extend(e.id for e in elements(node.value) if isinstance(e, ast.Name))
            made = self._made_result(node.value)
            if made is not None and self.region == NO_REGION:
                self.fn.made_results.append(made)
            container = _taken_out_of(node.value)
            if container and container.startswith("self.") and container.count(".") == 1:
                self.fn.hands_out.append(container)
        if self.detailed:
            # `return self.gpu_chunk`: an accessor (FunctionFacts.hands_back); "" for any other return
            path = (access_path(node.value) if isinstance(node.value, ast.Attribute) else "") or ""
            self.fn.hands_back.append(path[len("self."):] if path.startswith("self.") and path.count(".") == 1
                                      else "")
            self.fn.returned_paths.append(_returned_path(node.value))
        self.generic_visit(node)

    def _packed(self, target: ast.AST, value: ast.AST) -> None:
        """`state = (buf.device, buf_cpu)` after `buf_cpu` was written (Megatron's activation offload returns such a
        tuple and stores it for the reload): the tuple holds that output, so it is written where its element was,
        and storing or returning it hands the write on."""
        if not isinstance(target, ast.Name) or not isinstance(value, (ast.Tuple, ast.List)):
            return
        packed = {e.id for e in value.elts if isinstance(e, ast.Name)} & self.written_locals.get(id(self.fn), set())
        writes = [replace(a, path=target.id, index="", fresh=False) for a in self.fn.accesses
                  if a.kind == "write" and a.path in packed]
        if writes:
            self.fn.accesses.extend(writes)
            self.written_locals[id(self.fn)].add(target.id)

    def _derived(self, target: ast.AST, value: ast.AST) -> None:
        """`local = [op for op in self.ops if ...]`, `view = req.dest[a:b]`, `op = self.ops[k]`: the local holds
        elements or a view of that path (FunctionFacts.derived). Not a call's result (a new tensor or anything)."""
        if not isinstance(target, ast.Name):
            return
        if isinstance(value, (ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)):
            sources = [p for generator in value.generators
                       for _name, paths in loop_bindings(generator.target, generator.iter, access_path)[0]
                       for p in paths]
        elif isinstance(value, ast.Subscript) or isinstance(value, ast.Call) and isinstance(
                value.func, ast.Attribute) and value.func.attr in VIEW_METHODS:
            # (not `n = batch.num_reqs`: an attribute is as often a number or an object as a tensor); a view of a
            # local that names an attribute (`active = buffer[:n]` after `buffer = self._buffer`) is one of it
            aliases = self.aliases.get(id(self.fn), {})
            sources = [aliases[root] + dot + rest if root in aliases else p for p in [access_path(value)] if p
                       for root, dot, rest in [p.partition(".")]]
        else:
            return
        self.fn.derived.extend((target.id, source, target.lineno) for source in sources if source != target.id)

    def _stream_attribute_value(self, node: ast.Assign) -> bool:
        """`self.<attr> = ...` worth keeping as a stream binding: the attribute's name says stream, or the value
        captures the current (or default) stream."""
        if "stream" in dotted(node.targets[0]).lower():
            return True
        return self._may_say_stream(node.value) and captures_current(ast.unparse(node.value))

    def _through_container(self, target: ast.AST, value: ast.AST) -> None:
        """Tensors handed between methods through an attribute's container (Megatron's offload `self.saved`,
        torchrec's `context.module_input_post_prefetch`):
        `self.saved[k] = (dev, buf)` after `buf` was written inside a stream region holds that stream's output,
        so the container is written there too; `dev, buf = self.saved.pop(k)` (or `[k]`, `.get(k)`,
        `.popleft()`) makes `buf` the container's element from then on (taken_from: _access reads it so)."""
        taken = self.taken_from.setdefault(id(self.fn), {})
        aliases = self.aliases.setdefault(id(self.fn), {})
        self._unbind_names(target)
        source = access_path(value) if isinstance(target, ast.Name) and isinstance(value, (ast.Name, ast.Attribute)) \
            else None
        root = source.split(".", 1)[0] if source else ""
        if source and (root in ("self", "cls") or root in taken) and root != target.id:
            # `state = self._slot_mapping_staging`, `draft: torch.Tensor = self._draft_token_ids` (vLLM's HiSparse
            # and model runner): another name for that attribute from here on; `_access` reads the local as it.
            # (Not a parameter: `t = data` may be host data as often as a tensor, vLLM's `async_tensor_h2d`.)
            aliases[target.id] = source
            self.fn.attribute_names.append((target.id, source, target.lineno))
            return
        if isinstance(target, ast.Name) and isinstance(value, ast.Name) and value.id != target.id \
                and value.id in self.only_tensor_params.get(id(self.fn), ()):
            # `counts = valid_sampled_tokens_count` of a parameter annotated as a tensor (vLLM's model runner
            # copies it to the host on a side stream): another name for the caller's tensor from here on
            aliases[target.id] = value.id
            return
        if isinstance(target, ast.Tuple) and isinstance(value, ast.Name) and value.id in self.fn.params:
            # `dev, cpu_backup, use_pool = state` (Megatron's reload of what offload returned): the tensors unpacked
            # from a parameter are its elements, so what a device op does to them it does to the parameter
            # (summaries.parameter_accesses); a tuple of a caller's is a container, not host data
            for name in [e.id for e in target.elts if isinstance(e, ast.Name)]:
                if not any(word in name.lower() for word in NOT_TENSOR_WORDS):
                    aliases[name] = value.id
            return
        if isinstance(target, ast.Attribute) and isinstance(value, ast.Name) and value.id not in self.fn.params \
                and (path := access_path(target)) and path.startswith("self.") and path.count(".") == 1:
            # `self._prefetch_buffer = buffer` after `buffer = torch.empty(...)` (vLLM's lazily allocated prefetch
            # buffer): the local is another name for the attribute from here on, as after `buffer = self._buf`
            aliases[value.id] = path
            self.fn.attribute_names.append((value.id, path, target.lineno))
        if isinstance(target, ast.Attribute) and isinstance(value, ast.Name) and self.region == NO_REGION \
                and value.id in self.written_locals.get(id(self.fn), set()):
            # `self._out = out` after `out` was written inside `with stream(s):` (torchrec's maglev awaitable
            # launches the exchange in `__init__` and reads `self._out_bufs` in `wait`): the attribute holds s's
            # output, written where the local was. Outside a region too: a method called under a caller's region
            # (DeepSpeed FPDT's `load_to_gpu`: `gpu_chunk = torch.empty(...)`, `gpu_chunk.copy_(self.cpu_chunk,
            # non_blocking=True)`, `self.gpu_chunk = gpu_chunk`) writes the attribute on that stream; a fresh
            # write there, as the local held a new allocation (no overwrite of what the attribute held).
            path = access_path(target)
            if path and path.startswith("self."):
                made = [p.line for p in self.fn.placements if p.path == value.id and p.fresh]
                self.fn.accesses.extend(
                    replace(a, path=path, index="", fresh=a.region == NO_REGION and (
                        a.fresh or any(line <= a.line for line in made)))
                    for a in list(self.fn.accesses) if a.kind == "write" and a.path == value.id)
            return
        if isinstance(target, ast.Subscript):
            container = access_path(target.value)
            if container and "." not in container and self._awaited_in_region(target, value):
                # `waited[name] = request.wait()` inside `with stream(s):` (torchrec's PEC pipeline): a local
                # dict of s's outputs (written by visit_Assign's awaited case), taken apart after the region
                self.awaited_containers.setdefault(id(self.fn), set()).add(container)
                return
            if container and "." in container:
                moved = _taken_out_of(value)
                if moved and "." in moved and self.detailed:
                    # `ctx.b[k] = ctx.a.pop(k)` (torchrec's prefetch moves contexts on): b holds what a held
                    self.fn.taken.append((container, moved, target.lineno))
                names = [e for e in elements(value) if isinstance(e, ast.Name)]
                # `self.events[k] = s.record_event()`: the event made and recorded in the statement itself (its
                # record's receiver is the call's text)
                made = [dotted(e) for e in elements(value) if isinstance(e, ast.Call)
                        and isinstance(e.func, ast.Attribute) and e.func.attr == "record_event" and not e.args]
                for event in [name.id for name in names] + made:
                    # `self.stash[i] = (t, event)`: kept if `event` is recorded here (extract.py)
                    self.fn.syncs.append(Sync("store", dotted(target.value), target.lineno, target.col_offset + 1,
                                              event, self.region, self.blocks[-1], "[]="))
                stored = {e.id for e in names} & self.written_locals.get(id(self.fn), set())
                if not stored:
                    return
                self.fn.accesses.extend(
                    replace(a, path=container, index="", fresh=False) for a in list(self.fn.accesses)
                    if a.kind == "write" and a.path in stored and a.region != NO_REGION)
            return
        container = _taken_out_of(value)
        if container in taken:
            # `kv = out[:n]` after `out, done = self._buffers[k]` (vLLM's engram prefetch): a view of the element
            # is the same memory, so it is the container's element too
            container = taken[container]
        if container and ("." in container or container in self.awaited_containers.get(id(self.fn), ())):
            for name in [t.id for t in elements(target) if isinstance(t, ast.Name)]:
                if not any(word in name.lower() for word in NOT_TENSOR_WORDS):  # `device, buf = ...`: buf only
                    taken[name] = container
                    if self.detailed:
                        self.fn.taken.append((name, container, target.lineno))

    def _unbind_names(self, target: ast.AST) -> None:
        """Names bound again are no longer what they were taken from or another name for (FunctionFacts
        .attribute_names: from this line on, none)."""
        taken = self.taken_from.setdefault(id(self.fn), {})
        aliases = self.aliases.setdefault(id(self.fn), {})
        for name in [t.id for t in elements(target) if isinstance(t, ast.Name)]:
            if taken.pop(name, None) is not None and self.detailed:
                self.fn.rebound.append((name, getattr(target, "lineno", 0)))
            if aliases.pop(name, None) is not None:
                self.fn.attribute_names.append((name, "", getattr(target, "lineno", 0)))

    def _awaited_in_region(self, target: ast.AST, value: ast.AST) -> bool:
        """A local bound inside a stream region to what an awaitable's `wait()` returns (an event's or a
        stream's wait returns nothing; a work handle's is not bound)."""
        if self.region == NO_REGION or not isinstance(target, (ast.Name, ast.Subscript)) \
                or not isinstance(value, ast.Call):
            return False
        func = value.func
        if not isinstance(func, ast.Attribute) or func.attr != "wait":
            return False
        receiver = dotted(func.value).lower()
        return not any(word in receiver for word in ("event", "stream", "work", "handle", "fut"))

    def _name_recorded_event(self, target: ast.AST, value: ast.AST) -> None:
        """`ev = s.record_event()`: the record's event is `ev` (extract_calls.py files it under the call's text)."""
        if not (isinstance(value, ast.Call) and isinstance(value.func, ast.Attribute)
                and value.func.attr == "record_event" and isinstance(target, (ast.Name, ast.Attribute))):
            return
        text, name = dotted(value), dotted(target)
        for i in range(len(self.fn.syncs) - 1, -1, -1):
            sync = self.fn.syncs[i]
            if sync.kind == "record" and sync.receiver == text and sync.line == value.lineno:
                self.fn.syncs[i] = replace(sync, receiver=name)
                return

    def _bound_in_region(self, target: ast.AST, value: ast.AST) -> bool:
        """An attribute bound inside a stream region to a path, or to what a call returns, unless the call only
        names a stream, an event or metadata. (A local bound from an unknown call in a region is as often a handle
        or a view as new memory: not taken.)"""
        if self.region == NO_REGION or not isinstance(target, ast.Attribute):
            return False
        if access_path(value):
            return True
        if not isinstance(value, ast.Call):
            return False
        last = dotted(value.func).rsplit(".", 1)[-1]
        return last not in NOT_PRODUCERS and last not in HOST_ONLY_FUNCTIONS and last not in (
            "current_stream", "default_stream", "record_event", "get_accelerator")

    def _produces_tensor(self, value: ast.AST) -> bool:
        if not isinstance(value, ast.Call) or not isinstance(value.func, (ast.Attribute, ast.Name)):
            return False
        callee = dotted(value.func)
        last = callee.rsplit(".", 1)[-1]
        if isinstance(value.func, ast.Attribute) and value.func.value is not None and not self._is_torch_function(
                callee):
            if last == "to" and _converts_dtype_only(value):
                return True  # `x.to(torch.uint8)`: a conversion kernel where x lives, no copy the host waits for
            if last in COPYING_METHODS:  # a blocking copy orders the host with it; only an async one is left behind
                return any(k.arg == "non_blocking" and isinstance(k.value, ast.Constant) and k.value.value is True
                           for k in value.keywords)
            return last in PRODUCING_METHODS
        head = callee.split(".", 1)[0]
        # `torch.ops.fsdp.all_gather_copy_in(inputs, ...)`: a registered operator, a kernel on its tensor arguments
        custom_op = self.facts.imports.get(head) == "torch" and callee.count(".") == 3 and \
            callee.split(".")[1] == "ops"
        if self.facts.imports.get(head) not in ("torch", "torch.nn.functional") or (
                callee.count(".") > 1 and not custom_op):
            return False  # `torch.cat`, `F.linear`; not `torch.cuda.current_stream()`, `torch.distributed.x`
        if not value.args or not isinstance(value.args[0], (ast.Name, ast.Attribute, ast.Subscript, ast.List,
                                                              ast.Tuple, ast.ListComp)):
            return False  # a factory (`torch.zeros(n)`): initialization, not a producer of data another stream awaits
        return custom_op or last in TORCH_CALLABLES and last not in NOT_PRODUCERS

    def visit_AnnAssign(self, node: ast.AnnAssign) -> None:
        self._note_self_assigns([node.target])
        self.generic_visit(node)
        if self.detailed and node.value is not None:
            self._through_container(node.target, node.value)  # `x: torch.Tensor = self._x` binds as `x = ...`

    def _note_self_assigns(self, targets: list[ast.AST], value: ast.AST | None = None) -> None:
        if self.fn.cls is None:
            return
        classes = self.param_classes.get(id(self.fn), {}) if self.detailed else {}  # (plain files skip such
        # statements: extract.py `_PlainFactsVisitor`)
        if isinstance(value, ast.Name) and value.id in classes and len(targets) == 1 and isinstance(
                targets[0], ast.Attribute) and isinstance(targets[0].value, ast.Name) and targets[0].value.id == "self":
            self.fn.attribute_classes.append((targets[0].attr, classes[value.id]))  # (callgraph.py)
        for target in targets:
            for elt in elements(target):
                if (isinstance(elt, ast.Attribute) and isinstance(elt.value, ast.Name) and elt.value.id == "self"
                        and elt.attr not in self.fn.self_assigns):
                    self.fn.self_assigns.append(elt.attr)

    def _forwarding_lambda(self, node: ast.Assign) -> bool:
        """`opt.step = lambda closure=None: step(opt, closure)` on an object of a known class (a parameter annotated
        with it, or `self`): an instance override (facts.AttrFunction). The lambda's call runs where the attribute
        is called, not here: its body is not visited as code of this function (DeepSpeed's ZenFlow replaces
        ZeRO-3 methods so)."""
        target, value = node.targets[0], node.value
        if len(node.targets) != 1 or not isinstance(target, ast.Attribute) or not isinstance(target.value, ast.Name) \
                or not isinstance(value, ast.Lambda) or not isinstance(value.body, ast.Call) \
                or value.args.vararg or value.args.kwarg:
            return False
        receiver, call = target.value.id, value.body
        function = dotted(call.func)
        cls = self.fn.cls if receiver == "self" else self.param_classes.get(id(self.fn), {}).get(receiver)
        if not cls or "?" in function or function.split(".", 1)[0] in (receiver, "self"):
            return False  # (`self.f = lambda: self.g()`: a method of the object itself, resolved as such)
        lam = value.args
        params = tuple(a.arg for a in lam.posonlyargs + lam.args + lam.kwonlyargs)

        def text(arg: ast.expr) -> str:  # (`self` is no access path, and the receiver is what the call binds)
            return receiver if isinstance(arg, ast.Name) and arg.id == receiver else arg_text(arg)

        args = tuple(text(a) for a in call.args) + tuple(f"{k.arg}={text(k.value)}" for k in call.keywords if k.arg)
        self.pending_attr_functions.append(
            (target.attr, function, self._scope_name(), node.lineno, (receiver, cls, params, args)))
        self._note_self_assigns(node.targets)
        self.visit(target)
        for default in lam.defaults + [d for d in lam.kw_defaults if d is not None]:
            self.visit(default)  # defaults run here
        return True

    def _resolve_attr_functions(self) -> None:
        """Keep `x.attr = name` only where `name` is a function of this file or an imported name."""
        for attr, name, scope, line, *forwarder in self.pending_attr_functions:
            target = None
            parts = [] if scope == MODULE_SCOPE else scope.split(".")
            while True:  # innermost enclosing scope first
                candidate = ".".join(parts + [name])
                if candidate in self.defined:
                    target = candidate
                    break
                if not parts:
                    break
                parts.pop()
            if target is None:
                head = name.split(".", 1)[0]
                if head in self.facts.imports:
                    target = self.facts.imports[head] + name[len(head):]
            if target is not None:
                self.facts.attr_functions.append(AttrFunction(attr, target, line, *(forwarder[0] if forwarder else ())))
                self._keep_line(line)


def _taken_out_of(value: ast.AST) -> str | None:
    """The container path an element is taken out of: `c.pop(k)`, `c.get(k)`, `c.popleft()`, `c[k]`, also a view
    of an element of an attribute of self (`self.c[k].narrow(0, 0, n)`: DeepSpeed ZeRO-3's grad partitions, written
    through such views on the reduce stream and read as `self.c[k]` by other methods): the same memory."""
    if isinstance(value, ast.Call) and isinstance(value.func, ast.Attribute) \
            and value.func.attr in ("pop", "get", "popleft"):
        return access_path(value.func.value)
    if isinstance(value, ast.Call) and isinstance(value.func, ast.Attribute) and value.func.attr in VIEW_METHODS \
            and isinstance(value.func.value, ast.Subscript):
        container = access_path(value.func.value.value)  # (an attribute of self: a local's are derived paths)
        return container if container and container.startswith("self.") and container.count(".") == 1 else None
    return access_path(value.value) if isinstance(value, ast.Subscript) else None


TORCH_DTYPES = frozenset({
    "float", "float16", "float32", "float64", "half", "bfloat16", "double", "uint8", "int8", "int16", "int32",
    "int64", "int", "long", "short", "bool", "complex64", "complex128", "float8_e4m3fn", "float8_e5m2",
})


def _converts_dtype_only(call: ast.Call) -> bool:
    """`x.to(torch.uint8)`, `x.to(dtype=torch.bfloat16)`: a dtype and nothing that names a device."""
    if any(k.arg not in ("dtype", "non_blocking", "copy", "memory_format") for k in call.keywords) \
            or len(call.args) > 1:
        return False
    given = call.args[0] if call.args else next((k.value for k in call.keywords if k.arg == "dtype"), None)
    return isinstance(given, ast.Attribute) and isinstance(given.value, ast.Name) and given.value.id == "torch" \
        and given.attr in TORCH_DTYPES


def _returned_path(value: ast.AST) -> str:
    """The access path a `return` hands back (FunctionFacts.returned_paths): `group.hsdp_wbuf`; "self" for a view
    of the object's own tensor (`self.data[a:b]`, `self.data`); "" for anything else."""
    while isinstance(value, ast.Subscript):
        value = value.value
    if isinstance(value, ast.Attribute) and isinstance(value.value, ast.Name) and value.value.id == "self" \
            and value.attr == "data":
        return "self"
    return (access_path(value) if isinstance(value, ast.Attribute) else "") or ""
