"""`streamcheck scan [PATH ...]`: lint Python sources for stream-ordering hazards; a CI gate.

Exit 0: no findings (or --exit-zero). Exit 1: findings. Exit 2: usage, configuration or baseline error.
Options given here override the same keys of [tool.streamcheck] in the nearest pyproject.toml.
"""

from __future__ import annotations

import argparse
import os
import sys
import textwrap
import time

from streamcheck.constants import EXIT_CLEAN, EXIT_ERROR, EXIT_FINDINGS
from streamcheck.report import FORMATS
from streamcheck.scanner.config import CONFIG_KEYS

from streamcheck.commands.scan_extras import Progress  # noqa: E402  (re-exported: the scan's progress bar)

# The command line ends the process when `run` returns (cli.entry): the report, the cache, a baseline and --fix's
# files are written through files closed before, and the scan's million objects need no teardown.
EXIT_AT_ONCE = True


EPILOG = """\
examples:
  streamcheck scan src/                                 text report; exit 1 on findings
  streamcheck scan --format sarif -o scan.sarif .       for GitHub code scanning (upload-sarif)
  streamcheck scan --format github .                    annotations in a GitHub Actions log
  streamcheck scan --write-baseline baseline.json .     accept today's findings ...
  streamcheck scan --baseline baseline.json .           ... and fail only on new ones
  streamcheck scan --diff .                             the fixes as a diff; --fix applies them (--unsafe-fixes: syncs)
  streamcheck scan --diff-base origin/main .            only findings on lines changed since origin/main

{configuration}

suppression: `# streamcheck: ignore[SC101]` or `# noqa: SC101` on any line the finding names (bare
  `# streamcheck: ignore`: every rule); `# streamcheck: ignore-file[SC104]` anywhere in a file
documentation of a rule: streamcheck explain SC101
""".format(configuration=textwrap.fill("configuration: [tool.streamcheck] in pyproject.toml, keys "
                                       + ", ".join(CONFIG_KEYS), 110, subsequent_indent="  ", break_on_hyphens=False))


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.epilog = EPILOG
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.add_argument("paths", nargs="*", metavar="PATH", help="files or folders (default: .)")
    parser.add_argument("--format", choices=list(FORMATS), default="text", help="output format (default: text)")
    parser.add_argument("-o", "--output", metavar="FILE", help="write the report to FILE instead of stdout")
    parser.add_argument("--exit-zero", action="store_true", help="exit 0 even when there are findings")
    parser.add_argument("-q", "--quiet", action="store_true",
                        help="print the findings only: no summary line, no notices on stderr")
    parser.add_argument("--statistics", action="store_true",
                        help="print how many findings each rule has ([*]: --fix can fix them) instead of the findings")
    parser.add_argument("--show-settings", action="store_true",
                        help="print the configuration in effect (file, root, every key) and exit")
    parser.add_argument("--show-files", action="store_true", help="print the files the scan would read and exit")
    parser.add_argument("--stdin-filename", metavar="NAME",
                        help="with PATH '-': the name of the source read from stdin (for config and reports)")
    parser.add_argument("--config", metavar="FILE", help="read [tool.streamcheck] from FILE, not the nearest pyproject")
    fixing = parser.add_argument_group("fixes (each inserts the missing wait, record_stream or synchronize)")
    fixing.add_argument("--fix", action="store_true", help="apply the safe fixes, then report what is left")
    fixing.add_argument("--diff", action="store_true",
                        help="print the fixes as a unified diff instead of applying them (exit 1 if there are any)")
    fixing.add_argument("--unsafe-fixes", action="store_true",
                        help="also apply fixes that change performance (a host synchronize: SC102, SC103)")

    rules = parser.add_argument_group("what to report (override [tool.streamcheck])")
    rules.add_argument("--select", action="append", metavar="CODES", help="rule ids or prefixes, comma-separated")
    rules.add_argument("--ignore", action="append", metavar="CODES", help="rule ids or prefixes never reported")
    rules.add_argument("--per-file-ignores", action="append", metavar="GLOB:CODES",
                       help="e.g. 'tests/*:SC101,SC104' (repeatable)")
    rules.add_argument("--report-unused-ignores", action="store_true",
                       help="report suppression comments that suppress nothing (SC002)")
    rules.add_argument("--baseline", metavar="FILE", help="report only findings not in this baseline")
    rules.add_argument("--write-baseline", metavar="FILE", help="write all current findings to FILE and exit 0")

    scope = parser.add_argument_group("changed code only (the analysis still covers the whole program)")
    scope.add_argument("--diff-base", metavar="REF",
                       help="report only findings whose primary or a related location is on a line changed since REF "
                            "(committed, staged or not; untracked files count whole)")
    scope.add_argument("--project", metavar="DIR",
                       help="analyze DIR and report only findings touching the PATHs given (what the pre-commit hook "
                            "does with the staged files)")

    files = parser.add_argument_group("what to read")
    files.add_argument("--exclude", action="append", metavar="GLOBS", help="replace the default excludes")
    files.add_argument("--extend-exclude", action="append", metavar="GLOBS", help="add to the excludes")
    files.add_argument("--max-file-size-kb", type=int, metavar="KB", help="skip larger files (default 1024)")
    files.add_argument("--force-exclude", action="store_true", default=None,
                       help="apply the excludes to files named on the command line too")
    files.add_argument("--no-respect-gitignore", dest="respect_gitignore", action="store_false", default=None,
                       help="also read files that .gitignore ignores")

    model = parser.add_argument_group("teach the scanner your codebase's own stream API")
    model.add_argument("--stream-context", dest="stream_contexts", action="append", metavar="CALLABLES",
                       help="callables whose `with` block switches the current stream, e.g. my_accel.stream")
    model.add_argument("--collective", dest="collectives", action="append", metavar="NAMES",
                       help="extra collective functions, e.g. my_comm.all_gather_into")
    model.add_argument("--sync-callable", dest="sync_callables", action="append", metavar="CALLABLES",
                       help="extra callables that order streams, e.g. my_accel.barrier_streams")
    model.add_argument("--generic-attribute", dest="generic_attributes", action="append", metavar="NAMES",
                       help="attribute names too common to pair a write and a read by name alone")

    speed = parser.add_argument_group("speed")
    speed.add_argument("-j", "--jobs", type=int, metavar="N",
                       help="processes that parse, the scan's own included (default: number of cores)")
    speed.add_argument("--no-cache", action="store_true", help="neither read nor write the per-file Facts cache")
    speed.add_argument("--cache-dir", metavar="DIR", help="cache folder (default: .streamcheck_cache at the root)")
    speed.add_argument("--show-timings", action="store_true",
                       help="print each phase's time to stderr (discovery, extraction, whole-program, rules, report)")
    parser.add_argument("--color", choices=["auto", "always", "never"], default="auto",
                        help="colours in text output (auto: only on a terminal, and not with NO_COLOR)")
    parser.add_argument("--no-progress", action="store_true", help="never show a progress bar")


