"""Output formats on hand-made findings (a static SC101 with related locations, a runtime SC201 with count and
`extra`), so each format's exact shape is pinned independently of what the rules find."""

from __future__ import annotations

import io
import json
from pathlib import Path

import jsonschema
import pytest

from streamcheck.findings import Finding, Location
from streamcheck.report import ReportContext, RuleInfo, write_report
from streamcheck.report.github import annotation

from .helpers import scan_cli, write_tree

SCHEMA = json.loads((Path(__file__).parent / "data" / "sarif-schema-2.1.0.json").read_text(encoding="utf-8"))

STATIC = Finding(
    rule="SC101",
    kind="RAW",
    message="param.ds_secondary_tensor is written on the current stream and read by an all-gather on a side stream",
    primary=Location("pkg/part.py", 12, 9, role="write", snippet="param.ds_secondary_tensor.copy_(src)",
                     end_line=12, end_column=45),
    related=(
        Location("pkg/coord.py", 30, 13, role="stream context", note="with get_accelerator().stream(ag)",
                 snippet="with get_accelerator().stream(self.ag_stream):"),
        Location("pkg/coord.py", 31, 17, role="read", note="all_gather_coalesced", snippet="p.all_gather_coalesced()"),
    ),
    fix="Call ag_stream.wait_stream(current_stream) before the all-gather, in coord.py:30.",
    symbol="Init._partition_param_sec",
    extra={"path": "param.ds_secondary_tensor", "reader_stream": "self.ag_stream", "consumer": "collective"},
)
RUNTIME = Finding(
    rule="SC201",
    kind="WAR",
    message="a, b: read on cuda:0/s1, then written on cuda:0/s2",
    primary=Location("/abs/train.py", 7, 1, role="write"),
    related=(Location("/abs/train.py", 5, 1, role="read"),),
    count=3,
    extra={"streams": ["cuda:0/s1", "cuda:0/s2"], "tensor": "float32[1024]"},
)
CONTEXT = ReportContext(tool_version="9.9.9", files=2,
                        rules={"SC101": RuleInfo("SC101", "cross-stream consumer", "SC101: what\n\nWhy: because")})


def _render(fmt: str, findings, context=CONTEXT) -> str:
    out = io.StringIO()
    write_report(fmt, findings, out, context)
    return out.getvalue()


def test_github_annotations_exact():
    assert _render("github", [STATIC, RUNTIME]).splitlines() == [
        "::error file=pkg/part.py,line=12,col=9,endLine=12,endColumn=45,title=SC101 (RAW)::param.ds_secondary_tensor "
        "is written on the current stream and read by an all-gather on a side stream"
        "%0Astream context: pkg/coord.py:30:13 (with get_accelerator().stream(ag))"
        "%0Aread: pkg/coord.py:31:17 (all_gather_coalesced)"
        "%0Afix: Call ag_stream.wait_stream(current_stream) before the all-gather, in coord.py:30.",
        "::error file=/abs/train.py,line=7,col=1,title=SC201 (WAR)::a, b: read on cuda:0/s1, then written on "
        "cuda:0/s2%0Aread: /abs/train.py:5:1%0Aseen 3 times",
    ]


def test_github_escapes_properties_and_data():
    odd = Finding(rule="SC001", message="100% broken\nnext", primary=Location("a,b:c.py", 1, 1), severity="warning")
    assert annotation(odd) == "::warning file=a%2Cb%3Ac.py,line=1,col=1,title=SC001::100%25 broken%0Anext"


def test_json_round_trips_findings():
    doc = json.loads(_render("json", [STATIC, RUNTIME]))
    assert doc["tool"] == {"name": "streamcheck", "version": "9.9.9"}
    assert [Finding.from_dict(f) for f in doc["findings"]] == [STATIC, RUNTIME]
    assert doc["findings"][0]["fingerprint"] == STATIC.fingerprint
    assert doc["findings"][0]["extra"] == STATIC.extra  # the rule's own data: in json, not in the text
    assert doc["findings"][1]["extra"] == {"streams": ["cuda:0/s1", "cuda:0/s2"], "tensor": "float32[1024]"}
    assert doc["summary"] == {"files": 2, "findings": 2, "by_rule": {"SC101": 1, "SC201": 1}, "suppressed": 0,
                              "baselined": 0, "parsed": 0, "skipped": []}


def test_sarif_is_valid_against_the_official_schema():
    doc = json.loads(_render("sarif", [STATIC, RUNTIME], ReportContext(
        tool_version="9.9.9", rules=CONTEXT.rules, skipped=["big.py: 5.2 MB is over the limit"])))
    jsonschema.validate(doc, SCHEMA)
    run = doc["runs"][0]
    assert doc["version"] == "2.1.0"
    assert [r["id"] for r in run["tool"]["driver"]["rules"]] == ["SC101", "SC201"]
    assert run["tool"]["driver"]["rules"][0]["help"] == {"text": "SC101: what\n\nWhy: because",
                                                         "markdown": "# SC101: what\n\nWhy: because\n"}
    static, runtime = run["results"]
    assert static["ruleId"] == "SC101" and static["ruleIndex"] == 0 and static["level"] == "error"
    assert static["locations"][0]["physicalLocation"] == {
        "artifactLocation": {"uri": "pkg/part.py", "uriBaseId": "%SRCROOT%"},
        "region": {"startLine": 12, "startColumn": 9, "endLine": 12, "endColumn": 45,
                   "snippet": {"text": "param.ds_secondary_tensor.copy_(src)"}},
    }
    assert static["locations"][0]["logicalLocations"] == [
        {"fullyQualifiedName": "Init._partition_param_sec", "kind": "function"}]
    assert [(r["id"], r["message"]["text"], r["physicalLocation"]["region"]["startLine"])
            for r in static["relatedLocations"]] == [
        (1, "stream context with get_accelerator().stream(ag)", 30), (2, "read all_gather_coalesced", 31)]
    assert static["partialFingerprints"] == {"streamcheck/v1": STATIC.fingerprint}
    assert static["properties"]["kind"] == "RAW"
    assert static["properties"]["extra"] == STATIC.extra
    assert runtime["occurrenceCount"] == 3
    assert runtime["locations"][0]["physicalLocation"]["artifactLocation"] == {"uri": "file:///abs/train.py"}
    assert runtime["properties"]["extra"]["streams"] == ["cuda:0/s1", "cuda:0/s2"]
    assert run["invocations"][0]["toolExecutionNotifications"] == [
        {"level": "note", "message": {"text": "skipped big.py: 5.2 MB is over the limit"}}]


