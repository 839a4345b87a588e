"""Which files a scan reads, and reading them without ever raising.

Discovery walks the given folders for `*.py` (and `*.pyi`), prunes excluded folders before descending, and does not
follow symlinked folders (so a symlink loop cannot make it spin); a folder it cannot list is handed back as a
problem (the scan reports it), never skipped in silence. Reading turns every way a file can be unreadable into an
`Unreadable` with one clear sentence: permission denied, a symlink loop, not UTF-8 (or not the encoding its coding
cookie names, or a cookie naming a codec that is not a text encoding), UTF-16/32 text, a binary file, a file too
large to be hand-written source. File names that are not UTF-8 are shown with their odd bytes escaped (\\xe9), so
every report format can print them.
"""

from __future__ import annotations

import codecs
import errno
import hashlib
import os
import re
import stat
from dataclasses import dataclass
from pathlib import Path

from streamcheck.scanner.config import ScanConfig

PYTHON_SUFFIXES = (".py", ".pyi")


@dataclass(frozen=True)
class SourceFile:
    """A file to scan: where it is on disk, how reports name it, and its path relative to the project root."""

    disk_path: str
    display: str  # as given to the scanner, '/'-separated, no leading './'
    rel: str  # relative to the config root, for excludes and per-file-ignores


@dataclass(frozen=True)
class Source:
    """A file's text and the hash of its bytes."""

    text: str
    digest: str


@dataclass(frozen=True)
class Unreadable:
    """Why a file could not be read as Python source; line/column when the problem has a position."""

    message: str
    line: int = 1
    column: int = 1
    skip: bool = False  # True: skipped on purpose (too large) -> a notice, not a finding


class MissingPath(Exception):
    """A path given on the command line does not exist."""


def display_path(path: str) -> str:
    """'/'-separated and printable: bytes of a name that are not UTF-8 (surrogate escapes) become \\xNN."""
    norm = os.path.normpath(path).replace(os.sep, "/")
    try:
        norm.encode("utf-8")
    except UnicodeEncodeError:
        norm = os.fsencode(norm).decode("utf-8", "backslashreplace")
    return norm


@dataclass(frozen=True)
class FolderProblem:
    """A folder discovery could not list: its files were not scanned."""

    display: str
    message: str


def discover(paths: list[str], config: ScanConfig, problems: list[FolderProblem] | None = None) -> list[SourceFile]:
    """The Python files under `paths`, excluded ones left out, each once, in a stable order.

    A file named explicitly is scanned whatever its suffix and even when excluded, unless `force-exclude` is set
    (as ruff does). Folders walk without what .gitignore ignores (`respect-gitignore`). Raises MissingPath for a path that does not exist at all. Folders that cannot be
    listed are appended to `problems`.
    """
    found: dict[str, SourceFile] = {}
    failed = problems if problems is not None else []
    for given in paths:
        if not os.path.lexists(given):
            raise MissingPath(given)
        if os.path.isdir(given):
            for disk_path, rel in _walk(given, config, failed):
                _add(found, disk_path, rel)
        else:  # a file, or a symlink that leads nowhere (reading it reports why)
            rel = config.relative(Path(given))
            # Named on purpose: scanned even inside an excluded folder, unless force-exclude (for pre-commit).
            if not (config.force_exclude and config.is_excluded(rel)):
                _add(found, given, rel)
    return sorted(found.values(), key=lambda f: f.display)


def _add(found: dict[str, SourceFile], disk_path: str, rel: str) -> None:
    key = os.path.abspath(disk_path)
    if key not in found:
        found[key] = SourceFile(disk_path=disk_path, display=display_path(disk_path), rel=rel)


def _walk(top: str, config: ScanConfig, problems: list[FolderProblem]):
    """(disk path, root-relative path) of the Python files below `top`, excluded entries pruned.

    os.walk does not descend into symlinked folders (followlinks=False), so a symlink loop cannot make it spin;
    pruning `dirnames` in place keeps it out of excluded trees such as .venv. A folder os.walk cannot list
    (permission denied, vanished) goes to `problems`.
    """
    def unlistable(exc: OSError) -> None:
        where = display_path(exc.filename if isinstance(exc.filename, str) else top)
        problems.append(FolderProblem(where, f"cannot list folder: {_os_error_text(exc).removeprefix('cannot read: ')}"
                                      "; its files were not scanned"))

    ignored = frozenset()
    if config.respect_gitignore:
        from streamcheck.scanner.git_scope import ignored_paths

        ignored = ignored_paths(top)
    for folder, dirnames, filenames in os.walk(top, onerror=unlistable, followlinks=False):
        rel_folder = config.relative(Path(folder))
        prefix = "" if rel_folder == "." else rel_folder + "/"
        absolute = os.path.abspath(folder) if ignored else ""
        dirnames[:] = sorted(d for d in dirnames if not config.excludes_entry(d, prefix + d)
                             and not (ignored and os.path.join(absolute, d) in ignored))
        for name in sorted(filenames):
            if name.endswith(PYTHON_SUFFIXES) and not config.excludes_entry(name, prefix + name) \
                    and not (ignored and os.path.join(absolute, name) in ignored):
                yield os.path.join(folder, name), prefix + name


