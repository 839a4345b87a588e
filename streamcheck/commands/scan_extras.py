"""The scan command's side doors: --show-settings, --show-files, --statistics, source on stdin (`-`), and the
progress bar. Kept apart from commands/scan.py, which is the scan itself."""

from __future__ import annotations

import dataclasses
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

STDIN = "-"


def show_settings(config, out=None) -> None:
    """The resolved configuration, one `key = value` per line, as a TOML reader would take it."""
    out = out or sys.stdout
    out.write(f"# configuration file: {config.source or '(none: defaults)'}\n# root: {config.root}\n")
    for item in dataclasses.fields(config):
        if item.name in ("root", "source", "code_origins"):
            continue
        value = getattr(config, item.name)
        if item.name == "per_file_ignores":
            value = {glob: list(codes) for glob, codes in value}
        elif isinstance(value, tuple):
            value = list(value)
        out.write(f"{item.name.replace('_', '-')} = {_toml(value)}\n")


def _toml(value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_toml(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{ " + ", ".join(f"{_toml(k)} = {_toml(v)}" for k, v in value.items()) + " }"
    if isinstance(value, str):
        return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
    return str(value)


def show_files(paths: list[str], config, out=None) -> int:
    """The files a scan of `paths` reads, one a line; the number of them."""
    out = out or sys.stdout
    from streamcheck.scanner.sources import discover

    files = discover(paths, config)
    for file in files:
        out.write(file.display + "\n")
    return len(files)


def statistics(findings, out=None) -> None:
    """ruff's --statistics: count, rule id, whether a fix exists, the rule's summary; most frequent first."""
    out = out or sys.stdout
    from streamcheck.fixes import derive_fix

    counts: dict[str, int] = {}
    fixable: dict[str, bool] = {}
    for finding in findings:
        counts[finding.rule] = counts.get(finding.rule, 0) + 1
        fixable[finding.rule] = fixable.get(finding.rule, False) or derive_fix(finding) is not None
    try:
        from streamcheck.catalogue import catalogue

        summaries = {rule_id: doc.summary for rule_id, doc in catalogue().items()}
    except Exception:  # noqa: BLE001 - statistics without summaries are still statistics
        summaries = {}
    width = max((len(str(n)) for n in counts.values()), default=1)
    for rule_id, count in sorted(counts.items(), key=lambda item: (-item[1], item[0])):
        mark = "[*]" if fixable[rule_id] else "   "
        out.write(f"{count:>{width}}\t{rule_id}\t{mark} {summaries.get(rule_id, '')}".rstrip() + "\n")


class StdinSource:
    """Source read from stdin, scanned as a file named `name` (--stdin-filename; default stdin.py).

    The scanner reads files, so the text goes into a temporary folder; findings are renamed back to `name`, and
    per-file-ignores are applied for `name` (the scanner saw the temporary path)."""

    def __init__(self, name: str | None):
        self.name = (name or "stdin.py").replace(os.sep, "/")
        self._folder = tempfile.mkdtemp(prefix="streamcheck-stdin-")
        self.path = os.path.join(self._folder, os.path.basename(self.name) or "stdin.py")
        data = sys.stdin.buffer.read() if hasattr(sys.stdin, "buffer") else sys.stdin.read().encode("utf-8")
        with open(self.path, "wb") as handle:
            handle.write(data)

    def rename(self, result, config) -> None:
        from streamcheck.scanner.sources import display_path

        temp = display_path(self.path)

        def fix(loc):
            return dataclasses.replace(loc, path=self.name) if loc.path == temp else loc

        renamed = [dataclasses.replace(f, primary=fix(f.primary), related=tuple(fix(r) for r in f.related))
                   for f in result.findings]
        rel = config.relative(Path(self.name))
        result.findings = [f for f in renamed if config.rule_enabled_for(f.rule, rel)]

    def close(self) -> None:
        shutil.rmtree(self._folder, ignore_errors=True)


class Progress:
    """A rich progress bar on stderr that appears only once extraction has run for a second, and only on a tty."""

    DELAY_S = 1.0

    def __init__(self, stream):
        self._stream = stream
        self._started = time.perf_counter()
        self._bar = None
        self._task = None

    @classmethod
    def maybe(cls, stream) -> "Progress | None":
        from streamcheck.report import is_tty

        return cls(stream) if is_tty(stream) else None

    def __call__(self, done: int, total: int) -> None:
        if self._bar is None:
            if time.perf_counter() - self._started < self.DELAY_S or done >= total:
                return
            from rich.console import Console
            from rich.progress import BarColumn, MofNCompleteColumn, Progress as Bar, TextColumn, TimeElapsedColumn

            self._bar = Bar(TextColumn("scanning"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                            console=Console(file=self._stream), transient=True)
            self._bar.start()
            self._task = self._bar.add_task("scan", total=total)
        self._bar.update(self._task, completed=done)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.stop()
