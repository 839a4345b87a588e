"""The call graph of a set of files: every function, and the functions each call site may run.

Calls are resolved without importing anything:
- bare names through nested and module-level definitions, the file's imports and star imports;
- `self.m(...)` / `super().m(...)` through the enclosing class, its bases and its subclasses (overrides);
- `pkg.mod.f(...)` and `Class.m(...)` through the import table (relative imports against the package the file
  sits in: the topmost folder chain holding `__init__.py` files among the scanned files);
- `<anything>.m(...)` by name: functions stored in an attribute (`param.all_gather_coalesced = all_gather_coalesced`)
  and, when few classes define it, methods called `m`; only within one program (a top-level package, or a script
  and what it imports). These edges are marked inexact.
Functions passed as arguments (`wrap(dist.allgather_fn)(...)`) are treated as called at that site (inexact).
A launch `kernel[grid](...)` of a Triton kernel of another file calls that kernel (exact, through the imports).
`self.attr.m(...)` where the class stores an annotated parameter in `self.attr` (`self.method = method`, `method:
"EmbeddingMethod"`) runs `m` of that class family (exact).
A forwarding lambda stored over a method of an object of a known class (`opt.step = lambda c=None: step(opt, c)`
with `opt: "Stage3"`, or on `self`) is an instance override: `self.step(...)` in that class family may run `step`
too, through a call of its own whose arguments are the lambda's (inexact); the lambda's call is not made where the
lambda is stored.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, replace
from typing import Iterator

from .extract_paths import split_index
from .facts import MODULE_SCOPE, AttrFunction, Call, FileFacts, FunctionFacts, quick_init
from .options import StaticOptions

# By-name resolution of `<expr>.m(...)` is skipped for names defined by more classes than this (too vague) and for
# names that are, far more often, methods of builtins and tensors.
FUZZY_METHOD_LIMIT = 4
NEVER_BY_NAME = frozenset({
    "append", "extend", "pop", "popleft", "appendleft", "get", "items", "keys", "values", "update", "add", "remove",
    "discard", "clear", "copy", "index", "count", "insert", "join", "split", "format", "startswith", "endswith",
    "strip", "replace", "encode", "decode", "read", "write", "close", "open", "to", "cuda", "cpu", "item", "numel",
    "size", "view", "reshape", "narrow", "copy_", "zero_", "fill_", "add_", "mul_", "div_", "sub_", "float", "half",
    "bfloat16", "detach", "clone", "contiguous", "flatten", "__init__", "__call__", "forward", "backward",
    "synchronize", "wait_stream", "wait_event", "record", "record_event", "record_stream", "query", "wait",
    "current_stream", "default_stream", "stream", "Stream", "Event", "is_available", "device", "set_device",
    "put", "put_nowait", "get_nowait", "task_done", "step", "zero_grad", "state_dict", "load_state_dict",
    "parameters", "named_parameters", "modules", "children", "train", "eval", "apply", "run", "start", "submit",
})


BUILTIN_TYPES = frozenset({
    "dict", "list", "tuple", "set", "frozenset", "str", "bytes", "int", "float", "bool", "object", "type", "range",
    "collections", "os", "sys", "math", "itertools", "functools", "operator", "json", "re", "copy", "logging",
})


# Builtins that take functions or classes as arguments without calling them.
NO_CALLBACK_ARGS = frozenset({
    "isinstance", "issubclass", "getattr", "hasattr", "setattr", "type", "id", "print", "repr", "str", "super",
    "callable", "vars", "dir", "hash",
})


@dataclass(frozen=True, eq=False)  # one object per function: identity is equality
class Function:
    id: str  # "<path>::<qualname>"
    file: FileFacts
    facts: FunctionFacts
    owner: str | None  # the class whose `self` this code sees (methods and functions nested in them)


@dataclass(frozen=True)
class Edge:
    caller: str
    call: Call
    callee: str
    exact: bool


# (vLLM 0.33.0 makes about 300 k edges and 45 k functions: the frozen dataclasses' own __init__ is a third slower)
quick_init(Function)
quick_init(Edge)


class CallGraph:
    """Functions of all files and resolved call edges (also as `callees`: function id -> the ids it may call)."""

    def __init__(self, files: list[FileFacts], options: StaticOptions) -> None:
        self.options = options
        self.files = files
        self.functions: dict[str, Function] = {}
        self._by_module: dict[str, list[FileFacts]] = {}
        self._top_level: dict[str, dict[str, str]] = {}  # path -> name -> function id (classes map to __init__)
        self._classes: dict[tuple[str, str], tuple[str, ...]] = {}  # (path, class qualname) -> base texts
        self._methods: dict[tuple[str, str], dict[str, str]] = {}  # (path, class qualname) -> name -> id
        self._methods_by_name: dict[str, list[str]] = {}
        self._dotted_memo: dict[str, list[str]] = {}
        self._family_memo: dict[tuple[str, str], list[tuple[str, str]]] = {}
        self._root_memo: dict[tuple[str, str], str] = {}
        self._visible_memo: dict[str, set[str]] = {}
        self._attr_functions: dict[str, list[str]] = {}
        self._owner_memo: dict[tuple[str, str, str], str] = {}
        self._bases_memo: dict[tuple[str, str], list[tuple[str, str]]] = {}
        self._assigned_memo: dict[tuple[str, str], set[str]] = {}
        self._index()
        # Plain sets, not a networkx graph: the scan then never imports networkx (a warm scan starts 0.25 s
        # sooner), and building them is a set insertion per edge.
        self.callees: dict[str, set[str]] = {fid: set() for fid in self.functions}
        self._calls_with_edges: dict[str, list[tuple[Call, list[Edge]]]] = {}  # function id -> its calls, in order
        self._name_memo: dict[tuple[str, str, str], list[str]] = {}
        self._build_edges()

    # --- indexing ----------------------------------------------------------------------------------------------
    def _index(self) -> None:
        self._module_of = _true_module_names(self.files)
        # path -> last names of the file's nested functions and methods: the only plain names whose resolution
        # depends on the calling scope
        self._nested_names: dict[str, set[str]] = {}
        for file in self.files:
            self._nested_names[file.path] = {fn.qualname.rsplit(".", 1)[1] for fn in file.functions
                                             if "." in fn.qualname}
            self._by_module.setdefault(self._module_of[file.path], []).append(file)
            spelled = _full_module_name(file.path)
            if spelled != self._module_of[file.path] and "." in spelled:
                # under a namespace package (PEP 420: Megatron's `megatron/` holds no `__init__.py`, yet its code
                # imports `megatron.core.x`): the name from the scan root imports it too
                self._by_module.setdefault(spelled, []).append(file)
            top = self._top_level.setdefault(file.path, {})
            class_names = {c.qualname for c in file.classes}
            for cls in file.classes:
                self._classes[(file.path, cls.qualname)] = cls.bases
            for fn in file.functions:
                fid = f"{file.path}::{fn.qualname}"
                self.functions[fid] = Function(fid, file, fn, fn.cls or _enclosing_class(fn.qualname, class_names))
                if fn.cls is not None:
                    self._methods.setdefault((file.path, fn.cls), {})[fn.name] = fid
                    self._methods_by_name.setdefault(fn.name, []).append(fid)
                elif "." not in fn.qualname and fn.qualname != MODULE_SCOPE:
                    top[fn.name] = fid
            for cls in file.classes:
                if "." not in cls.qualname:
                    init = self._methods.get((file.path, cls.qualname), {}).get("__init__")
                    top.setdefault(cls.qualname, init or f"class:{file.path}::{cls.qualname}")
        self._subclasses: dict[tuple[str, str], list[tuple[str, str]]] = {}
        for (path, qualname), bases in self._classes.items():
            for base in bases:
                for resolved in self._resolve_class(self._file(path), base):
                    self._subclasses.setdefault(resolved, []).append((path, qualname))
        # (class, attribute) -> (function id, forwarder) of the lambdas stored over that attribute of its instances
        self._overrides: dict[tuple[tuple[str, str], str], list[tuple[str, AttrFunction]]] = {}
        for file in self.files:
            for held in file.attr_functions:
                local = f"{file.path}::{held.function}"
                found = [local] if local in self.functions else self._resolve_dotted(held.function)
                if held.receiver_class:
                    classes = [(file.path, held.receiver_class)] if held.receiver == "self" else \
                        self._resolve_class(file, held.receiver_class)
                    for cls in classes:
                        self._overrides.setdefault((cls, held.attr), []).extend((fid, held) for fid in found)
                    continue
                for fid in found:
                    self._attr_functions.setdefault(held.attr, []).append(fid)

    def _file(self, path: str) -> FileFacts:
        return self.functions[f"{path}::{MODULE_SCOPE}"].file

    def _modules(self, dotted_module: str) -> list[FileFacts]:
        return self._by_module.get(dotted_module, [])

    def _absolute(self, file: FileFacts, target: str) -> str:
        """An import target made absolute: `..utils.x` from `pkg/sub/mod.py` is `pkg.utils.x`."""
        if not target.startswith("."):
            return target
        level = len(target) - len(target.lstrip("."))
        package = self._module_of[file.path].split(".")
        if not file.is_package:
            package = package[:-1]
        package = package[: max(0, len(package) - (level - 1))]
        rest = target[level:]
        return ".".join(package + ([rest] if rest else []))

    def _import(self, file: FileFacts, name: str) -> str | None:
        target = file.imports.get(name)
        return None if target is None else self._absolute(file, target)

    # --- resolution --------------------------------------------------------------------------------------------
    def _resolve_dotted(self, target: str) -> list[str]:
        """`pkg.mod.func` / `pkg.mod.Class.method` / `pkg.mod.Class` -> function ids (memoized; cycles give [])."""
        memo = self._dotted_memo
        if target in memo:
            return memo[target]
        memo[target] = []
        parts = target.split(".")
        if len(parts) > 12:  # import chains that grow instead of cycling
            return []
        found: list[str] = []
        for cut in range(len(parts) - 1, 0, -1):
            files = self._modules(".".join(parts[:cut]))
            if files:  # the deepest module that exists decides, as in Python's attribute lookup
                for file in files:
                    found = self._lookup_in_file(file, parts[cut:])
                    if found:
                        break
                break
        memo[target] = found
        return found

    def _lookup_in_file(self, file: FileFacts, rest: list[str]) -> list[str]:
        head = rest[0]
        top = self._top_level.get(file.path, {})
        if len(rest) == 1 and head in top:
            return [top[head]] if not top[head].startswith("class:") else []
        if len(rest) == 2 and (file.path, head) in self._classes:
            return self._methods_in_family((file.path, head), rest[1])
        imported = self._import(file, head)
        if imported is not None:
            return self._resolve_dotted(".".join([imported] + rest[1:]))
        for star in file.star_imports if len(rest) <= 2 else ():
            found = self._resolve_dotted(".".join([self._absolute(file, star)] + rest))
            if found:
                return found
        return []

    def _resolve_name_in_file(self, file: FileFacts, name: str, scope: str) -> list[str]:
        """A (possibly dotted) name as seen from `scope` in `file` (memoized: every argument that is a name is
        looked up as a possible callback, the same names again and again: 450 k lookups on vLLM). The scope only
        matters for a plain name that some nested function or method of the file is called (see _resolve_name)."""
        key = (file.path, name, scope if name in self._nested_names[file.path] else "")
        found = self._name_memo.get(key)
        if found is None:
            found = self._name_memo[key] = self._resolve_name(file, name, scope)
        return found

    def _resolve_name(self, file: FileFacts, name: str, scope: str) -> list[str]:
        head, _, tail = name.partition(".")
        if not tail:
            parts = [] if scope == MODULE_SCOPE or head not in self._nested_names[file.path] else scope.split(".")
            while parts:
                fid = f"{file.path}::{'.'.join(parts + [head])}"
                # (a class body's names are not visible from its methods: `_wait_for_batch(...)` in the method
                # `_wait_for_batch` calls the module's or an imported function, not the method itself)
                if fid in self.functions and (file.path, ".".join(parts)) not in self._classes:
                    return [fid]
                parts.pop()
            top = self._top_level.get(file.path, {})
            if head in top:
                return [top[head]] if not top[head].startswith("class:") else []
        if (file.path, head) in self._classes and tail and "." not in tail:
            return self._methods_in_family((file.path, head), tail)
        imported = self._import(file, head)
        if imported is not None:
            return self._resolve_dotted(imported + (f".{tail}" if tail else ""))
        if not tail:
            for star in file.star_imports:
                found = self._resolve_dotted(f"{self._absolute(file, star)}.{head}")
                if found:
                    return found
        return []

    def _resolve_class(self, file: FileFacts, text: str) -> list[tuple[str, str]]:
        text = text.split("[", 1)[0]  # `class F(BaseForward[Ctx])`: a generic base is the base class
        if (file.path, text) in self._classes:
            return [(file.path, text)]
        head, _, tail = text.partition(".")
        target = self._import(file, head)
        if target is None:
            return []
        target += f".{tail}" if tail else ""
        module, _, name = target.rpartition(".")
        return [(f.path, name) for f in self._modules(module) if (f.path, name) in self._classes]

    def _bases(self, cls: tuple[str, str]) -> list[tuple[str, str]]:
        """The known bases of a class, nearest first (not the class itself)."""
        if cls in self._bases_memo:
            return self._bases_memo[cls]
        order, seen = [], {cls}
        up = deque([cls])
        while up:
            current = up.popleft()
            for base in self._classes.get(current, ()):
                for resolved in self._resolve_class(self._file(current[0]), base):
                    if resolved not in seen:
                        seen.add(resolved)
                        order.append(resolved)
                        up.append(resolved)
        self._bases_memo[cls] = order
        return order

    def _family(self, cls: tuple[str, str]) -> list[tuple[str, str]]:
        """The class, its known bases (upwards) and its known subclasses (downwards)."""
        if cls in self._family_memo:
            return self._family_memo[cls]
        order = [cls, *self._bases(cls)]
        seen = set(order)
        down = deque([cls])
        while down:
            for sub in self._subclasses.get(down.popleft(), ()):
                if sub not in seen:
                    seen.add(sub)
                    order.append(sub)
                    down.append(sub)
        self._family_memo[cls] = order
        return order

    def family_root(self, path: str, cls: str | None) -> str:
        """A name shared by a class and all its known bases: the topmost known base."""
        if cls is None:
            return ""
        if (path, cls) in self._root_memo:
            return self._root_memo[(path, cls)]
        self._root_memo[(path, cls)] = root = self._family_root((path, cls))
        return root

    def _family_root(self, current: tuple[str, str]) -> str:
        seen = {current}
        while True:
            bases = [r for b in self._classes.get(current, ()) for r in self._resolve_class(self._file(current[0]), b)]
            bases = [b for b in bases if b not in seen]
            if not bases:
                return f"{current[0]}::{current[1]}"
            current = bases[0]
            seen.add(current)

    def attr_owner(self, path: str, cls: str | None, attr: str) -> str:
        """The class that owns `self.<attr>` as seen from class `cls`: the topmost of its known bases (itself
        included) whose methods assign the attribute; the family root when none does (set from outside)."""
        if cls is None:
            return ""
        key = (path, cls, attr)
        if key not in self._owner_memo:
            chain = [(path, cls), *self._bases((path, cls))]
            owners = [c for c in chain if attr in self._assigned_attrs(c)]
            self._owner_memo[key] = f"{owners[-1][0]}::{owners[-1][1]}" if owners else self.family_root(path, cls)
        return self._owner_memo[key]

    def _assigned_attrs(self, cls: tuple[str, str]) -> set[str]:
        found = self._assigned_memo.get(cls)
        if found is None:
            found = set()
            for fid in self._methods.get(cls, {}).values():
                found.update(self.functions[fid].facts.self_assigns)
            self._assigned_memo[cls] = found
        return found

    def _methods_in_family(self, cls: tuple[str, str], name: str) -> list[str]:
        return [m[name] for c in self._family(cls) if name in (m := self._methods.get(c, {}))]

    def resolve(self, function: Function, call: Call) -> list[tuple[str, bool]]:
        """Function ids a call may run, each with whether the resolution is exact."""
        callee = call.callee
        file = function.file
        if callee.endswith("[]"):
            return self._launched_kernels(function, callee[:-2])
        parts = callee.split(".")
        if "?" in parts[0]:
            return self._by_name(file, parts[-1])
        if parts[0] in ("self", "cls") and len(parts) == 2 and function.owner:
            found = self._methods_in_family((file.path, function.owner), parts[1])
            if found:
                return [(fid, True) for fid in found]
            # Not a method of the class family: a function stored on the instance, or a method of a base outside
            # the scanned tree. Only functions stored in an attribute of that name can be meant.
            return self._held_functions(file, parts[1])
        if parts[0] == "self" and len(parts) == 3 and function.owner:
            typed = [(m, True) for cls in self._attribute_class((file.path, function.owner), parts[1])
                     for m in self._methods_in_family(cls, parts[2])]
            if typed:
                return typed
        if parts[0] == "super()" and len(parts) == 2 and function.owner:
            bases = self._bases((file.path, function.owner))  # upwards only: super() never reaches a subclass
            return [(m[parts[1]], True) for c in bases if parts[1] in (m := self._methods.get(c, {}))]
        if all(map(str.isidentifier, parts)):
            found = self._resolve_name_in_file(file, callee, function.facts.qualname)
            if found:
                return [(fid, True) for fid in found]
            if len(parts) == 1 or parts[0] in file.imports:
                return []  # a builtin or a library function outside the scanned tree
        if parts[0] in BUILTIN_TYPES:
            return []  # `dict.fromkeys(...)`, `str.join(...)`: a builtin's method, never a scanned one
        return self._by_name(file, parts[-1]) if len(parts) > 1 else []

    def _attribute_class(self, cls: tuple[str, str], attr: str) -> list[tuple[str, str]]:
        """The classes `self.<attr>` holds in class `cls`'s family: those of the annotated constructor parameters
        its methods store there (FunctionFacts.attribute_classes)."""
        found: list[tuple[str, str]] = []
        for member in self._family(cls):
            for fid in self._methods.get(member, {}).values():
                for name, text in self.functions[fid].facts.attribute_classes:
                    if name == attr:
                        found += [c for c in self._resolve_class(self._file(member[0]), text) if c not in found]
        return found

    def _launched_kernels(self, function: Function, kernel: str) -> list[tuple[str, bool]]:
        """`kernel[grid](...)`, `mod.kernel[grid](...)`: the Triton kernel of another file it launches (FunctionFacts
        .kernel), through the imports. A kernel of the launching file is an edge only in a plain file (prefilter.py):
        in a detailed one the extraction already wrote its stored arguments at the launch (extract_calls.py
        `_launched`)."""
        if not all(part.isidentifier() for part in kernel.split(".")):
            return []
        return [(fid, True) for fid in self._resolve_name_in_file(function.file, kernel, function.facts.qualname)
                if fid in self.functions and self.functions[fid].facts.kernel
                and (self.functions[fid].file.path != function.file.path or not function.file.detailed)]

    def _held_functions(self, file: FileFacts, name: str) -> list[tuple[str, bool]]:
        visible = self._visible_components(file)
        return [(fid, False) for fid in dict.fromkeys(self._attr_functions.get(name, ()))
                if self.component(self.functions[fid].file) in visible]

    def _by_name(self, file: FileFacts, name: str) -> list[tuple[str, bool]]:
        if not name.isidentifier() or name in NEVER_BY_NAME:
            return []
        found = list(dict.fromkeys(self._attr_functions.get(name, ())))
        methods = self._methods_by_name.get(name, ())
        if len(methods) <= FUZZY_METHOD_LIMIT:
            found += [m for m in methods if m not in found]
        visible = self._visible_components(file)
        return [(fid, False) for fid in found if self.component(self.functions[fid].file) in visible]

    def component(self, file: FileFacts) -> str:
        """What a file belongs to: its top-level package, or the file itself for a script outside any package.
        Code of one component only reaches another's by name through an import."""
        module = self._module_of[file.path]
        return module.split(".", 1)[0] if file.is_package or "." in module else f"{module}@{file.path}"

    def _visible_components(self, file: FileFacts) -> set[str]:
        if file.path in self._visible_memo:
            return self._visible_memo[file.path]
        self._visible_memo[file.path] = visible = {self.component(file)}
        for target in file.imports.values():
            head = self._absolute(file, target).split(".", 1)[0]
            visible.update(self.component(f) for f in self._modules(head))
        return visible

    def _build_edges(self) -> None:
        # A callee text resolves alike wherever the same file, class and (for a plain name) function call it:
        # resolved once (vLLM 0.33.0: 284 k calls, 145 k distinct keys).
        # (vLLM 0.33.0: the loop's own work, per call, is a third of the phase: what a call's edges need from its
        # function is looked up once per function)
        resolved: dict[tuple[str, str | None, str, str], list[tuple[str, bool]]] = {}
        functions = self.functions
        overrides = bool(self._overrides)
        name_in_file = self._resolve_name_in_file
        for function in functions.values():
            fid, file = function.id, function.file
            calls = self._calls_with_edges[fid] = []
            mine = self.callees[fid]
            path, owner, scope = file.path, function.owner, function.facts.qualname
            nested = self._nested_names[path]
            for call in function.facts.calls:
                callee = call.callee  # the owner only matters to self./cls./super() calls, the scope to nested names
                key = (path, owner if callee.startswith(("self.", "cls.", "super().")) else None, callee,
                       scope if callee in nested else "")
                targets = resolved.get(key)
                if targets is None:
                    targets = resolved[key] = [(c, e) for c, e in self.resolve(function, call) if c in functions]
                edges = [Edge(fid, call, target, exact) for target, exact in targets]
                if call.func_args and callee not in NO_CALLBACK_ARGS:
                    for ref in call.func_args:
                        for target in name_in_file(file, ref, scope):
                            if target in functions and not target.endswith(".__init__"):  # a class named, not called
                                edges.append(Edge(fid, call, target, False))
                calls.append((call, edges))
                for edge in edges:
                    mine.add(edge.callee)
                if overrides and owner and callee.startswith(("self.", "cls.")) and callee.count(".") == 1:
                    for forwarded, more in self._overriding_calls(function, call):
                        calls.append((forwarded, more))
                        mine.update(e.callee for e in more)

    def _overriding_calls(self, function: Function, call: Call) -> list[tuple[Call, list[Edge]]]:
        """`self.step(c)` where some code stores a forwarding lambda over `step` on an instance of the class family
        (`opt.step = lambda closure=None: step(opt, closure)`): the call may run the forwarded function, with the
        lambda's arguments (the receiver's text for the object, the call's arguments for the lambda's parameters).
        A call of its own, so that parameters bind to those arguments (inexact: the override may not be made)."""
        name = call.callee.split(".", 1)[1]
        found = []
        for cls in self._family((function.file.path, function.owner)):
            for fid, held in self._overrides.get((cls, name), ()):
                if fid in self.functions:
                    forwarded = replace(call, args=_forwarded_args(call, held), func_args=())
                    found.append((forwarded, [Edge(function.id, forwarded, fid, False)]))
        return found

    # --- queries -----------------------------------------------------------------------------------------------
    def calls_of(self, fid: str) -> Iterator[tuple[Call, list[Edge]]]:
        return iter(self._calls_with_edges[fid])

    def functions_named(self, function: Function, name: str) -> list[str]:
        """The functions a plain or dotted name means where `function` mentions it (`p2p_func = _p2p_ops`)."""
        return [fid for fid in self._resolve_name_in_file(function.file, name, function.facts.qualname)
                if fid in self.functions]


