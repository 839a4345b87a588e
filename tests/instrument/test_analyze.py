"""`streamcheck analyze TRACE` on the hand-written scenario-26 trace and its fixed twin."""

from __future__ import annotations

import json
import re
from pathlib import Path

from streamcheck.cli import main
from streamcheck.instrument.trace import TraceWriter

TRACES = Path(__file__).resolve().parents[2] / "examples" / "traces"
RACY = str(TRACES / "scenario26_hpz.jsonl")
FIXED = str(TRACES / "scenario26_hpz_fixed.jsonl")
PP = "deepspeed/runtime/zero/partition_parameters.py"


SIDE = "side stream created at partitioned_param_coordinator.py:115 on cuda:0"
HEADLINE = ("read-after-write race on param.ds_secondary_tensor: c10d::_allgather_base_ on NCCL stream of group [0] "
            "on cuda:0 reads it at partition_parameters.py:1136, not ordered after aten::copy_ on compute stream "
            "cuda:0 (write at partition_parameters.py:1643)")
FIX = (f"add `side.wait_stream(compute)` before the c10d::_allgather_base_ is launched at partition_parameters.py:1136 "
       f"(side = {SIDE}, compute = compute stream cuda:0); or record an event on compute after "
       f"partition_parameters.py:1643 and call `side.wait_event(event)` there")


def test_text_names_both_sites_and_the_missing_edge(capsys):
    assert main(["analyze", RACY]) == 1
    assert capsys.readouterr().out.splitlines() == [
        f"{PP}:1136:1: SC201 RAW {HEADLINE}",
        "  tensor   param.ds_secondary_tensor: bfloat16[4096], allocated at partition_parameters.py:1643, "
        "storage 0x8583b00, race on bytes [0, 8192)",
        "  write    aten::copy_ on compute stream cuda:0, host thread T1",
        f"           {PP}:1643 in _partition_param_sec",
        "           called from partition_parameters.py:1180 in partition",
        "  read     c10d::_allgather_base_ on NCCL stream of group [0] on cuda:0, launched from "
        f"{SIDE}, host thread T1",
        f"           {PP}:1136 in all_gather_coalesced",
        "           called from partitioned_param_coordinator.py:470 in __all_gather_params_",
        f"  missing  {SIDE} never waited for compute stream cuda:0 after partition_parameters.py:1643",
        f"  fix: {FIX}",
        "  seen once on rank 0",
        "",
        f"Found 1 race (1 occurrence) in {RACY} (rank 0, 15 events): SC201 x1.",
    ]


def test_text_is_the_report_layout(capsys):
    """analyze and `streamcheck report` render a trace's races the same way; only the summary line differs."""
    main(["analyze", RACY])
    analyzed = capsys.readouterr().out.splitlines()
    main(["report", RACY])
    reported = capsys.readouterr().out.splitlines()
    assert analyzed[:-1] == reported[:-1]
    assert reported[-1] == "Found 1 finding in 1 rank: SC201 x1."


def test_fixed_twin_is_clean(capsys):
    assert main(["analyze", FIXED]) == 0
    assert capsys.readouterr().out == f"No race in {FIXED} (rank 0, 17 events).\n"


def test_json(capsys):
    assert main(["analyze", RACY, "--format", "json"]) == 1
    document = json.loads(capsys.readouterr().out)
    assert document["trace"]["rank"] == 0 and document["trace"]["path"] == RACY
    assert document["summary"] == {"events": 15, "skipped_events": 0, "races": 1, "findings": 1,
                                   "by_rule": {"SC201": 1}}
    (finding,) = document["findings"]
    assert (finding["rule"], finding["kind"], finding["symbol"]) == ("SC201", "RAW", "all_gather_coalesced")
    assert (finding["primary"]["path"], finding["primary"]["line"], finding["primary"]["role"]) == (PP, 1136, "read")
    assert [(r["role"], r["path"], r["line"]) for r in finding["related"]] == [("write", PP, 1643), ("sync", PP, 1643)]
    assert finding["extra"]["earlier"]["op"] == "aten::copy_" and finding["extra"]["earlier"]["seq"] == 10
    assert finding["extra"]["later"]["stream"] == "cuda:0/s3" and finding["extra"]["later"]["seq"] == 12
    assert (finding["extra"]["start"], finding["extra"]["end"]) == (0, 8192)
    assert (finding["message"], finding["fix"]) == (HEADLINE, FIX)  # the words of the text report
    assert finding["extra"]["streams"] == {"cuda:0/s0": "compute stream",
                                           "cuda:0/s3": "side stream created at partitioned_param_coordinator.py:115"}
    assert (finding["extra"]["ranks"], finding["extra"]["counts_by_rank"], finding["count"]) == ([0], {"0": 1}, 1)
    assert finding["extra"]["later_stack"] == [f"{PP}:1136 in all_gather_coalesced",
                                               "deepspeed/runtime/zero/partitioned_param_coordinator.py:470 in "
                                               "__all_gather_params_"]
    assert len(finding["fingerprint"]) == 20


