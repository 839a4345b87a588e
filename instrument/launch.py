"""Start a command with the runtime detector in every rank, then merge what the ranks found.

`streamcheck run -- CMD` works for `python`, `torchrun` and `deepspeed` alike because it instruments through the
environment, not the command line: it writes a bootstrap directory holding a `sitecustomize.py`, puts it first on
PYTHONPATH and sets STREAMCHECK=1 and STREAMCHECK_OUT. Every Python process the command starts imports
sitecustomize at startup; there, a process that is a launcher (torchrun's agent, DeepSpeed's runner and launch)
stays uninstrumented and every other process starts `streamcheck.watch()` (rank from RANK), writing
`streamcheck-rank{R}.jsonl` in the output directory. A sitecustomize that ours shadows is still run after ours.

Rank files are appended to (several processes of one rank, e.g. spawned helpers, each write their own header),
so `run` clears them before it starts the command; instrument/offline/merge.py reads them back.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

LAUNCHER_MODULES = frozenset(
    {"torch.distributed.run", "torch.distributed.launch", "deepspeed.launcher.runner", "deepspeed.launcher.launch"}
)
LAUNCHER_SCRIPTS = frozenset({"torchrun", "deepspeed", "ds"})
RANK_FILE_GLOB = "streamcheck-rank*.jsonl"

SITECUSTOMIZE = '''\
"""Written by `streamcheck run`: start streamcheck's runtime detector in this process (STREAMCHECK=1)."""
import os as _os
import sys as _sys

if _os.environ.get("STREAMCHECK") == "1":
    try:
        from streamcheck.instrument.launch import bootstrap as _bootstrap

        _bootstrap()
    except Exception as _exc:  # the program must run even when instrumentation cannot start
        _sys.stderr.write("streamcheck: instrumentation not started in pid %d: %r\\n" % (_os.getpid(), _exc))


def _chain():
    """Run the sitecustomize this one shadows, if there is one further down sys.path."""
    import importlib.machinery
    import importlib.util

    here = _os.path.dirname(_os.path.abspath(__file__))
    rest = [p for p in _sys.path if _os.path.abspath(p or ".") != here]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", rest)
    if spec is not None and spec.loader is not None:
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)


_chain()
'''


def is_launcher(argv: list[str]) -> bool:
    """Whether a process started with `argv` (sys.orig_argv) only launches ranks."""
    if len(argv) < 2:
        return False
    args = argv[1:]
    while args and args[0].startswith("-") and args[0] not in ("-m", "-c"):
        args = args[1:]  # interpreter flags such as -u
    if not args:
        return False
    if args[0] == "-m":
        return len(args) > 1 and args[1] in LAUNCHER_MODULES
    return os.path.basename(args[0]) in LAUNCHER_SCRIPTS


def bootstrap() -> None:
    """Called from the bootstrap sitecustomize in every Python process the command starts."""
    if is_launcher(list(getattr(sys, "orig_argv", sys.argv))):
        return
    from .watch import start_from_environment

    start_from_environment()


def prepare_environment(out_dir: Path, base: dict[str, str] | None = None, fail_fast: bool = False,
                        trace: str | None = None, backend: str | None = None) -> dict[str, str]:
    """The environment for the command: bootstrap dir first on PYTHONPATH, STREAMCHECK=1, output dir."""
    env = dict(os.environ if base is None else base)
    out_dir.mkdir(parents=True, exist_ok=True)
    boot = out_dir / ".bootstrap"
    boot.mkdir(exist_ok=True)
    (boot / "sitecustomize.py").write_text(SITECUSTOMIZE)
    paths = [str(boot.resolve())]
    if env.get("PYTHONPATH"):
        paths.append(env["PYTHONPATH"])
    env["PYTHONPATH"] = os.pathsep.join(paths)
    env["STREAMCHECK"] = "1"
    env["STREAMCHECK_OUT"] = str(out_dir.resolve())
    if fail_fast:
        env["STREAMCHECK_FAIL_FAST"] = "1"
    if trace:
        env["STREAMCHECK_TRACE"] = str(Path(trace).resolve())
    if backend:
        env["STREAMCHECK_BACKEND"] = backend
    return env


def clear_rank_files(out_dir: Path) -> None:
    for path in out_dir.glob(RANK_FILE_GLOB):
        path.unlink()
