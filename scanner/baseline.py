"""Baseline files: accept today's findings, fail only on new ones.

A baseline is JSON: {"tool": "streamcheck", "version": 1, "findings": [{fingerprint, rule, path, line, message}]}.
Matching uses Finding.fingerprint only (rule, file, enclosing function, text of the involved lines), so findings
survive edits that move lines. It is a multiset: two identical findings in the baseline excuse two, not three.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Iterable

from streamcheck.findings import Finding

FORMAT_VERSION = 1


class BaselineError(Exception):
    """The baseline file cannot be read or is not a streamcheck baseline."""


def write_baseline(path: str | Path, findings: Iterable[Finding]) -> int:
    entries = [
        {"fingerprint": f.fingerprint, "rule": f.rule, "path": f.primary.path, "line": f.primary.line,
         "message": f.message}
        for f in findings
    ]
    data = {"tool": "streamcheck", "version": FORMAT_VERSION, "findings": entries}
    Path(path).write_text(json.dumps(data, indent=1) + "\n", encoding="utf-8")
    return len(entries)


def read_baseline(path: str | Path) -> Counter[str]:
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except OSError as exc:
        raise BaselineError(f"{path}: cannot read baseline: {exc.strerror or exc}") from None
    except (ValueError, UnicodeDecodeError) as exc:
        raise BaselineError(f"{path}: not a JSON file: {exc}") from None
    if not isinstance(data, dict) or data.get("tool") != "streamcheck" or not isinstance(data.get("findings"), list):
        raise BaselineError(f"{path}: not a streamcheck baseline (write one with --write-baseline)")
    if data.get("version") != FORMAT_VERSION:
        raise BaselineError(f"{path}: baseline format version {data.get('version')!r}, expected {FORMAT_VERSION}")
    try:
        return Counter(str(entry["fingerprint"]) for entry in data["findings"])
    except (TypeError, KeyError):
        raise BaselineError(f"{path}: a baseline entry has no fingerprint") from None


def subtract_baseline(findings: list[Finding], known: Counter[str]) -> tuple[list[Finding], int]:
    """(findings not excused by the baseline, how many were excused)."""
    remaining = Counter(known)
    new: list[Finding] = []
    for finding in findings:
        fp = finding.fingerprint
        if remaining[fp] > 0:
            remaining[fp] -= 1
        else:
            new.append(finding)
    return new, len(findings) - len(new)
