"""Small helpers shared by the scan tests: write a tree of files, run the CLI in-process."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

from streamcheck.cli import main

# One file with one SC101 race (the write on the current stream, the read-modify-write on `side`).
RACY = """import torch

side = torch.cuda.Stream()


def f(x, y):
    x.copy_(y)
    with torch.cuda.stream(side):
        y.add_(x)
"""


def write_tree(root: Path, files: dict[str, str | bytes]) -> None:
    for name, content in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(textwrap.dedent(content).lstrip("\n"), encoding="utf-8")


def scan_cli(capsys, *args: str) -> tuple[int, str, str]:
    """Run `streamcheck scan ARGS` in this process; (exit code, stdout, stderr)."""
    code = main(["scan", "--no-progress", *args])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def scan_json(capsys, *args: str) -> tuple[int, dict, str]:
    code, out, err = scan_cli(capsys, "--format", "json", *args)
    return code, json.loads(out), err


def positions(document: dict) -> list[tuple[str, str, int, int]]:
    """(rule, path, line, column) of every finding in a JSON report."""
    return [(f["rule"], f["primary"]["path"], f["primary"]["line"], f["primary"]["column"])
            for f in document["findings"]]
