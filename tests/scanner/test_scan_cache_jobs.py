"""The per-file Facts cache (warm scans re-parse only what changed), --jobs, and the progress bar's rules."""

from __future__ import annotations

import io
import os
import time
from pathlib import Path

import pytest

from streamcheck.commands import scan as scan_command
from streamcheck.scanner.config import ScanConfig
from streamcheck.scanner.facts_cache import FactsCache, code_stamp
from streamcheck.scanner.driver import scan

from . import fake_rules
from .helpers import write_tree

COPY = "def f(x, y):\n    x.copy_(y)\n"


def _positions(result):
    return [(f.rule, f.primary.path, f.primary.line) for f in result.findings]


@pytest.fixture
def tree(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    write_tree(tmp_path, {f"m{i:02d}.py": COPY if i % 3 == 0 else f"x = {i}\n" for i in range(20)})
    write_tree(tmp_path, {"broken.py": "def (\n"})
    fake_rules.extract_calls.clear()
    fake_rules.analyze_calls.clear()
    return tmp_path


def _scan(root, **kwargs):
    config = ScanConfig(root=Path(root))
    return scan(["."], config, backend=kwargs.pop("backend", fake_rules.backend()), jobs=kwargs.pop("jobs", 1),
                cache_dir=root / "cache", **kwargs)


def test_warm_scan_reads_facts_and_parse_failures_from_the_cache(tree):
    cold = _scan(tree)
    assert (cold.parsed, cold.cached, len(fake_rules.extract_calls), fake_rules.analyze_calls) == (21, 0, 21, [20])
    (tree / "cache" / "last_scan.json").unlink()  # only the per-file entries are left
    fake_rules.extract_calls.clear()
    warm = _scan(tree)
    assert (warm.parsed, warm.cached, fake_rules.extract_calls) == (0, 21, [])
    assert fake_rules.analyze_calls == [20, 20]  # the rules ran again, on cached Facts
    assert _positions(warm) == _positions(cold)
    assert ("SC001", "broken.py", 1) in _positions(warm)
    assert (tree / "cache" / ".gitignore").read_text() == "# created by streamcheck\n*\n"


def test_unchanged_tree_reuses_the_last_scan_without_facts_or_rules(tree, monkeypatch):
    cold = _scan(tree)
    for entry in (tree / "cache" / "facts").rglob("*.json"):
        entry.unlink()  # the last scan alone must be enough
    warm = _scan(tree)
    assert (warm.parsed, warm.cached, fake_rules.analyze_calls) == (0, 21, [20])
    assert [f.to_dict() for f in warm.findings] == [f.to_dict() for f in cold.findings]
    # Filters are re-applied to the reused findings: a per-file ignore takes effect without a re-scan ...
    config = ScanConfig(root=tree, per_file_ignores=(("m00.py", ("SC101",)),))
    filtered = scan(["."], config, backend=fake_rules.backend(), jobs=1, cache_dir=tree / "cache")
    assert ("SC101", "m00.py", 2) not in _positions(filtered) and fake_rules.analyze_calls == [20]
    # ... while select/ignore are part of the key (the rules run only for the selected ids).
    config = ScanConfig(root=tree, select=("SC001",))
    selected = scan(["."], config, backend=fake_rules.backend(), jobs=1, cache_dir=tree / "cache")
    assert _positions(selected) == [("SC001", "broken.py", 1)]
    # A changed file misses; so does a deleted one.
    (tree / "m03.py").unlink()
    assert ("SC101", "m03.py", 2) not in _positions(_scan(tree))


def test_only_changed_files_are_parsed_again(tree):
    _scan(tree)
    fake_rules.extract_calls.clear()
    write_tree(tree, {"m01.py": "def g(a, b):\n    pass\n    a.copy_(b)\n"})
    result = _scan(tree)
    assert (result.parsed, result.cached, fake_rules.extract_calls) == (1, 20, ["m01.py"])
    assert ("SC101", "m01.py", 3) in _positions(result)


def test_options_and_rules_code_are_part_of_the_key(tree):
    _scan(tree)
    other_options = _scan(tree, backend=fake_rules.backend(fake_rules.FakeOptions(stream_contexts=("my.stream",))))
    assert other_options.parsed == 21
    newer_rules = fake_rules.backend()
    object.__setattr__(newer_rules, "stamp", "fake-2")
    assert _scan(tree, backend=newer_rules).parsed == 21


def test_no_cache_and_unwritable_cache(tree):
    assert _scan(tree, use_cache=False).parsed == 21
    assert not (tree / "cache").exists()
    (tree / "cache").write_text("not a folder")  # cache writes fail: the scan still works
    result = _scan(tree)
    assert result.parsed == 21 and ("SC001", "broken.py", 1) in _positions(result)


def test_corrupt_cache_entries_are_recomputed(tree):
    cold = _scan(tree)
    for entry in (tree / "cache").rglob("*.json"):
        entry.write_text("{not json")
    warm = _scan(tree)
    assert warm.parsed == 21 and _positions(warm) == _positions(cold)


def test_jobs_give_the_same_findings_as_one_process(tree):
    one = _scan(tree, use_cache=False, jobs=1)
    many = _scan(tree, use_cache=False, jobs=3)
    assert _positions(many) == _positions(one)
    assert [f.fingerprint for f in many.findings] == [f.fingerprint for f in one.findings]
    assert ("SC001", "broken.py", 1) in _positions(many)


def test_parallel_workers_write_the_cache(tree):
    _scan(tree, jobs=3)
    (tree / "cache" / "last_scan.json").unlink()
    warm = _scan(tree, jobs=3)
    assert (warm.parsed, warm.cached) == (0, 21)


def test_code_stamp_changes_with_the_code(tmp_path):
    (tmp_path / "rule.py").write_text("A = 1\n")
    before = code_stamp(tmp_path, "1.0")
    assert code_stamp(tmp_path, "1.0") == before
    assert code_stamp(tmp_path, "1.1") != before
    (tmp_path / "rule.py").write_text("A = 22\n")
    assert code_stamp(tmp_path, "1.0") != before


def test_cache_key_covers_path_content_and_options(tmp_path):
    cache = FactsCache(tmp_path, "stamp", "opts")
    key = cache.key("a.py", "digest")
    assert key == FactsCache(tmp_path, "stamp", "opts").key("a.py", "digest")
    assert len({key, cache.key("b.py", "digest"), cache.key("a.py", "other"),
                FactsCache(tmp_path, "stamp", "opts2").key("a.py", "digest")}) == 4


class _Terminal(io.StringIO):
    def isatty(self):
        return True


def test_progress_bar_only_on_a_terminal_and_only_after_a_second(monkeypatch):
    assert scan_command.Progress.maybe(io.StringIO()) is None
    clock = [100.0]
    monkeypatch.setattr(scan_command.time, "perf_counter", lambda: clock[0])
    terminal = _Terminal()
    progress = scan_command.Progress.maybe(terminal)
    progress(1, 10)
    assert progress._bar is None  # less than a second in
    clock[0] += 1.5
    progress(2, 10)
    assert progress._bar is not None
    progress(10, 10)
    progress.close()
    assert "scanning" in terminal.getvalue()


def test_old_unused_entries_are_pruned_after_a_scan_that_extracted(tree):
    _scan(tree)
    entries = {p.stem: p for p in (tree / "cache" / "facts").rglob("*.json")}
    assert len(entries) == 21
    month_ago = time.time() - 30 * 86400
    for path in entries.values():
        os.utime(path, (month_ago, month_ago))  # all old; all still used by the tree
    write_tree(tree, {"m01.py": "y = 1\n"})  # one change: m01's old entry is now unused
    result = _scan(tree)
    assert result.parsed == 1
    left = {p.stem for p in (tree / "cache" / "facts").rglob("*.json")}
    assert len(left) == 21  # 20 old-but-used kept, m01's old entry gone, its new one written
    assert len(left - set(entries)) == 1 and len(set(entries) - left) == 1
    # A fresh unused entry survives (another scan root may use it tomorrow).
    write_tree(tree, {"m01.py": "y = 2\n"})
    _scan(tree)
    assert len(list((tree / "cache" / "facts").rglob("*.json"))) == 22
