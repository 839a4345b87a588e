"""Check that report/regions.py's block parse gives every expression the end a parse of its whole file gives.

    python benchmarks/region_ends.py FOLDER [FOLDER ...]

For each .py file, every (line, column) where an expression starts (as the whole-file parse finds them) is looked up
the way a report looks up a finding's location (the `def`/`class` around its line), and the two ends compared.
Prints the files, the expression starts compared and the mismatches (the first few by place).
"""

from __future__ import annotations

import os
import sys
from collections import defaultdict
from pathlib import Path

from streamcheck.report import regions


def compare(folders: list[str]) -> tuple[int, int, int]:
    files = starts = mismatches = 0
    for folder in folders:
        for path in sorted(Path(folder).rglob("*.py")):
            name, stamp = str(path), os.stat(path).st_mtime_ns
            whole = regions._expression_ends(name, stamp)
            if not whole:
                continue
            files += 1
            by_line: dict[int, list] = defaultdict(list)
            for (line, column), end in whole.items():
                by_line[line].append((column, end))
            for line, items in by_line.items():
                around = regions._ends_around(name, stamp, line)
                for column, end in items:
                    starts += 1
                    if around.get((line, column)) != end:
                        mismatches += 1
                        if mismatches <= 10:
                            print(f"mismatch {name}:{line}:{column}: file {end}, block {around.get((line, column))}")
            regions._expression_ends.cache_clear()
            regions._lines.cache_clear()
    return files, starts, mismatches


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    files, starts, mismatches = compare(sys.argv[1:])
    print(f"{files} files, {starts} expression starts, {mismatches} mismatches")
    sys.exit(1 if mismatches else 0)
