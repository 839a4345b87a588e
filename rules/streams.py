"""Symbolic streams: what a stream expression in the source stands for, as one comparable id.

- `CURRENT_STREAM` (""): the stream the enclosing code runs on. `torch.cuda.current_stream(...)`,
  `get_accelerator().current_stream(dev)` and `default_stream(...)` name it (outside every region the current stream
  is the default one; code that switches streams says so with a region, which the engine follows).
- `HOST`: the host thread, the waiter of a synchronize.
- `UNKNOWN` ("?"): a stream the source does not name (`with torch.cuda.stream(make())`); it is never reported
  against, and as an ordering's target it orders everything (the lint stays precise where it cannot see).
- `self.<attr>@<owner>`: an attribute of `self`, owned by the class that first assigns it (see Program.attr_owner),
  so one class's `self.side` is one stream in all its methods and subclasses, and sibling classes' are two.
- `param:<name>`: a parameter of the function; at a call it stands for the caller's argument.
- `<local>@<function id>`: a local bound to a new stream (`side = torch.cuda.Stream()`): one per function that
  makes it (and the closures in it that use it).
- anything else: its text, a local alias replaced by what it was bound to (`s = self.side` then `s`).
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .callgraph import Function
    from .facts import Region
    from .program import Program

CURRENT_STREAM = ""
HOST = "<host>"
DEFAULT_STREAM = "<default>"  # `default_stream()` where it may not be the current stream (inside a hook: hooks.py)
UNKNOWN = "?"
PARAM = "param:"  # a stream handed in as a parameter: which one is the caller's business
# The current stream of an earlier call of a hook (races.py `_earlier_hook_call`): autograd runs each call of a
# gradient hook on the stream of that parameter's backward, so `wait_stream(current_stream())` in one call does not
# name the stream an earlier call wrote on; only a wait the lint cannot name, or an event recorded there, covers it.
EARLIER_HOOK_CALL = "<current stream of an earlier hook call>"
PROPERTY_VALUE = "<property>"  # the stream_aliases key of what a one-line `@property` returns (extract.py)

_NAMES_CURRENT = re.compile(r"(^|\.)(current_stream|default_stream)\(.*\)$")
_NAMES_DEFAULT = re.compile(r"(^|\.)default_stream\(.*\)$")


def names_current(text: str) -> bool:
    """Whether a stream expression's text names the current (or default) stream."""
    return text in ("", "None") or bool(_NAMES_CURRENT.search(text))


def captures_current(text: str) -> bool:
    """`current_stream()` / `default_stream()` called (a value worth keeping: `self.s0 = ...`)."""
    return bool(_NAMES_CURRENT.search(text))


def names_default(text: str) -> bool:
    """`default_stream(...)`: the stream code outside every region runs on, even when read inside one (where
    `current_stream()` is the region's stream instead)."""
    return bool(_NAMES_DEFAULT.search(text))


def stream_id(program: "Program", function: "Function", stream: "Region | str") -> str:
    text = stream if isinstance(stream, str) else stream.stream
    aliases = function.facts.stream_aliases.get(text)
    if aliases:
        # `stream = self.s1 if overlap else self.s0`, s0 the compute stream (a property returning
        # `current_stream()`, or one captured at construction): the side arm is the one that switches.
        named = list(dict.fromkeys(a for a in aliases if not names_current(a)
                                   and not (len(aliases) > 1 and _current_attribute(program, function, a))))
        if not named:
            text = CURRENT_STREAM
        elif len(named) > 1:
            return UNKNOWN  # bound to different streams on different paths (`post_reduce_stream = ...` twice)
        elif not named[0].endswith(")"):
            text = named[0]  # `stream = self.reduction_stream`: the attribute is the stream
        elif text.isidentifier() and _makes_stream(named[0]):
            return f"{text}@{function.id}"  # `side = torch.cuda.Stream()`: a new stream per call of the function
        # else `side = make_stream()`: a stream, which the local's name stands for
    elif text.isidentifier() and text not in function.facts.params:
        made_by = _enclosing_maker(program, function, text)
        if made_by:
            return f"{text}@{made_by}"  # a closure's use of the stream its enclosing function made
    if names_current(text):
        return CURRENT_STREAM
    if text == UNKNOWN or text.startswith("?"):
        return UNKNOWN
    if text in function.facts.params and text not in ("self", "cls"):
        return f"{PARAM}{text}"  # bound to the caller's argument by summaries.py
    if text.startswith(("self.", "cls.")):
        attr = text.split(".")[1]
        if text.count(".") == 1 and _property_names_current(program, function, attr):
            return CURRENT_STREAM  # evaluated where it is used: TRL's `s0` property returning current_stream()
        if text.count(".") == 1 and _captured_current_only(program, function, text):
            return CURRENT_STREAM  # vLLM's `self.main_stream = torch.cuda.current_stream(device)` in `__init__`
        return f"{text}@{program.attr_owner(function.file.path, function.owner, attr)}"
    return text


