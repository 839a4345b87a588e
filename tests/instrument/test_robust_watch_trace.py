"""Issue 19 D18: a watched program killed with SIGKILL leaves a trace that still names its sites.

The site table used to be written only at stop() and the last 4 095 events stayed in memory, so every race of a
killed run's trace was at `<unknown>:0`. Now the trace is flushed every second, each flush with the sites of what
it writes.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import textwrap
import time

from streamcheck.cli import main

PROGRAM = textwrap.dedent("""
    import sys, time
    import streamcheck

    w = streamcheck.watch(sys.argv[1], trace=sys.argv[2], echo=False).start()
    rec = w.recorder

    def kernel(stream, write):
        site = rec.sites.capture(2)
        ranges = [(0x1000, 0, 64)]
        rec.emit("kernel", "T1", stream, [] if write else ranges, ranges if write else [], site,
                 "aten::copy_" if write else "aten::sum")

    kernel("cuda:0/s0", True)   # the write
    kernel("cuda:0/s7", False)  # the unordered read
    print("ready", flush=True)
    time.sleep(120)  # killed here, before stop()
""")
WRITE_LINE = PROGRAM.splitlines().index('kernel("cuda:0/s0", True)   # the write') + 1
READ_LINE = WRITE_LINE + 1


def test_d18_sigkilled_watch_trace_names_its_sites(tmp_path, capsys):
    script = tmp_path / "killed.py"
    script.write_text(PROGRAM)
    trace = tmp_path / "trace.jsonl"
    process = subprocess.Popen([sys.executable, str(script), str(tmp_path / "out"), str(trace)],
                               stdout=subprocess.PIPE, text=True)
    try:
        assert process.stdout.readline() == "ready\n"
        deadline = time.monotonic() + 15
        while not _flushed(trace) and time.monotonic() < deadline:
            time.sleep(0.1)
    finally:
        process.send_signal(signal.SIGKILL)
        process.wait(10)
        process.stdout.close()
    assert process.returncode == -signal.SIGKILL
    assert main(["analyze", str(trace), "--format", "json"]) == 1
    out, err = capsys.readouterr()
    (finding,) = json.loads(out)["findings"]
    assert err == ""
    assert (finding["rule"], finding["kind"]) == ("SC201", "RAW")
    assert (finding["primary"]["path"], finding["primary"]["line"]) == (str(script), READ_LINE)
    assert [(r["role"], r["path"], r["line"]) for r in finding["related"] if r["role"] == "write"] == [
        ("write", str(script), WRITE_LINE)]


def _flushed(trace) -> bool:
    """Both kernels and their sites are on disk, each line whole (a flush may be half written when looked at)."""
    text = trace.read_text() if trace.exists() else ""
    whole = text[: text.rfind("\n") + 1]
    return '"e":"site"' in whole and whole.count('"e":"kernel"') >= 2
