"""Bad input never stops a scan: each bad file gives one clear message, no traceback, the rest is still scanned."""

from __future__ import annotations

import os

import pytest

from streamcheck.scanner import sources

from .helpers import positions, scan_cli, scan_json, write_tree

GOOD = """
def f(x, y):
    x.copy_(y)
"""


@pytest.fixture
def tree(tmp_path, monkeypatch, fake_backend):
    write_tree(tmp_path, {"z_good.py": GOOD})
    monkeypatch.chdir(tmp_path)
    return tmp_path


def _only(doc, rule="SC001"):
    return [f for f in doc["findings"] if f["rule"] == rule]


def test_syntax_error_is_sc001_with_its_position(tree, capsys):
    write_tree(tree, {"broken.py": "def ok():\n    pass\n\ndef bad(:\n    pass\n"})
    code, doc, err = scan_json(capsys, "--no-cache", ".")
    assert code == 1
    assert positions(doc) == [("SC001", "broken.py", 4, 9), ("SC101", "z_good.py", 2, 5)]
    assert doc["findings"][0]["message"] == "syntax error: invalid syntax"
    assert doc["findings"][0]["primary"]["snippet"] == "def bad(:"
    assert err == ""


def test_syntax_error_text_output_shows_line_and_caret(tree, capsys):
    write_tree(tree, {"broken.py": "x = 1\nif x\n    pass\n"})
    code, out, err = scan_cli(capsys, "--no-cache", "broken.py")
    assert code == 1
    assert out.splitlines()[:3] == [
        "broken.py:2:5: SC001 syntax error: expected ':'",
        "     2 | if x",
        "             ^",
    ]
    assert "Traceback" not in out + err


def test_non_utf8_bytes(tree, capsys):
    write_tree(tree, {"latin.py": b"x = 1\ns = '\xe9t\xe9'\n"})
    code, doc, _ = scan_json(capsys, "--no-cache", ".")
    assert positions(doc) == [("SC001", "latin.py", 2, 6), ("SC101", "z_good.py", 2, 5)]
    assert _only(doc)[0]["message"].startswith("not valid UTF-8: byte 0xe9 at line 2, column 6")


def test_declared_encoding_and_bom_are_honoured(tree, capsys):
    write_tree(tree, {"latin.py": b"# -*- coding: latin-1 -*-\ns = '\xe9t\xe9'\n",
                      "bom.py": b"\xef\xbb\xbfdef f(x, y):\n    x.copy_(y)\n",
                      "bogus.py": b"# coding: no-such-codec\nx = 1\n"})
    code, doc, _ = scan_json(capsys, "--no-cache", ".")
    assert positions(doc) == [("SC001", "bogus.py", 1, 1), ("SC101", "bom.py", 2, 5), ("SC101", "z_good.py", 2, 5)]
    assert doc["findings"][0]["message"] == "unknown encoding 'no-such-codec' in the coding declaration"
    assert doc["summary"]["files"] == 4


def test_unreadable_file(tree, capsys, monkeypatch):
    write_tree(tree, {"secret.py": GOOD})
    os.chmod(tree / "secret.py", 0)
    if os.geteuid() == 0:  # root reads anything: make the open fail the way it would for a normal user
        real_open = open

        def deny(path, *args, **kwargs):
            if str(path).endswith("secret.py"):
                raise PermissionError(13, "Permission denied", str(path))
            return real_open(path, *args, **kwargs)

        monkeypatch.setattr(sources, "open", deny, raising=False)
    try:
        code, doc, err = scan_json(capsys, "--no-cache", ".")
    finally:
        os.chmod(tree / "secret.py", 0o644)
    assert positions(doc) == [("SC001", "secret.py", 1, 1), ("SC101", "z_good.py", 2, 5)]
    assert _only(doc)[0]["message"] == "cannot read: permission denied"


def test_symlink_loops(tree, capsys):
    os.symlink("loop_b.py", tree / "loop_a.py")
    os.symlink("loop_a.py", tree / "loop_b.py")
    os.makedirs(tree / "pkg")
    os.symlink("..", tree / "pkg" / "up")  # a folder loop: never followed
    os.symlink("nowhere.py", tree / "pkg" / "dangling.py")
    write_tree(tree, {"pkg/m.py": GOOD})
    code, doc, err = scan_json(capsys, "--no-cache", ".")
    assert positions(doc) == [
        ("SC001", "loop_a.py", 1, 1), ("SC001", "loop_b.py", 1, 1), ("SC001", "pkg/dangling.py", 1, 1),
        ("SC101", "pkg/m.py", 2, 5), ("SC101", "z_good.py", 2, 5),
    ]
    assert [f["message"] for f in _only(doc)] == [
        "cannot read: symlink loop (too many levels of symbolic links)",
        "cannot read: symlink loop (too many levels of symbolic links)",
        "cannot read: broken symlink or file vanished during the scan",
    ]
    assert "Traceback" not in err


