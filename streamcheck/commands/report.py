"""`streamcheck report DIR|FILES`: merge the per-rank runtime findings of a job into one report.

Inputs are the `streamcheck-rank{R}.jsonl` files the runtime writes (or the directory holding them), and optionally
the traces of `streamcheck run --trace`: a trace names streams and tensors, is the source of the pictures, and stands
in for the findings of a rank that has no findings file. Each finding is printed once, with the ranks that saw it
and how often (instrument/offline/merge.py). `--graph DIR` writes each finding's happens-before picture there, as DOT and as
a self-contained HTML page (streamcheck/instrument/offline/graph.py).
Exit: 0 no finding, 1 findings, 2 unusable input, or no finding in input that could not be read in full.
"""

from __future__ import annotations

import argparse
import sys

from streamcheck.report import FORMATS


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("inputs", nargs="+", metavar="DIR|FILE",
                        help="per-rank findings files (streamcheck-rank*.jsonl), traces, or directories holding them")
    parser.add_argument("--format", choices=list(FORMATS), default="text",
                        help="report format (default: text)")
    parser.add_argument("--graph", metavar="DIR", help="write each finding's happens-before picture (DOT, HTML) here")
    parser.add_argument("-o", "--output", metavar="FILE", help="write the report to FILE instead of stdout")
    parser.add_argument("--color", choices=("auto", "always", "never"), default="auto",
                        help="colour the text report (auto: on a terminal without NO_COLOR)")


def run(args: argparse.Namespace) -> int:
    from streamcheck.instrument.offline.merge import MergeError, merge

    try:
        merged = merge(args.inputs)
    except MergeError as exc:
        print(f"streamcheck report: {exc}", file=sys.stderr)
        return 2
    if not merged.files:
        _say_warnings(merged)
        print("streamcheck report: none of the inputs is a streamcheck findings file or trace", file=sys.stderr)
        return 2
    findings = enriched_findings(merged)  # reads the traces for names: their damage joins the warnings
    _say_warnings(merged)
    for error in merged.errors:
        print(f"streamcheck report: the run reported an instrumentation error on {error}", file=sys.stderr)
    try:
        _write(args, findings, merged)
    except OSError as exc:
        if not args.output or isinstance(exc, BrokenPipeError):
            raise  # stdout went away: the cli ends quietly
        print(f"streamcheck report: cannot write {args.output}: {exc.strerror or exc}", file=sys.stderr)
        return 2
    if args.graph:
        from streamcheck.instrument.offline.graph import write_graphs

        try:
            written = write_graphs(findings, merged, args.graph)
        except OSError as exc:
            print(f"streamcheck report: cannot write graphs into {args.graph}: {exc.strerror or exc}",
                  file=sys.stderr)
            return 2
        for path in written:
            print(f"streamcheck report: wrote {path}", file=sys.stderr)
    if findings:
        return 1
    if merged.damaged:  # nothing found in input that could not be read in full: not a clean bill
        print("streamcheck report: no findings in what could be read, but some input was damaged (see the "
              "warnings): exit 2", file=sys.stderr)
        return 2
    return 0


def _say_warnings(merged) -> None:
    for warning in merged.warnings:
        print(f"streamcheck report: warning: {warning}", file=sys.stderr)


def trace_names(merged) -> dict:
    """rank -> Names of that rank's trace. Lines the trace cannot give are skipped; the ones merge() did not
    already say (a rank whose trace was not replayed) become warnings, and a trace without a usable header gives
    no names."""
    from streamcheck.instrument.trace import TraceError, read_trace
    from streamcheck.instrument.names import Names

    names = {}
    said = set(merged.warnings)
    for rank, trace in merged.traces.items():
        problems: list[str] = []
        try:
            names[rank] = Names.from_events(read_trace(trace.path, problems))
        except TraceError as exc:
            if not any(warning.startswith(str(exc)) for warning in said):
                merged.damage(f"{exc}; names from this trace are left out")
        for problem in problems:
            if problem not in said:
                merged.damage(problem)
    return names


def enriched_findings(merged) -> list:
    from streamcheck.instrument.offline.merge import rank_of
    from streamcheck.instrument.offline.race_view import enrich

    names = trace_names(merged) if merged.traces else {}
    return [enrich(finding, names.get(rank_of(finding)), merged.world_size) for finding in merged.findings]


def _write(args: argparse.Namespace, findings: list, merged) -> None:
    from streamcheck.report import wants_color

    out = open(args.output, "w", encoding="utf-8") if args.output else sys.stdout
    try:
        write_merged(findings, merged, args.format, out, wants_color(args.color, out, to_file=bool(args.output)))
    finally:
        if args.output:
            out.close()


def write_merged(findings: list, merged, fmt: str, out, color: bool = False) -> None:
    """Write merged runtime findings (enriched_findings) in one of the formats; also for `streamcheck run`."""
    from streamcheck.report import write_report

    write_report(fmt, findings, out, runtime_context(merged, color))


def runtime_context(merged, color: bool = False):
    """The ReportContext of runtime findings: the SC2xx rules, the runtime text layout, "N ranks" as the scope."""
    from streamcheck.constants import version
    from streamcheck.report import ReportContext
    from streamcheck.instrument.offline.race_text import layout as race_layout
    from streamcheck.catalogue import RUNTIME, catalogue

    ranks = sorted(merged.ranks)
    scope = f"{len(ranks)} rank{'s' if len(ranks) != 1 else ''}" if ranks else "no rank"
    return ReportContext(tool_version=version(), rules=catalogue(RUNTIME), scope=scope, layout=race_layout,
                         color=color)

