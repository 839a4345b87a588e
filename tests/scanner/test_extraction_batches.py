"""The parallel extraction hands the workers the biggest files first, in batches that shrink as the work runs out,
while the scan process takes the smallest files one by one; the rules still get every file's facts in file order
(cold, with -j, and with part of the tree from the cache)."""

from __future__ import annotations

from pathlib import Path

from streamcheck.scanner.config import ScanConfig
from streamcheck.scanner.driver import scan
from streamcheck.scanner.extraction import WorkSplit

from . import fake_rules
from .helpers import write_tree


def test_workers_take_the_biggest_files_in_shrinking_batches_and_the_scan_process_the_smallest_one_by_one():
    sizes = [5, 1, 9, 3, 7, 2, 8, 4]  # 39 in all; 2 jobs: each batch is an eighth of what is left
    split = WorkSplit(sizes, 2)
    assert split.batch() == [2]  # 9: the biggest, and 39 // 8 = 4 is reached by it alone
    assert split.single() == 1  # 1: the smallest
    assert split.batch() == [6]  # 8
    assert split.single() == 5  # 2
    assert split.batch() == [4]  # 7
    assert (split.single(), split.single()) == (3, 7)  # 3 and 4
    assert split.batch() == [0]  # 5: the last file, handed out once
    assert (split.batch(), split.single()) == ([], None)


def test_a_batch_is_filled_to_its_share_and_every_file_is_handed_out_once():
    split = WorkSplit([1] * 64, 2)  # 64 equal files: shares of 8, 7, 6, ... of what is left
    batches = [split.batch() for _ in range(3)]
    assert [len(b) for b in batches] == [8, 7, 6]
    singles = []
    while (i := split.single()) is not None:
        singles.append(i)
    assert sorted(singles + [i for b in batches for i in b]) == list(range(64))
    assert split.batch() == []
    assert (WorkSplit([], 3).batch(), WorkSplit([], 3).single()) == ([], None)


def _recording_backend(orders: list[list[str]]):
    backend = fake_rules.backend()
    analyze = backend.analyze

    def recording(facts_list, options, select, timings):
        orders.append([facts.path for facts in facts_list])
        return analyze(facts_list, options, select, timings)

    backend.analyze = recording
    return backend


def test_the_rules_get_the_facts_in_file_order_whatever_order_the_workers_finish_in(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    # sizes that the biggest-first order turns around: m00 is the smallest, m19 the biggest
    write_tree(tmp_path, {f"m{i:02d}.py": "x = 1\n" * (1 + 40 * i) + "def f(a, b):\n    a.copy_(b)\n"
                          for i in range(20)})
    in_order = [f"m{i:02d}.py" for i in range(20)]
    orders: list[list[str]] = []
    config = ScanConfig(root=Path(tmp_path))
    cold = scan(["."], config, backend=_recording_backend(orders), jobs=3, cache_dir=tmp_path / "cache")
    assert orders == [in_order]
    assert [(f.rule, f.primary.path, f.primary.line) for f in cold.findings] == \
        [("SC101", f"m{i:02d}.py", 3 + 40 * i) for i in range(20)]
    (tmp_path / "m07.py").write_text("def g(a, b):\n    a.copy_(b)\n")  # one file changed: 19 from the cache
    changed = scan(["."], config, backend=_recording_backend(orders), jobs=3, cache_dir=tmp_path / "cache")
    assert (changed.parsed, changed.cached) == (1, 19)
    assert orders[1] == in_order
    assert ("SC101", "m07.py", 2) in [(f.rule, f.primary.path, f.primary.line) for f in changed.findings]
