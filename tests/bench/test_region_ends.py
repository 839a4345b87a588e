"""benchmarks/region_ends.py on this package: the block parse of report/regions.py gives every expression start of
every module here the end the whole-file parse gives."""

from __future__ import annotations

from pathlib import Path

from region_ends import compare

PACKAGE = Path(__file__).resolve().parents[2]


def test_every_expression_of_this_package_ends_where_the_whole_file_says():
    files, starts, mismatches = compare([str(PACKAGE / name) for name in ("streamcheck", "rules", "scanner",
                                                                          "instrument")])
    assert mismatches == 0
    assert files > 100 and starts > 50_000
