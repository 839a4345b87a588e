"""What every rule is: an id, a one-line summary, documentation in its docstring, examples, and `check`.

A rule lives alone in `rules/scNNN_<name>.py`; the registry finds it there. The docstring has the sections
"What it does", "Why it is bad", "Example" and "Fix". `VALID` snippets must give no finding of the rule; each
`INVALID` snippet marks every line where a finding must point with a trailing `# expect: <rule id>` comment.
"""

from __future__ import annotations

import inspect
import re
from typing import TYPE_CHECKING, ClassVar, Iterable

from streamcheck.findings import ROLE_CALL, ROLE_STREAM_CONTEXT, Finding, Location

if TYPE_CHECKING:
    from .program import Function, Program
    from .races import Context


class Rule:
    id: ClassVar[str] = ""
    summary: ClassVar[str] = ""
    VALID: ClassVar[list[str]] = []
    INVALID: ClassVar[list[str]] = []

    @classmethod
    def documentation(cls) -> str:
        body = inspect.cleandoc(cls.__doc__ or "")
        return f"{cls.id}: {cls.summary}\n\n{body}\n"

    def check(self, program: "Program") -> Iterable[Finding]:
        raise NotImplementedError

    @classmethod
    def expected_lines(cls, snippet: str) -> list[int]:
        """Lines of an INVALID snippet marked `# expect: <this rule's id>`."""
        marker = re.compile(rf"#\s*expect:\s*{re.escape(cls.id)}\b")
        return [n for n, text in enumerate(snippet.splitlines(), 1) if marker.search(text)]


def location(function: "Function", line: int, column: int, role: str, note: str = "") -> Location:
    """A Location in `function`'s file with the stripped source line as snippet."""
    return Location(
        path=function.file.path, line=line, column=column, role=role, note=note, snippet=function.file.snippet(line))


def handed_out_extra(path: str, writer_stream: str) -> dict:
    """The SC101 extra of a device write on `writer_stream` read by code outside the scan (the caller, the code
    after a hook or `backward()`): one shape for every query that reports such a hand-out."""
    return {"path": path, "writer_stream": writer_stream, "reader_stream": "", "consumer": "outside",
            "producer": "device op"}


def insert_edit(function: "Function", line: int, column: int, statement: str, where: str, safe: bool = True) -> dict:
    """A finding's `fix_edit` (what `--fix` applies): insert `statement` at (line, column) of `function`'s file;
    `where` finishes the description ("before the read at line 12")."""
    return {"path": function.file.path, "line": line, "column": column, "insert": statement, "safe": safe,
            "description": f"insert `{{statement}}` {where}"}


def way_of(program: "Program", region_of: "Context", chain_of: "Context") -> list[Location]:
    """How an access got onto its stream, for a finding's related locations: the `with` that switched to it
    (`region_of`'s region, if any), then each call of `chain_of`'s chain."""
    from .streams import stream_words

    found = []
    if region_of.region_fn is not None:
        region = region_of.region_fn.facts.regions[region_of.region]
        found.append(location(region_of.region_fn, region.line, region.column, ROLE_STREAM_CONTEXT,
                              f"switches to {stream_words(region_of.stream)}"))
    for edge in chain_of.chain:
        caller, callee = program.functions[edge.caller], program.functions[edge.callee]
        found.append(location(caller, edge.call.line, edge.call.column, ROLE_CALL, f"calls {callee.facts.qualname}"))
    return found


def called_on_one_side_stream(program: "Program", function: "Function"):
    """(the body as a region, the caller's `with` as a location) for a function every call of which comes from
    regions of one side stream (Program.only_side_stream; named as that `with` names it), or None."""
    from .facts import Region

    if program.only_side_stream(function.id) is None:
        return None
    region_fn, index, _ = program.region_chains(function.id)[0]
    caller_region = region_fn.facts.regions[index]
    where = location(region_fn, caller_region.line, caller_region.column, ROLE_STREAM_CONTEXT,
                     f"switches to `{caller_region.stream}`, then calls into {function.facts.qualname}")
    return Region(caller_region.stream, function.facts.line, 1, function.facts.end_line), where