def _forwarded_args(call: Call, held: AttrFunction) -> tuple[str, ...]:
    """The arguments a forwarding lambda's call gets when the attribute is called with `call`'s (see
    `_overriding_calls`): its parameters by position or keyword, its receiver as the call's `self`; "" for
    anything else (a default, a constant)."""
    positional = [a for a in call.args if "=" not in a]
    keywords = dict(a.split("=", 1) for a in call.args if "=" in a)
    given = {p: positional[i] if i < len(positional) else keywords.get(p, "") for i, p in enumerate(held.params)}
    receiver = call.callee.split(".", 1)[0]

    def one(text: str) -> str:
        path, index = split_index(text)
        root, dot, rest = path.partition(".")
        if root == held.receiver:
            root = receiver
        elif root in given:
            root, given_index = split_index(given[root])
            if not root or (index and given_index):
                return ""
            index = index or given_index
        else:
            return ""
        path = root + dot + rest
        return f"{path}[{index}]" if index else path

    out = []
    for arg in held.args:
        key, eq, value = arg.partition("=") if "=" in arg else ("", "", arg)
        bound = one(value) if value else ""
        out.append(f"{key}={bound}" if eq else bound)
    return tuple(out)


def _enclosing_class(qualname: str, class_names: set[str]) -> str | None:
    parts = qualname.split(".")[:-1]
    while parts:
        candidate = ".".join(parts)
        if candidate in class_names:
            return candidate
        parts.pop()
    return None


