"""`streamcheck run`: launcher detection, the environment bootstrap, merging rank files, and the command end to end
on CPU (the program feeds synthetic GPU events to the watch that the bootstrap started in it)."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import threading

import pytest

from streamcheck.cli import main
from streamcheck.instrument.launch import is_launcher

PROGRAM = textwrap.dedent(
    """
    import sys
    from streamcheck.instrument import watch

    w = watch._current
    assert w is not None, "the bootstrap did not start a watch"
    rec = w.recorder
    for _ in range(int(sys.argv[1])):
        rec.emit("kernel", "T1", "cuda:0/s0", [], [(64, 0, 8)], rec.sites.capture(1), "aten::fill_")  # write
        rec.emit("kernel", "T1", "cuda:0/s9", [(64, 0, 8)], [], rec.sites.capture(1), "aten::sum")  # read
        rec.emit("sync_device", "T1", 0)
    print("program finished")
    if len(sys.argv) > 2:  # die without any cleanup, as a rank killed by the launcher does
        import os, signal
        os.kill(os.getpid(), signal.SIGKILL)
    """
)


def test_launchers_are_recognized_and_ranks_are_not():
    assert is_launcher(["python3", "-m", "torch.distributed.run", "--nproc_per_node", "2", "train.py"])
    assert is_launcher(["python3", "-u", "-m", "deepspeed.launcher.launch", "--world_info=abc"])
    assert is_launcher(["python3", "/usr/bin/torchrun", "train.py"])
    assert is_launcher(["python", "/opt/bin/deepspeed", "train.py"])
    assert not is_launcher(["python3", "-u", "train.py", "--local_rank=0"])
    assert not is_launcher(["python3", "-m", "pytest"])
    assert not is_launcher(["python3"])


def test_run_instruments_the_program_and_reports_what_it_found(tmp_path):
    program = tmp_path / "program.py"
    program.write_text(PROGRAM)
    out = tmp_path / "out"
    done = subprocess.run([sys.executable, "-m", "streamcheck.cli", "run", "--out", str(out), "--format", "json",
                           "--", sys.executable, str(program), "4"], capture_output=True, text=True, timeout=120,
                          cwd=tmp_path)
    assert done.returncode == 1, done.stderr
    assert "program finished" in done.stdout
    report = json.loads(done.stdout[done.stdout.index("{"):])
    (finding,) = report["findings"]
    source = PROGRAM.splitlines()
    read_line = [n for n, line in enumerate(source, 1) if line.endswith("# read")][0]
    assert (finding["kind"], finding["count"], finding["primary"]["line"]) == ("RAW", 4, read_line)
    assert finding["primary"]["path"] == str(program)
    assert "instrumented ranks: 0; command exit code 0" in done.stderr


def test_run_without_a_command_is_a_usage_error(capsys):
    assert main(["run"]) == 2
    assert "no command given" in capsys.readouterr().err


def test_run_reports_a_command_that_cannot_start(tmp_path, capsys):
    assert main(["run", "--out", str(tmp_path), "--", str(tmp_path / "no-such-program")]) == 2
    assert "cannot start" in capsys.readouterr().err


@pytest.mark.parametrize("backend", ["mode", "native"])
def test_watched_threads_enter_the_hook_and_report_start_and_join(tmp_path, backend):
    import torch.utils._python_dispatch as python_dispatch

    import streamcheck
    from streamcheck.instrument import native
    from streamcheck.instrument.dispatch import StreamcheckMode

    seen = []
    trace = tmp_path / "trace.jsonl"

    def child_sees():
        if backend == "mode":
            seen.append(isinstance(python_dispatch._get_current_dispatch_mode(), StreamcheckMode))
        else:
            seen.append(native.load().this_thread_watched())

    with streamcheck.watch(tmp_path, trace=trace, echo=False, backend=backend) as w:
        assert w.backend == backend
        child = threading.Thread(target=child_sees)
        child.start()
        child.join()
        parent = w.recorder.thread_actor()
    assert seen == [True]
    events = [json.loads(line) for line in trace.read_text().splitlines()]
    links = [(e["e"], e["parent"], e["child"]) for e in events if e["e"].startswith("thread_")]
    assert links == [("thread_start", parent, f"T{child.ident}"), ("thread_join", parent, f"T{child.ident}")]


def test_a_killed_program_still_reports_what_it_found(tmp_path):
    program = tmp_path / "program.py"
    program.write_text(PROGRAM)
    done = subprocess.run([sys.executable, "-m", "streamcheck.cli", "run", "--out", str(tmp_path / "out"),
                           "--format", "json", "--", sys.executable, str(program), "3", "kill"],
                          capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert done.returncode == 1, done.stderr
    report = json.loads(done.stdout[done.stdout.index("{"):])
    (finding,) = report["findings"]
    assert (finding["kind"], finding["count"]) == ("RAW", 1)  # flushed at first sight; the final count never came
    assert "command exit code -9" in done.stderr


@pytest.mark.parametrize("choice, env_value, expected", [
    (["--backend", "mode"], None, "mode"),
    ([], "mode", "mode"),
    ([], "fast", "auto"),  # a wrong value: said on stderr, then the default
])
def test_run_picks_the_backend_from_the_option_or_the_environment(tmp_path, choice, env_value, expected):
    import os

    env = dict(os.environ)
    env.pop("STREAMCHECK_BACKEND", None)
    if env_value is not None:
        env["STREAMCHECK_BACKEND"] = env_value
    import torch

    if expected == "auto":  # the C++ hook where a stream can run; without CUDA it is not built for nothing
        expected = "native" if torch.cuda.is_available() else "mode"
    program = "import streamcheck.instrument.watch as w; print('BACKEND', w._current.backend)"
    done = subprocess.run([sys.executable, "-m", "streamcheck.cli", "run", "--out", str(tmp_path / "out"), *choice,
                           "--", sys.executable, "-c", program], capture_output=True, text=True, timeout=300,
                          env=env, cwd=tmp_path)
    assert f"BACKEND {expected}\n" in done.stdout, done.stderr
    if env_value == "fast":
        assert "streamcheck: STREAMCHECK_BACKEND='fast': expected one of auto, native, mode; using auto" in done.stderr
