"""`pytest --streamcheck` on a GPU: over examples/pytest_gate, exactly the racy test fails, with its report.

The inner run is a fresh pytest process (as a CI job would start it); its findings directory is then read back with
streamcheck.instrument.offline.merge, and the finding must point at the lines marked `streamcheck: race` / `streamcheck: earlier`.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import torch

from streamcheck.instrument.offline.merge import merge

ROOT = Path(__file__).resolve().parents[2]
GATE = ROOT / "examples" / "pytest_gate" / "test_streams.py"
PLUGIN_ARGS = ["-p", "no:streamcheck", "-p", "streamcheck.instrument.pytest_plugin"]  # installed or not

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
]


def marker_line(marker: str) -> int:
    (line,) = [n for n, text in enumerate(GATE.read_text().splitlines(), 1) if f"# streamcheck: {marker}" in text]
    return line


def test_gate_fails_exactly_the_racy_test(tmp_path: Path):
    out = tmp_path / "sc"
    done = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-rA", "--streamcheck",
                           "--streamcheck-out", str(out), *PLUGIN_ARGS, str(GATE)],
                          capture_output=True, text=True, timeout=300, cwd=tmp_path)
    print(done.stdout[-8000:], done.stderr[-3000:], sep="\n")
    assert done.returncode == 1
    lines = done.stdout.splitlines()
    assert "FAILED" in next(l for l in lines if "::test_side_stream_reads_before_the_fill_is_ordered" in l
                            and l.startswith(("FAILED", "PASSED")))
    assert any(l.startswith("PASSED") and l.endswith("::test_side_stream_waits_for_the_fill") for l in lines)
    assert "1 failed, 1 passed" in lines[-1]
    assert f"test_streams.py:{marker_line('race')}:1: SC201 RAW read-after-write race on " in done.stdout
    assert f"test_streams.py:{marker_line('earlier')} in test_side_stream_reads_before_the_fill_is_ordered" \
        in done.stdout  # the write, in the report's "write" block
    assert "streamcheck: 1 stream-ordering race in this test" in done.stdout

    (finding,) = merge([out]).findings
    assert (finding.rule, finding.kind) == ("SC201", "RAW")
    assert Path(finding.primary.path).resolve() == GATE.resolve()
    assert finding.primary.line == marker_line("race")
    assert finding.related[0].line == marker_line("earlier")
    assert finding.extra["earlier"]["actor"].endswith("/s0")  # the write was on the compute (default) stream
    assert not finding.extra["later"]["actor"].endswith("/s0")
