"""streamcheck.instrument.offline.merge on recorded rank files: one finding per fingerprint, ranks and counts, killed jobs, traces."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from streamcheck.instrument.offline.merge import MergeError, merge

from .conftest import DATA, PP, SCENARIO26_TRACE


def _summary(findings):
    return [(f.rule, f.kind, f.primary.path, f.primary.line, f.count, f.extra["ranks"], f.extra["counts_by_rank"])
            for f in findings]


def test_two_rank_files_merge_into_one_finding_each_with_summed_counts(rank_files: Path):
    report = merge([rank_files])
    assert _summary(report.findings) == [
        ("SC201", "RAW", PP, 93, 4, [0, 1], {"0": 2, "1": 2}),
        ("SC202", "FREE", PP, 1494, 2, [0], {"0": 2}),
    ]
    assert report.ranks == {0, 1} and report.world_size == 2
    assert report.warnings == [] and report.errors == [] and report.traces == {}
    hpz = report.findings[0]
    assert "rank" not in hpz.extra and "pid" not in hpz.extra  # per-run keys do not survive the merge
    assert (hpz.related[0].role, hpz.related[0].line) == ("write", 1643)


def test_files_given_one_by_one_merge_the_same_as_their_directory(rank_files: Path):
    by_dir = merge([rank_files])
    by_file = merge(sorted(rank_files.iterdir()))
    assert _summary(by_file.findings) == _summary(by_dir.findings)


def test_truncated_last_line_of_a_killed_rank_is_a_warning_and_the_rest_is_kept(rank_files: Path):
    rank1 = rank_files / "streamcheck-rank1.jsonl"
    lines = rank1.read_text().splitlines(keepends=True)
    assert len(lines) == 3  # header, the finding when first seen (count 1), its final count (2) at stop()
    rank1.write_text("".join(lines[:2]) + lines[2][: len(lines[2]) // 2])  # killed while writing the last line
    report = merge([rank_files])
    assert report.warnings == [f"{rank1}:3: truncated last line (was the job killed?), ignored"]
    assert _summary(report.findings)[0] == ("SC201", "RAW", PP, 93, 3, [0, 1], {"0": 2, "1": 1})


def test_a_bad_line_in_the_middle_is_skipped_with_its_line_number(rank_files: Path):
    rank0 = rank_files / "streamcheck-rank0.jsonl"
    lines = rank0.read_text().splitlines(keepends=True)
    rank0.write_text(lines[0] + "{not json\n" + "".join(lines[1:]))
    report = merge([rank_files])
    assert report.warnings == [f"{rank0}:2: not JSON, ignored"]
    assert [f.count for f in report.findings] == [4, 2]


def test_runs_appended_to_one_file_each_count(tmp_path: Path):
    """Several processes (or watches) of a rank append to one file, each after its own header."""
    lines = (DATA / "streamcheck-rank1.jsonl").read_text()
    path = tmp_path / "streamcheck-rank1.jsonl"
    path.write_text(lines + lines)
    (finding,) = merge([path]).findings
    assert (finding.count, finding.extra["ranks"], finding.extra["counts_by_rank"]) == (4, [1], {"1": 4})


def test_steps_are_merged_and_instrumentation_errors_reported(tmp_path: Path):
    records = [json.loads(line) for line in (DATA / "streamcheck-rank1.jsonl").read_text().splitlines()]
    header, finding = records[0], records[1]
    for rank, steps in ((0, [3, 1]), (1, [2, 3])):
        path = tmp_path / f"streamcheck-rank{rank}.jsonl"
        lines = [{**header, "rank": rank}, {**finding, "extra": {**finding["extra"], "steps": steps}}]
        if rank == 1:
            lines.append({"e": "error", "rank": 1, "error": "RuntimeError('boom')"})
        path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    report = merge([tmp_path])
    (merged,) = report.findings
    assert (merged.count, merged.extra["steps"], merged.extra["ranks"]) == (2, [1, 2, 3], [0, 1])
    assert report.errors == ["rank 1: RuntimeError('boom')"]


def test_traces_are_kept_for_names_but_do_not_double_the_findings():
    report = merge([DATA])
    assert sorted(report.traces) == [0, 1]
    assert report.traces[1].path == DATA / "hpz-trace-rank1.jsonl"
    assert [f.count for f in report.findings] == [4, 2]
    assert report.trace_for(report.findings[0]).rank == 0


def test_a_trace_alone_is_replayed_into_findings():
    report = merge([DATA / "hpz-trace-rank1.jsonl", DATA / "hpz-trace-rank0.jsonl"])
    assert [(f.rule, f.kind, f.primary.line, f.count, f.extra["ranks"]) for f in report.findings] == [
        ("SC201", "RAW", 93, 4, [0, 1]), ("SC202", "FREE", 93, 1, [0])]
    # FREE is judged at the pool stream's next work: the first free's block may be reused by the next all-gather
    # launched from that side stream (line 93); after the second free the trace gives that stream no more work.
    free = report.findings[1]
    assert [(loc.role, loc.line) for loc in free.related] == [("free", 1494), ("read", 88), ("sync", 88)]
    assert report.findings[0].extra["later_stack"][1] == f"{PP}:1217 in all_gather_coalesced"


def test_the_shipped_scenario_26_trace_gives_the_hpz_race():
    (finding,) = merge([SCENARIO26_TRACE]).findings
    assert (finding.rule, finding.kind, finding.primary.line, finding.related[0].line, finding.count) == (
        "SC201", "RAW", 1136, 1643, 1)
    assert finding.extra["later"]["stream"] == "cuda:0/s3"


def test_unusable_inputs(tmp_path: Path):
    with pytest.raises(MergeError, match="no such file or directory"):
        merge([tmp_path / "missing"])
    with pytest.raises(MergeError, match="no .jsonl files in this directory"):
        merge([tmp_path])
    other = tmp_path / "other.jsonl"
    other.write_text('{"hello": 1}\n')
    report = merge([other])
    assert report.files == [] and report.warnings == [f"{other}: not a streamcheck findings file or trace, skipped"]


def test_gzipped_rank_files_are_read(tmp_path: Path):
    import gzip

    with open(DATA / "streamcheck-rank0.jsonl", "rb") as src, gzip.open(tmp_path / "r0.jsonl.gz", "wb") as dst:
        shutil.copyfileobj(src, dst)
    assert [f.count for f in merge([tmp_path]).findings] == [2, 2]


def test_a_gzipped_rank_file_cut_short_keeps_its_complete_lines(tmp_path: Path):
    import gzip

    data = gzip.compress((DATA / "streamcheck-rank0.jsonl").read_bytes())
    path = tmp_path / "streamcheck-rank0.jsonl.gz"
    path.write_bytes(data[: len(data) - 12])  # the gzip trailer and the end of the last block are lost
    report = merge([path])
    assert report.warnings == [f"{path}: cut short after line 4 (Compressed file ended before the end-of-stream "
                               "marker was reached); the lines before are kept"]
    # header, SC201 (count 1), SC202 (count 1), SC201's final count (2) survived; SC202's final count was lost
    assert [(f.rule, f.count) for f in report.findings] == [("SC201", 2), ("SC202", 1)]