def run(args: argparse.Namespace) -> int:
    from streamcheck.commands.scan_extras import STDIN, StdinSource

    if STDIN in (args.paths or []) or (args.stdin_filename and not args.paths):
        if args.paths not in ([STDIN], None, []) or args.project or args.fix:
            print("streamcheck scan: '-' (stdin) is scanned alone, without --project or --fix (use --diff)",
                  file=sys.stderr)
            return EXIT_ERROR
        stdin = StdinSource(args.stdin_filename)
        try:
            args.paths = [stdin.path]
            args.stdin_map = {stdin.name: stdin.path}
            return _run(args, stdin)
        finally:
            stdin.close()
    return _run(args, None)


def _run(args: argparse.Namespace, stdin) -> int:
    from pathlib import Path

    from streamcheck.scanner.baseline import BaselineError, read_baseline, write_baseline
    from streamcheck.commands.scan_extras import show_files, show_settings, statistics
    from streamcheck.scanner.config import ConfigError, check_rule_codes, load_config, parse_per_file_ignores, split_csv
    from streamcheck.scanner.git_scope import GitError

    args.focus = list(args.paths) if args.project else None
    args.paths = [args.project] if args.project else (args.paths or ["."])
    try:
        if args.jobs is not None and args.jobs < 1:
            raise ConfigError("command line", "--jobs", "must be at least 1")
        overrides = {
            "select": split_csv(args.select),
            "ignore": split_csv(args.ignore),
            "per-file-ignores": parse_per_file_ignores(args.per_file_ignores),
            "exclude": split_csv(args.exclude),
            "extend-exclude": split_csv(args.extend_exclude),
            "max-file-size-kb": args.max_file_size_kb,
            "force-exclude": args.force_exclude,
            "respect-gitignore": args.respect_gitignore,
            "stream-contexts": split_csv(args.stream_contexts),
            "collectives": split_csv(args.collectives),
            "sync-callables": split_csv(args.sync_callables),
            "generic-attributes": split_csv(args.generic_attributes),
        }
        config_file = Path(args.config) if args.config else None
        if config_file is not None and not config_file.is_file():
            raise ConfigError(str(config_file), "", f"cannot read {config_file} (--config): no such file")
        start = _common_start([stdin.name]) if stdin else _common_start(args.paths)
        config = load_config(config_file, start, overrides)
        baseline = read_baseline(args.baseline) if args.baseline else None
    except (ConfigError, BaselineError) as exc:
        print(f"streamcheck scan: {exc}", file=sys.stderr)
        return EXIT_ERROR

    if args.show_settings:
        show_settings(config)
        return EXIT_CLEAN
    if args.show_files:
        try:
            show_files(args.paths, config)
        except Exception as exc:  # MissingPath
            print(f"streamcheck scan: {exc}: no such file or folder", file=sys.stderr)
            return EXIT_ERROR
        return EXIT_CLEAN

    from streamcheck.scanner import driver

    try:
        backend = driver.default_backend(config)
        check_rule_codes(config, set(backend.rule_ids) | set(driver.DRIVER_RULES), tuple(runtime_rule_ids()))
    except ConfigError as exc:
        print(f"streamcheck scan: {exc}", file=sys.stderr)
        return EXIT_ERROR
    try:
        keep = _scope_filter(args)
    except GitError as exc:
        print(f"streamcheck scan: --diff-base {args.diff_base}: {exc}", file=sys.stderr)
        return EXIT_ERROR
    if stdin is not None:
        keep_all = keep

        def keep(finding, _keep=keep_all):
            return _keep is None or _keep(finding)

    def scan_once():
        result = _scan(args, config, backend, baseline, keep)
        if stdin is not None and not isinstance(result, int):
            stdin.rename(result, config)
        return result


    result = scan_once()
    if isinstance(result, int):
        return result
    if args.fix or args.diff:
        from streamcheck.scanner.fix_files import run_fixes

        result = run_fixes(args, result, scan_once)
        if isinstance(result, int):
            return result

    if not args.quiet:
        for reason in result.skipped:
            print(f"streamcheck: skipped {reason}", file=sys.stderr)
    if args.statistics:
        statistics(result.findings)
        return EXIT_FINDINGS if result.findings and not args.exit_zero else EXIT_CLEAN

    try:
        if args.write_baseline:
            count = write_baseline(args.write_baseline, result.findings)
            print(f"streamcheck: wrote {count} finding{'s' if count != 1 else ''} to {args.write_baseline}",
                  file=sys.stderr)
            return EXIT_CLEAN
        report_started = time.perf_counter()
        _write(args, result, backend)
        result.timings["report"] = time.perf_counter() - report_started
    except OSError as exc:
        print(f"streamcheck scan: cannot write {exc.filename or 'the report'}: {exc.strerror or exc}", file=sys.stderr)
        return EXIT_ERROR
    if args.show_timings:
        print(driver.timings_text(result.timings), file=sys.stderr)
    if result.findings and not args.exit_zero:
        return EXIT_FINDINGS
    return EXIT_CLEAN


