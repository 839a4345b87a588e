"""SARIF for GitHub code scanning: repository-root URIs, rule metadata, linked related locations, codeFlows for
runtime races, fixes; validated against the official SARIF 2.1.0 schema, which is kept byte for byte."""

from __future__ import annotations

import hashlib
import json
import subprocess
from pathlib import Path

import jsonschema
import pytest

from streamcheck.cli import main

ROOT = Path(__file__).resolve().parents[2]
SCHEMA_FILE = ROOT / "tests" / "scanner" / "data" / "sarif-schema-2.1.0.json"
# sha256 of the OASIS errata01 file (Schemata/sarif-schema-2.1.0.json of oasis-tcs/sarif-spec, 112 768 bytes).
SCHEMA_SHA256 = "ddddcccbf95c7c50c037b5b07eff4140556278ca574ff374db46786b5fce7949"


def test_the_schema_is_the_official_file_unmodified():
    data = SCHEMA_FILE.read_bytes()
    assert (len(data), hashlib.sha256(data).hexdigest()) == (112768, SCHEMA_SHA256)
    schema = json.loads(data)
    assert schema["id"] == "https://docs.oasis-open.org/sarif/sarif/v2.1.0/errata01/os/schemas/sarif-schema-2.1.0.json"


@pytest.fixture
def repo(tmp_path, monkeypatch):
    """A git repository holding a racy example under src/pkg/; the scan runs from src/."""
    from .test_fix import FREE_SOURCE

    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    (tmp_path / "src" / "pkg").mkdir(parents=True)
    (tmp_path / "src" / "pkg" / "racy.py").write_text(FREE_SOURCE, encoding="utf-8")
    monkeypatch.chdir(tmp_path / "src")
    return tmp_path


def _sarif(capsys, *args):
    code = main(["scan", "--no-progress", "--no-cache", "--format", "sarif", *args])
    doc = json.loads(capsys.readouterr().out)
    jsonschema.validate(doc, json.loads(SCHEMA_FILE.read_text(encoding="utf-8")))
    return code, doc


def test_scan_sarif_for_code_scanning(repo, capsys):
    code, doc = _sarif(capsys, ".")
    assert code == 1
    run = doc["runs"][0]
    assert run["originalUriBaseIds"] == {"%SRCROOT%": {"uri": repo.as_uri() + "/"}}
    (result,) = run["results"]
    assert result["locations"][0]["physicalLocation"]["artifactLocation"] == {
        "uri": "src/pkg/racy.py", "uriBaseId": "%SRCROOT%"}  # the repository root, not the current folder
    assert result["message"]["text"] == (
        "`t1` is used on stream `side` and released by `del` with no `record_stream(side)` and no wait for `side`: "
        "the allocator may hand its memory to new work while the side stream still uses it "
        "(see [read at line 7](1), [stream context at line 6](2))")
    assert [(r["id"], r["message"]["text"]) for r in result["relatedLocations"]] == [
        (1, "read used on `side`"), (2, "stream context switches to `side`")]
    assert "Fix:" not in result["message"]["text"]
    assert result["properties"]["fix"].startswith("Call `t1.record_stream(side)`")
    assert result["fixes"] == [{
        "description": {"text": "insert `t1.record_stream(side)` before line 8"},
        "artifactChanges": [{
            "artifactLocation": {"uri": "src/pkg/racy.py", "uriBaseId": "%SRCROOT%"},
            "replacements": [{"deletedRegion": {"startLine": 8, "startColumn": 1, "endLine": 8, "endColumn": 1},
                              "insertedContent": {"text": "    t1.record_stream(side)\n"}}]}],
        "properties": {"safe": True}}]
    driver = run["tool"]["driver"]
    assert driver["informationUri"] == "https://github.com/streamcheck/streamcheck"
    rules = {rule["id"]: rule for rule in driver["rules"]}
    assert sorted(rules)[:7] == ["SC001", "SC002", "SC101", "SC102", "SC103", "SC104", "SC105"]
    assert all(rule_id.startswith(("SC0", "SC1")) for rule_id in rules)  # scan rules only, no runtime SC2xx
    sc104 = rules["SC104"]
    assert sc104["name"] == "FreeAfterSideStreamUse"
    assert sc104["helpUri"] == "https://github.com/streamcheck/streamcheck/blob/main/docs/rules/SC104.md"
    markdown = sc104["help"]["markdown"]
    assert markdown.startswith("# SC104: tensor used on a side stream is freed without record_stream or a wait\n\n"
                               "## What it does\n\nFinds a tensor that was allocated outside")
    assert "## Example\n\n```python\nt = torch.ones(n, device=\"cuda\")\n" in markdown
    assert sc104["properties"] == {"tags": ["correctness", "concurrency", "cuda", "pytorch", "static"],
                                   "precision": "high", "problem.severity": "error"}
    assert rules["SC002"]["properties"]["problem.severity"] == "warning"
    assert sc104["defaultConfiguration"] == {"level": "error"}


