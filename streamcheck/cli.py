"""Command line entry point: `streamcheck scan | analyze | run | report | explain` (also `python -m streamcheck`).

Each subcommand lives in streamcheck/commands/<name>.py with two functions, `add_arguments(parser)` and
`run(args) -> int`. Command modules import libcst or torch only inside `run`, so `streamcheck --help` and the
commands that don't parse or instrument start fast. Exit codes: 0 clean, 1 findings, 2 usage or config error.
"""

from __future__ import annotations

import argparse
import importlib
import sys

from streamcheck.constants import EXIT_CLEAN, EXIT_ERROR, version

COMMANDS = {
    "scan": "lint Python sources for stream-ordering hazards (no code is imported or run)",
    "analyze": "replay a recorded trace (JSONL) through the race detector and report the races",
    "run": "run a command (python, torchrun, deepspeed) with the runtime detector in every rank",
    "report": "merge per-rank runtime findings (JSONL) into one report",
    "explain": "print a rule's documentation: what it finds, why it is bad, an example and the fix",
}

DESCRIPTION = "Find CUDA stream-ordering races in PyTorch code: a static lint (scan) and a runtime detector (run)."
EPILOG = """\
exit codes: 0 nothing found, 1 findings, 2 usage or configuration error (run: the command's own failing status)
a command's options: streamcheck COMMAND --help; a rule's documentation: streamcheck explain SC101"""


class Parser(argparse.ArgumentParser):
    """argparse without abbreviated options (`--sel` is not `--select`: a later option must not change what an
    old command line means) and with a did-you-mean for a mistyped option."""

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)

    def parse_args(self, args=None, namespace=None):
        parsed, extras = self.parse_known_args(args, namespace)
        if extras:
            command = self._subcommand(getattr(parsed, "command", None))
            (command or self).error_unrecognized(extras)
        return parsed

    def _subcommand(self, name):
        for action in self._actions:
            if isinstance(action, argparse._SubParsersAction) and name in action.choices:
                return action.choices[name]
        return None

    def error_unrecognized(self, extras: list[str]) -> None:
        import difflib

        options = [o for action in self._actions for o in action.option_strings if o.startswith("--")]
        message = f"unrecognized arguments: {' '.join(extras)}"
        for extra in extras:
            if extra.startswith("-"):
                close = difflib.get_close_matches(extra.split("=", 1)[0], options, n=1, cutoff=0.6)
                if close:
                    message += f" (did you mean {close[0]}?)"
                    break
        self.error(message)


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(prog="streamcheck", description=DESCRIPTION, epilog=EPILOG,
                    formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--version", action="version", version=f"streamcheck {version()}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=Parser)
    for name, help_text in COMMANDS.items():
        module = _command_module(name)
        if module is None:
            continue
        cmd = sub.add_parser(name, help=help_text, description=help_text)
        module.add_arguments(cmd)
        cmd.set_defaults(_run=module.run)
    return parser


def _command_module(name: str):
    try:
        return importlib.import_module(f"streamcheck.commands.{name}")
    except ModuleNotFoundError as exc:
        if exc.name == f"streamcheck.commands.{name}":
            return None  # command not built yet
        raise


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # argparse exits 2 on usage errors, 0 on --help
        return int(exc.code or 0)
    if not getattr(args, "_run", None):
        parser.print_help(sys.stderr)
        return EXIT_ERROR
    try:
        return int(args._run(args))
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        return EXIT_CLEAN


if __name__ == "__main__":
    sys.exit(main())
