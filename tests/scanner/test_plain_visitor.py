"""The facts pass's shortcuts change no fact: the visitor of plain files (which skips names read and attribute
chains) gives what the full visitor gives in plain mode, and a scan pauses and restores the cyclic collector."""

from __future__ import annotations

import gc
from pathlib import Path

from streamcheck.rules import extract as extract_module
from streamcheck.rules.facts import ParseFailure
from streamcheck.rules.options import StaticOptions
from streamcheck.scanner.config import ScanConfig
from streamcheck.scanner.driver import scan

ROOT = Path(__file__).resolve().parents[2]


def _plain_facts(sources: list[tuple[str, str]]) -> list[dict]:
    found = []
    for path, text in sources:
        try:
            facts = extract_module.extract(text, path, StaticOptions(), False)
        except ParseFailure:
            continue
        found.append(facts.to_dict())
    return found


def test_the_plain_visitor_makes_the_facts_the_full_visitor_makes(monkeypatch):
    # varied real code: streamcheck's own sources, its benchmarks, examples and tests
    folders = ("rules", "scanner", "streamcheck", "instrument", "benchmarks", "examples", "tests")
    paths = sorted(p for folder in folders for p in (ROOT / folder).rglob("*.py"))
    assert len(paths) > 250
    sources = [(str(path), path.read_text(encoding="utf-8")) for path in paths]  # read once: both see one text
    shortcut = _plain_facts(sources)
    monkeypatch.setattr(extract_module, "_PlainFactsVisitor", extract_module._FactsVisitor)
    full = _plain_facts(sources)
    assert len(shortcut) == len(full) > 250
    assert shortcut == full
    assert sum(len(fn.get("calls", ())) for facts in full for fn in facts["functions"]) > 10_000


def test_a_scan_restores_the_collector(tmp_path):
    (tmp_path / "a.py").write_text("import torch\ns = torch.cuda.Stream()\nwith torch.cuda.stream(s):\n    y = 1\n")
    (tmp_path / "b.py").write_text("def f():\n    return 1\n")
    threshold, enabled, frozen = gc.get_threshold(), gc.isenabled(), gc.get_freeze_count()
    result = scan([str(tmp_path)], ScanConfig(root=tmp_path), jobs=1, use_cache=False)
    assert result.files == 2 and result.parsed == 2
    assert (gc.get_threshold(), gc.isenabled(), gc.get_freeze_count()) == (threshold, enabled, frozen)
