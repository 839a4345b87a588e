"""The parallel extraction hands out the biggest files first, in batches of about equal size, and the rules still
get every file's facts in file order (cold, with -j, and with part of the tree from the cache)."""

from __future__ import annotations

from pathlib import Path

from streamcheck.scanner.config import ScanConfig
from streamcheck.scanner.driver import scan
from streamcheck.scanner.extraction import batches

from . import fake_rules
from .helpers import write_tree


def test_batches_put_the_biggest_files_first_and_fill_each_batch_to_its_share():
    assert batches([5, 1, 9, 3], 2) == [[2], [0, 3, 1]]
    assert batches([4, 4, 4, 4], 4) == [[0], [1], [2], [3]]
    assert batches([1, 1, 1], 10) == [[0], [1], [2]]  # never an empty batch, never a file left out
    assert batches([], 3) == []


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
