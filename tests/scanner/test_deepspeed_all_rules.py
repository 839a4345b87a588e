"""Every rule on real framework code, through `streamcheck scan`: the complete list of findings on the DeepSpeed
0.13.4 package (rule, file, line), so any change in precision shows up in review, and the same scan of the installed
torch's `torch/distributed/fsdp` (correct stream code: no finding).

The judgement of each finding is in the closing notes of issues 4 and 13; in short: four SC101 findings are the hpZ
race and its `ds_tensor` siblings, the fifth reads `param.grad` (written by autograd on the current stream) on the
copy stream with no wait, and the SC104 finding releases that `param.grad` inside the copy stream's region with no
record_stream (real hazards, in a method 0.13.4 never calls).
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

from streamcheck.cli import main

STAGE3 = "deepspeed/runtime/zero/stage3.py"
PARTITION = "deepspeed/runtime/zero/partition_parameters.py"

EXPECTED_0_13_4 = [
    # The checkpoint load's copy into ds_tensor, all-gathered later on a stream that never waits for the current
    # one (tests/rules/test_deepspeed_sc101.py says why it is found now).
    ("SC101", "deepspeed/runtime/engine.py", 2628),
    ("SC101", PARTITION, 1566),
    ("SC101", PARTITION, 1580),
    ("SC101", PARTITION, 1643),
    ("SC101", PARTITION, 1649),
    # The gradient hook's copy after a wait for the default stream (the shape DeepSpeed PR #7898 fixed in 0.18.8).
    ("SC101", STAGE3, 1240),
    ("SC101", STAGE3, 1384),
    ("SC104", STAGE3, 1387),
]


def _scan(capsys, monkeypatch, root: Path, target: str) -> list[dict]:
    monkeypatch.chdir(root)
    code = main(["scan", "--no-progress", "--no-cache", "--format", "json", target])
    report = json.loads(capsys.readouterr().out)
    assert code == (1 if report["findings"] else 0)
    return report["findings"]


@pytest.mark.network
def test_every_finding_of_every_rule_on_deepspeed_0_13_4(sdist, capsys, monkeypatch):
    findings = _scan(capsys, monkeypatch, sdist("deepspeed", "0.13.4"), "deepspeed")
    assert [(f["rule"], f["primary"]["path"], f["primary"]["line"]) for f in findings] == EXPECTED_0_13_4
    hook_copy, gradient = [f for f in findings if f["extra"].get("producer") == "autograd"]
    assert (hook_copy["symbol"], hook_copy["extra"]["reader_stream"]) == (
        "DeepSpeedZeroOptimizer_Stage3.__add_grad_to_ipg_bucket", "self.reduce_and_partition_stream")
    assert (gradient["symbol"], gradient["extra"]["reader_stream"]) == (
        "DeepSpeedZeroOptimizer_Stage3.async_inplace_copy_grad_to_fp32_buffer_from_gpu", "self.copy_grad_stream")
    [free] = [f for f in findings if f["rule"] == "SC104"]
    assert (free["symbol"], free["kind"], free["primary"]["snippet"]) == (
        "DeepSpeedZeroOptimizer_Stage3.async_inplace_copy_grad_to_fp32_buffer_from_gpu", "FREE", "param.grad = None")
    assert free["extra"] == {"path": "param.grad", "stream": "self.copy_grad_stream"}


def test_no_finding_on_the_installed_torch_fsdp(capsys, monkeypatch):
    spec = importlib.util.find_spec("torch")  # located, not imported
    if spec is None or not spec.submodule_search_locations:
        pytest.skip("torch is not installed")
    distributed = Path(list(spec.submodule_search_locations)[0]) / "distributed"
    assert (distributed / "fsdp").is_dir()
    assert _scan(capsys, monkeypatch, distributed, "fsdp") == []
