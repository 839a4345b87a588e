"""`--format text` (default): for each finding its position, rule, message, the source line with a caret, the
related locations (the write, the read, the stream context, ...), the runtime count, the few `extra` facts in
TEXT_EXTRAS, and the fix hint.

Rendered with rich Text objects (never markup, so `[SC101]` in a message is printed as is); colours only when the
command says so (a terminal without NO_COLOR).
"""

from __future__ import annotations

import linecache
from typing import TextIO

from rich.console import Console
from rich.text import Text

from streamcheck.findings import Finding, Location
from streamcheck.report import ReportContext, count_by_rule

_SEVERITY_STYLE = {"error": "bold red", "warning": "bold yellow"}

# The `extra` keys this layout shows as rows: what the message and the locations do not already tell a reader (the
# tensor and the streams of a runtime finding that lacks the runtime layout's data). Every other key is a rule's own
# data (the written path, the reader stream, the copy's line, the work handle...), repeated in its message: it stays
# in json and sarif, where tools read it.
TEXT_EXTRAS = ("streams", "tensor")


def write(findings: list[Finding], out: TextIO, context: ReportContext) -> None:
    console = make_console(out, context.color, context.width)
    for finding in findings:
        console.print(render(finding, context))
    if not context.quiet:
        console.print(summary(findings, context))


def make_console(out: TextIO, color: bool, width: int = 0) -> Console:
    """`width` > 0 (a terminal): lines are wrapped at word boundaries to it, rather than cut mid-word by the
    terminal; 0 (a file, a pipe): never wrapped, so tools see one line per line."""
    return Console(file=out, highlight=False, soft_wrap=not width, width=width or None, emoji=False,
                   force_terminal=color, no_color=not color, color_system="auto" if color else None)


def render(finding: Finding, context: ReportContext) -> Text:
    """One finding's block, in the context's own layout when it has one for this finding."""
    if context.layout is not None:
        laid_out = context.layout(finding, _SEVERITY_STYLE.get(finding.severity, "bold cyan"))
        if laid_out is not None:
            return laid_out
    return render_finding(finding)


def render_finding(finding: Finding) -> Text:
    text = Text()
    text.append(finding.primary.short(), style="bold")
    text.append(": ")
    text.append(finding.rule, style=_SEVERITY_STYLE.get(finding.severity, "bold cyan"))
    if finding.kind:
        text.append(f" {finding.kind}", style="magenta")
    text.append(f" {finding.message}")
    if finding.count > 1:
        text.append(f" (seen {finding.count} times)", style="dim")
    text.append("\n")
    _source_block(text, finding.primary)
    for loc in finding.related:
        text.append(f"  {loc.role or 'see':<15}", style="cyan")
        text.append(loc.short())
        if loc.note:
            text.append(f"  {loc.note}", style="dim")
        line = _line_text(loc)
        if line:
            text.append(f"  | {line.strip()}", style="dim")
        text.append("\n")
    for key in TEXT_EXTRAS:
        value = finding.extra.get(key)
        if value in ("", None, [], {}):
            continue
        text.append(f"  {key:<15}", style="cyan")
        text.append(_plain(value) + "\n")
    if finding.fix:
        text.append("  fix: ", style="bold green")
        text.append(finding.fix + "\n")
    return text


def _source_block(text: Text, loc: Location) -> None:
    from streamcheck.report.regions import with_end

    loc = with_end(loc)  # the caret underlines the whole expression where the source shows where it ends
    line = _file_line(loc)
    gutter = f"{loc.line:>6} | "
    if not line:  # the file is not at hand: show the stored snippet, without a caret (its indent is gone)
        if loc.snippet:
            text.append(gutter, style="dim")
            text.append(loc.snippet + "\n")
        return
    indent = len(line) - len(line.lstrip())
    shown = line.strip()
    text.append(gutter, style="dim")
    text.append(shown + "\n")
    caret_at = max(0, loc.column - 1 - indent)
    width = 1
    if loc.end_column and loc.end_line in (None, loc.line) and loc.end_column > loc.column:
        width = loc.end_column - loc.column
    text.append(" " * (len(gutter) + caret_at))
    text.append("^" * max(1, min(width, len(shown) - caret_at)) + "\n", style="bold red")


def _file_line(loc: Location) -> str:
    """The full source line, if the file is at hand and still says what the finding saw (the column needs it)."""
    try:  # linecache decodes by the file's coding cookie: a bogus one (rot13, utf-16) raises, the snippet stays
        linecache.checkcache(loc.path)  # the file may have changed since an earlier report in this process
        line = linecache.getline(loc.path, loc.line).rstrip("\r\n")
    except (LookupError, UnicodeError, SyntaxError, ValueError, OSError):
        line = ""
    if line.strip() and (not loc.snippet or " ".join(line.split()) == " ".join(loc.snippet.split())):
        return line
    return ""


def _line_text(loc: Location) -> str:
    return _file_line(loc) or loc.snippet


def _plain(value) -> str:
    if isinstance(value, (list, tuple)):
        return ", ".join(_plain(v) for v in value)
    if isinstance(value, dict):
        return ", ".join(f"{k}={_plain(v)}" for k, v in value.items())
    return str(value)


def summary(findings: list[Finding], context: ReportContext) -> Text:
    files = context.scope or f"{context.files} file{'s' if context.files != 1 else ''}"
    extra = []
    if context.suppressed:
        extra.append(f"{context.suppressed} suppressed inline")
    if context.baselined:
        extra.append(f"{context.baselined} in the baseline")
    if context.skipped:
        extra.append(f"{len(context.skipped)} file{'s' if len(context.skipped) != 1 else ''} skipped")
    tail = f" ({', '.join(extra)})" if extra else ""
    if not findings:
        return Text(f"No findings in {files}{tail}.", style="bold green")
    by_rule = ", ".join(f"{rule} x{n}" for rule, n in count_by_rule(findings).items())
    noun = "finding" if len(findings) == 1 else "findings"
    return Text(f"Found {len(findings)} {noun} in {files}: {by_rule}{tail}.", style="bold")
