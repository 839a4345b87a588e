"""`streamcheck analyze TRACE`: replay a recorded trace through the online detector and report every race.

Each race is printed with both sites (the later access is the finding's position, the earlier one a related
location) and the missing happens-before edge. Races that repeat (same kind, sites, ops and actors, e.g. every
training step) are reported once with a count. `--graph out.dot` writes, for each reported race, the witness
subgraph of the happens-before graph (streamcheck.hb) as a Graphviz digraph, all in one file.
Exit 0: no race; 1: races; 2: the trace cannot be read.
"""

from __future__ import annotations

import argparse
import json
import sys


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("trace", help="a trace written by the runtime (JSONL, optionally .gz)")
    parser.add_argument("--format", choices=("text", "json"), default="text", help="output format (default: text)")
    parser.add_argument("--graph", metavar="OUT.dot", help="write the witness subgraph of each race as Graphviz DOT")


def run(args: argparse.Namespace) -> int:
    from streamcheck.findings import Finding
    from streamcheck.instrument.detector import Detector, Race
    from streamcheck.instrument.races import Names, race_finding
    from streamcheck.instrument.trace import TraceError, read_trace, replay

    detector = Detector()
    try:
        header = replay(read_trace(args.trace), detector)
    except TraceError as exc:
        message = str(exc)
        if not message.startswith(args.trace):
            message = f"{args.trace}: {message}"
        print(f"streamcheck analyze: {message}", file=sys.stderr)
        return 2

    distinct: dict[tuple, list[Race]] = {}
    for race in detector.races:
        e, l = race.earlier, race.later
        key = (race.kind, e.site, l.site, e.op, l.op, e.actor, l.actor, e.is_write, l.is_write)
        distinct.setdefault(key, []).append(race)
    names = Names.of(detector)
    findings: list[Finding] = []
    for group in distinct.values():
        finding = race_finding(group[0], names)
        if len(group) > 1:
            finding = Finding(**{**finding.__dict__, "count": len(group)})
        findings.append(finding)

    if args.graph:
        try:
            _write_graph(args.trace, [group[0] for group in distinct.values()], args.graph)
        except OSError as exc:
            print(f"streamcheck analyze: cannot write {args.graph}: {exc.strerror or exc}", file=sys.stderr)
            return 2

    if args.format == "json":
        _write_json(args.trace, header, findings, len(detector.races))
    else:
        _write_text(args.trace, header, findings, len(detector.races))
    return 1 if findings else 0


def _write_graph(trace: str, races: list, out_path: str) -> None:
    from streamcheck.hb import HappensBefore
    from streamcheck.instrument.trace import read_trace

    hb = HappensBefore.from_events(read_trace(trace), find_races=False)
    with open(out_path, "w") as out:
        if not races:
            out.write("digraph race {\n  label=\"no race\";\n}\n")
        for k, race in enumerate(races):
            out.write(hb.witness_dot(hb.witness(race), name=f"race_{k + 1}"))


def _summary(header: dict, findings: list, races: int) -> dict:
    by_rule: dict[str, int] = {}
    for finding in findings:
        by_rule[finding.rule] = by_rule.get(finding.rule, 0) + 1
    return {"events": header.get("events", 0), "skipped_events": header.get("skipped_events", 0),
            "races": races, "findings": len(findings), "by_rule": dict(sorted(by_rule.items()))}


def _write_json(trace: str, header: dict, findings: list, races: int) -> None:
    from streamcheck.cli import _version

    trace_info = {"path": trace, **{k: v for k, v in header.items() if k not in ("e", "events", "skipped_events")}}
    document = {
        "tool": {"name": "streamcheck", "version": _version()},
        "trace": trace_info,
        "findings": [finding.to_dict() for finding in findings],
        "summary": _summary(header, findings, races),
    }
    json.dump(document, sys.stdout, indent=2)
    sys.stdout.write("\n")


def _write_text(trace: str, header: dict, findings: list, races: int) -> None:
    import os

    from rich.console import Console
    from rich.text import Text

    from streamcheck.report.text import render_finding

    color = sys.stdout.isatty() and "NO_COLOR" not in os.environ
    console = Console(file=sys.stdout, highlight=False, soft_wrap=True, emoji=False, force_terminal=color,
                      no_color=not color, color_system="auto" if color else None)
    for finding in findings:
        console.print(render_finding(finding))
    summary = _summary(header, findings, races)
    where = f"{trace} (rank {header.get('rank', '?')}, {summary['events']} events)"
    if not findings:
        console.print(Text(f"No race in {where}.", style="bold green"))
        return
    by_rule = ", ".join(f"{rule} x{n}" for rule, n in summary["by_rule"].items())
    noun = "race" if len(findings) == 1 else "distinct races"
    console.print(Text(f"Found {len(findings)} {noun} ({races} occurrence{'s' if races != 1 else ''}) in {where}: {by_rule}.", style="bold"))
