"""Issue 19, scanner rows: one bad input is one reported item, the rest of the tree is still scanned.

D2 non-text codecs in a coding cookie, D3 UTF-16 cookie, D4 a file name that is not UTF-8, D7 an unreadable
subfolder, D8 that folder named on the command line, D9 damaged cache entries, and from the issue's "Also": UTF-16
files are not "binary", CPython's SyntaxWarnings stay off stderr. (D10, pool workers outliving a killed scan, is in
test_robust_pool.py.) Every input is made here, in tmp_path.
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from streamcheck.scanner import facts_cache

from .helpers import positions, scan_cli, scan_json, write_tree

GOOD = """
def f(x, y):
    x.copy_(y)
"""
NOT_TEXT = "in the coding declaration is not a text encoding (a bytes-to-bytes codec); Python cannot read this file"


@pytest.fixture
def tree(tmp_path, monkeypatch, fake_backend):
    write_tree(tmp_path, {"z_good.py": GOOD})
    monkeypatch.chdir(tmp_path)
    return tmp_path


def _sc001(doc):
    return [(f["primary"]["path"], f["primary"]["line"], f["message"]) for f in doc["findings"] if f["rule"] == "SC001"]


# -- D2: a coding cookie naming a bytes-to-bytes codec -------------------------------------------------------------
@pytest.mark.parametrize("codec", ["rot13", "hex", "base64", "zlib", "bz2", "uu", "quopri"])
def test_d2_non_text_codec_cookie_is_sc001_and_the_rest_is_scanned(tree, capsys, codec):
    write_tree(tree, {"cookie.py": f"# -*- coding: {codec} -*-\nx.copy_(y)\n"})
    code, doc, err = scan_json(capsys, ".")  # the default, cached scan
    assert code == 1
    assert positions(doc) == [("SC001", "cookie.py", 1, 1), ("SC101", "z_good.py", 2, 5)]
    assert _sc001(doc) == [("cookie.py", 1, f"{codec!r} {NOT_TEXT}")]
    assert err == ""


def test_d2_punycode_cookie_is_sc001(tree, capsys):
    write_tree(tree, {"cookie.py": "# -*- coding: punycode -*-\nx = 1\n"})
    code, doc, err = scan_json(capsys, "--no-cache", ".")
    assert code == 1
    assert _sc001(doc) == [("cookie.py", 1, "encoding 'punycode' in the coding declaration is not ASCII-compatible "
                                            "(Python rejects it: 'encoding problem'); save the file as UTF-8")]


def test_d2_text_report_of_a_rot13_file_is_complete(tree, capsys):
    write_tree(tree, {"a_rot.py": "# -*- coding: rot13 -*-\nx.copy_(y)\n"})
    code, out, err = scan_cli(capsys, "--no-cache", ".")
    assert code == 1
    assert out.splitlines()[0] == f"a_rot.py:1:1: SC001 'rot13' {NOT_TEXT}"
    assert "z_good.py:2:5: SC101 RAW fake SC101 finding" in out
    assert out.rstrip().endswith("Found 2 findings in 2 files: SC001 x1, SC101 x1.")
    assert err == ""


# -- D3: a UTF-16 cookie without a BOM; the text report must reach its end -------------------------------------------
@pytest.mark.parametrize("codec", ["utf-16", "utf-32", "utf-16-le"])
def test_d3_utf16_cookie_is_sc001_and_the_text_report_is_complete(tree, capsys, codec):
    write_tree(tree, {"a_wide.py": f"# -*- coding: {codec} -*-\nx = 1\n", "b_after.py": GOOD})
    code, out, err = scan_cli(capsys, "--no-cache", ".")
    assert code == 1
    assert out.splitlines()[0] == (f"a_wide.py:1:1: SC001 encoding '{codec}' in the coding declaration is not "
                                   "ASCII-compatible (Python rejects it: 'encoding problem'); save the file as UTF-8")
    assert "b_after.py:2:5: SC101 RAW fake SC101 finding" in out
    assert "z_good.py:2:5: SC101 RAW fake SC101 finding" in out
    assert out.rstrip().endswith("Found 3 findings in 3 files: SC001 x1, SC101 x2.")
    assert err == ""


# -- "Also": a UTF-16 file is UTF-16 text, not "binary" -----------------------------------------------------------
@pytest.mark.parametrize("encoding, name", [("utf-16", "UTF-16"), ("utf-16-be", "UTF-16"), ("utf-32", "UTF-32")])
def test_utf16_file_is_called_utf16_not_binary(tree, capsys, encoding, name):
    write_tree(tree, {"wide.py": "def f(x, y):\n    x.copy_(y)\n".encode(encoding)})
    code, doc, err = scan_json(capsys, "--no-cache", ".")
    assert code == 1
    assert _sc001(doc) == [("wide.py", 1, f"{name} text, not Python source: Python reads source as UTF-8 (or an "
                                          "ASCII-compatible encoding named in a '# -*- coding: ... -*-' line); "
                                          "save the file as UTF-8")]


# -- D4: a file name that is not UTF-8 ------------------------------------------------------------------------------
@pytest.mark.parametrize("fmt", ["json", "sarif", "text", "github"])
def test_d4_non_utf8_file_name_is_scanned_and_printed_escaped(tree, capsys, fmt):
    name = os.fsdecode(b"caf\xe9.py")
    (tree / name).write_text(GOOD.lstrip(), encoding="utf-8")
    code, out, err = scan_cli(capsys, "--format", fmt, ".")  # the default, cached scan: keys hash the name
    assert code == 1, err
    assert err == ""
    if fmt == "json":
        assert positions(json.loads(out)) == [("SC101", "caf\\xe9.py", 2, 5), ("SC101", "z_good.py", 2, 5)]
    elif fmt == "sarif":
        uris = [r["locations"][0]["physicalLocation"]["artifactLocation"]["uri"]
                for r in json.loads(out)["runs"][0]["results"]]
        assert uris == ["caf%5Cxe9.py", "z_good.py"]
    elif fmt == "text":
        assert out.splitlines()[0] == "caf\\xe9.py:2:5: SC101 RAW fake SC101 finding"
    else:
        assert out.splitlines()[0].startswith("::error file=caf\\xe9.py,line=2,")
    code_again, out_again, _ = scan_cli(capsys, "--format", fmt, ".")  # the warm scan finds the same
    assert code_again == code
    if fmt == "json":
        assert json.loads(out_again)["findings"] == json.loads(out)["findings"]
    else:
        assert out_again.splitlines()[0] == out.splitlines()[0]


# -- D7 / D8: a folder the scanner may not list -------------------------------------------------------------------
def _lock(folder: Path, monkeypatch) -> None:
    """Make `folder` unlistable: chmod 0, and as root (who lists anything) refuse os.scandir of it as the kernel
    would for anyone else."""
    os.chmod(folder, 0)
    if os.geteuid() == 0:
        real = os.scandir
        locked = os.path.abspath(folder)

        def scandir(path="."):
            if os.path.abspath(os.fspath(path)) == locked:
                raise PermissionError(13, "Permission denied", os.fspath(path))
            return real(path)

        monkeypatch.setattr(os, "scandir", scandir)


LOCKED = "cannot list folder: permission denied; its files were not scanned"


def test_d7_unreadable_subfolder_is_sc001_naming_it(tree, capsys, monkeypatch):
    write_tree(tree, {"locked/hidden.py": GOOD, "open/seen.py": GOOD})
    _lock(tree / "locked", monkeypatch)
    try:
        code, doc, err = scan_json(capsys, "--no-cache", ".")
    finally:
        os.chmod(tree / "locked", stat.S_IRWXU)
    assert code == 1
    assert positions(doc) == [("SC001", "locked", 1, 1), ("SC101", "open/seen.py", 2, 5), ("SC101", "z_good.py", 2, 5)]
    assert _sc001(doc) == [("locked", 1, LOCKED)]
    assert err == ""


def test_d7_unreadable_subfolder_alone_still_fails_the_gate(tmp_path, capsys, monkeypatch, fake_backend):
    write_tree(tmp_path, {"locked/hidden.py": "x = 1\n", "ok.py": "x = 1\n"})
    monkeypatch.chdir(tmp_path)
    _lock(tmp_path / "locked", monkeypatch)
    try:
        code, out, err = scan_cli(capsys, ".")
        again, out_again, _ = scan_cli(capsys, ".")  # the last-scan cache must not turn it green either
    finally:
        os.chmod(tmp_path / "locked", stat.S_IRWXU)
    assert (code, again) == (1, 1)
    assert out.splitlines()[0] == f"locked:1:1: SC001 {LOCKED}"
    assert out_again == out


@pytest.mark.parametrize("paths", [("locked", "z_good.py"), (".", "locked")], ids=["alone", "and-its-parent"])
def test_d8_unreadable_folder_named_on_the_command_line(tree, capsys, monkeypatch, paths):
    write_tree(tree, {"locked/hidden.py": GOOD})
    _lock(tree / "locked", monkeypatch)
    try:
        code, doc, err = scan_json(capsys, "--no-cache", *paths)
    finally:
        os.chmod(tree / "locked", stat.S_IRWXU)
    assert code == 1
    assert positions(doc) == [("SC001", "locked", 1, 1), ("SC101", "z_good.py", 2, 5)]  # once, however reached
    assert _sc001(doc) == [("locked", 1, LOCKED)]
    assert err == ""


# -- D9: damaged cache entries are misses, recomputed and rewritten -------------------------------------------------
def _entries(cache: Path) -> list[Path]:
    return sorted(p for p in (cache / "facts").rglob("*.json"))


def _expected(doc):
    return positions(doc) == [("SC101", "a.py", 2, 5), ("SC101", "z_good.py", 2, 5)]


def _checksummed(body: bytes) -> bytes:
    return facts_cache._checksum(body) + b"\n" + body


DAMAGE = {
    "facts is a number": lambda old: _checksummed(b'{"facts": 5}'),
    "failure fields of the wrong type": lambda old: _checksummed(b'{"failure": {"message": 1, "line": "x"}}'),
    "facts fields emptied": lambda old: _checksummed(b'{"facts": {}}'),
    "facts of another file": lambda old: _checksummed(json.dumps(
        {"facts": {"path": "elsewhere.py", "marks": []}}).encode()),
    "facts emptied, old format": lambda old: b'{"facts": {"path": "a.py", "marks": []}}',
    "100 k deep JSON": lambda old: _checksummed(b"[" * 100_000 + b"]" * 100_000),
    "edited after writing": lambda old: old.replace(b'"marks":[[', b'"marks":[ ['),
    "cut short": lambda old: old[: len(old) // 2],
    "empty": lambda old: b"",
    "not UTF-8": lambda old: b"\xff\xfe" + old,
}


@pytest.mark.parametrize("damage", list(DAMAGE))
def test_d9_damaged_cache_entry_is_recomputed_and_rewritten(tree, capsys, damage):
    write_tree(tree, {"a.py": GOOD})
    code, doc, _ = scan_json(capsys, ".")
    assert code == 1 and _expected(doc)
    entries = _entries(tree / ".streamcheck_cache")
    assert len(entries) == 2
    good = {path: path.read_bytes() for path in entries}
    for path in entries:
        path.write_bytes(DAMAGE[damage](good[path]))
    (tree / ".streamcheck_cache" / "last_scan.json").write_bytes(DAMAGE[damage](b'{"key": 1, "findings": [5]}'))
    for _ in range(2):  # the damaged run, then the one after it: same findings, no error
        code, doc, err = scan_json(capsys, ".")
        assert (code, err) == (1, "")
        assert _expected(doc)
    assert {path: path.read_bytes() for path in entries} == good  # rewritten as they were


def test_d9_fifo_as_a_cache_entry_neither_hangs_nor_stays(tree, capsys):
    write_tree(tree, {"a.py": GOOD})
    scan_json(capsys, ".")
    entries = _entries(tree / ".streamcheck_cache")
    last = tree / ".streamcheck_cache" / "last_scan.json"
    for path in [*entries, last]:
        path.unlink()
        os.mkfifo(path)
    code, doc, err = scan_json(capsys, ".")  # a blocking open would wait here forever for a writer
    assert (code, err) == (1, "") and _expected(doc)
    assert all(stat.S_ISREG(path.stat().st_mode) for path in [*entries, last])
    os.unlink(entries[0])
    os.symlink("/dev/zero", entries[0])  # a symlink into the device tree is not followed either
    last.unlink()  # so that the scan reads the Facts entries
    code, doc, err = scan_json(capsys, ".")
    assert (code, err) == (1, "") and _expected(doc)
    assert entries[0].is_file() and not entries[0].is_symlink()


# -- "Also": CPython's SyntaxWarnings about the scanned code do not reach stderr -------------------------------------
def test_syntax_warnings_of_scanned_code_stay_off_stderr(tmp_path):
    """In a fresh interpreter that shows every warning (pytest would capture them in-process): CPython 3.12+ warns
    about "\\d" with a SyntaxWarning, 3.11 with a DeprecationWarning, both while the facts pass parses."""
    write_tree(tmp_path, {"warns.py": 'import re\nPATTERN = re.compile("\\d+")\nif PATTERN is 1:\n    pass\n'})
    env = {**os.environ, "PYTHONWARNINGS": "default"}
    done = subprocess.run([sys.executable, "-m", "streamcheck", "scan", "--no-progress", "--no-cache", "."],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert (done.returncode, done.stdout, done.stderr) == (0, "No findings in 1 file.\n", "")
