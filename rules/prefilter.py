"""Which files get the detailed facts pass (accesses, syncs, stream regions, hazard facts) and which only feed the
call graph (definitions, imports, calls).

A file can hold a stream region, a sync, an async copy or collective, or a consumer any rule looks at only if its
code names one of the words below. Stream and sync words are looked for inside identifiers (the engine's own tests
are substring tests: `comm_stream`, `"stream" in name`); the names the engine compares whole (`Event`, the options'
stream contexts, collectives and sync callables: `matches_name`) as whole identifiers (`reduced` is no `reduce`).
Comments and string literals other than f-strings (whose braces hold code) do not count: a docstring that says
"stream" does not make a file detailed. Measured (files detailed by the substring test over the whole text before ->
now): vLLM 0.33.0 1 449 -> 755 of 3 231, DeepSpeed 0.19.8 246 -> 162 of 751, torchrec 1.9.2 192 -> 95, megatron-core
0.16.1 164 -> 90, torch 2.13's distributed 178 -> 111; the detailed pass costs about three times a parse, this test
1.4 s CPU on all of vLLM (0.4 s before).

What it does not see (nor did the substring test before, unless a comment happened to name a word): a helper in a
file whose code names no word, called from stream code, contributes no parameter accesses to its callers
(summaries.py reads detailed callees only), unless it launches a Triton kernel (a kernel's stores and loads are
extracted in every file: summaries.has_access_facts). Detailing every file that holds such a callee would detail
more files than the prefilter leaves out (DeepSpeed 0.19.8: 222 plain files hold exact callees of detailed code).
The findings are compared with a scan that details every file in tests/scanner/test_prefilter_no_loss.py.
"""

from __future__ import annotations

import re

from .options import StaticOptions

# The stream and sync vocabulary, looked for inside identifiers (the engine's own tests are substring tests:
# `comm_stream`, `"stream" in name`).
WORDS = frozenset({"stream", "synchronize", "non_blocking", "async_op", "pin_memory", "wait_event"})
# Names the engine compares whole (`matches_name`: a call's last part equals one of them): `Event`, and the
# options' stream contexts, collectives and sync callables. `reduce` in `reduced_sum` is no collective.
# (point-to-point launches: async unflagged; `rendezvous` and `reduce_tensor` hand memory to other processes: SC107)
NAMES = frozenset({"Event", "isend", "irecv", "batch_isend_irecv", "rendezvous", "reduce_tensor"})

# A comment or a string literal (without its prefix). Every alternative starts with `#` or a quote, which the
# regex engine looks for fast, and the quoted bodies are unrolled loops (no backtracking): masking all of vLLM
# 0.33.0 (50 MB) takes about 1 s, and only files whose text names a word at all are masked. An unterminated
# literal does not match and stays as code (more detail, never less).
_QUOTED = "|".join((
    r"'''[^'\\]*(?:(?:\\.|'(?!''))[^'\\]*)*'''",
    r'"""[^"\\]*(?:(?:\\.|"(?!""))[^"\\]*)*"""',
    r"'[^'\\\r\n]*(?:\\.[^'\\\r\n]*)*'",
    r'"[^"\\\r\n]*(?:\\.[^"\\\r\n]*)*"',
))
# (DOTALL: `.` only follows a backslash, and an escaped line end is part of the literal)
_COMMENTS_AND_STRINGS = re.compile(rf"#[^\r\n]*|{_QUOTED}", re.DOTALL)
_PREFIX_LETTERS = "rRbBuUfF"


def names_of(options: StaticOptions) -> frozenset[str]:
    """Every name whose mention as an identifier makes a file detailed (the last part of a dotted option name)."""
    names = NAMES | options.all_stream_contexts | options.all_collectives | options.all_sync_callables
    return frozenset(name.rsplit(".", 1)[-1] for name in names)


def code_of(source: str) -> str:
    """`source` with a space for each comment and string literal, except f-strings (their braces are code)."""
    return _COMMENTS_AND_STRINGS.sub(_code_in, source)


def _code_in(match: re.Match) -> str:
    text = match.group()
    if text[0] != "#":
        before = match.string[max(0, match.start() - 2):match.start()]
        prefix = before[len(before.rstrip(_PREFIX_LETTERS)):]  # `f`, `rf`, `Fr`; a keyword's `if"x"` too (kept)
        if "f" in prefix or "F" in prefix:
            return text
    return " "


def needs_detail(source: str, options: StaticOptions) -> bool:
    """Whether the file's code (not its comments or strings) holds a word of WORDS, or a name of
    `names_of(options)` as a whole identifier."""
    names = _names(options)
    if not any(word in source for word in WORDS) and not _names_in(source, names):
        return False  # the common case, without the pass over literals
    code = code_of(source)
    return any(word in code for word in WORDS) or _names_in(code, names)


_NAMES: dict[StaticOptions, frozenset[str]] = {}


def _names(options: StaticOptions) -> frozenset[str]:
    names = _NAMES.get(options)
    if names is None:
        names = _NAMES[options] = names_of(options)
    return names


def _names_in(code: str, names: frozenset[str]) -> bool:
    """Whether one of `names` is a whole identifier somewhere in `code` (`send` in `x.send(` but not in `sender`).
    A name that holds a shorter one (`isend`, `all_gather`) can only be in code that holds the shorter one: one
    scan of the text per shortest name (11 of 32 by default), the longer names only where it was found."""
    for core, holders in _cores(names):
        if core in code and any(_name_in(code, name) for name in holders):
            return True
    return False


_CORES: dict[frozenset[str], list[tuple[str, tuple[str, ...]]]] = {}


def _cores(names: frozenset[str]) -> list[tuple[str, tuple[str, ...]]]:
    """(a name that holds no other one, every name that holds it) for `names`, each name under one such core."""
    found = _CORES.get(names)
    if found is None:
        cores = sorted(name for name in names if not any(other != name and other in name for other in names))
        left = set(names)
        found = []
        for core in cores:
            holders = tuple(sorted(name for name in left if core in name))
            left -= set(holders)
            found.append((core, holders))
        _CORES[names] = found
    return found


def _name_in(code: str, name: str) -> bool:
    """Whether `name` is a whole identifier somewhere in `code`."""
    at = code.find(name)
    while at >= 0:
        end = at + len(name)
        if not (at and _IDENTIFIER.match(code, at - 1)) and not _IDENTIFIER.match(code, end):
            return True
        at = code.find(name, at + 1)
    return False


_IDENTIFIER = re.compile(r"\w")
