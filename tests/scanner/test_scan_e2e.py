"""End to end with the real rules: `streamcheck scan` on an hpZ-shaped program (DeepSpeed 0.13.4's race), its fixed
twin, and the options, suppressions, baseline, cache and formats applied to real SC101 findings."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest

from .helpers import scan_cli, scan_json, write_tree

RACY = """
import torch


class Init:
    def _partition_param_sec(self, param, one_dim_param, n):
        param.ds_secondary_tensor.copy_(one_dim_param.narrow(0, 0, n))


class Coordinator:
    def __init__(self, accel):
        self.accel = accel
        self.ag_stream = torch.cuda.Stream()

    def fetch(self, params):
        with torch.cuda.stream(self.ag_stream):
            for p in params:
                torch.distributed.all_gather_into_tensor(p.full, p.ds_secondary_tensor, async_op=True)
"""
FIXED = RACY.replace(
    "        with torch.cuda.stream(self.ag_stream):",
    "        self.ag_stream.wait_stream(torch.cuda.current_stream())\n        with torch.cuda.stream(self.ag_stream):")
WRITE_LINE = 6  # param.ds_secondary_tensor.copy_(...) (write_tree drops the leading blank line)
SCHEMA = json.loads((Path(__file__).parent / "data" / "sarif-schema-2.1.0.json").read_text(encoding="utf-8"))


def _race(finding) -> tuple:
    read = [r for r in finding["related"] if r["role"] == "read"]
    return (finding["rule"], finding["kind"], finding["primary"]["path"], finding["primary"]["line"],
            finding["primary"]["column"], finding["symbol"], [(r["path"], r["line"]) for r in read],
            finding["extra"].get("reader_stream"))


@pytest.fixture
def project(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    return tmp_path


def test_racy_reported_fixed_not(project, capsys):
    write_tree(project, {"racy/part.py": RACY, "fixed/part.py": FIXED})
    code, doc, err = scan_json(capsys, "--no-cache", "racy")
    assert code == 1 and err == ""
    assert [_race(f) for f in doc["findings"]] == [
        ("SC101", "RAW", "racy/part.py", WRITE_LINE, 9, "Init._partition_param_sec", [("racy/part.py", 17)],
         "self.ag_stream")]
    code, doc, err = scan_json(capsys, "--no-cache", "fixed")
    assert (code, doc["findings"], doc["summary"]["files"]) == (0, [], 1)


def test_text_report_of_a_real_finding(project, capsys):
    write_tree(project, {"part.py": RACY})
    code, out, _ = scan_cli(capsys, "--no-cache", "part.py")
    lines = out.splitlines()
    assert code == 1
    assert lines[0].startswith(f"part.py:{WRITE_LINE}:9: SC101 RAW `param.ds_secondary_tensor` is written by `copy_`")
    # The caret underlines the whole expression that starts at the reported column (report/regions.py).
    assert lines[1:3] == [f"     {WRITE_LINE} | param.ds_secondary_tensor.copy_(one_dim_param.narrow(0, 0, n))",
                          "         " + "^" * len("param.ds_secondary_tensor.copy_(one_dim_param.narrow(0, 0, n))")]
    assert any(line.startswith("  read           part.py:17:") for line in lines)
    assert any(line.startswith("  stream context part.py:15:") for line in lines)
    assert any(line.startswith("  fix: ") and "wait_stream" in line for line in lines)
    # the rows are the related locations and the fix; the rule's `extra` (path, reader_stream, ...) is json-only
    assert [line.split()[0] for line in lines[3:-2]] == ["read", "stream", "fix:"]
    assert lines[-1] == "Found 1 finding in 1 file: SC101 x1."


def test_own_accelerator_abstraction_via_config(project, capsys):
    custom = RACY.replace("with torch.cuda.stream(self.ag_stream):", "with self.accel.side(self.ag_stream):")
    write_tree(project, {"part.py": custom})
    assert scan_json(capsys, "--no-cache", ".")[1]["findings"] == []
    (project / "pyproject.toml").write_text('[tool.streamcheck]\nstream-contexts = ["accel.side"]\n')
    code, doc, _ = scan_json(capsys, "--no-cache", ".")
    assert [_race(f)[:4] for f in doc["findings"]] == [("SC101", "RAW", "part.py", WRITE_LINE)]


def test_collectives_and_sync_callables_options(project, capsys):
    source = (RACY.replace("torch.distributed.all_gather_into_tensor(p.full, p.ds_secondary_tensor, async_op=True)",
                           "self.comm.gather_into(p.full, p.ds_secondary_tensor)"))
    write_tree(project, {"part.py": source})
    # An unknown library method is a hand-off, not a read (what it does is its own business) ...
    assert scan_json(capsys, "--no-cache", ".")[1]["findings"] == []
    # ... until it is declared a collective: then it reads its tensors on the communication stream.
    doc = scan_json(capsys, "--no-cache", "--collective", "comm.gather_into", ".")[1]
    assert [(f["primary"]["line"], f["extra"]["consumer"]) for f in doc["findings"]] == [(WRITE_LINE, "collective")]
    fenced = source.replace("one_dim_param.narrow(0, 0, n))",
                            "one_dim_param.narrow(0, 0, n))\n        self.accel.fence()")
    write_tree(project, {"part.py": fenced})
    assert len(scan_json(capsys, "--no-cache", "--collective", "comm.gather_into", ".")[1]["findings"]) == 1
    code, doc, _ = scan_json(capsys, "--no-cache", "--collective", "comm.gather_into", "--sync-callable",
                             "accel.fence", ".")
    assert (code, doc["findings"]) == (0, [])


def test_generic_attributes_option(project, capsys):
    # Declared generic, `.ds_secondary_tensor` no longer pairs a write and a read on different owners by name alone.
    write_tree(project, {"part.py": RACY})
    assert scan_json(capsys, "--no-cache", ".")[0] == 1
    (project / "pyproject.toml").write_text('[tool.streamcheck]\ngeneric-attributes = ["ds_secondary_tensor"]\n')
    code, doc, _ = scan_json(capsys, "--no-cache", ".")
    # What is left is the read alone: an element of `fetch`'s parameter, made by code the scan no longer pairs
    # it with (so taken as the current stream's), gathered on the side stream with no wait first.
    assert (code, [(f["rule"], f["primary"]["line"], f["extra"]["producer"], f["extra"]["path"])
                   for f in doc["findings"]]) == (1, [("SC101", 17, "outside", "p.ds_secondary_tensor")])


def test_select_ignore_and_per_file_ignores(project, capsys):
    write_tree(project, {"part.py": RACY})
    assert scan_json(capsys, "--no-cache", "--ignore", "SC1", ".")[0] == 0
    assert scan_json(capsys, "--no-cache", "--select", "SC001", ".")[0] == 0
    assert scan_json(capsys, "--no-cache", "--per-file-ignores", "part.py:SC101", ".")[0] == 0
    assert scan_json(capsys, "--no-cache", "--per-file-ignores", "other.py:SC101", ".")[0] == 1


def test_inline_suppressions_on_a_real_finding(project, capsys):
    line = "        param.ds_secondary_tensor.copy_(one_dim_param.narrow(0, 0, n))"
    write_tree(project, {"part.py": RACY.replace(line, line + "  # streamcheck: ignore[SC101]")})
    code, doc, _ = scan_json(capsys, "--no-cache", "--report-unused-ignores", ".")
    assert (code, doc["findings"], doc["summary"]["suppressed"]) == (0, [], 1)

    write_tree(project, {"part.py": RACY.replace(line, line + "  # streamcheck: ignore[SC999]")})
    code, doc, _ = scan_json(capsys, "--no-cache", "--report-unused-ignores", ".")
    assert code == 1
    assert [(f["rule"], f["primary"]["line"], f["message"]) for f in doc["findings"]] == [
        ("SC101", WRITE_LINE, doc["findings"][0]["message"]),
        ("SC002", WRITE_LINE, "unused suppression: SC999 is not a streamcheck rule"),
    ]

    write_tree(project, {"part.py": RACY.replace(line, line + "  # streamcheck: ignore")})
    assert scan_json(capsys, "--no-cache", ".")[0] == 0


def test_baseline_with_real_findings(project, capsys):
    write_tree(project, {"part.py": RACY})
    assert scan_cli(capsys, "--no-cache", "--write-baseline", "base.json", ".")[0] == 0
    # Ten unrelated lines above everything: the finding moves from line 7 to 17 and stays excused.
    write_tree(project, {"part.py": "import os\n" * 10 + RACY.lstrip("\n")})
    moved = scan_json(capsys, "--no-cache", ".")[1]
    assert [f["primary"]["line"] for f in moved["findings"]] == [WRITE_LINE + 10]
    code, doc, _ = scan_json(capsys, "--no-cache", "--baseline", "base.json", ".")
    assert (code, doc["findings"], doc["summary"]["baselined"]) == (0, [], 1)
    # A second racy write, new: it alone fails the gate.
    new_write = "\n\ndef refresh(param, src):\n    param.ds_secondary_tensor.copy_(src)\n"
    write_tree(project, {"part.py": "import os\n" * 10 + RACY.lstrip("\n") + new_write})
    code, doc, _ = scan_json(capsys, "--no-cache", "--baseline", "base.json", ".")
    assert code == 1
    assert [(f["rule"], f["primary"]["line"], f["symbol"]) for f in doc["findings"]] == [("SC101", 31, "refresh")]


def test_sarif_of_a_real_scan_is_valid(project, capsys):
    write_tree(project, {"part.py": RACY, "broken.py": "def (\n"})
    code, out, _ = scan_cli(capsys, "--no-cache", "--format", "sarif", ".")
    doc = json.loads(out)
    jsonschema.validate(doc, SCHEMA)
    results = doc["runs"][0]["results"]
    assert [(r["ruleId"], r["locations"][0]["physicalLocation"]["artifactLocation"]["uri"],
             r["locations"][0]["physicalLocation"]["region"]["startLine"]) for r in results] == [
        ("SC001", "broken.py", 1), ("SC101", "part.py", WRITE_LINE)]
    assert "SC101" in [r["id"] for r in doc["runs"][0]["tool"]["driver"]["rules"]]


def test_warm_cache_and_jobs_give_the_same_findings(project, capsys):
    files = {f"pkg/mod{i}.py": f"def helper{i}(x):\n    return x + {i}\n" for i in range(12)}
    files["pkg/part.py"] = RACY
    write_tree(project, files)
    cold = scan_json(capsys, "--cache-dir", "c", "--jobs", "2", ".")[1]
    warm = scan_json(capsys, "--cache-dir", "c", "--jobs", "2", ".")[1]
    serial = scan_json(capsys, "--no-cache", "--jobs", "1", ".")[1]
    assert [_race(f) for f in cold["findings"]] == [
        ("SC101", "RAW", "pkg/part.py", WRITE_LINE, 9, "Init._partition_param_sec", [("pkg/part.py", 17)],
         "self.ag_stream")]
    assert warm["findings"] == cold["findings"] == serial["findings"]
    assert (cold["summary"]["parsed"], warm["summary"]["parsed"], serial["summary"]["parsed"]) == (13, 0, 13)
    assert len(list((project / "c" / "facts").rglob("*.json"))) == 13


EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "hpz_race"


def _line_of(path: Path, text: str) -> int:
    """1-based line of the only line of `path` containing `text` (so the test follows edits of the example)."""
    lines = [n for n, line in enumerate(path.read_text().splitlines(), 1) if text in line]
    assert len(lines) == 1, (path, text, lines)
    return lines[0]


def test_hpz_race_example_racy_reported_fixed_not(capsys, monkeypatch):
    monkeypatch.chdir(EXAMPLE.parents[1])
    racy, fixed = EXAMPLE / "racy.py", EXAMPLE / "fixed.py"
    code, doc, err = scan_json(capsys, "--no-cache", "examples/hpz_race/racy.py")
    assert (code, err) == (1, "")
    assert [_race(f) for f in doc["findings"]] == [
        ("SC101", "RAW", "examples/hpz_race/racy.py", _line_of(racy, "param.secondary_shard.copy_("), 9,
         "ParameterStore.release", [("examples/hpz_race/racy.py", _line_of(racy, "torch.cat([p.secondary_shard"))],
         "self.allgather_stream")]
    code, doc, err = scan_json(capsys, "--no-cache", "examples/hpz_race/fixed.py")
    assert (code, doc["findings"], doc["summary"]["files"], err) == (0, [], 1, "")
    # Scanned together, the racy file's finding is the only one.
    code, doc, _ = scan_json(capsys, "--no-cache", "examples/hpz_race")
    assert [(f["rule"], f["primary"]["path"]) for f in doc["findings"]] == [("SC101", "examples/hpz_race/racy.py")]