def test_end_line_and_column_where_known(capsys, tmp_path, monkeypatch):
    from streamcheck.findings import Finding, Location
    from streamcheck.report import ReportContext
    from streamcheck.report.sarif import document

    monkeypatch.chdir(tmp_path)
    finding = Finding(rule="SC101", message="m [x]", primary=Location("a.py", 3, 5, end_line=3, end_column=17))
    doc = document([finding], ReportContext(root=str(tmp_path)))
    (result,) = doc["runs"][0]["results"]
    assert result["locations"][0]["physicalLocation"]["region"] == {
        "startLine": 3, "startColumn": 5, "endLine": 3, "endColumn": 17}
    assert result["message"]["text"] == "m [x]"  # no related locations: the message as it is


def test_runtime_report_sarif_has_code_flows(capsys, monkeypatch):
    monkeypatch.chdir(ROOT)
    code = main(["report", "--format", "sarif", "examples/traces/hpz_race.jsonl"])
    doc = json.loads(capsys.readouterr().out)
    jsonschema.validate(doc, json.loads(SCHEMA_FILE.read_text(encoding="utf-8")))
    assert code == 1
    run = doc["runs"][0]
    (result,) = [r for r in run["results"] if r["locations"][0]["physicalLocation"]["artifactLocation"]["uri"]
                 == "examples/hpz_race/racy.py"]
    (flow,) = result["codeFlows"]
    earlier, later = flow["threadFlows"]
    assert [(s["location"]["physicalLocation"]["region"]["startLine"], s["location"]["message"]["text"],
             s["nestingLevel"]) for s in earlier["locations"]] == [
        (99, "in <module>", 0), (87, "in main", 1), (45, "earlier access: aten::copy_", 2)]
    assert later["message"]["text"] == "later access"
    assert later["locations"][-1]["location"]["physicalLocation"]["region"]["startLine"] == 35
    assert later["locations"][-1]["location"]["message"]["text"] == "later access: aten::cat"
    rules = {rule["id"]: rule for rule in run["tool"]["driver"]["rules"]}
    assert rules["SC201"]["name"] == "StreamRaceAtRuntime"
    assert rules["SC201"]["properties"]["precision"] == "very-high"
    assert "runtime" in rules["SC201"]["properties"]["tags"]


def test_end_of_a_region_read_from_the_source(tmp_path, monkeypatch, capsys):
    from .test_fix import FREE_SOURCE

    monkeypatch.chdir(tmp_path)
    (tmp_path / "m.py").write_text(FREE_SOURCE.replace("del t1", "del t1  # é"), encoding="utf-8")
    code, doc = _sarif(capsys, "m.py")
    (result,) = doc["runs"][0]["results"]
    region = result["locations"][0]["physicalLocation"]["region"]
    assert (region["startLine"], region["startColumn"], region["endLine"], region["endColumn"]) == (8, 9, 8, 11)
    read = result["relatedLocations"][0]["physicalLocation"]["region"]
    assert (read["startLine"], read["startColumn"], read["endLine"], read["endColumn"]) == (7, 17, 7, 25)  # t1.sum()
    assert main(["scan", "--no-progress", "--no-cache", "--format", "github", "m.py"]) == 1
    assert capsys.readouterr().out.startswith("::error file=m.py,line=8,col=9,endLine=8,endColumn=11,title=SC104")
    # A column where no expression starts: the source does not say where the region ends, so no end is given.
    from streamcheck.findings import Location
    from streamcheck.report.regions import with_end

    assert with_end(Location("m.py", 8, 3)) == Location("m.py", 8, 3)
