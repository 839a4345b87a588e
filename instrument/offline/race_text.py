"""The text of a runtime race finding, laid out like a compiler error:

    path:line:col: SC201 RAW <headline>
      tensor   <name>: <dtype[shape]>, ds_id, allocated at ..., storage, race on bytes [a, b)
      write    <op> on <stream>, <thread>
               <file:line in function>
                 <line> | <source>
               called from <caller>            (up to six callers, torch frames left out)
      read     <op> on <stream>, launched from <stream>, <thread>
               ...
      missing  <stream> never waited for <stream> after <place>
      fix: <the edge to add, as code, at its place>
      seen N times on ranks 0, 1 (rank 0: 2, rank 1: 2)

The earlier access comes first, so the block reads in the order things happened. text.py uses this for every
finding that carries the runtime's access data; the words come from runtime.describe.
"""

from __future__ import annotations

import linecache

from rich.text import Text

from streamcheck.findings import Finding

from .race_view import AccessView, RaceView, describe, display_path, headline, is_runtime_finding

MAX_CALLERS = 6
_INDENT = " " * 11


def layout(finding: Finding, severity_style: str) -> Text | None:
    """ReportContext.layout of runtime reports: runtime races in this layout, any other finding in the common one."""
    return render_runtime_finding(finding, severity_style) if is_runtime_finding(finding) else None


def render_runtime_finding(finding: Finding, severity_style: str = "bold red") -> Text:
    view = describe(finding)
    text = Text()
    text.append(finding.primary.short(), style="bold")
    text.append(": ")
    text.append(finding.rule, style=severity_style)
    text.append(f" {finding.kind}", style="magenta")
    text.append(f" {headline(view)}\n")
    _row(text, "tensor", view.tensor)
    for access in (view.earlier, view.later):
        _access(text, access)
    _row(text, "missing", view.missing)
    text.append("  fix: ", style="bold green")
    text.append(view.fix + "\n")
    seen = _seen(view)
    if seen:
        text.append(f"  {seen}\n", style="dim")
    return text


def _row(text: Text, label: str, value: str) -> None:
    text.append(f"  {label:<9}", style="cyan")
    text.append(value + "\n")


def _access(text: Text, access: AccessView) -> None:
    if access.verb == "free":
        who = f"by host thread {access.thread}; the block was allocated on {access.stream}"
    else:
        who = f"{access.op} on {access.stream}"
        if access.launched_from:
            who += f", launched from {access.launched_from}"
        if access.thread and access.thread != access.actor:
            who += f", host thread {access.thread}"
    _row(text, access.verb, who)
    if access.path and access.path != "<unknown>":
        place = f"{display_path(access.path)}:{access.line}"
        text.append(_INDENT + place + (f" in {access.function}" if access.function else "") + "\n")
        line = _source(access)
        if line:
            text.append(f"{_INDENT}  {access.line:>5} | ", style="dim")
            text.append(line + "\n")
    else:
        text.append(_INDENT + "at an unknown site\n")
    for n, caller in enumerate(access.callers[:MAX_CALLERS]):
        text.append(_INDENT + ("called from " if n == 0 else " " * 12), style="dim")
        text.append(caller + "\n", style="dim")


def _source(access: AccessView) -> str:
    """The source line when the file is at hand and still says what the runtime saw, else the recorded snippet."""
    linecache.checkcache(access.path)
    line = linecache.getline(access.path, access.line).strip()
    if line and (not access.snippet or " ".join(line.split()) == " ".join(access.snippet.split())):
        return line
    return access.snippet


def _seen(view: RaceView) -> str:
    parts = []
    times = "once" if view.count == 1 else f"{view.count} times"
    if view.ranks:
        noun = "rank" if len(view.ranks) == 1 else "ranks"
        parts.append(f"seen {times} on {noun} {', '.join(str(r) for r in view.ranks)}")
        if len(view.counts_by_rank) > 1:
            parts[-1] += " (" + ", ".join(f"rank {r}: {n}" for r, n in view.counts_by_rank.items()) + ")"
    elif view.count > 1:
        parts.append(f"seen {times}")
    if view.steps:
        parts.append(f"in steps {_ranges(view.steps)}")
    return ", ".join(parts)


def _ranges(numbers: list[int]) -> str:
    """[1, 2, 3, 7] -> "1-3, 7"."""
    out: list[str] = []
    start = prev = None
    for n in sorted(set(numbers)):
        if start is None:
            start = prev = n
        elif n == prev + 1:
            prev = n
        else:
            out.append(f"{start}-{prev}" if start != prev else str(start))
            start = prev = n
    if start is not None:
        out.append(f"{start}-{prev}" if start != prev else str(start))
    return ", ".join(out)
