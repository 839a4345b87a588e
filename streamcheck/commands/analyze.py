"""`streamcheck analyze TRACE`: replay a recorded trace through the online detector and report every race.

The races become findings as in `streamcheck report` (instrument/offline/merge.py race_findings: a race that repeats, e.g.
every training step, is one finding with a count) and are told in the same words and layout (instrument/offline/race_view.py
enrich, instrument/offline/race_text.py), with stream and tensor names from the trace; a summary line with the trace's rank,
its event count and the number of race occurrences closes the text. `--graph out.dot` writes, for each finding, the
witness subgraph of the happens-before graph (streamcheck.instrument.offline.hb) as a Graphviz digraph, all in one file.
A line or event that cannot be replayed (not JSON, a field of the wrong type, the cut-off end of a killed run) is a
warning naming its line, and the rest of the trace is analyzed. Exit 0: no race; 1: races; 2: the trace cannot be
read (no header of a version this streamcheck knows), or no race but some lines could not be read.
"""

from __future__ import annotations

import argparse
import json
import sys


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("trace", help="a trace written by the runtime (JSONL, optionally .gz)")
    parser.add_argument("--format", choices=("text", "json"), default="text", help="output format (default: text)")
    parser.add_argument("--graph", metavar="OUT.dot", help="write the witness subgraph of each race as Graphviz DOT")
    parser.add_argument("--color", choices=("auto", "always", "never"), default="auto",
                        help="colour the text report (auto: on a terminal without NO_COLOR)")


def run(args: argparse.Namespace) -> int:
    from streamcheck.instrument.detector import Detector
    from streamcheck.instrument.trace import TraceError, read_trace, replay
    from streamcheck.instrument.offline.merge import combine, int_or_zero, race_findings
    from streamcheck.instrument.names import Names
    from streamcheck.instrument.offline.race_view import enrich

    detector = Detector()
    names = Names()
    problems: list[str] = []  # lines and events skipped, each with its line or index

    def events():  # one pass over the trace: the detector replays it, names are collected on the way
        for event in read_trace(args.trace, problems):
            names.add(event)
            yield event

    try:
        header = replay(events(), detector, problems)
    except TraceError as exc:  # no usable header: nothing can be replayed
        message = str(exc)
        if not message.startswith(args.trace):
            message = f"{args.trace}: {message}"
        print(f"streamcheck analyze: {message}", file=sys.stderr)
        return 2
    for problem in problems:
        print(f"streamcheck analyze: warning: {problem}", file=sys.stderr)

    rank = int_or_zero(header.get("rank"))
    world_size = int_or_zero(header.get("world_size"))
    from streamcheck.instrument.offline.source_lines import with_sources

    # Source lines (and the code's stream names) also when analyze runs away from where the trace was recorded.
    found = with_sources(combine([(rank, race_findings(detector, rank))]), args.trace)
    findings = [enrich(finding, names, world_size) for finding in found]

    if args.graph:
        try:
            _write_graph(args.trace, findings, args.graph)
        except OSError as exc:
            print(f"streamcheck analyze: cannot write {args.graph}: {exc.strerror or exc}", file=sys.stderr)
            return 2

    if args.format == "json":
        _write_json(args.trace, header, findings, len(detector.races), problems)
    else:
        _write_text(args.trace, header, findings, len(detector.races), args.color, len(problems))
    if findings:
        return 1
    if problems:  # no race in what could be read is no verdict on the lines that could not
        return 2
    return 0


def _write_graph(trace: str, findings: list, out_path: str) -> None:
    """The same drawing as `streamcheck report --graph` (instrument/offline/graph.py): lanes, columns in time order, the
    missing edge dashed red, so that both commands show a race alike."""
    from pathlib import Path

    from streamcheck.instrument.offline.graph import race_graph, to_dot

    with open(out_path, "w") as out:
        if not findings:
            out.write("digraph race {\n  label=\"no race\";\n}\n")
        for k, finding in enumerate(findings):
            out.write(to_dot(race_graph(finding, Path(trace))).replace("digraph race {", f"digraph race_{k + 1} {{", 1))


def _summary(header: dict, findings: list, races: int, problems: list[str] | None = None) -> dict:
    from streamcheck.report import count_by_rule

    summary = {"events": header.get("events", 0), "skipped_events": header.get("skipped_events", 0),
               "races": races, "findings": len(findings), "by_rule": count_by_rule(findings)}
    if problems:
        summary["unreadable"] = list(problems)
    return summary


def _write_json(trace: str, header: dict, findings: list, races: int, problems: list[str]) -> None:
    from streamcheck.constants import version

    trace_info = {"path": trace, **{k: v for k, v in header.items() if k not in ("e", "events", "skipped_events")}}
    document = {
        "tool": {"name": "streamcheck", "version": version()},
        "trace": trace_info,
        "findings": [finding.to_dict() for finding in findings],
        "summary": _summary(header, findings, races, problems),
    }
    json.dump(document, sys.stdout, indent=2)
    sys.stdout.write("\n")


def _write_text(trace: str, header: dict, findings: list, races: int, color_choice: str, unreadable: int = 0) -> None:
    """Each race as `streamcheck report` lays it out, then this command's own summary line."""
    from rich.text import Text

    from streamcheck.report import ReportContext, wants_color
    from streamcheck.report.text import make_console, render
    from streamcheck.instrument.offline.race_text import layout as race_layout

    color = wants_color(color_choice, sys.stdout)
    console = make_console(sys.stdout, color)
    context = ReportContext(layout=race_layout, color=color)
    for finding in findings:
        console.print(render(finding, context))
    summary = _summary(header, findings, races)
    where = f"{trace} (rank {header.get('rank', '?')}, {summary['events']} events)"
    if not findings and unreadable:
        console.print(Text(f"No race in the readable part of {where}; {unreadable} line"
                           f"{'s' if unreadable != 1 else ''} could not be read.", style="bold yellow"))
        return
    if not findings:
        console.print(Text(f"No race in {where}.", style="bold green"))
        return
    by_rule = ", ".join(f"{rule} x{n}" for rule, n in summary["by_rule"].items())
    noun = "race" if len(findings) == 1 else "distinct races"
    console.print(Text(f"Found {len(findings)} {noun} ({races} occurrence{'s' if races != 1 else ''}) in {where}: "
                       f"{by_rule}.", style="bold"))
