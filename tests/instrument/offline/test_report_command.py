"""`streamcheck report`: the exact text of a report, json, sarif (schema-valid), github, exit codes, bad input."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest

from streamcheck.cli import main

from .conftest import DATA, PP, ROOT

SARIF_SCHEMA = ROOT / "tests" / "scanner" / "data" / "sarif-schema-2.1.0.json"
SEED = ROOT / "examples" / "deepspeed_hpz" / "results"

RANK1_REPORT = f"""\
{PP}:93:1: SC201 RAW read-after-write race on model.layers.0.mlp.up_proj.weight.ds_secondary_tensor: \
c10d::_allgather_base_ on NCCL stream of group 1 on cuda:1 reads it at partition_parameters.py:93, not ordered after \
aten::copy_ on compute stream cuda:1 (write at partition_parameters.py:1643)
  tensor   model.layers.0.mlp.up_proj.weight.ds_secondary_tensor: bfloat16[4096], ds_id 7, allocated at \
partition_parameters.py:1616, storage 0x7f3a00100000, race on bytes [0, 8192)
  write    aten::copy_ on compute stream cuda:1, host thread T139872
           deepspeed/runtime/zero/partition_parameters.py:1643 in _partition_param_sec
              1643 | param.ds_secondary_tensor.copy_(sec_src_tensor)
           called from partition_parameters.py:1474 in _partition
                       partitioned_param_coordinator.py:482 in __release_param
                       partitioned_param_coordinator.py:403 in release_sub_module
                       parameter_offload.py:462 in post_sub_module_forward_function
  read     c10d::_allgather_base_ on NCCL stream of group 1 on cuda:1, launched from side stream created at \
parameter_offload.py:138 on cuda:1, host thread T139911
           deepspeed/runtime/zero/partition_parameters.py:93 in _dist_allgather_fn
                93 | return instrument_w_nvtx(dist.allgather_fn)(output_tensor, input_tensor, group=group, async_op=True)
           called from partition_parameters.py:1217 in all_gather_coalesced
                       partitioned_param_coordinator.py:463 in __all_gather_params_
                       parameter_offload.py:474 in pre_sub_module_backward_function
  missing  side stream created at parameter_offload.py:138 on cuda:1 never waited for compute stream cuda:1 after \
partition_parameters.py:1643
  fix: add `side.wait_stream(compute)` before the c10d::_allgather_base_ is launched at partition_parameters.py:93 \
(side = side stream created at parameter_offload.py:138 on cuda:1, compute = compute stream cuda:1); or record an \
event on compute after partition_parameters.py:1643 and call `side.wait_event(event)` there
  seen 2 times on rank 1

Found 1 finding in 1 rank: SC201 x1.
"""


def test_exact_text_of_the_hpz_report_of_one_rank_with_its_trace(capsys):
    code = main(["report", str(DATA / "streamcheck-rank1.jsonl"), str(DATA / "hpz-trace-rank1.jsonl")])
    out, err = capsys.readouterr()
    assert (code, err) == (1, "")
    assert out == RANK1_REPORT


def test_text_of_the_merged_job_lists_each_finding_once_with_ranks(capsys):
    assert main(["report", str(DATA)]) == 1
    out = capsys.readouterr().out
    assert out.count(": SC201 RAW ") == 1 and out.count(": SC202 FREE ") == 1
    assert "  seen 4 times on ranks 0, 1 (rank 0: 2, rank 1: 2)\n" in out
    assert "  seen 2 times on rank 0\n" in out
    assert ("  fix: call `t.record_stream(compute)` on the tensor before the free at partition_parameters.py:1494 "
            "(compute = compute stream cuda:0)") in out
    assert "  free     by host thread T139872; the block was allocated on side stream created at " \
           "parameter_offload.py:138 on cuda:0\n" in out
    assert out.endswith("Found 2 findings in 2 ranks: SC201 x1, SC202 x1.\n")


def test_without_traces_names_come_from_the_finding_itself(rank_files: Path, capsys):
    """The side stream's name is in the finding (extra["streams"], as the watch writes it); the NCCL stream is named
    from its id."""
    assert main(["report", str(rank_files)]) == 1
    out = capsys.readouterr().out
    assert ("  read     c10d::_allgather_base_ on NCCL stream of group 1 on cuda:0, launched from side stream created "
            "at parameter_offload.py:138 on cuda:0, host thread T139911\n") in out
    assert "  tensor   storage 0x7f3a00000000, race on bytes [0, 8192)\n" in out


def test_the_recorded_deepspeed_0_13_4_run_on_two_gpus(capsys):
    """The seed workload's rank files (examples/deepspeed_hpz/results, 2xH200): one finding, 151 hits, both ranks."""
    assert main(["report", *map(str, sorted(SEED.glob("findings-0.13.4-rank*.jsonl")))]) == 1
    out = capsys.readouterr().out
    lines = out.splitlines()
    # paths as recorded on the GPU machine (the repository was at /work/main there)
    assert lines[0].startswith("/work/main/.site0.13.4/deepspeed/comm/torch.py:219:1: SC201 RAW read-after-write "
                               "race on storage 0x7fe314b00000: c10d::_allgather_base_ on NCCL stream of group 1 on "
                               "cuda:0")
    assert "site0.13.4/deepspeed/runtime/zero/partition_parameters.py:1643 in _partition_param_sec\n" in out
    assert "              1643 | param.ds_secondary_tensor.copy_(sec_src_tensor)" in lines
    assert "                       partition_parameters.py:93 in _dist_allgather_fn" in lines  # the read's callers
    assert not any("eval_frame.py" in line for line in lines)  # torch's frames are left out
    assert "  seen 151 times on ranks 0, 1 (rank 0: 70, rank 1: 81)" in lines
    assert lines[-1] == "Found 1 finding in 2 ranks: SC201 x1."
    assert main(["report", str(SEED / "findings-0.13.5-rank0.jsonl")]) == 0
    assert capsys.readouterr().out == "No findings in 1 rank.\n"


