"""The scan driver on a real code base (DeepSpeed 0.13.4's package): in parallel, cold and warm, it reports exactly
what the rules engine reports when called directly on the same files, and its SARIF is valid."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import jsonschema
import pytest

from streamcheck.findings import Finding
from streamcheck.rules.engine import analyze
from streamcheck.rules.facts import extract_facts
from streamcheck.rules.options import StaticOptions

from .helpers import scan_cli, scan_json

pytestmark = pytest.mark.network
SCHEMA = json.loads((Path(__file__).parent / "data" / "sarif-schema-2.1.0.json").read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def deepspeed_copy(sdist, tmp_path_factory):
    """A private copy of the package (the shared unpacked sdist is never written to)."""
    root = tmp_path_factory.mktemp("ds")
    shutil.copytree(sdist("deepspeed", "0.13.4") / "deepspeed", root / "deepspeed")
    return root


def test_driver_matches_the_engine_cold_and_warm(deepspeed_copy, capsys, monkeypatch):
    monkeypatch.chdir(deepspeed_copy)
    options = StaticOptions()
    paths = sorted(p.relative_to(deepspeed_copy).as_posix() for p in (deepspeed_copy / "deepspeed").rglob("*.py"))
    direct = analyze([extract_facts((deepspeed_copy / p).read_text(encoding="utf-8"), p, options) for p in paths],
                     options)
    assert direct, "the engine finds the hpZ race in 0.13.4"

    code, cold, err = scan_json(capsys, "--jobs", "2", "--cache-dir", "cache", "deepspeed")
    assert (code, err) == (1, "")
    assert cold["summary"]["files"] == len(paths) and cold["summary"]["parsed"] == len(paths)
    assert [Finding.from_dict(f) for f in cold["findings"]] == direct

    code, warm, _ = scan_json(capsys, "--jobs", "2", "--cache-dir", "cache", "deepspeed")
    assert warm["summary"]["parsed"] == 0 and warm["findings"] == cold["findings"]

    (Path("cache") / "last_scan.json").unlink()  # the rules run again, on Facts read back from the cache
    code, from_facts, _ = scan_json(capsys, "--jobs", "2", "--cache-dir", "cache", "deepspeed")
    assert from_facts["summary"]["parsed"] == 0 and from_facts["findings"] == cold["findings"]

    code, out, _ = scan_cli(capsys, "--format", "sarif", "--cache-dir", "cache", "deepspeed")
    sarif = json.loads(out)
    jsonschema.validate(sarif, SCHEMA)
    assert len(sarif["runs"][0]["results"]) == len(direct)
