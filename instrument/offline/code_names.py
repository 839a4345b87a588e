"""The names the code gives its streams, for runtime fix hints that can be pasted where they belong.

The runtime knows a side stream by where it was created or first used ("side stream first used at racy.py:52 in
__init__"). Where that source line can be read and assigns a stream (`self.allgather_stream = torch.cuda.Stream()`),
the fix says `self.allgather_stream.wait_stream(...)` instead of a placeholder `side` defined in words. The
default (compute) stream is `torch.cuda.default_stream()`, which names it anywhere (inside a `with stream(s):`
block `current_stream()` would be the side stream). Without the source (a trace from another machine) nothing is
named and the hint keeps its placeholders.
"""

from __future__ import annotations

import linecache
import os
import re
from typing import Mapping

from streamcheck.findings import Finding, parse_frame
from streamcheck.instrument.actors import parse

_SITE = re.compile(r"\bat (?P<file>[^\s:]+\.py):(?P<line>\d+)")
_ASSIGN = re.compile(r"^\s*(?P<target>[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*)\s*(?::[^=]+)?=\s*(?P<value>.+)$")
DEFAULT_STREAM = "torch.cuda.default_stream()"


def code_names(finding: Finding, names: Mapping[str, str]) -> dict[str, str]:
    """actor -> the expression that names it in the program's code, for the actors that have one."""
    known_paths = _paths_of(finding)
    found: dict[str, str] = {}
    for actor in {*names, *(str((finding.extra.get(w) or {}).get(k, "")) for w in ("earlier", "later")
                            for k in ("actor", "stream"))}:
        if parse(actor).is_default_stream:
            found[actor] = DEFAULT_STREAM
            continue
        label = str(names.get(actor, ""))
        site = _SITE.search(label)
        if not site:
            continue
        path = _resolve(site.group("file"), known_paths, str(finding.extra.get("source_root") or ""))
        if path is None:
            continue
        assigned = _ASSIGN.match(linecache.getline(path, int(site.group("line"))))
        if assigned and "Stream(" in assigned.group("value"):
            found[actor] = assigned.group("target")
    return found


def _paths_of(finding: Finding) -> list[str]:
    paths = [finding.primary.path, *(loc.path for loc in finding.related)]
    for key in ("earlier_stack", "later_stack"):
        stack = finding.extra.get(key)
        if isinstance(stack, list):
            paths += [parsed[0] for parsed in map(parse_frame, map(str, stack)) if parsed]
    return [p for p in dict.fromkeys(paths) if p]


def _resolve(name: str, known: list[str], root: str = "") -> str | None:
    """The readable file a label's (possibly shortened) file name stands for; `root`: the folder relative paths
    are relative to (instrument/offline/source_lines.py), when not the current one."""
    for path in [name, *(p for p in known if p == name or p.endswith("/" + name))]:
        for candidate in (path, os.path.join(root, path)) if root and not os.path.isabs(path) else (path,):
            if os.path.isfile(candidate):
                return candidate
    return None