def _full_module_name(path: str) -> str:
    """The dotted name of a file from the scan root down, every folder counted (`megatron/core/x.py` ->
    `megatron.core.x`)."""
    parts = [p for p in path.replace("\\", "/").split("/") if p not in ("", ".")]
    stem = parts[-1].rsplit(".", 1)[0] if parts else ""
    return ".".join(parts[:-1] + ([] if stem == "__init__" else [stem]))


def _true_module_names(files: list[FileFacts]) -> dict[str, str]:
    """Path -> dotted module name as Python would import it: from the topmost enclosing package directory (one
    holding an `__init__.py` among the scanned files) down; a file outside any package is a top-level module."""
    def parts_of(path: str) -> list[str]:
        return [p for p in path.replace("\\", "/").split("/") if p not in ("", ".")]

    package_dirs = {"/".join(parts_of(f.path)[:-1]) for f in files if f.is_package}
    names = {}
    for file in files:
        parts = parts_of(file.path)
        stem = parts[-1].rsplit(".", 1)[0] if parts else ""
        dirs = parts[:-1]
        start = len(dirs)
        while start > 0 and "/".join(dirs[:start]) in package_dirs:
            start -= 1
        names[file.path] = ".".join(dirs[start:] + ([] if stem == "__init__" else [stem]))
    return names
