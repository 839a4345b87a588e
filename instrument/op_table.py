"""What each operator touches: the one table both backends read.

The op knowledge is data: op_effects.json beside this module (package data, so a wheel carries it) names the
operators that touch only metadata, the queries that read data, the arguments that give only metadata, the
namespaces of collectives and the return types that make an op a query. This module loads and checks the file once
and reads roles off a schema with it. The dispatch mode (dispatch.py) calls `roles_of_schema` for every OpOverload it
meets; the C++ hook (native_hook/plans.h) calls `roles_of_name` once per operator it meets and keeps the answer. So
both backends take their plans from the one file and cannot drift apart.

Roles are read off the schema's alias annotations:
- an argument whose alias set is written (`Tensor(a!) self`, `out=`) is written;
- an argument with a read-only alias set (`Tensor(a) self` of `view`, `t`, `split`) is a view input: no data moves;
- every other tensor argument (tensor lists and optionals) is read, unless it gives only metadata: the file's
  `metadata_arguments` of the op (`other` of `view_as`, `expand_as`, `type_as`, `to.other`: the native hook sees these
  composite ops before they decompose, and `x.data = y.data.view_as(z)` reads no data of z), and `self` of a
  factory-like op (`factory_like`: `aten::zeros_like`, `aten::new_empty`);
- a return without alias information is a fresh tensor the op wrote; an aliased, not written return is a view.

An op touches nothing when the file says `metadata_only` (`set_`, `set_data` behind `x.data = y`, `resize_`,
`requires_grad_`, ...) or when it is a query: it writes nothing and returns only `query_return_types` (`size`,
`stride`, `dim`, `is_contiguous`, `result_type`, `_version`, ...), unless the file says `data_query` (`item`,
`equal`, `allclose`, ...). `aten::record_stream` is annotated as writing `self` but only informs the allocator (the
record_stream event); the `c10d` namespace holds collectives (collectives.py reads their arguments by name).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from importlib import resources
from typing import Any

import torch

SKIP, ACCESS, RECORD_STREAM, COLLECTIVE = "skip", "access", "record_stream", "collective"
NONE, READ, WRITE, VIEW = "none", "read", "write", "view"  # argument roles
FRESH = "fresh"  # return role (NONE / VIEW otherwise)
GROUP, ASYNC = "group", "async"  # collective argument roles besides READ / WRITE: the process group, async_op
# c10d ops whose tensors the argument names do not describe: send only reads its tensors; barriers move no data
COLLECTIVE_READ_ONLY = frozenset({"c10d::send"})
COLLECTIVE_NO_DATA = frozenset({"c10d::barrier", "c10d::monitored_barrier_"})

EFFECTS_FILE = "op_effects.json"
EFFECTS_FORMAT, EFFECTS_VERSION = "streamcheck-op-effects", 1
# The effects the file may name, and the plan kind each gives an op (data_query only exempts a query from SKIP).
EFFECT_KINDS = {"metadata_only": SKIP, "data_query": None, "record_stream": RECORD_STREAM, "collective": COLLECTIVE}
_SECTIONS = ("format", "version", "about", "effects", "namespaces", "factory_like", "query_return_types", "ops")
_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
_OP_NAME = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)::[A-Za-z_][A-Za-z0-9_]*\Z")


class OpEffectsError(ValueError):
    """The op-effects file is malformed; the message names the file and the entry."""


@dataclass(frozen=True)
class OpEffects:
    """The file, checked and indexed the way `roles_of_schema` asks it."""

    op_kinds: dict[str, str]  # qualified op -> SKIP / RECORD_STREAM / COLLECTIVE
    namespace_kinds: dict[str, str]  # namespace -> the kind of every op in it
    data_queries: frozenset[str]
    metadata_arguments: dict[str, frozenset[str]]
    factory_namespace: str
    factory_prefixes: tuple[str, ...]
    factory_suffixes: tuple[str, ...]
    factory_arguments: frozenset[str]
    query_return_types: frozenset[str]


def _names(value: Any) -> bool:
    return (isinstance(value, list) and bool(value) and len(set(value)) == len(value)
            and all(isinstance(v, str) and v for v in value))


def check_effects(doc: Any, source: str = EFFECTS_FILE) -> None:
    """Raise OpEffectsError, naming the entry, unless `doc` is a well-formed op-effects document."""

    def fail(where: str, what: str) -> None:
        raise OpEffectsError(f"{source}: {where}: {what}")

    if not isinstance(doc, dict):
        fail("top level", "must be an object")
    for key in _SECTIONS:
        if key not in doc:
            fail("top level", f"lacks {key!r}")
    for key in doc:
        if key not in _SECTIONS:
            fail("top level", f"unknown key {key!r} (the sections are {', '.join(_SECTIONS)})")
    if doc["format"] != EFFECTS_FORMAT:
        fail("format", f"{doc['format']!r} is not {EFFECTS_FORMAT!r}")
    if doc["version"] != EFFECTS_VERSION:
        fail("version", f"{doc['version']!r} is not {EFFECTS_VERSION} (the one this streamcheck reads)")
    known = ", ".join(sorted(EFFECT_KINDS))
    effects = doc["effects"]
    if not isinstance(effects, dict) or sorted(effects) != sorted(EFFECT_KINDS):
        fail("effects", f"must describe exactly the effects this streamcheck knows: {known}")
    for name, text in effects.items():
        if not (isinstance(text, str) and text):
            fail(f"effects[{name!r}]", "must be a description")
    if not isinstance(doc["namespaces"], dict):
        fail("namespaces", "must be an object of namespace -> effect")
    for namespace, effect in doc["namespaces"].items():
        if not _IDENTIFIER.match(namespace):
            fail(f"namespaces[{namespace!r}]", "not a namespace name")
        if effect not in EFFECT_KINDS or EFFECT_KINDS[effect] is None:
            fail(f"namespaces[{namespace!r}]", f"effect {effect!r} is not one of collective, metadata_only, "
                                               "record_stream")
    factory = doc["factory_like"]
    if not isinstance(factory, dict) or sorted(factory) != ["about", "metadata_arguments", "namespace", "prefixes",
                                                             "suffixes"]:
        fail("factory_like", "must have exactly about, namespace, prefixes, suffixes, metadata_arguments")
    if not _IDENTIFIER.match(str(factory["namespace"])):
        fail("factory_like.namespace", f"{factory['namespace']!r} is not a namespace name")
    for key in ("prefixes", "suffixes"):
        if not isinstance(factory[key], list) or not all(isinstance(v, str) and v for v in factory[key]):
            fail(f"factory_like.{key}", "must be a list of non-empty strings")
    if not _names(factory["metadata_arguments"]):
        fail("factory_like.metadata_arguments", "must be a non-empty list of argument names")
    queries = doc["query_return_types"]
    if not isinstance(queries, dict) or sorted(queries) != ["about", "types"] or not _names(queries["types"]):
        fail("query_return_types", "must have about and types (a non-empty list of distinct type names)")
    if not isinstance(doc["ops"], dict) or not doc["ops"]:
        fail("ops", "must be a non-empty object of qualified op -> entry")
    for op, entry in doc["ops"].items():
        where = f"ops[{op!r}]"
        match = _OP_NAME.match(op)
        if match is None:
            fail(where, "not a qualified operator name (namespace::name)")
        if match.group(1) in doc["namespaces"]:
            fail(where, f"the namespace {match.group(1)} is decided by namespaces; this entry would never be read")
        if not isinstance(entry, dict) or not entry:
            fail(where, "must be an object with effect and/or metadata_arguments")
        for key in entry:
            if key not in ("effect", "metadata_arguments"):
                fail(where, f"unknown key {key!r} (an entry has effect and/or metadata_arguments)")
        effect = entry.get("effect")
        if "effect" in entry and effect not in EFFECT_KINDS:
            fail(where, f"effect {effect!r} is not one of {known}")
        if "metadata_arguments" in entry:
            if not _names(entry["metadata_arguments"]):
                fail(where, f"metadata_arguments must be a non-empty list of argument names, not "
                            f"{entry['metadata_arguments']!r}")
            if EFFECT_KINDS.get(effect) is not None:
                fail(where, f"metadata_arguments mean nothing for an op whose effect is {effect}")


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    seen: dict[str, Any] = {}
    for key, value in pairs:
        if key in seen:
            raise OpEffectsError(f"{EFFECTS_FILE}: {key!r} is listed twice")
        seen[key] = value
    return seen


def effects_path() -> str:
    """Where the packaged file is (in the source tree or in the installed package)."""
    return str(resources.files(__package__).joinpath(EFFECTS_FILE))


def load_effects(text: str | None = None) -> OpEffects:
    """Parse and check the op-effects file (the packaged one unless `text` is given) and index it."""
    if text is None:
        try:
            text = resources.files(__package__).joinpath(EFFECTS_FILE).read_text(encoding="utf-8")
        except FileNotFoundError:
            raise OpEffectsError(f"{effects_path()} is missing: this installation of streamcheck lacks its package "
                                 "data") from None
    try:
        doc = json.loads(text, object_pairs_hook=_no_duplicates)
    except json.JSONDecodeError as error:
        raise OpEffectsError(f"{EFFECTS_FILE}: line {error.lineno} column {error.colno}: {error.msg}") from None
    check_effects(doc)
    ops = doc["ops"]
    factory = doc["factory_like"]
    return OpEffects(
        op_kinds={op: EFFECT_KINDS[e["effect"]] for op, e in ops.items() if EFFECT_KINDS.get(e.get("effect"))},
        namespace_kinds={ns: EFFECT_KINDS[effect] for ns, effect in doc["namespaces"].items()},
        data_queries=frozenset(op for op, e in ops.items() if e.get("effect") == "data_query"),
        metadata_arguments={op: frozenset(e["metadata_arguments"]) for op, e in ops.items()
                            if "metadata_arguments" in e},
        factory_namespace=factory["namespace"],
        factory_prefixes=tuple(factory["prefixes"]),
        factory_suffixes=tuple(factory["suffixes"]),
        factory_arguments=frozenset(factory["metadata_arguments"]),
        query_return_types=frozenset(doc["query_return_types"]["types"]),
    )


EFFECTS = load_effects()
# The file's facts under the names older callers import (dispatch.py re-exports METADATA_ONLY_OPS).
METADATA_ONLY_OPS = frozenset(op for op, kind in EFFECTS.op_kinds.items() if kind == SKIP)
METADATA_ARGUMENTS = EFFECTS.metadata_arguments
QUERY_RETURN_TYPES = EFFECTS.query_return_types
DATA_QUERIES = EFFECTS.data_queries


def holds_tensors(type_str: str) -> bool:
    return "Tensor" in type_str


def is_factory_like(qualified_name: str) -> bool:
    """`aten::zeros_like`, `aten::new_empty`: the input gives shape and dtype only."""
    namespace, _, name = qualified_name.partition("::")
    if namespace != EFFECTS.factory_namespace:
        return False
    return name.endswith(EFFECTS.factory_suffixes) or name.startswith(EFFECTS.factory_prefixes)


def is_query(name: str, schema) -> bool:
    """Writes nothing and returns only metadata-like values (sizes, flags, a dtype)."""
    if not schema.returns or name in EFFECTS.data_queries:
        return False
    for arg in schema.arguments:
        if arg.alias_info is not None and arg.alias_info.is_write:
            return False
    return all(str(ret.type) in EFFECTS.query_return_types for ret in schema.returns)


def roles_of_schema(schema, namespace: str = "aten") -> tuple[str, tuple[str, ...], tuple[str, ...]]:
    """(kind, one role per argument, one role per return) of an operator schema."""
    name = schema.name if "::" in schema.name else f"{namespace}::{schema.name}"
    n_args, n_returns = len(schema.arguments), len(schema.returns)
    kind = EFFECTS.op_kinds.get(name) or EFFECTS.namespace_kinds.get(name.partition("::")[0])
    if kind is None and is_query(name, schema):
        kind = SKIP
    if kind == COLLECTIVE:
        return kind, collective_roles(schema, name), (NONE,) * n_returns
    if kind is not None:
        return kind, (NONE,) * n_args, (NONE,) * n_returns
    metadata = EFFECTS.metadata_arguments.get(name, frozenset())
    if is_factory_like(name):
        metadata = metadata | EFFECTS.factory_arguments
    args = []
    for arg in schema.arguments:
        role = NONE
        if holds_tensors(str(arg.type)):
            alias = arg.alias_info
            if alias is not None and alias.is_write:
                role = WRITE
            elif alias is not None:
                role = VIEW
            elif arg.name not in metadata:
                role = READ
        args.append(role)
    returns = []
    for ret in schema.returns:
        role = NONE
        if holds_tensors(str(ret.type)):
            alias = ret.alias_info
            if alias is None:
                role = FRESH
            elif not alias.is_write:
                role = VIEW
        returns.append(role)
    touches = READ in args or WRITE in args or FRESH in returns
    return (ACCESS if touches else SKIP), tuple(args), tuple(returns)


def collective_roles(schema, name: str) -> tuple[str, ...]:
    """One role per argument of a c10d op, from the argument names (its schema has no alias annotations):
    `output*` written, `input*` read, other tensors written (in-place: all_reduce, broadcast, recv), `send` only
    reads; the process group and `async_op`. instrument/collectives.py and the C++ hook read these."""
    roles = []
    for arg in schema.arguments:
        type_str = str(arg.type)
        if "ProcessGroup" in type_str:
            role = GROUP
        elif arg.name == "async_op":
            role = ASYNC
        elif "Tensor" in type_str and name not in COLLECTIVE_NO_DATA:
            if arg.name.startswith("output"):
                role = WRITE
            elif arg.name.startswith("input") or name in COLLECTIVE_READ_ONLY:
                role = READ
            else:
                role = WRITE
        else:
            role = NONE
        roles.append(role)
    return tuple(roles)


def roles_of_name(name: str, overload: str) -> tuple[str, tuple[str, ...], tuple[str, ...]]:
    """The C++ hook's entry: the roles of operator `name` (qualified) and `overload` ("" for the default)."""
    return roles_of_schema(torch._C._get_schema(name, overload))
