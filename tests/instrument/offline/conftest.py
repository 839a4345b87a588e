"""Shared paths for the runtime report tests: the recorded hpZ data (tests/instrument/offline/data, see
make_hpz.py)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

DATA = Path(__file__).resolve().parent / "data"
ROOT = Path(__file__).resolve().parents[3]
SCENARIO26_TRACE = ROOT / "examples" / "traces" / "scenario26_hpz.jsonl"
PP = "/opt/venv/lib/python3.11/site-packages/deepspeed/runtime/zero/partition_parameters.py"


@pytest.fixture
def rank_files(tmp_path: Path) -> Path:
    """A job directory holding only the two ranks' findings files (no traces)."""
    job = tmp_path / "job"
    job.mkdir()
    for rank in (0, 1):
        shutil.copy(DATA / f"streamcheck-rank{rank}.jsonl", job)
    return job