def test_json_carries_ranks_counts_and_the_readable_words(capsys):
    assert main(["report", str(DATA), "--format", "json"]) == 1
    document = json.loads(capsys.readouterr().out)
    hpz, free = document["findings"]
    assert (hpz["rule"], hpz["kind"], hpz["count"], hpz["extra"]["ranks"], hpz["extra"]["counts_by_rank"]) == (
        "SC201", "RAW", 4, [0, 1], {"0": 2, "1": 2})
    assert hpz["extra"]["tensor"] == {"shape": [4096], "dtype": "torch.bfloat16", "ds_id": 7,
                                      "name": "model.layers.0.mlp.up_proj.weight.ds_secondary_tensor",
                                      "alloc_site": "partition_parameters.py:1616"}
    assert hpz["extra"]["streams"] == {"cuda:0/s94371": "side stream created at parameter_offload.py:138"}
    assert hpz["fix"].startswith("add `side.wait_stream(compute)` before the c10d::_allgather_base_ is launched")
    assert (free["rule"], free["kind"], free["count"], free["extra"]["ranks"]) == ("SC202", "FREE", 2, [0])
    assert document["summary"]["findings"] == 2 and document["summary"]["by_rule"] == {"SC201": 1, "SC202": 1}


def test_sarif_is_valid_against_the_schema_and_has_both_accesses(capsys):
    assert main(["report", str(DATA), "--format", "sarif"]) == 1
    document = json.loads(capsys.readouterr().out)
    jsonschema.validate(document, json.loads(SARIF_SCHEMA.read_text()))
    (run,) = document["runs"]
    assert [rule["id"] for rule in run["tool"]["driver"]["rules"]] == ["SC201", "SC202", "SC203", "SC204"]
    hpz, free = run["results"]
    assert (hpz["ruleId"], hpz["occurrenceCount"], hpz["properties"]["kind"]) == ("SC201", 4, "RAW")
    assert hpz["locations"][0]["physicalLocation"]["region"]["startLine"] == 93
    assert [(r["message"]["text"].split(" ")[0], r["physicalLocation"]["region"]["startLine"])
            for r in hpz["relatedLocations"]] == [("write", 1643), ("sync", 1643)]
    assert hpz["properties"]["extra"]["ranks"] == [0, 1]
    assert (free["ruleId"], free["occurrenceCount"]) == ("SC202", 2)


def test_github_annotations(capsys):
    assert main(["report", str(DATA), "--format", "github"]) == 1
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 2
    assert lines[0].startswith(f"::error file={PP},line=93,col=1,title=SC201 (RAW)::read-after-write race on ")
    assert "%0Aseen 4 times%0Afix: add `side.wait_stream(compute)`" in lines[0]


def test_output_file(tmp_path: Path, capsys):
    out = tmp_path / "report.sarif"
    assert main(["report", str(DATA), "--format", "sarif", "-o", str(out)]) == 1
    assert capsys.readouterr().out == ""
    assert json.loads(out.read_text())["runs"][0]["results"][0]["ruleId"] == "SC201"


def test_clean_run_exits_0(tmp_path: Path, capsys):
    header = (DATA / "streamcheck-rank0.jsonl").read_text().splitlines()[0]
    (tmp_path / "streamcheck-rank0.jsonl").write_text(header + "\n")
    assert main(["report", str(tmp_path)]) == 0
    assert capsys.readouterr().out == "No findings in 1 rank.\n"


@pytest.mark.parametrize("make, message", [
    (lambda d: d / "missing", "streamcheck report: {p}: no such file or directory\n"),
    (lambda d: d, "streamcheck report: {p}: no .jsonl files in this directory\n"),
])
def test_bad_input_is_exit_2_with_a_message(tmp_path: Path, capsys, make, message):
    path = make(tmp_path)
    assert main(["report", str(path)]) == 2
    assert capsys.readouterr().err == message.format(p=path)


def test_a_file_that_is_not_ours_is_exit_2(tmp_path: Path, capsys):
    other = tmp_path / "notes.jsonl"
    other.write_text("hello\n")
    assert main(["report", str(other)]) == 2
    assert capsys.readouterr().err == (
        f"streamcheck report: warning: {other}: not a streamcheck findings file or trace, skipped\n"
        "streamcheck report: none of the inputs is a streamcheck findings file or trace\n")


def test_truncated_rank_file_is_reported_on_stderr_and_the_report_goes_on(rank_files: Path, capsys):
    rank1 = rank_files / "streamcheck-rank1.jsonl"
    rank1.write_text(rank1.read_text()[:-40])
    assert main(["report", str(rank_files)]) == 1
    out, err = capsys.readouterr()
    assert err == f"streamcheck report: warning: {rank1}:3: truncated last line (was the job killed?), ignored\n"
    assert "  seen 3 times on ranks 0, 1 (rank 0: 2, rank 1: 1)\n" in out