def _scope_filter(args: argparse.Namespace):
    """--diff-base / --project: which findings to keep (None: all). Raises GitError for a bad revision."""
    from streamcheck.scanner.git_scope import changed_lines, touches_changed_lines, touches_paths

    tests = []
    if args.diff_base:
        changed = changed_lines(args.diff_base, args.paths[0] if os.path.isdir(args.paths[0]) else ".")
        tests.append(lambda finding: touches_changed_lines(finding, changed))
    if args.focus:
        focus = list(args.focus)
        tests.append(lambda finding: touches_paths(finding, focus))
    return (lambda finding: all(test(finding) for test in tests)) if tests else None


def _scan(args: argparse.Namespace, config, backend, baseline, keep=None):
    """One scan: its ScanResult (only the findings `keep` accepts), or the exit code of a failure (reported)."""
    result = _scan_all(args, config, backend, baseline)
    if keep is not None and not isinstance(result, int):
        result.findings = [finding for finding in result.findings if keep(finding)]
    return result


def _scan_all(args: argparse.Namespace, config, backend, baseline):
    from streamcheck.scanner import driver
    from streamcheck.commands.scan_extras import Progress
    from streamcheck.scanner.sources import MissingPath

    progress = None if args.no_progress else Progress.maybe(sys.stderr)
    try:
        return driver.scan(
            args.paths,
            config,
            backend=backend,
            jobs=args.jobs,
            cache_dir=args.cache_dir,
            use_cache=not args.no_cache,
            report_unused_ignores=args.report_unused_ignores,
            baseline=baseline,
            progress=progress,
        )
    except MissingPath as exc:
        print(f"streamcheck scan: {exc}: no such file or folder", file=sys.stderr)
        return EXIT_ERROR
    except Exception as exc:  # a bug in the rules must not look like a verdict on the code
        if os.environ.get("STREAMCHECK_DEBUG"):
            raise
        print(f"streamcheck scan: internal error in the analysis: {type(exc).__name__}: {exc}\n"
              "  (a streamcheck bug: please report it; STREAMCHECK_DEBUG=1 shows the traceback)", file=sys.stderr)
        return EXIT_ERROR
    finally:
        if progress:
            progress.close()