def test_graph_writes_the_witness(tmp_path, capsys):
    out = tmp_path / "race.dot"
    assert main(["analyze", RACY, "--graph", str(out)]) == 1
    dot = out.read_text()
    nodes = dict(re.findall(r'^    (n\d+) \[label="([^"]*)"', dot, re.M))
    by_label = {label.split("\\n")[0]: node for node, label in nodes.items()}
    by_label.update({label.split("\\n")[1]: node for node, label in nodes.items() if "access" in label})
    copy, launch, gather = by_label["aten::copy_"], by_label["launch c10d::_allgather_base_"], \
        by_label["c10d::_allgather_base_"]
    # The layout `streamcheck report --graph` draws (instrument/offline/graph.py), not a second one.
    assert (f'  {copy} -> {launch} [style=dashed, color=red, fontcolor=red, penwidth=2.5, constraint=false, '
            f'label="missing: side.wait_stream(compute)"];') in dot
    assert f'  {launch} -> {gather} [color="#1f5fbf", fontcolor="#1f5fbf", label="collective"];' in dot
    assert dot.startswith("digraph race_1 {")
    assert '    label="compute stream cuda:0"; style=filled' in dot
    assert dot.count("digraph ") == 1 and dot.rstrip().endswith("}")


def test_repeated_races_are_counted_once(tmp_path, capsys):
    path = tmp_path / "steps.jsonl"
    with TraceWriter(path) as trace:
        trace.site(1, [["train.py", 10, "step"]])
        trace.site(2, [["train.py", 20, "step"]])
        for _ in range(3):
            trace.kernel("T", "cuda:0/s0", writes=[(5, 0, 64)], site=1, op="aten::add_")
            trace.kernel("T", "cuda:0/s1", reads=[(5, 0, 64)], site=2, op="aten::mul")
    assert main(["analyze", str(path), "--format", "json"]) == 1
    document = json.loads(capsys.readouterr().out)
    assert document["summary"]["races"] == 5  # s1 reads after each s0 write, s0 writes after each s1 read but 1st
    assert sorted((f["kind"], f["count"], f["primary"]["line"]) for f in document["findings"]) == [
        ("RAW", 3, 20), ("WAR", 2, 10)]


def test_unreadable_trace_is_exit_2(tmp_path, capsys):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"e": "header", "format": "streamcheck-trace", "version": 1}\n{"e": "kernel"}\n')
    assert main(["analyze", str(bad)]) == 2  # no race in what could be read is not a clean bill
    out, err = capsys.readouterr()
    assert err == f"streamcheck analyze: warning: {bad}:2: bad event: 'kernel' lacks thread, stream, skipped\n"
    assert out == f"No race in the readable part of {bad} (rank ?, 1 events); 1 line could not be read.\n"
    assert main(["analyze", str(tmp_path / "missing.jsonl")]) == 2
    assert "cannot open" in capsys.readouterr().err


def test_colour_only_when_asked(capsys, monkeypatch):
    monkeypatch.delenv("NO_COLOR", raising=False)
    assert main(["analyze", RACY]) == 1
    assert "\x1b[" not in capsys.readouterr().out  # captured stdout is not a terminal
    assert main(["analyze", RACY, "--color", "always"]) == 1
    coloured = capsys.readouterr().out
    assert "\x1b[" in coloured and "Found 1 race (1 occurrence)" in coloured
