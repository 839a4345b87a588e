"""benchmarks/frameworks_gpu.py's driver on CPU: the runs it starts are stood in for, its table and report checked."""

from __future__ import annotations

import argparse
import importlib.util
import json
import subprocess
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "frameworks_gpu.py"


def load():
    spec = importlib.util.spec_from_file_location("frameworks_gpu", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def fake_runs(results: dict):
    """subprocess.run for the driver: writes the --result file of each run as `results[mode]` says."""

    def run(command, stdout=None, stderr=None, timeout=None, env=None):
        mode = command[command.index("--mode") + 1]
        out = results[mode]
        if out is None:
            stdout.write("Traceback (most recent call last):\nRuntimeError: CUDA out of memory\n")
            return subprocess.CompletedProcess(command, 1)
        Path(command[command.index("--result") + 1]).write_text(json.dumps(out))
        return subprocess.CompletedProcess(command, 0)

    return run


def args(**overrides):
    return argparse.Namespace(**{"steps": 4, "backend": None, "timeout": 10.0, **overrides})


def test_a_setup_row_gives_medians_after_the_first_step_the_ratio_loss_identity_and_every_finding(tmp_path,
                                                                                                   monkeypatch):
    module = load()
    losses = [1.5.hex(), 1.25.hex()]
    finding = {"rule": "SC202", "kind": "FREE", "count": 3, "where": "stage_1_and_2.py:3131", "message": "reuse ...",
               "related": ["free stage_1_and_2.py:3131"]}
    monkeypatch.setattr(module.subprocess, "run", fake_runs({
        "plain": {"step_ms": [90.0, 10.0, 12.0, 11.0], "losses": losses},
        "streamcheck": {"step_ms": [300.0, 20.0, 24.0, 22.0], "losses": losses, "backend": "native", "notes": [],
                        "errors": [], "findings": [finding]}}))
    row, report = module.run_setup("deepspeed-zero2-overlap", args(), tmp_path)
    assert row.split() == ["deepspeed-zero2-overlap", "11.0", "22.0", "2.00x", "yes", "1", "native"]
    assert report == ["  deepspeed-zero2-overlap: SC202 FREE x3 at stage_1_and_2.py:3131: reuse ...",
                      "      free stage_1_and_2.py:3131"]


def test_a_failed_run_is_reported_with_its_last_lines_and_losses_that_differ_say_no(tmp_path, monkeypatch):
    module = load()
    monkeypatch.setattr(module.subprocess, "run", fake_runs({"plain": None, "streamcheck": {
        "step_ms": [5.0], "losses": [], "findings": []}}))
    row, report = module.run_setup("ddp", args(), tmp_path)
    assert row.split()[:6] == ["ddp", "-", "5.0", "-", "-", "0"]
    assert report[0].startswith("  ddp plain FAILED (") and report[0].endswith(
        "exit 1: Traceback (most recent call last): | RuntimeError: CUDA out of memory")
    monkeypatch.setattr(module.subprocess, "run", fake_runs({
        "plain": {"step_ms": [1.0, 2.0], "losses": [1.0.hex()]},
        "streamcheck": {"step_ms": [1.0, 2.0], "losses": [1.5.hex()], "findings": []}}))
    assert module.run_setup("ddp", args(), tmp_path)[0].split()[4] == "no"