def read_source(disk_path: str, max_bytes: int) -> Source | Unreadable:
    """The file's text, or why it cannot be scanned. Never raises."""
    try:
        info = os.stat(disk_path)
        if not stat.S_ISREG(info.st_mode):
            return Unreadable("not a regular file", skip=True)
        if info.st_size > max_bytes:
            return Unreadable(
                f"{_size(info.st_size)} is over the {max_bytes // 1024} kB limit for hand-written "
                "source (generated code?); exclude it, or raise max-file-size-kb in [tool.streamcheck]",
                skip=True,
            )
        with open(disk_path, "rb") as handle:
            data = handle.read()
    except OSError as exc:
        return Unreadable(_os_error_text(exc))
    return decode(data)


def decode(data: bytes) -> Source | Unreadable:
    """Bytes -> text as Python would decode them (BOM, PEP 263 coding cookie, else UTF-8)."""
    wide = _wide_unicode(data)
    if wide:
        return Unreadable(f"{wide} text, not Python source: Python reads source as UTF-8 (or an ASCII-compatible "
                          "encoding named in a '# -*- coding: ... -*-' line); save the file as UTF-8")
    nul = data.find(b"\0")
    if nul >= 0:
        line, column = _position(data, nul)
        return Unreadable(f"binary file (NUL byte at line {line}, column {column}), not Python source", line, column)
    encoding = _declared_encoding(data)
    if isinstance(encoding, Unreadable):
        return encoding
    try:
        text = data.decode(encoding)
    except UnicodeDecodeError as exc:
        line, column = _position(data, exc.start)
        name = "UTF-8" if encoding in ("utf-8", "utf-8-sig") else encoding
        return Unreadable(
            f"not valid {name}: byte 0x{data[exc.start]:02x} at line {line}, column {column} "
            "(save the file as UTF-8, or declare its encoding with a '# -*- coding: ... -*-' line)",
            line,
            column,
        )
    except (UnicodeError, LookupError, ValueError) as exc:  # a codec failing its own way (idna, punycode, ...)
        return Unreadable(f"cannot decode as {encoding}: {exc}")
    return Source(text=text, digest=hashlib.blake2b(data, digest_size=20).hexdigest())


_WIDE_BOMS = ((codecs.BOM_UTF32_LE, "UTF-32"), (codecs.BOM_UTF32_BE, "UTF-32"),
              (codecs.BOM_UTF16_LE, "UTF-16"), (codecs.BOM_UTF16_BE, "UTF-16"))


def _wide_unicode(data: bytes) -> str:
    """"UTF-16" / "UTF-32" when the bytes are such text (a byte-order mark, or ASCII interleaved with NULs)."""
    for bom, name in _WIDE_BOMS:  # UTF-32-LE's mark starts with UTF-16-LE's: longest first
        if data.startswith(bom):
            return name
    head = data[:256]
    if len(head) >= 8:
        odd, even = head[1::2], head[0::2]
        if odd.count(0) == len(odd) and 0 not in even or even.count(0) == len(even) and 0 not in odd:
            return "UTF-16"
    return ""


_COOKIE = re.compile(rb"^[ \t\f]*#.*?coding[:=][ \t]*([-\w.]+)")


def _declared_encoding(data: bytes) -> str | Unreadable:
    """PEP 263: a coding cookie on line 1 or 2 (line 2 only if line 1 is a comment or blank), else UTF-8.

    As CPython does, a cookie must name a text encoding (not rot13, hex, zlib, ...) in which the cookie's own line
    reads as written (so not UTF-16, UTF-32 or punycode): such a file is reported, never decoded.
    """
    if data.startswith(codecs.BOM_UTF8):
        return "utf-8-sig"
    lines = data.split(b"\n", 2)[:2]
    for number, line in enumerate(lines, 1):
        match = _COOKIE.match(line)
        if match:
            name = match.group(1).decode("ascii", "replace")
            try:
                info = codecs.lookup(name)
            except LookupError:
                return Unreadable(f"unknown encoding {name!r} in the coding declaration", number)
            if not getattr(info, "_is_text_encoding", True):
                return Unreadable(f"{name!r} in the coding declaration is not a text encoding "
                                  "(a bytes-to-bytes codec); Python cannot read this file", number)
            if not _reads_as_written(line[:match.end()], info.name):
                return Unreadable(f"encoding {name!r} in the coding declaration is not ASCII-compatible "
                                  "(Python rejects it: 'encoding problem'); save the file as UTF-8", number)
            return info.name
        if line.strip() and not line.lstrip().startswith(b"#"):
            break
    return "utf-8"


def _reads_as_written(cookie: bytes, encoding: str) -> bool:
    """The cookie (ASCII up to the encoding's name) decodes to itself."""
    try:
        return cookie.decode(encoding) == cookie.decode("latin-1")
    except (UnicodeError, LookupError, ValueError):
        return False


def _size(n: int) -> str:
    return f"{n / 1e6:.1f} MB" if n >= 1e6 else f"{n / 1024:.1f} kB"


def _position(data: bytes, offset: int) -> tuple[int, int]:
    line = data.count(b"\n", 0, offset) + 1
    column = offset - (data.rfind(b"\n", 0, offset) + 1) + 1
    return line, column


def _os_error_text(exc: OSError) -> str:
    if exc.errno == errno.ELOOP:
        return "cannot read: symlink loop (too many levels of symbolic links)"
    if exc.errno == errno.ENOENT:
        return "cannot read: broken symlink or file vanished during the scan"
    if exc.errno in (errno.EACCES, errno.EPERM):
        return "cannot read: permission denied"
    if exc.errno == errno.EISDIR:
        return "cannot read: is a folder"
    return f"cannot read: {exc.strerror or exc}"
