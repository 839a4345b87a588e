"""Precision of `streamcheck scan` on real code: the pinned corpus, every finding judged in a committed triage file.

    python benchmarks/real_code.py [--package NAME] [--write-missing] [--triage FILE] [--jobs N]

For each package of benchmarks/corpus.py (fetched by pip, unpacked, never imported) it runs one cold scan
(streamcheck's scan API, no Facts cache) of the package's folders and prints files, wall time and findings by
rule. Every finding is then looked up in benchmarks/triage/real_code.tsv (see corpus_triage.py for the format).

Exit status: 1 when a finding has no row in the triage file (they are listed; --write-missing appends them with
verdict `todo`), 0 otherwise. Rows whose finding is gone are listed as stale (a warning only).
Totals: findings, real + hazard, precision = (real + hazard) / findings (unjudged and unclear count as not real).
"""

from __future__ import annotations

import argparse
import contextlib
import sys
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from corpus import CACHE, CORPUS, Package, unpacked  # noqa: E402
from corpus_triage import (  # noqa: E402
    GOOD_VERDICTS, VERDICTS, Key, append_rows, finding_key, format_key, load_triage, match,
)
from streamcheck.findings import Finding  # noqa: E402

TRIAGE = Path(__file__).resolve().parent / "triage" / "real_code.tsv"


@dataclass
class PackageScan:
    package: Package
    files: int
    seconds: float
    findings: list[Finding]


def scan_package(package: Package, tree: Path, jobs: int | None) -> PackageScan:
    """One cold scan of the package's folders, paths reported relative to its unpacked tree."""
    from streamcheck.scanner.config import ScanConfig
    from streamcheck.scanner.driver import scan

    started = time.perf_counter()
    with contextlib.chdir(tree):
        result = scan(list(package.scan), ScanConfig(root=tree), jobs=jobs, use_cache=False)
    return PackageScan(package, result.files, time.perf_counter() - started, result.findings)


def by_rule(findings: list[Finding]) -> str:
    counts = Counter(f.rule for f in findings)
    return ", ".join(f"{rule} {n}" for rule, n in sorted(counts.items())) or "-"


def print_scan(done: PackageScan) -> None:
    p = done.package
    where = ", ".join(f"{folder}/" for folder in p.scan)
    print(f"{p.name} {p.version} ({p.source}, {where}): {done.files} files, {done.seconds:.1f} s, "
          f"{len(done.findings)} findings ({by_rule(done.findings)})", flush=True)


def judge(scans: list[PackageScan], triage: Path, write_missing: bool) -> int:
    keys: list[Key] = [finding_key(s.package.name, s.package.version, f) for s in scans for f in s.findings]
    scanned = {(s.package.name, s.package.version) for s in scans}
    result = match(keys, load_triage(triage), scanned)
    for row in result.stale:
        print(f"stale (finding gone): {format_key(row.key)}  [{row.verdict}]")
    for key in result.missing:
        print(f"not triaged: {format_key(key)}")
    if result.missing and write_missing:
        append_rows(triage, result.missing)
        print(f"appended {len(result.missing)} rows with verdict todo to {triage}")
    judged = ", ".join(f"{v} {result.verdicts[v]}" for v in VERDICTS if result.verdicts[v])
    print(f"total: {result.findings} findings; {judged or 'none judged'}; not triaged {len(result.missing)}")
    precision = f"{100 * result.good / result.findings:.0f} %" if result.findings else "n/a"
    print(f"{' + '.join(GOOD_VERDICTS)}: {result.good}; precision {precision}")
    return 1 if result.missing else 0


def main(argv: list[str] | None = None, packages: tuple[Package, ...] = CORPUS, cache: Path = CACHE) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--package", action="append", help="only this package (repeatable)")
    parser.add_argument("--write-missing", action="store_true", help="append untriaged findings as `todo` rows")
    parser.add_argument("--triage", type=Path, default=TRIAGE, help="the triage file (default: %(default)s)")
    parser.add_argument("--jobs", type=int, default=None, help="scan worker processes (default: cores)")
    args = parser.parse_args(argv)
    chosen = [p for p in packages if not args.package or p.name in args.package]
    if args.package and len({p.name for p in chosen}) != len(set(args.package)):
        parser.error(f"unknown package; the corpus has {', '.join(p.name for p in packages)}")
    scans = []
    for package in chosen:
        scans.append(scan_package(package, unpacked(package, cache), args.jobs))
        print_scan(scans[-1])
    return judge(scans, args.triage, args.write_missing)


if __name__ == "__main__":
    raise SystemExit(main())