def test_sarif_without_findings_is_valid():
    doc = json.loads(_render("sarif", []))
    jsonschema.validate(doc, SCHEMA)
    assert doc["runs"][0]["results"] == []


def test_text_plain_shows_source_related_fix_and_runtime_data():
    """A static finding's `extra` (path, reader_stream, consumer) is left out; tensor and streams are shown."""
    assert _render("text", [STATIC, RUNTIME]).splitlines() == [
        "pkg/part.py:12:9: SC101 RAW param.ds_secondary_tensor is written on the current stream and read by an "
        "all-gather on a side stream",
        "    12 | param.ds_secondary_tensor.copy_(src)",
        "  stream context pkg/coord.py:30:13  with get_accelerator().stream(ag)  | "
        "with get_accelerator().stream(self.ag_stream):",
        "  read           pkg/coord.py:31:17  all_gather_coalesced  | p.all_gather_coalesced()",
        "  fix: Call ag_stream.wait_stream(current_stream) before the all-gather, in coord.py:30.",
        "",
        "/abs/train.py:7:1: SC201 WAR a, b: read on cuda:0/s1, then written on cuda:0/s2 (seen 3 times)",
        "  read           /abs/train.py:5:1",
        "  streams        cuda:0/s1, cuda:0/s2",
        "  tensor         float32[1024]",
        "",
        "Found 2 findings in 2 files: SC101 x1, SC201 x1.",
    ]


def test_text_uses_the_file_for_a_caret_and_colours_only_when_asked(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    write_tree(tmp_path, {"pkg/part.py": b"\n" * 11 + b"        param.ds_secondary_tensor.copy_(src)\n"})
    plain = _render("text", [STATIC])
    assert plain.splitlines()[1:3] == [
        "    12 | param.ds_secondary_tensor.copy_(src)",
        "         " + "^" * 36,
    ]
    assert "\x1b[" not in plain
    coloured = _render("text", [STATIC], ReportContext(color=True))
    assert "\x1b[" in coloured
    assert "[SC101]" not in coloured  # rich markup is never interpreted


def test_cli_colour_follows_the_terminal(tmp_path, monkeypatch, capsys, fake_backend):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("NO_COLOR", raising=False)
    write_tree(tmp_path, {"m.py": "def f(x, y):\n    x.copy_(y)\n"})
    _, out, _ = scan_cli(capsys, "--no-cache", ".")
    assert "\x1b[" not in out  # captured stdout is not a terminal
    _, out, _ = scan_cli(capsys, "--no-cache", "--color", "always", ".")
    assert "\x1b[" in out


def test_output_file_and_exit_zero(tmp_path, monkeypatch, capsys, fake_backend):
    monkeypatch.chdir(tmp_path)
    write_tree(tmp_path, {"m.py": "def f(x, y):\n    x.copy_(y)\n"})
    code, out, _ = scan_cli(capsys, "--no-cache", "--format", "sarif", "-o", "out.sarif", "--exit-zero", ".")
    assert (code, out) == (0, "")
    doc = json.loads((tmp_path / "out.sarif").read_text())
    jsonschema.validate(doc, SCHEMA)
    assert [(r["ruleId"], r["locations"][0]["physicalLocation"]["region"]["startLine"])
            for r in doc["runs"][0]["results"]] == [("SC101", 2)]
    assert [r["id"] for r in doc["runs"][0]["tool"]["driver"]["rules"]] == ["SC001", "SC002", "SC101", "SC104"]


def test_unknown_format_is_a_usage_error(capsys):
    from streamcheck.cli import main

    assert main(["scan", "--format", "xml", "."]) == 2
    assert "invalid choice: 'xml'" in capsys.readouterr().err


def test_write_report_rejects_unknown_format():
    with pytest.raises(ValueError, match="unknown format 'xml'"):
        write_report("xml", [], io.StringIO(), ReportContext())


def test_unwritable_output_or_baseline_exits_2(tmp_path, monkeypatch, capsys, fake_backend):
    monkeypatch.chdir(tmp_path)
    write_tree(tmp_path, {"m.py": "x = 1\n"})
    code, out, err = scan_cli(capsys, "--no-cache", "-o", "missing/dir/report.txt", ".")
    assert (code, out) == (2, "")
    assert err == "streamcheck scan: cannot write missing/dir/report.txt: No such file or directory\n"
    code, out, err = scan_cli(capsys, "--no-cache", "--write-baseline", "missing/b.json", ".")
    assert (code, err) == (2, "streamcheck scan: cannot write missing/b.json: No such file or directory\n")