def runtime_rule_ids() -> list[str]:
    from streamcheck.instrument.runtime_rules import RUNTIME_RULES  # not the whole catalogue: it imports every rule

    return sorted(RUNTIME_RULES)


def _common_start(paths: list[str]) -> str:
    """Where to look for pyproject.toml: the folder the given paths share."""
    folders = [os.path.abspath(p if os.path.isdir(p) else os.path.dirname(p) or ".") for p in paths]
    try:
        return os.path.commonpath(folders)
    except ValueError:  # different drives
        return os.getcwd()


def _write(args: argparse.Namespace, result, backend) -> None:
    from streamcheck.report import ReportContext, wants_color, write_report
    from streamcheck.constants import version

    out = open(args.output, "w", encoding="utf-8") if args.output else sys.stdout
    try:
        color = wants_color(args.color, out, to_file=bool(args.output))
        context = ReportContext(
            tool_version=version(),
            rules=rule_infos(backend) if args.format == "sarif" else {},  # only SARIF lists the rules
            files=result.files,
            suppressed=result.suppressed,
            baselined=result.baselined,
            parsed=result.parsed,
            skipped=result.skipped,
            color=color,
            quiet=args.quiet,
            width=_terminal_width(out) if not args.output else 0,
        )
        write_report(args.format, result.findings, out, context)
    finally:
        if args.output:
            out.close()


def _terminal_width(out) -> int:
    from streamcheck.report import is_tty

    if not is_tty(out):
        return 0
    import shutil

    return max(40, shutil.get_terminal_size().columns)


def rule_infos(backend) -> dict:
    """id -> RuleInfo for every rule a scan reports: the catalogue's driver rules (SC001, SC002) and the backend's
    rules (the catalogue's entry where it has one; a test's own backend brings rules the catalogue does not know)."""
    from streamcheck.catalogue import DRIVER, RuleInfo, catalogue

    known = catalogue()
    rules = dict(catalogue(DRIVER))
    for rule_id, (summary, doc) in backend.rule_docs.items():
        rules[rule_id] = known.get(rule_id) or RuleInfo(rule_id, summary, doc)
    return dict(sorted(rules.items()))
