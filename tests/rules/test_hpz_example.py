"""examples/hpz_race as scanner input: the racy script is reported where the hpZ shape is, the fixed twin is not."""

from __future__ import annotations

import json
from pathlib import Path

from streamcheck.cli import main
from streamcheck.findings import ROLE_CALL, ROLE_READ, ROLE_STREAM_CONTEXT

from static_helpers import findings_of, line_of

ROOT = Path(__file__).resolve().parents[2]
RACY = "examples/hpz_race/racy.py"
FIXED = "examples/hpz_race/fixed.py"


def _sources():
    return {path: (ROOT / path).read_text() for path in (RACY, FIXED)}


def test_racy_copy_is_reported_with_read_region_and_call():
    sources = _sources()
    racy = sources[RACY]
    [finding] = findings_of(sources)
    assert (finding.rule, finding.kind, finding.primary.path, finding.primary.line) == (
        "SC101", "RAW", RACY, line_of(racy, "param.secondary_shard.copy_("))
    assert finding.symbol == "ParameterStore.release"
    assert [(loc.role, loc.path, loc.line) for loc in finding.related] == [
        (ROLE_READ, RACY, line_of(racy, "torch.cat([p.secondary_shard")),
        (ROLE_STREAM_CONTEXT, RACY, line_of(racy, "with torch.cuda.stream(self.allgather_stream)")),
        (ROLE_CALL, RACY, line_of(racy, "params[0].all_gather_shards(params)")),
    ]


def test_scan_command_exit_codes(monkeypatch, capsys):
    monkeypatch.chdir(ROOT)
    assert main(["scan", "--no-cache", "--no-progress", "--format", "json", "examples/hpz_race/"]) == 1
    report = json.loads(capsys.readouterr().out)
    assert [(f["rule"], f["primary"]["path"], f["primary"]["line"]) for f in report["findings"]] == [
        ("SC101", RACY, line_of(_sources()[RACY], "param.secondary_shard.copy_("))]
    assert main(["scan", "--no-cache", "--no-progress", FIXED]) == 0
    capsys.readouterr()
    assert main(["scan", "--no-cache", "--no-such-option", FIXED]) == 2
