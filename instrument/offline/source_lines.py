"""Source lines for runtime findings replayed away from where they were recorded.

A trace names files as the recording process saw them (relative to its working folder). `streamcheck analyze`
run from another folder would find none of them, and the report would lose its source lines and the code's own
stream names. A trace usually lies inside the project it was recorded in, so the folders above the trace are tried
as that working folder: the first under which the finding's file exists is kept in `extra["source_root"]`.
"""

from __future__ import annotations

import dataclasses
import linecache
import os
from pathlib import Path

from streamcheck.findings import Finding, Location

MAX_LEVELS = 8  # folders above the trace that are tried


def source_root(finding: Finding, near: str | os.PathLike) -> str | None:
    """The folder the finding's relative paths are relative to: "" when they resolve from here, else a folder at
    or above `near`, else None."""
    path = finding.primary.path
    if not path or os.path.isabs(path) or os.path.isfile(path):
        return ""
    folder = Path(os.path.abspath(near))
    folder = folder if folder.is_dir() else folder.parent
    for candidate in [folder, *folder.parents][:MAX_LEVELS]:
        if (candidate / path).is_file():
            return str(candidate)
    return None


def with_sources(findings: list[Finding], near: str | os.PathLike) -> list[Finding]:
    """Each finding with the snippets of its locations filled from the files found through source_root."""
    out = []
    for finding in findings:
        root = source_root(finding, near)
        if not root:
            out.append(finding)
            continue

        def filled(loc: Location) -> Location:
            if loc.snippet or loc.line <= 0 or os.path.isabs(loc.path):
                return loc
            return dataclasses.replace(loc, snippet=linecache.getline(os.path.join(root, loc.path), loc.line).strip())

        out.append(dataclasses.replace(finding, primary=filled(finding.primary),
                                       related=tuple(filled(loc) for loc in finding.related),
                                       extra={**finding.extra, "source_root": root}))
    return out
