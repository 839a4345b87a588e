"""What git knows that a scan uses: the lines changed since a revision (`scan --diff-base REF`) and the files that
.gitignore leaves out of discovery.

The analysis always covers the whole program (a write in an unchanged file races with a read in a changed one);
these only decide which findings are reported and which files are read.
"""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

from streamcheck.findings import Finding

_HUNK = re.compile(r"^@@ -\d+(?:,\d+)? \+(\d+)(?:,(\d+))? @@")
WHOLE_FILE = None  # in ChangedLines: a file that is new since the revision (every line counts as changed)
ChangedLines = dict[str, "set[int] | None"]  # absolute path -> changed lines of its current text


class GitError(Exception):
    """git is missing, the folder is not in a repository, or the revision does not exist."""


def _git(args: list[str], cwd: str) -> str:
    try:
        done = subprocess.run(["git", "-c", "core.quotepath=off", *args], cwd=cwd, capture_output=True,
                              timeout=120, check=False)
    except FileNotFoundError:
        raise GitError("git is not installed") from None
    except subprocess.TimeoutExpired:
        raise GitError(f"git {args[0]} took longer than 120 s") from None
    if done.returncode != 0:
        message = done.stderr.decode("utf-8", "replace").strip().splitlines()
        raise GitError(message[-1] if message else f"git {args[0]} failed with exit code {done.returncode}")
    return done.stdout.decode("utf-8", "surrogateescape")


def repository_root(start: str) -> str:
    return _git(["rev-parse", "--show-toplevel"], start).strip()


def changed_lines(ref: str, start: str = ".") -> ChangedLines:
    """Lines of the working tree changed since `ref` (committed, staged or not), plus untracked files as wholes.

    A deletion marks the lines on both sides of where the deleted text was: removing a `wait_stream` line makes
    the race next to it new.
    """
    root = repository_root(start)
    try:
        _git(["rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}"], root)
    except GitError:
        raise GitError(f"{ref!r} is not a commit of the repository at {root}") from None
    diff = _git(["diff", "--no-color", "--no-ext-diff", "--unified=0", "--no-renames", ref, "--"], root)
    changed: ChangedLines = {}
    current: set[int] | None = None
    for line in diff.splitlines():
        if line.startswith("+++ "):
            name = line[4:]
            current = None
            if name != "/dev/null":
                current = changed.setdefault(os.path.join(root, name[2:] if name.startswith("b/") else name), set())
            continue
        match = _HUNK.match(line)
        if match and current is not None:
            start_line, count = int(match.group(1)), int(match.group(2) if match.group(2) is not None else 1)
            if count == 0:  # a pure deletion after line start_line
                current.update((start_line, start_line + 1))
            else:
                current.update(range(start_line, start_line + count))
    for name in _git(["ls-files", "-z", "--others", "--exclude-standard"], root).split("\0"):
        if name:
            changed[os.path.join(root, name)] = WHOLE_FILE
    return changed


def touches_changed_lines(finding: Finding, changed: ChangedLines) -> bool:
    for loc in (finding.primary, *finding.related):
        path = os.path.abspath(loc.path)
        if path in changed and (changed[path] is WHOLE_FILE or loc.line in changed[path]):
            return True
    return False


def touches_paths(finding: Finding, paths: list[str]) -> bool:
    """Whether the finding's primary or a related location lies in one of `paths` (files, or folders: below)."""
    wanted = [os.path.abspath(p) for p in paths]
    for loc in (finding.primary, *finding.related):
        where = os.path.abspath(loc.path)
        if any(where == p or where.startswith(p.rstrip(os.sep) + os.sep) for p in wanted):
            return True
    return False


def ignored_paths(top: str) -> frozenset[str]:
    """Absolute paths below `top` that .gitignore (and .git/info/exclude, the global excludes file) leaves out:
    folders as one entry each. Empty outside a repository or without git: then nothing is left out."""
    try:
        listing = _git(["ls-files", "-z", "--others", "--ignored", "--exclude-standard", "--directory"],
                       os.path.abspath(top))
    except GitError:
        return frozenset()
    base = Path(os.path.abspath(top))
    return frozenset(os.path.normpath(base / name) for name in listing.split("\0") if name)