_MAKES_STREAM = re.compile(r"(^|\.)Stream\(.*\)$")


def _makes_stream(text: str) -> bool:
    """`torch.cuda.Stream()`, `get_accelerator().Stream()`: a stream constructed where the local is bound, so two
    functions (FPDT's forward and backward) that each bind `offload_stream = get_accelerator().Stream()` hold two
    streams, and two calls of one function too (the engine does not tell calls apart: one id per function)."""
    return bool(_MAKES_STREAM.search(text))


def _enclosing_maker(program: "Program", function: "Function", name: str) -> str:
    """The id of the function `function` is nested in that binds `name` to a new stream ("" when none does)."""
    qualname = function.facts.qualname
    while "." in qualname:
        qualname = qualname.rsplit(".", 1)[0]
        outer = program.functions.get(f"{function.file.path}::{qualname}")
        if outer is None:
            continue
        aliases = outer.facts.stream_aliases.get(name)
        if aliases:
            return outer.id if len(aliases) == 1 and _makes_stream(aliases[0]) else ""
    return ""


def holds_captured_current(program: "Program", function: "Function", text: str) -> bool:
    """`self.<attr>` that holds a `current_stream()` taken once (`_captured_current_only`), not a property
    evaluated where it is read."""
    return text.startswith(("self.", "cls.")) and text.count(".") == 1 \
        and not _property_names_current(program, function, text.split(".")[1]) \
        and _captured_current_only(program, function, text)


def handed_in(program: "Program", stream: str) -> bool:
    """`self.<attr>@<owner>` that its class sets only from a method's parameter (`self._stream = stream` in
    `__init__`): a stream the constructor was given, which the code that built the object names its own way
    (torchrec's pipelined forwards hold the pipeline's `_data_dist_stream` as `_stream`)."""
    if not stream.startswith("self.") or "@" not in stream:
        return False

    def build() -> bool:
        text, owner = stream.split("@", 1)
        path, _, cls = owner.partition("::")
        bound = [(method, value) for method in program.functions_of_class_at(path, cls)
                 for value in method.facts.stream_aliases.get(text, ())]
        return bool(bound) and all(value in method.facts.params for method, value in bound)

    return program.memo(("streams.handed_in", stream), build)


def _current_attribute(program: "Program", function: "Function", text: str) -> bool:
    """`self.<attr>` that is a property returning the current stream, or set only to `current_stream()` /
    `default_stream()` values by the class's methods."""
    if not text.startswith("self.") or text.count(".") != 1 or not function.owner:
        return False
    attr = text.split(".")[1]
    if _property_names_current(program, function, attr):
        return True
    captured = _captured(program, function)
    return bool(captured.get(text)) and all(captures_current(v) for v in captured[text])


def _captured_current_only(program: "Program", function: "Function", text: str) -> bool:
    """`self.<attr>` that the class sets only to `current_stream(...)` (never `default_stream()`, never anything
    else): the stream its methods run on, taken once. (A captured `default_stream()` stays a stream of its own:
    code under another stream context is not on it, TRL's bug before PR #7195.)"""
    values = _captured(program, function).get(text, ())
    return bool(values) and all(captures_current(v) and not names_default(v) for v in values)


def _captured(program: "Program", function: "Function") -> dict[str, list[str]]:
    """`self.<attr>` -> every value the class's methods bind it to that stream_aliases keeps."""
    if not function.owner:
        return {}
    return program.memo(("streams.captured", function.file.path, function.owner), lambda: {
        key: values for method in program.functions_of_class(function)
        for key, values in method.facts.stream_aliases.items() if key.startswith("self.")})


def _property_names_current(program: "Program", function: "Function", attr: str) -> bool:
    if not function.owner:
        return False
    prop = program.functions.get(f"{function.file.path}::{function.owner}.{attr}")
    values = prop.facts.stream_aliases.get(PROPERTY_VALUE, ()) if prop is not None else ()
    return bool(values) and all(names_current(v) for v in values)


def stream_words(stream: str) -> str:
    """A stream id as a reader would say it."""
    if stream == CURRENT_STREAM:
        return "the current stream"
    if stream == HOST:
        return "the host"
    return f"stream `{display(stream)}`"


def display(stream: str) -> str:
    if stream.startswith(PARAM):
        return stream[len(PARAM):]
    return stream.split("@", 1)[0] if stream else "torch.cuda.current_stream()"


def as_code(stream: str) -> str:
    """A stream id as an expression for a fix (`torch.cuda.current_stream()` for the current stream)."""
    return "torch.cuda.current_stream()" if stream == CURRENT_STREAM else display(stream)


def writable(code: str) -> bool:
    """A stream expression that can be written into new code as it stands (a name or attribute chain): what a
    `--fix` edit may insert."""
    return code == "torch.cuda.current_stream()" or code.replace(".", "_").isidentifier()
