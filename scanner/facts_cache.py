"""Per-file Facts on disk, so a warm scan re-parses only what changed; and the last scan's raw findings, so a scan
in which nothing changed at all needs neither Facts nor the rules.

An entry's key hashes the file's bytes, the path reports use for it (Facts carry it), streamcheck's version plus a
stamp of the rules' source files (a rules edit in a development checkout must not serve stale Facts), and the
options' cache_key() (extra stream contexts change what a file's Facts hold). Keys never need invalidation: a change
makes a new key. The last-scan entry is keyed by every file's path and hash plus select/ignore and the same stamp
and options; it holds the findings before per-file ignores, suppressions and the baseline, which are re-applied.
Entries are written atomically; a cache that cannot be written is silently not used. After a scan that extracted
something, entries it did not use and that are older than two weeks are deleted, so the cache does not grow forever.
Everything is JSON: a cache in a checked-out repository must never be able to run code (no pickle).

A cache is input like any other and may be damaged (a disk filling up, a hand edit, a stray FIFO): each file starts
with the hash of the JSON after it, only regular files are opened (never blocking), and anything that does not
check out is a miss, recomputed and rewritten, never an error.
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
import tempfile
import time
from pathlib import Path
from typing import Any

from streamcheck.findings import Finding

CACHE_DIR_NAME = ".streamcheck_cache"


def code_stamp(package_dir: str | Path, version: str) -> str:
    """streamcheck's version and the (name, size, mtime) of every module of a package: changes when its code does."""
    parts = [version]
    try:
        with os.scandir(package_dir) as entries:
            for entry in sorted(entries, key=lambda e: e.name):
                if entry.name.endswith(".py"):
                    info = entry.stat()
                    parts.append(f"{entry.name}:{info.st_size}:{info.st_mtime_ns}")
    except OSError:
        pass
    return hashlib.blake2b("|".join(parts).encode(), digest_size=12).hexdigest()


class FactsCache:
    """JSON entries under <dir>/facts/<key[:2]>/<key>.json."""

    def __init__(self, directory: str | Path, stamp: str, options_key: str):
        self.directory = Path(directory)
        self._salt = f"{stamp}\x1f{options_key}\x1f"
        self.scan_ends: Any = None  # what get_scan found beside the findings (report/regions.py `tell` checks it)

    def key(self, display_path: str, digest: str) -> str:
        return hashlib.blake2b(f"{self._salt}{display_path}\x1f{digest}".encode(), digest_size=20).hexdigest()

    def _file(self, key: str) -> Path:
        return self.directory / "facts" / key[:2] / f"{key}.json"

    def get(self, key: str) -> dict[str, Any] | None:
        return _read_json(self._file(key))

    def put(self, key: str, entry: dict[str, Any]) -> None:
        self._write(self._file(key), entry)

    def prune(self, keep: set[str], max_age_days: float = 14) -> int:
        """Delete Facts entries this scan did not use that are older than `max_age_days` (files long edited away,
        old option sets, old streamcheck versions), and leftovers of interrupted writes. Returns how many."""
        cutoff = time.time() - max_age_days * 86400
        removed = 0
        try:
            shards = list(os.scandir(self.directory / "facts"))
        except OSError:
            return 0
        for shard in shards:
            try:
                entries = list(os.scandir(shard.path))
            except OSError:
                continue
            for entry in entries:
                key = entry.name.split(".", 1)[0]
                try:
                    if key not in keep and entry.stat().st_mtime < cutoff:
                        os.unlink(entry.path)
                        removed += 1
                except OSError:
                    pass
        return removed

    # -- the last scan ------------------------------------------------------------------------------------------
    def scan_key(self, identity: list[str], select: tuple[str, ...], ignore: tuple[str, ...]) -> str:
        digest = hashlib.blake2b(self._salt.encode(), digest_size=20)
        digest.update(f"{','.join(select)}\x1f{','.join(ignore)}\x1e".encode())
        for item in identity:
            digest.update(item.encode() + b"\x1e")
        return digest.hexdigest()

    def get_scan(self, key: str) -> list[Finding] | None:
        """The last scan's raw findings if its key is `key`; the ends of their locations it kept (report/regions.py
        `ends_of`) are then in `scan_ends`."""
        self.scan_ends = None
        entry = _read_json(self.directory / "last_scan.json")
        if not isinstance(entry, dict) or entry.get("key") != key:
            return None
        try:
            findings = [Finding.from_dict(data) for data in entry["findings"]]
        except (KeyError, TypeError, ValueError):
            return None
        self.scan_ends = entry.get("ends")
        return findings

    def put_scan(self, key: str, findings: list[Finding], ends: dict | None = None) -> None:
        entry = {"key": key, "findings": [f.to_dict() for f in findings]}
        if ends:
            entry["ends"] = ends
        self._write(self.directory / "last_scan.json", entry)

    def _write(self, target: Path, entry: Any) -> None:
        try:
            if not target.parent.is_dir():
                self._prepare()
                target.parent.mkdir(parents=True, exist_ok=True)
            body = json.dumps(entry, separators=(",", ":")).encode()  # one C-encoder call; json.dump is Python
            fd, tmp = tempfile.mkstemp(dir=target.parent, suffix=".tmp")
            with os.fdopen(fd, "wb") as handle:
                handle.write(_checksum(body) + b"\n" + body)
            os.replace(tmp, target)
        except (OSError, TypeError, ValueError, RecursionError):
            try:
                os.unlink(tmp)  # type: ignore[possibly-undefined]
            except (OSError, NameError):
                pass

    def _prepare(self) -> None:
        # Keep the cache out of git and of backups, like other tools' caches.
        self.directory.mkdir(parents=True, exist_ok=True)
        ignore = self.directory / ".gitignore"
        if not ignore.exists():
            ignore.write_text("# created by streamcheck\n*\n", encoding="utf-8")
        tag = self.directory / "CACHEDIR.TAG"
        if not tag.exists():
            tag.write_text("Signature: 8a477f597d28d172789f06886806bc55\n# streamcheck facts cache\n", encoding="utf-8")


def _checksum(body: bytes) -> bytes:
    return hashlib.blake2b(body, digest_size=16).hexdigest().encode()


def _read_json(path: Path) -> Any:
    """The JSON of a cache file, or None for anything else: missing, not a regular file, cut short, edited."""
    try:
        # O_NONBLOCK: opening a FIFO planted in the cache must not wait for a writer.
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOFOLLOW", 0))
    except OSError:
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        with os.fdopen(fd, "rb") as handle:
            fd = -1
            data = handle.read()
    except OSError:
        return None
    finally:
        if fd >= 0:
            os.close(fd)
    digest, _, body = data.partition(b"\n")
    if digest != _checksum(body):
        return None
    try:
        return json.loads(body)
    except (ValueError, RecursionError):
        return None
