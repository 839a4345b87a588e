"""How much plain source (files the prefilter does not detail) a scan could skip if it kept only the plain files
that detailed code can reach BY NAME: a plain file is kept when it defines a function a kept file calls by name, or
calls by name a function a kept file defines (to a fixed point; names read with regexes, no parse).

    python benchmarks/plain_reach.py FOLDER

The by-name test is what the call graph's method resolution (FUZZY_METHOD_LIMIT) and runs_on_current_stream's roots
need to stay unchanged; the figure says whether skipping on it could pay (session 17: vLLM 0.33.0 keeps 27.4 of its
27.5 MB of plain source, DeepSpeed 0.19.8 2.5 of 2.6 MB: it cannot; skipping needs imports-resolved reachability).
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

from streamcheck.rules.facts import needs_detail
from streamcheck.rules.options import StaticOptions

DEFINED = re.compile(r"^\s*(?:async\s+)?def\s+(\w+)", re.M)
CALLED = re.compile(r"(\w+)\s*\(")


def main(folder: Path) -> None:
    options = StaticOptions()
    files = []  # (text, detailed, names defined, names called)
    for path in sorted(folder.rglob("*.py")):
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError):
            continue
        files.append((text, needs_detail(text, options), set(DEFINED.findall(text)), set(CALLED.findall(text))))
    plain = [file for file in files if not file[1]]
    kept = [file for file in files if file[1]]
    called = set().union(*(file[3] for file in kept))
    defined = set().union(*(file[2] for file in kept))
    left = plain
    while True:
        reached = [file for file in left if file[2] & called or file[3] & defined]
        if not reached:
            break
        for file in reached:
            called |= file[3]
            defined |= file[2]
        left = [file for file in left if not (file[2] & called or file[3] & defined)]
    megabytes = lambda group: sum(len(file[0]) for file in group) / 1e6  # noqa: E731
    print(f"{folder}: {len(files)} files, {len(files) - len(plain)} detailed, {len(plain)} plain; not reached by "
          f"name: {len(left)} files, {megabytes(left):.1f} of {megabytes(plain):.1f} MB of plain source")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    main(Path(sys.argv[1]))
