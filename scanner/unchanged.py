"""A warm scan that reads almost nothing: what each file was at the last scan, known by its stat.

The last-scan key is made of every file's identity (its path and the hash of its bytes, or why it could not be
read). After a scan that read the files, `record()` keeps each file's stat (size, mtime, inode) with that identity;
the next scan, when every file's stat is still the same, takes the identities from the record instead of reading
and hashing every file (`known()`). Only if the key then matches the last scan's is the read skipped: the files
its findings name are read for their suppression comments, and that is all. Anything else (a changed, new or
removed file, another size limit) falls back to reading everything.

A file changed twice within one tick of the file system's clock could keep its stat: entries whose mtime is less
than RACY_NS before the stats were taken are not trusted (as git does with its index), so such a file is read.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

from streamcheck.scanner.sources import SourceFile

RECORD = "file_stats.json"
RACY_NS = 2_000_000_000


def stat_of(disk_path: str) -> list[int] | None:
    try:
        info = os.stat(disk_path)
    except OSError:
        return None
    return [info.st_size, info.st_mtime_ns, info.st_ino]


class Record:
    """What one scan read, to be written when it is done: display path -> [size, mtime_ns, inode, kind, value]
    (kind "id": value is the file's identity in the scan key; kind "skip": value is why it was skipped)."""

    def __init__(self, max_file_size_kb: int) -> None:
        self.taken_ns = time.time_ns()  # before any stat: an mtime later than this minus RACY_NS is not trusted
        self.max_file_size_kb = max_file_size_kb
        self.files: dict[str, list] = {}

    def add(self, file: SourceFile, stat: list[int] | None, kind: str, value: str) -> None:
        if stat is not None and stat[1] < self.taken_ns - RACY_NS:
            self.files[file.display] = [*stat, kind, value]

    def write(self, directory: Path) -> None:
        body = {"max_file_size_kb": self.max_file_size_kb, "files": self.files}
        try:
            directory.mkdir(parents=True, exist_ok=True)
            temporary = directory / f"{RECORD}.{os.getpid()}.tmp"
            temporary.write_text(json.dumps(body, separators=(",", ":")), encoding="utf-8")
            os.replace(temporary, directory / RECORD)
        except OSError:
            pass  # no record: the next scan reads the files, as without one


def known(files: list[SourceFile], directory: Path, max_file_size_kb: int):
    """(identity items in file order, skip notices, files read, files readable) from the record when every file's
    stat is what it recorded; None otherwise."""
    try:
        body = json.loads((directory / RECORD).read_text(encoding="utf-8"))
        recorded = body["files"]
        if body["max_file_size_kb"] != max_file_size_kb or not isinstance(recorded, dict):
            return None
    except (OSError, ValueError, KeyError, TypeError):
        return None
    identity: list[str] = []
    skipped: list[str] = []
    readable = 0
    for file in files:
        entry = recorded.get(file.display)
        if not isinstance(entry, list) or len(entry) != 5 or entry[:3] != stat_of(file.disk_path):
            return None
        kind, value = entry[3], entry[4]
        if kind == "skip":
            skipped.append(f"{file.display}: {value}")
        else:
            identity.append(value)
            readable += "\x1f!" not in value
    return identity, skipped, len(identity), readable
