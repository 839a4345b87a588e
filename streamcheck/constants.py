"""Facts both halves and every command share, each said once: exit codes, the version, file formats, the project URL.

Torch-free and import-free (beyond the standard library), so any module of any layer may import it.
"""

from __future__ import annotations

import gzip
from typing import BinaryIO

PROJECT_URL = "https://github.com/streamcheck/streamcheck"

# Exit status of every command (`streamcheck run` returns the program's own failing status instead of 1).
EXIT_CLEAN, EXIT_FINDINGS, EXIT_ERROR = 0, 1, 2

# The two JSONL files the runtime writes; each starts with {"e": "header", "format": ..., "version": ...}.
FINDINGS_FORMAT = "streamcheck-findings"  # streamcheck-rank{R}.jsonl: one Finding.to_dict() per line
FINDINGS_VERSION = 1
TRACE_FORMAT = "streamcheck-trace"  # `streamcheck run --trace`: one event per line (instrument/trace.py)
TRACE_VERSION = 1

GZIP_MAGIC = b"\x1f\x8b"


# The package's version: pyproject.toml reads it from here (setuptools' `attr:`, without importing the package),
# so a scan never asks importlib.metadata (40 ms of every warm scan's start).
VERSION = "0.1.0"


def version() -> str:
    """The package's version (one place: VERSION, which the distribution's metadata is built from)."""
    return VERSION


def open_maybe_gzip(raw: BinaryIO) -> BinaryIO:
    """`raw` (seekable, at its start) as bytes, decompressed when it starts with gzip's magic number."""
    magic = raw.read(2)
    raw.seek(0)
    return gzip.GzipFile(fileobj=raw) if magic == GZIP_MAGIC else raw