def test_binary_file_named_py(tree, capsys):
    write_tree(tree, {"blob.py": b"\x7fELF\x02\x01\x01\x00\x00\x00" + bytes(range(256))})
    code, doc, _ = scan_json(capsys, "--no-cache", ".")
    assert positions(doc) == [("SC001", "blob.py", 1, 8), ("SC101", "z_good.py", 2, 5)]
    assert _only(doc)[0]["message"] == "binary file (NUL byte at line 1, column 8), not Python source"


def test_five_megabyte_generated_file_is_skipped_with_a_notice(tree, capsys):
    line = "TABLE_%07d = (1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0)  # generated\n"
    body = "".join(line % i for i in range(5 * 1024 * 1024 // len(line % 0) + 1))
    write_tree(tree, {"gen_table.py": "# @generated\n" + body})
    size_mb = (tree / "gen_table.py").stat().st_size / 1e6
    assert size_mb > 5.0
    code, out, err = scan_cli(capsys, "--no-cache", ".")
    assert code == 1  # the good file's finding still counts
    assert err == (f"streamcheck: skipped gen_table.py: {size_mb:.1f} MB is over the 1024 kB limit for hand-written "
                   "source (generated code?); exclude it, or raise max-file-size-kb in [tool.streamcheck]\n")
    assert out.startswith("z_good.py:2:5: SC101 RAW fake SC101 finding\n")
    assert out.rstrip().endswith("Found 1 finding in 1 file: SC101 x1 (1 file skipped).")
    assert (tree / "gen_table.py").exists()


def test_max_file_size_option(tree, capsys):
    write_tree(tree, {"big.py": "x = 1\n" * 400})  # 2.4 kB
    code, doc, err = scan_json(capsys, "--no-cache", "--max-file-size-kb", "2", ".")
    assert doc["summary"]["skipped"] == [
        "big.py: 2.3 kB is over the 2 kB limit for hand-written source (generated code?); exclude it, or raise "
        "max-file-size-kb in [tool.streamcheck]"]
    code, doc, err = scan_json(capsys, "--no-cache", "--max-file-size-kb", "3", ".")
    assert doc["summary"]["skipped"] == [] and doc["summary"]["files"] == 2


def test_everything_at_once_still_scans_the_rest(tree, capsys):
    write_tree(tree, {"a_bad.py": "def (\n", "b_bin.py": b"\x00", "c_latin.py": b"\xff\n", "d/ok.py": GOOD})
    os.symlink("e_self.py", tree / "e_self.py")
    code, doc, err = scan_json(capsys, "--no-cache", "--jobs", "2", ".")
    assert [p[:2] for p in positions(doc)] == [
        ("SC001", "a_bad.py"), ("SC001", "b_bin.py"), ("SC001", "c_latin.py"), ("SC101", "d/ok.py"),
        ("SC001", "e_self.py"), ("SC101", "z_good.py"),
    ]
    assert "Traceback" not in err


def test_a_crash_in_fact_extraction_is_reported_not_raised(tree, capsys, monkeypatch):
    from . import fake_rules

    def explode(source, path, options):
        raise RuntimeError("boom")

    monkeypatch.setattr(fake_rules, "extract", explode)
    monkeypatch.setattr("streamcheck.scanner.driver.default_backend", lambda config: fake_rules.backend())
    code, doc, _ = scan_json(capsys, "--no-cache", ".")
    assert positions(doc) == [("SC001", "z_good.py", 1, 1)]
    assert doc["findings"][0]["message"] == "internal error while reading the file: RuntimeError: boom"


def test_a_crash_in_the_analysis_exits_2_with_a_message(tree, capsys, monkeypatch):
    from . import fake_rules

    def explode(facts_list, options, select=None, timings=None):
        raise RecursionError("maximum recursion depth exceeded")

    monkeypatch.setattr(fake_rules, "analyze", explode)
    monkeypatch.setattr("streamcheck.scanner.driver.default_backend", lambda config: fake_rules.backend())
    monkeypatch.delenv("STREAMCHECK_DEBUG", raising=False)
    code, out, err = scan_cli(capsys, "--no-cache", ".")
    assert (code, out) == (2, "")
    assert err == ("streamcheck scan: internal error in the analysis: RecursionError: maximum recursion depth "
                   "exceeded\n  (a streamcheck bug: please report it; STREAMCHECK_DEBUG=1 shows the traceback)\n")
