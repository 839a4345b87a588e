"""Issue 19 D10: the worker processes of a scan die with it, however it dies (SIGKILL, SIGTERM).

A scan runs in a child process with a rules backend whose fact extraction sleeps, so that its pool workers are
busy when the scan is killed; then every worker must be gone within seconds (they used to stay forever, ~30 MB each).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")

DRIVER = textwrap.dedent("""
    import sys, time
    sys.path.insert(0, sys.argv[2])
    from streamcheck.scanner import driver
    from streamcheck.scanner.config import ScanConfig
    from scanner import fake_rules

    def slow_extract(source, path, options):
        time.sleep(60)
        return fake_rules.extract(source, path, options)

    backend = fake_rules.backend()
    backend.extract = slow_extract
    # 3 jobs: two worker processes and the scan process itself (extraction.py)
    driver.scan([sys.argv[1]], ScanConfig(root=__import__("pathlib").Path(sys.argv[1])), backend=backend,
                  jobs=3, use_cache=False)
""")


def _children(pid: int) -> set[int]:
    """Processes whose parent is `pid` (from /proc/*/stat, which every Linux kernel has)."""
    found: set[int] = set()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        if int(stat.rsplit(")", 1)[1].split()[1]) == pid:  # after "(comm)": state, ppid, ...
            found.add(int(entry.name))
    return found


def _alive(pid: int) -> bool:
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return False
    state = next(line for line in status.splitlines() if line.startswith("State:"))
    return "Z" not in state.split()[1]  # a zombie has exited; only its parent's wait is missing


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM], ids=["SIGKILL", "SIGTERM"])
def test_d10_pool_workers_die_with_a_killed_scan(tmp_path, sig):
    for i in range(10):
        (tmp_path / f"m{i}.py").write_text("x = 1\n")
    tests_dir = Path(__file__).resolve().parents[1]
    scan = subprocess.Popen([sys.executable, "-c", DRIVER, str(tmp_path), str(tests_dir)])
    workers: set[int] = set()
    try:
        deadline = time.monotonic() + 30
        while len(workers) < 2 and time.monotonic() < deadline:
            time.sleep(0.1)
            workers = _children(scan.pid)
        assert len(workers) >= 2, "the scan never started its two workers"
        time.sleep(0.5)  # the workers are inside the sleeping extraction now
        os.kill(scan.pid, sig)
        assert scan.wait(10) == -sig
        deadline = time.monotonic() + 10
        while any(_alive(pid) for pid in workers) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert [pid for pid in workers if _alive(pid)] == []
    finally:  # whatever happened, leave no process of this test behind
        for pid in workers:
            if _alive(pid):
                os.kill(pid, signal.SIGKILL)
        if scan.poll() is None:
            scan.kill()
            scan.wait()
