"""`streamcheck run` says when it cannot check anything: no torch, no CUDA, nothing instrumented; and it passes the
command's own exit status through instead of turning a failing program into the usage-error code 2."""

from __future__ import annotations

import subprocess
import sys

from streamcheck.cli import main

NO_TORCH = (
    "streamcheck run: the runtime detector needs PyTorch, which is not installed for {exe}; install the torch build "
    "for your CUDA version (https://pytorch.org/get-started/locally/) or `pip install 'streamcheck[torch]'`; the "
    "static lint (`streamcheck scan`) works without it\n")
NO_CUDA = (
    "streamcheck run: warning: CUDA is not available in rank 0 (torch.cuda.is_available() is False): no CUDA stream "
    "ran there, so no stream race could be seen; run on a machine with a GPU and a CUDA build of torch")


def _run(tmp_path, *cmd):
    return subprocess.run([sys.executable, "-m", "streamcheck", "run", "--out", str(tmp_path / "o"), "--", *cmd],
                          capture_output=True, text=True, cwd=tmp_path, timeout=120)


def test_without_torch_run_says_what_to_install(tmp_path):
    # An interpreter in which `import torch` fails (sys.modules[name] = None is how Python spells "not importable").
    code = ("import sys; sys.modules['torch'] = None; from streamcheck.cli import main; "
            f"sys.exit(main(['run', '--out', {str(tmp_path / 'o')!r}, '--', sys.executable, '-c', 'print(1)']))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert (done.returncode, done.stdout, done.stderr) == (2, "", NO_TORCH.format(exe=sys.executable))


def test_without_cuda_run_says_so_and_passes_the_exit_status_through(tmp_path):
    import torch

    if torch.cuda.is_available():
        import pytest

        pytest.skip("this test is about a machine without CUDA")
    done = _run(tmp_path, sys.executable, "-c", "import torch")
    assert done.returncode == 0
    assert done.stdout == "No findings in 1 rank.\n"
    assert done.stderr.splitlines() == [
        NO_CUDA,
        f"streamcheck run: 0 finding(s), 0 occurrence(s); instrumented ranks: 0; command exit code 0; per-rank "
        f"files in {tmp_path / 'o'}"]
    failed = _run(tmp_path, sys.executable, "-c", "import sys; sys.exit(3)")
    assert failed.returncode == 3
    assert failed.stderr.splitlines()[-1].endswith("command exit code 3; per-rank files in " + str(tmp_path / "o"))


def test_a_command_that_starts_no_python_is_not_a_pass(tmp_path, capsys):
    assert main(["run", "--out", str(tmp_path / "o"), "--", "true"]) == 2
    assert capsys.readouterr().err == (
        "streamcheck run: no process was instrumented, nothing was checked (is the command a Python program, with "
        "torch importable? see any 'instrumentation not started' line above); command exit code 0\n")
    assert main(["run", "--out", str(tmp_path / "o"), "--", "sh", "-c", "exit 4"]) == 4
