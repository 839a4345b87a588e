"""The facts pass's prefilter loses no finding: a scan in which only files that mention streams, syncs or
collectives get access facts (the rest only feed the call graph) finds exactly what a scan with full facts for
every file finds, on real trees."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from streamcheck.rules.engine import analyze
from streamcheck.rules.extract import extract
from streamcheck.rules.facts import ParseFailure, extract_facts, needs_detail
from streamcheck.rules.prefilter import code_of
from streamcheck.scanner.config import ScanConfig
from streamcheck.scanner.extraction import few_collections
from streamcheck.scanner.sources import Source, discover, read_source


def _findings_both_ways(root: Path, folder: str) -> tuple[list, list, int]:
    """(findings with the prefilter, findings with full facts everywhere, files the prefilter passed over)."""
    options = ScanConfig(root=root).static_options()
    files = discover([str(root / folder)], ScanConfig(root=root))
    sources = [(f.display, s.text) for f in files if isinstance(s := read_source(f.disk_path, 1 << 30), Source)]
    prefiltered, full = [], []
    with few_collections():
        for path, text in sources:
            try:
                prefiltered.append(extract_facts(text, path, options))
                full.append(extract(text, path, options, detailed=True))
            except ParseFailure:
                pass
        passed_over = sum(not facts.detailed for facts in prefiltered)
        return [_key(f) for f in analyze(prefiltered, options)], [_key(f) for f in analyze(full, options)], \
            passed_over


def _key(finding) -> tuple:
    return (finding.rule, finding.kind, finding.primary.path, finding.primary.line, finding.primary.column,
            finding.message, tuple((r.path, r.line, r.column, r.role) for r in finding.related))


def _torch_distributed() -> Path:
    spec = importlib.util.find_spec("torch")  # located, not imported
    if spec is None or not spec.submodule_search_locations:
        pytest.skip("torch is not installed")
    return Path(list(spec.submodule_search_locations)[0])


def test_the_prefilter_loses_nothing_on_the_examples():
    with_prefilter, with_full_facts, _ = _findings_both_ways(Path(__file__).resolve().parents[2], "examples")
    assert with_prefilter == with_full_facts
    assert len(with_prefilter) >= 10  # every racy.py has at least one


def test_the_prefilter_loses_nothing_on_the_installed_torch_distributed():
    with_prefilter, with_full_facts, passed_over = _findings_both_ways(_torch_distributed(), "distributed")
    assert with_prefilter == with_full_facts
    assert passed_over >= 100  # the prefilter did leave files out (else this compares a scan with itself)


@pytest.mark.network
def test_the_prefilter_loses_nothing_on_deepspeed_0_13_4(sdist):
    with_prefilter, with_full_facts, passed_over = _findings_both_ways(sdist("deepspeed", "0.13.4"), "deepspeed")
    assert with_prefilter == with_full_facts
    assert len(with_prefilter) >= 6  # the hpZ findings and their siblings (tests/scanner/test_deepspeed_all_rules.py)
    assert passed_over >= 300


PREFILTER_TREE = Path(__file__).resolve().parent / "data" / "prefilter_tree"


def test_the_prefilter_reads_code_not_comments_or_strings():
    options = ScanConfig(root=PREFILTER_TREE).static_options()
    detailed = {path.name: needs_detail(path.read_text(), options) for path in (PREFILTER_TREE / "pkg").glob("*.py")}
    # helpers.py says "stream", "synchronize", "all_reduce" only in its docstring, a comment and strings, and
    # `reduced` is no collective; events.py's KVEvent is no CUDA Event; formatting.py names a stream in an f-string
    assert detailed == {"__init__.py": False, "engine.py": True, "helpers.py": False, "events.py": False,
                        "formatting.py": True}


def test_the_prefilter_loses_nothing_on_a_tree_of_files_that_only_mention_the_words():
    with_prefilter, with_full_facts, passed_over = _findings_both_ways(PREFILTER_TREE, "pkg")
    assert with_prefilter == with_full_facts
    assert passed_over == 3
    assert [(rule, kind, Path(path).name, line, column) for rule, kind, path, line, column, *_ in with_prefilter] == [
        ("SC101", "RAW", "engine.py", 9, 5), ("SC106", "WAR", "engine.py", 11, 9)]


def test_code_of_drops_comments_and_strings_but_keeps_f_strings():
    source = ('x = "a stream"  # stream\n'
              "y = f\"{s.stream}\" + rb'\\x' + u\"q\"\n"
              '"""doc\nstream"""\n'
              "if z in\"abc\": t = '#'; w.wait_stream(v)\n")
    assert code_of(source) == ('x =     \n'  # a space for each literal and comment
                               'y = f"{s.stream}" + rb  + u \n'
                               ' \n'
                               'if z in : t =  ; w.wait_stream(v)\n')
