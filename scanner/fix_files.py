"""`scan --fix` / `--diff`: the fixes of a scan's findings (streamcheck/fixes.py), applied file by file.

Unsafe fixes (a host synchronize) are applied only with --unsafe-fixes; without it they are counted, so the command
can say how many more --unsafe-fixes would make.
"""

from __future__ import annotations

import sys
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


def fix_findings(findings: list[Finding], unsafe: bool, write: bool, disk: dict[str, str] | None = None) -> FixOutcome:
    """`disk` maps a reported path to the file that holds its text, where they differ (source read from stdin)."""
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
            with open((disk or {}).get(path, path), "rb") as handle:
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


# A fix can make the next finding of a file reachable (two races on one tensor): a few rounds, never forever.
_FIX_ROUNDS = 4


def run_fixes(args, result, scan_once):
    """--diff: print what --fix would change and return the exit code. --fix: apply, rescan, return what is left."""
    if args.diff:
        outcome = fix_findings(result.findings, args.unsafe_fixes, write=False, disk=getattr(args, "stdin_map", None))
        sys.stdout.write("".join(outcome.diffs))
        if not args.quiet:
            print(f"streamcheck: would fix {plural(len(outcome.applied), 'finding')} in "
                  f"{plural(len(outcome.files), 'file')}{_unsafe_hint(outcome.unsafe_left)}", file=sys.stderr)
        return 1 if outcome.applied else 0
    fixed, files, unsafe_left = 0, set(), 0
    for _ in range(_FIX_ROUNDS):
        outcome = fix_findings(result.findings, args.unsafe_fixes, write=True)
        for error in outcome.errors:
            print(f"streamcheck scan: {error}", file=sys.stderr)
        unsafe_left = outcome.unsafe_left
        if not outcome.applied:
            break
        fixed += len(outcome.applied)
        files.update(outcome.files)
        result = scan_once()
        if isinstance(result, int):
            return result
    if not args.quiet:  # -q: the findings left, nothing else
        print(f"streamcheck: fixed {plural(fixed, 'finding')} in {plural(len(files), 'file')}, "
              f"{len(result.findings)} left{_unsafe_hint(unsafe_left)}", file=sys.stderr)
    return result


def _unsafe_hint(count: int) -> str:
    if not count:
        return ""
    return f"; {count} more with --unsafe-fixes (they block the host: a performance change)"
