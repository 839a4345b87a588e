"""`scan --fix` / `--diff`: the fixes of a scan's findings (streamcheck/fixes.py), applied file by file.

Unsafe fixes (a host synchronize) are applied only with --unsafe-fixes; without it they are counted, so the command
can say how many more --unsafe-fixes would make.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from streamcheck.findings import Finding
from streamcheck.fixes import Fix, apply_fixes, derive_fix, unified_diff


@dataclass
class FixOutcome:
    applied: list[Fix] = field(default_factory=list)
    diffs: list[str] = field(default_factory=list)  # one unified diff per changed file, in path order
    files: list[str] = field(default_factory=list)  # changed files
    unsafe_left: int = 0  # fixes held back for want of --unsafe-fixes
    errors: list[str] = field(default_factory=list)  # "path: why" for files that could not be written


def fix_findings(findings: list[Finding], unsafe: bool, write: bool) -> FixOutcome:
    outcome = FixOutcome()
    by_path: dict[str, list[Fix]] = {}
    for finding in findings:
        fix = derive_fix(finding)
        if fix is None:
            continue
        if not fix.safe and not unsafe:
            outcome.unsafe_left += 1
            continue
        by_path.setdefault(fix.path, []).append(fix)
    for path in sorted(by_path):
        try:
            with open(path, "rb") as handle:
                before = handle.read()
        except OSError as exc:
            outcome.errors.append(f"{path}: cannot read: {exc.strerror or exc}")
            continue
        after, applied = apply_fixes(before, by_path[path])
        if not applied:
            continue
        if write:
            try:
                with open(path, "wb") as handle:
                    handle.write(after)
            except OSError as exc:
                outcome.errors.append(f"{path}: cannot write: {exc.strerror or exc}")
                continue
        outcome.applied += applied
        outcome.files.append(path)
        outcome.diffs.append(unified_diff(path, before, after))
    return outcome


def plural(count: int, noun: str) -> str:
    return f"{count} {noun}{'' if count == 1 else 's'}"
