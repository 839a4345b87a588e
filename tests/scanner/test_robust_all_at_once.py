"""Issue 19, "what it must show": one scan of a tree holding every bad scanner input of the table next to the hpZ
example (the traces' counterpart, one report of every bad trace, is in tests/instrument/offline/test_robust_traces.py).

The scan exits 1, keeps the example's SC101, gives exactly one SC001 per bad file or folder, prints no traceback,
and says the same on the next run after its cache was damaged (D9). Rows not in the tree: D5 and D19 (pyproject
parsing, helper "adopt": a bad pyproject rightly stops a scan with exit 2), D6 (tests/scanner/test_robust_engine.py:
xfail until the engine rewrite), D10 (test_robust_pool.py), D18 and D20 (runtime; tests/instrument).
"""

from __future__ import annotations

import json
import os
import shutil
import stat
from pathlib import Path

from streamcheck.cli import main

from .helpers import positions, scan_json
from .test_robust_scan import LOCKED, NOT_TEXT, _lock

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "hpz_race" / "racy.py"
RACY_G = "import torch\n\nside = torch.cuda.Stream()\n\n\ndef g(x, y):\n    x.copy_(y)\n" \
         "    with torch.cuda.stream(side):\n        return x * 2\n"
WIDE = ("text, not Python source: Python reads source as UTF-8 (or an ASCII-compatible encoding named in a "
        "'# -*- coding: ... -*-' line); save the file as UTF-8")
NOT_ASCII = "in the coding declaration is not ASCII-compatible (Python rejects it: 'encoding problem'); save the " \
            "file as UTF-8"


def bad_tree(root: Path) -> None:
    src = root / "src"
    src.mkdir()
    shutil.copy(EXAMPLE, src / "racy.py")
    files: dict[str, str | bytes] = {
        "d1_deep_chain.py": "".join(f"def f{i}(t):\n    f{i + 1}(t)\n\n\n" for i in range(400)) + "def f400(t):\n"
                            "    return t\n",
        "d2_rot13.py": "# -*- coding: rot13 -*-\nk = 1\n",
        "d2_zlib.py": "# -*- coding: zlib -*-\nk = 1\n",
        "d2_punycode.py": "# -*- coding: punycode -*-\nk = 1\n",
        "d3_utf16_cookie.py": "# -*- coding: utf-16 -*-\nx = 1\n",
        "utf16_bom.py": "x = 1\n".encode("utf-16"),
        "warns.py": 'import re\nP = re.compile("\\d")\nif P is 1:\n    pass\n',
        "syntax.py": "def f(:\n",
        "locked/hidden.py": RACY_G,
        **{f"clean/m{i}.py": f"def f{i}(x):\n    return x + {i}\n" for i in range(4)},  # enough files for the pool
    }
    for name, content in files.items():
        path = src / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(content if isinstance(content, bytes) else content.encode())
    (src / os.fsdecode(b"d4_caf\xe9.py")).write_text(RACY_G)
    (root / "named_locked").mkdir()
    (root / "named_locked" / "m.py").write_text(RACY_G)


EXPECTED = [
    ("SC001", "named_locked", 1, 1),
    ("SC001", "src/d2_punycode.py", 1, 1),
    ("SC001", "src/d2_rot13.py", 1, 1),
    ("SC001", "src/d2_zlib.py", 1, 1),
    ("SC001", "src/d3_utf16_cookie.py", 1, 1),
    ("SC101", "src/d4_caf\\xe9.py", 7, 5),
    ("SC001", "src/locked", 1, 1),
    ("SC101", "src/racy.py", 45, 9),
    ("SC001", "src/syntax.py", 1, 7),
    ("SC001", "src/utf16_bom.py", 1, 1),
]
MESSAGES = {
    "named_locked": LOCKED,
    "src/d2_punycode.py": f"encoding 'punycode' {NOT_ASCII}",
    "src/d2_rot13.py": f"'rot13' {NOT_TEXT}",
    "src/d2_zlib.py": f"'zlib' {NOT_TEXT}",
    "src/d3_utf16_cookie.py": f"encoding 'utf-16' {NOT_ASCII}",
    "src/locked": LOCKED,
    "src/syntax.py": "syntax error: invalid syntax",
    "src/utf16_bom.py": f"UTF-16 {WIDE}",
}


def test_scan_of_every_bad_input_next_to_the_example(tmp_path, capsys, monkeypatch):
    bad_tree(tmp_path)
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("STREAMCHECK_DEBUG", raising=False)
    locked = [tmp_path / "src" / "locked", tmp_path / "named_locked"]
    for folder in locked:
        _lock(folder, monkeypatch)  # as root, each _lock wraps the os.scandir the previous one installed
    try:
        first = scan_json(capsys, "--jobs", "2", "src", "named_locked")
        entries = sorted((tmp_path / ".streamcheck_cache" / "facts").rglob("*.json"))
        for k, entry in enumerate(entries):  # D9: damage every cache entry, each its own way
            if k % 3 == 0:
                entry.write_bytes(b'{"facts": 5}')
            elif k % 3 == 1:
                entry.unlink()
                os.mkfifo(entry)
            else:
                entry.write_bytes(entry.read_bytes()[:-7])
        (tmp_path / ".streamcheck_cache" / "last_scan.json").write_bytes(b"[" * 100_000)
        second = scan_json(capsys, "--jobs", "2", "src", "named_locked")
    finally:
        for folder in locked:
            os.chmod(folder, stat.S_IRWXU)
    for code, doc, err in (first, second):
        assert code == 1
        assert err == ""  # no traceback, no parser warning, no cache complaint
        assert positions(doc) == EXPECTED
        assert {f["primary"]["path"]: f["message"] for f in doc["findings"] if f["rule"] == "SC001"} == MESSAGES
        assert doc["findings"][7]["symbol"] == "ParameterStore.release"
    assert len(entries) == 9  # the readable files: racy, d1, d4, warns, syntax (its failure too), clean/m0-m3

