"""Issue 19, trace and findings-file rows: a bad line is one warning with its line number, the rest is analyzed, and
the exit code never says "clean" about input that could not be read in full.

D11 JSON nested 100 k deep, D12 an event field of the wrong type, D13 no header (blank lines first), D14 a cut or
garbage line, D15 traces `report` cannot replay, D16 findings fields of the wrong type, D17 two traces of one
rank; from the issue's "Also": distinct findings whose lines have the same text, findings files of one rank.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from streamcheck.cli import main
from streamcheck.instrument.trace import TraceWriter

HEADER = {"e": "header", "format": "streamcheck-trace", "version": 1, "rank": 0, "world_size": 1}
DEEP = "[" * 100_000 + "]" * 100_000
RACE_LINE = "train.py:20:1: SC201 RAW read-after-write race on storage 0x5: aten::mul on side stream 0x1 on cuda:0 " \
            "reads it at train.py:20, not ordered after aten::add_ on compute stream cuda:0 (write at train.py:10)"


def racy_trace(path: Path, rank: int = 0, read_line: int = 20) -> list[str]:
    """A trace with one RAW race (write at train.py:10, read at train.py:<read_line>); returns its lines."""
    with TraceWriter(path, rank=rank) as trace:
        trace.site(1, [["train.py", 10, "step"]])
        trace.site(2, [["train.py", read_line, "step"]])
        trace.kernel("T", "cuda:0/s0", writes=[(5, 0, 64)], site=1, op="aten::add_")
        trace.kernel("T", "cuda:0/s1", reads=[(5, 0, 64)], site=2, op="aten::mul")
    return path.read_text().splitlines(keepends=True)


def clean_trace(path: Path) -> list[str]:
    with TraceWriter(path) as trace:
        trace.site(1, [["train.py", 10, "step"]])
        trace.kernel("T", "cuda:0/s0", writes=[(5, 0, 64)], site=1, op="aten::add_")
        trace.kernel("T", "cuda:0/s0", reads=[(5, 0, 64)], site=1, op="aten::mul")
    return path.read_text().splitlines(keepends=True)


def with_line(lines: list[str], at: int, line: str) -> str:
    """The trace with `line` inserted so that it becomes line number `at` (1-based)."""
    return "".join(lines[: at - 1] + [line] + lines[at - 1:])


def run(capsys, *args) -> tuple[int, str, str]:
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


# -- D11: JSON nested 100 k deep -----------------------------------------------------------------------------------
@pytest.mark.parametrize("deep", [DEEP, '{"e": ' * 50_000 + "1" + "}" * 50_000], ids=["array", "object"])
def test_d11_deeply_nested_trace_line_is_skipped_with_its_number(tmp_path, capsys, deep):
    path = tmp_path / "t.jsonl"
    path.write_text(with_line(racy_trace(path), 3, deep + "\n"))
    code, out, err = run(capsys, "analyze", str(path))
    assert code == 1
    assert err == f"streamcheck analyze: warning: {path}:3: not JSON this reader can take (nested too deep), skipped\n"
    assert out.splitlines()[0] == RACE_LINE
    code, out, err = run(capsys, "report", str(path))
    assert code == 1 and out.splitlines()[0] == RACE_LINE
    assert err == f"streamcheck report: warning: {path}:3: not JSON this reader can take (nested too deep), skipped\n"


def test_d11_deeply_nested_findings_line_is_ignored_with_its_number(tmp_path, capsys):
    findings = findings_file(tmp_path / "streamcheck-rank0.jsonl")
    path = tmp_path / "streamcheck-rank0.jsonl"
    path.write_text(with_line(findings, 2, DEEP + "\n"))
    code, out, err = run(capsys, "report", str(path))
    assert code == 1 and out.splitlines()[0] == RACE_LINE
    assert err == (f"streamcheck report: warning: {path}:2: not JSON this reader can take (nested too deep), "
                   "ignored\n")


# -- D12: a field of the wrong type --------------------------------------------------------------------------------
@pytest.mark.parametrize("event, why", [
    ('{"e": "site", "id": [1], "frames": []}', "'site' field 'id' must be an integer or a string, not a list"),
    ('{"e": "kernel", "thread": "T", "stream": 3}', "'kernel' field 'stream' must be a string, not an integer"),
    ('{"e": "kernel", "thread": "T", "stream": "s", "reads": [[1, 2]]}',
     "'kernel' field 'reads' must be a list of [storage, start, end], not a list"),
    ('{"e": "storage_info", "storage": {"a": 1}}',
     "'storage_info' field 'storage' must be an integer or a string, not an object"),
])
def test_d12_bad_event_is_skipped_with_its_line(tmp_path, capsys, event, why):
    path = tmp_path / "t.jsonl"
    path.write_text(with_line(racy_trace(path), 2, event + "\n"))
    code, out, err = run(capsys, "analyze", str(path))
    assert code == 1
    assert err == f"streamcheck analyze: warning: {path}:2: bad event: {why}, skipped\n"
    assert out.splitlines()[0] == RACE_LINE
    assert out.rstrip().endswith(f"Found 1 race (1 occurrence) in {path} (rank 0, 5 events): SC201 x1.")
    code, out, err = run(capsys, "report", str(path))
    assert (code, out.splitlines()[0]) == (1, RACE_LINE)
    assert err == f"streamcheck report: warning: {path}:2: bad event: {why}, skipped\n"


# -- D13: the header is required, blank lines or not ------------------------------------------------------------------
def test_d13_blank_lines_only_is_not_a_trace(tmp_path, capsys):
    path = tmp_path / "t.jsonl"
    path.write_text("\n\n  \n")
    assert run(capsys, "analyze", str(path)) == (
        2, "", f"streamcheck analyze: {path}: empty file, expected a streamcheck trace header\n")
    assert run(capsys, "report", str(path)) == (
        2, "", f"streamcheck report: warning: {path}: not a streamcheck findings file or trace, skipped\n"
               "streamcheck report: none of the inputs is a streamcheck findings file or trace\n")


def test_d13_blank_first_line_then_a_newer_version(tmp_path, capsys):
    path = tmp_path / "t.jsonl"
    lines = racy_trace(path)
    path.write_text("\n" + lines[0].replace('"version":1', '"version":99') + "".join(lines[1:]))
    why = f"{path}:2: trace format version 99 is newer than this streamcheck (reads up to 1)"
    assert run(capsys, "analyze", str(path)) == (2, "", f"streamcheck analyze: {why}\n")
    code, out, err = run(capsys, "report", str(path))
    assert (code, out) == (2, "No findings in no rank.\n")
    assert err == (f"streamcheck report: warning: {why}; this trace was not used\n"
                   "streamcheck report: no findings in what could be read, but some input was damaged (see the "
                   "warnings): exit 2\n")


def test_d13_blank_first_line_then_no_header(tmp_path, capsys):
    path = tmp_path / "t.jsonl"
    lines = racy_trace(path)
    path.write_text("\n" + "".join(lines[1:]))
    assert run(capsys, "analyze", str(path)) == (
        2, "", f"streamcheck analyze: {path}:2: not a streamcheck trace (the first line must be a streamcheck-trace "
               "header)\n")


# -- D14: a cut or garbage line is skipped, the rest analyzed --------------------------------------------------------
def test_d14_trace_cut_mid_line(tmp_path, capsys):
    path = tmp_path / "t.jsonl"
    lines = racy_trace(path)
    path.write_text("".join(lines) + lines[3][:30])  # the run was killed while writing line 6
    code, out, err = run(capsys, "analyze", str(path))
    assert code == 1 and out.splitlines()[0] == RACE_LINE
    assert err == f"streamcheck analyze: warning: {path}:6: truncated last line (was the run killed?), skipped\n"
    code, out, err = run(capsys, "report", str(path))
    assert code == 1 and out.splitlines()[0] == RACE_LINE
    assert err == f"streamcheck report: warning: {path}:6: truncated last line (was the run killed?), skipped\n"


def test_d14_garbage_line_between_the_racing_accesses(tmp_path, capsys):
    path = tmp_path / "t.jsonl"
    path.write_text(with_line(racy_trace(path), 5, "garbage\n"))  # after the write, before the read
    code, out, err = run(capsys, "analyze", str(path), "--format", "json")
    assert code == 1
    assert err == f"streamcheck analyze: warning: {path}:5: not JSON (Expecting value), skipped\n"
    document = json.loads(out)
    assert [(f["rule"], f["kind"], f["primary"]["line"]) for f in document["findings"]] == [("SC201", "RAW", 20)]
    assert document["findings"][0]["extra"]["later"]["seq"] == 4  # the skipped line keeps its index
    assert document["summary"]["unreadable"] == [f"{path}:5: not JSON (Expecting value), skipped"]
    code, out, err = run(capsys, "report", str(path))  # used to keep only the lines before the bad one
    assert code == 1 and out.splitlines()[0] == RACE_LINE


def test_d14_garbage_in_a_race_free_trace_is_exit_2(tmp_path, capsys):
    path = tmp_path / "t.jsonl"
    path.write_text(with_line(clean_trace(path), 3, "garbage\n"))
    code, out, err = run(capsys, "analyze", str(path))
    assert (code, out) == (2, f"No race in the readable part of {path} (rank 0, 4 events); 1 line could not be read.\n")
    assert err == f"streamcheck analyze: warning: {path}:3: not JSON (Expecting value), skipped\n"
    code, out, err = run(capsys, "report", str(path))
    assert (code, out) == (2, "No findings in 1 rank.\n")
    assert err == (f"streamcheck report: warning: {path}:3: not JSON (Expecting value), skipped\n"
                   "streamcheck report: no findings in what could be read, but some input was damaged (see the "
                   "warnings): exit 2\n")


# -- D15: traces report cannot replay ------------------------------------------------------------------------------
DAMAGED = ("streamcheck report: no findings in what could be read, but some input was damaged (see the warnings): "
           "exit 2\n")


def test_d15_newer_version_is_exit_2_naming_line_1(tmp_path, capsys):
    path = tmp_path / "t.jsonl"
    lines = racy_trace(path)
    path.write_text(lines[0].replace('"version":1', '"version":2') + "".join(lines[1:]))
    code, out, err = run(capsys, "report", str(path))
    assert code == 2
    assert err == (f"streamcheck report: warning: {path}:1: trace format version 2 is newer than this streamcheck "
                   f"(reads up to 1); this trace was not used\n{DAMAGED}")


def test_d15_bad_early_event_names_its_own_line(tmp_path, capsys):
    path = tmp_path / "t.jsonl"
    path.write_text(with_line(clean_trace(path), 2, '{"e": "kernel", "thread": "T"}\n'))
    code, out, err = run(capsys, "report", str(path))
    assert code == 2
    assert err == f"streamcheck report: warning: {path}:2: bad event: 'kernel' lacks stream, skipped\n{DAMAGED}"


def test_d15_non_utf8_byte_names_its_own_line(tmp_path, capsys):
    path = tmp_path / "t.jsonl"
    lines = [line.encode() for line in clean_trace(path)]
    lines[2] = lines[2].replace(b"aten::add_", b"aten::\xffadd_")
    path.write_bytes(b"".join(lines))
    code, out, err = run(capsys, "report", str(path))
    assert code == 2
    assert err == f"streamcheck report: warning: {path}:3: not UTF-8 (byte 0xff at column 101), skipped\n{DAMAGED}"
    code, out, err = run(capsys, "analyze", str(path))
    assert code == 2
    assert err == f"streamcheck analyze: warning: {path}:3: not UTF-8 (byte 0xff at column 101), skipped\n"


# -- D16: findings-file fields of the wrong type ------------------------------------------------------------------
def findings_file(path: Path, rank: int = 0, read_lines=(20,)) -> list[str]:
    """A findings file of `rank` holding the race of racy_trace for each read line; returns its lines."""
    from streamcheck.instrument.detector import Detector
    from streamcheck.instrument.trace import read_trace, replay
    from streamcheck.instrument.offline.merge import race_findings

    records = [{"e": "header", "format": "streamcheck-findings", "version": 1, "rank": rank, "world_size": 2}]
    for line in read_lines:
        trace = path.with_suffix(f".trace{line}")
        racy_trace(trace, rank, line)
        detector = Detector()
        replay(read_trace(trace), detector)
        trace.unlink()
        records += [finding.to_dict() for finding in race_findings(detector, rank).values()]
    path.write_text("".join(json.dumps(record) + "\n" for record in records))
    return path.read_text().splitlines(keepends=True)


@pytest.mark.parametrize("field, value, why", [
    ("count", "abc", 'count must be an integer, not a string "abc"'),
    ("line", "x", 'primary.line must be an integer, not a string "x"'),
    ("path", 7, "primary.path must be a string, not an integer 7"),
    ("related", 5, "related must be a list, not an integer 5"),
    ("rule", None, "rule must be a string, not null null"),
])
def test_d16_mistyped_finding_is_ignored_with_its_line(tmp_path, capsys, field, value, why):
    path = tmp_path / "streamcheck-rank0.jsonl"
    lines = findings_file(path, read_lines=(20, 30))
    record = json.loads(lines[2])
    (record["primary"] if field in ("line", "path") else record)[field] = value
    lines[2] = json.dumps(record) + "\n"
    path.write_text("".join(lines))
    code, out, err = run(capsys, "report", str(path))
    assert code == 1
    assert out.splitlines()[0] == RACE_LINE  # the good finding of line 2
    assert "train.py:30:1" not in out
    assert err == f"streamcheck report: warning: {path}:3: not a finding ({why}), ignored\n"


def test_d16_only_mistyped_findings_is_exit_2(tmp_path, capsys):
    path = tmp_path / "streamcheck-rank0.jsonl"
    lines = findings_file(path)
    record = json.loads(lines[1])
    record["count"] = "abc"
    path.write_text(lines[0] + json.dumps(record) + "\n")
    code, out, err = run(capsys, "report", str(path))
    assert (code, out) == (2, "No findings in 1 rank.\n")
    assert err == (f"streamcheck report: warning: {path}:2: not a finding (count must be an integer, not a string "
                   f'"abc"), ignored\n{DAMAGED}')


# -- D17: two traces of one rank -----------------------------------------------------------------------------------
def test_d17_two_traces_of_one_rank_are_both_kept(tmp_path, capsys):
    first, second = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    racy_trace(first, read_line=20)
    racy_trace(second, read_line=30)
    code, out, err = run(capsys, "report", str(tmp_path), "--format", "json")
    assert code == 1
    assert [f["primary"]["line"] for f in json.loads(out)["findings"]] == [20, 30]
    assert err == (f"streamcheck report: warning: rank 0 has 2 traces ({first}, {second}): all are kept; names and "
                   f"pictures come from {first}\n")


# -- "Also": distinct findings on lines of the same text; one rank in two findings files ----------------------------
def test_distinct_findings_whose_lines_read_the_same_stay_distinct(tmp_path, capsys):
    path = tmp_path / "streamcheck-rank0.jsonl"
    lines = findings_file(path, read_lines=(20, 30))
    records = [json.loads(line) for line in lines[1:]]
    for record in records:  # the same source text on both lines, as in a loop body written out twice
        record["primary"]["snippet"] = "y = x * 2"
    assert records[0]["primary"]["line"] != records[1]["primary"]["line"]
    path.write_text(lines[0] + "".join(json.dumps(r) + "\n" for r in records))
    code, out, err = run(capsys, "report", str(path), "--format", "json")
    assert (code, err) == (1, "")
    assert [(f["primary"]["line"], f["count"]) for f in json.loads(out)["findings"]] == [(20, 1), (30, 1)]


def test_one_rank_in_two_findings_files_is_said(tmp_path, capsys):
    first, second = tmp_path / "streamcheck-rank0.jsonl", tmp_path / "streamcheck-rank0-again.jsonl"
    findings_file(first)
    findings_file(second)
    code, out, err = run(capsys, "report", str(tmp_path), "--format", "json")
    assert code == 1
    assert [(f["count"], f["extra"]["counts_by_rank"]) for f in json.loads(out)["findings"]] == [(2, {"0": 2})]
    assert err == (f"streamcheck report: warning: rank 0 is in 2 findings files ({second}, {first}): all are kept "
                   "and their counts added\n")


# -- all at once: every bad trace and findings file of the table next to a racy trace --------------------------------
def test_report_of_every_bad_input_next_to_a_racy_trace(tmp_path, capsys):
    folder = tmp_path / "job"
    folder.mkdir()
    racy = racy_trace(folder / "a_racy.jsonl", rank=0)
    clean = clean_trace(tmp_path / "clean.jsonl")
    bad = {  # one bad line each, at line 3, in a race-free trace of its own rank
        "d11_deep.jsonl": DEEP,
        "d12_site_list_id.jsonl": '{"e": "site", "id": [1], "frames": []}',
        "d14_garbage.jsonl": "garbage",
    }
    for rank, (name, line) in enumerate(bad.items(), 1):
        (folder / name).write_text(with_line(clean, 3, line + "\n").replace('"rank":0', f'"rank":{rank}', 1))
    (folder / "d13_blank.jsonl").write_text("\n\n")
    (folder / "d15_newer.jsonl").write_text(clean[0].replace('"version":1', '"version":7') + "".join(clean[1:]))
    findings = findings_file(tmp_path / "f.jsonl", rank=5)
    record = json.loads(findings[1])
    record["count"] = "abc"
    (folder / "d16_findings.jsonl").write_text(findings[0] + json.dumps(record) + "\n")
    (folder / "d17_second_of_rank0.jsonl").write_text("".join(racy))
    code, out, err = run(capsys, "report", str(folder))
    assert code == 1
    assert out.splitlines()[0] == RACE_LINE
    assert "seen 2 times on rank 0" in out  # both traces of rank 0
    j = str(folder)
    assert err.splitlines() == [
        f"streamcheck report: warning: {j}/d13_blank.jsonl: not a streamcheck findings file or trace, skipped",
        f"streamcheck report: warning: {j}/d15_newer.jsonl:1: trace format version 7 is newer than this streamcheck "
        "(reads up to 1); this trace was not used",
        f"streamcheck report: warning: {j}/d16_findings.jsonl:2: not a finding (count must be an integer, not a "
        'string "abc"), ignored',
        f"streamcheck report: warning: rank 0 has 2 traces ({j}/a_racy.jsonl, {j}/d17_second_of_rank0.jsonl): all "
        f"are kept; names and pictures come from {j}/a_racy.jsonl",
        f"streamcheck report: warning: {j}/d11_deep.jsonl:3: not JSON this reader can take (nested too deep), skipped",
        f"streamcheck report: warning: {j}/d12_site_list_id.jsonl:3: bad event: 'site' field 'id' must be an integer "
        "or a string, not a list, skipped",
        f"streamcheck report: warning: {j}/d14_garbage.jsonl:3: not JSON (Expecting value), skipped",
    ]


def test_an_unreadable_input_file_is_skipped_and_the_rest_reported(tmp_path, capsys, monkeypatch):
    racy_trace(tmp_path / "a.jsonl")
    locked = tmp_path / "b.jsonl"
    racy_trace(locked, rank=1)
    os.chmod(locked, 0)
    real_open = Path.open

    def refuse(self, *args, **kwargs):  # what a non-root user meets; root reads anything
        if self == locked:
            raise PermissionError(13, "Permission denied", str(self))
        return real_open(self, *args, **kwargs)

    monkeypatch.setattr(Path, "open", refuse)
    code, out, err = run(capsys, "report", str(tmp_path))
    assert code == 1 and out.splitlines()[0] == RACE_LINE
    assert out.rstrip().endswith("Found 1 finding in 1 rank: SC201 x1.")
    assert err == f"streamcheck report: warning: {locked}: cannot read: Permission denied, skipped\n"
