"""`streamcheck report --graph DIR`: each finding's happens-before picture, as Graphviz DOT and as a self-contained
HTML page with an inline SVG (no Graphviz, no JavaScript, no network needed to look at it).

The picture: one horizontal lane per actor (streams, NCCL streams, host threads), named as the report names them;
the events of the witness in order along the lanes (left to right = happens-before, laid out by longest path);
the two racing accesses highlighted in red; the edges that exist drawn solid (event waits, enqueues, syncs,
collectives; program order as a thin lane line); the missing edge dashed red with the code that adds it (the drawing: graph_svg.py).

Where a trace of the finding's rank is at hand, the graph is streamcheck.instrument.offline.hb's witness subgraph (the earlier
actor's chain around the write, the waiter's chain up to the read, and what they were ordered after). Without a
trace it is drawn from the finding's own data: the two accesses, the collective's launch, and the missing edge.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable

from streamcheck.findings import Finding

from .race_view import describe, is_runtime_finding, stream_label

ROLE_TAGS = {"earlier": "earlier access", "later": "racing access"}
MAX_TRACE_EVENTS = 500_000  # beyond this the networkx graph gets too big: draw from the finding's data instead


@dataclass
class GraphNode:
    id: int
    actor: str
    seq: int
    label: str
    detail: str = ""  # file:line for the racing accesses
    role: str = ""  # "earlier" | "later" | ""


@dataclass
class GraphEdge:
    source: int
    target: int
    kind: str  # program | enqueue | event | sync | collective | work | thread | free | record_stream | missing
    label: str = ""


@dataclass
class RaceGraph:
    """What is drawn: lanes (actor -> name, in drawing order), nodes, edges; built from a witness or a finding."""

    title: str
    subtitle: str
    lanes: dict[str, str]
    nodes: list[GraphNode]
    edges: list[GraphEdge]
    from_trace: bool
    fix: str = ""
    notes: list[str] = field(default_factory=list)

    def missing(self) -> GraphEdge:
        return next(edge for edge in self.edges if edge.kind == "missing")


def missing_label(fix: str) -> str:
    """The first piece of code in the fix hint: `side.wait_stream(compute)`."""
    match = re.search(r"`([^`]+)`", fix)
    return f"missing: {match.group(1)}" if match else "missing edge"


# ---- building ---------------------------------------------------------------------------------------------------
def _lane_order(actors: Iterable[str], first: list[str]) -> list[str]:
    rest = sorted(set(actors) - set(first), key=lambda a: (a.startswith("T"), a))
    seen: list[str] = []
    for actor in first + rest:
        if actor and actor not in seen:
            seen.append(actor)
    return seen


def graph_from_finding(finding: Finding) -> RaceGraph:
    """Only what the finding itself says: the two accesses (and a collective's launch), and the missing edge."""
    view = describe(finding)
    extra = finding.extra
    earlier, later = extra["earlier"], extra["later"]
    names = extra.get("streams") or {}
    world = int(extra.get("world_size") or 0)
    nodes = [GraphNode(0, earlier["actor"], int(earlier.get("seq", 0)), view.earlier.op, view.earlier.where,
                       "earlier")]
    edges: list[GraphEdge] = []
    later_id = target = 1
    if later.get("stream"):  # a collective: its NCCL stream waits for the launch stream, so the edge goes there
        nodes.append(GraphNode(1, later["stream"], int(later.get("seq", 0)), f"launch {view.later.op}"))
        later_id = 2
        edges.append(GraphEdge(1, 2, "collective", "collective"))
    nodes.append(GraphNode(later_id, later["actor"], int(later.get("seq", 0)), view.later.op, view.later.where,
                           "later"))
    edges.append(GraphEdge(0, target, "missing", missing_label(view.fix)))
    order = _lane_order([n.actor for n in nodes], [earlier["actor"], later.get("stream", ""), later["actor"]])
    lanes = {actor: stream_label(actor, names, world) for actor in order}
    return RaceGraph(_title(finding), view.tensor, lanes, nodes, edges, False, view.fix,
                     ["No trace of this rank was given: only the two accesses are drawn (run with --trace for "
                      "the full happens-before picture)."])


def graph_from_trace(finding: Finding, trace_path: Path) -> RaceGraph | str:
    """hb.py's witness subgraph for the finding, or why it cannot be drawn from this trace."""
    from streamcheck.instrument.offline.hb import HappensBefore
    from streamcheck.instrument.trace import read_trace, replay

    extra = finding.extra
    limit = int(extra["later"].get("seq", -1))
    if limit < 0:
        return "The finding does not say where in the trace its accesses are: only they are drawn."
    if limit > MAX_TRACE_EVENTS:
        return (f"The race is at event {limit} of the trace, too far in to build its happens-before graph "
                f"(limit {MAX_TRACE_EVENTS}): only the two accesses are drawn.")
    hb = HappensBefore(find_races=False)
    # lines it cannot give are skipped (the report warns); nothing after the later access is needed but names
    replay(read_trace(trace_path, problems=[]), hb, problems=[], until=limit)

    race = race_of(finding)
    earlier, later = race.earlier, race.later
    if (earlier.seq, earlier.actor) not in hb.access_nodes or (later.seq, later.actor) not in hb.access_nodes:
        return f"The trace {trace_path} does not hold this finding's accesses: only they are drawn."
    witness = hb.witness(race)
    sub = hb.witness_subgraph(witness)
    view = describe(finding)
    names = dict(hb.stream_names)
    names.update(extra.get("streams") or {})
    world = int(extra.get("world_size") or 0)
    nodes = []
    for node, data in sorted(sub.nodes(data=True)):
        role = "earlier" if node == witness.earlier_node else "later" if node == witness.later_node else ""
        detail = view.earlier.where if role == "earlier" else view.later.where if role == "later" else ""
        nodes.append(GraphNode(node, data["actor"], data["seq"], data["label"], detail, role))
    edges = []
    for u, v, data in sorted(sub.edges(data=True)):
        if data.get("missing"):
            edges.append(GraphEdge(u, v, "missing", missing_label(view.fix)))
        else:
            edges.append(GraphEdge(u, v, data["kind"], "" if data["kind"] == "program" else data["kind"]))
    order = _lane_order([n.actor for n in nodes], [earlier.actor, witness.waiter, later.actor])
    lanes = {actor: stream_label(actor, names, world) for actor in order}
    return RaceGraph(_title(finding), view.tensor, lanes, nodes, edges, True, view.fix)


def race_of(finding: Finding):
    """The detector's Race a runtime finding was made from (its accesses' trace positions are in `extra`)."""
    from streamcheck.instrument.detector import Access, Race

    def access(data: dict) -> Access:
        return Access(str(data["actor"]), str(data.get("thread", "")), bool(data.get("is_write")),
                      int(data.get("site", -1)), str(data.get("op", "")), int(data.get("seq", -1)), 0,
                      str(data.get("stream") or ""))

    extra = finding.extra
    return Race(finding.kind, int(extra.get("storage", 0)), int(extra.get("start", 0)), int(extra.get("end", 0)),
                access(extra["earlier"]), access(extra["later"]))


def _title(finding: Finding) -> str:
    return f"{finding.rule} {finding.kind}: {finding.message}"


def condense(graph: RaceGraph) -> RaceGraph:
    """Fold each run of two or more consecutive events of a lane that take part in no edge across lanes (kernels
    queued before the write, say) into one node "N ops": they only say that time passed, and the picture must
    keep the two accesses and the missing edge on one screen."""
    anchored = {n.id for n in graph.nodes if n.role}
    for edge in graph.edges:
        if edge.kind != "program":
            anchored.update((edge.source, edge.target))
    next_id = max((n.id for n in graph.nodes), default=0) + 1
    replaced: dict[int, int] = {}
    nodes: list[GraphNode] = []
    for actor in graph.lanes:
        lane = sorted((n for n in graph.nodes if n.actor == actor), key=lambda n: (n.seq, n.id))
        run: list[GraphNode] = []
        for node in lane + [None]:  # None closes the last run
            if node is not None and node.id not in anchored:
                run.append(node)
                continue
            if len(run) >= 2:
                ops = [re.sub(r"^\w+::", "", n.label) for n in run]
                folded = GraphNode(next_id, actor, run[0].seq, f"{len(run)} ops", ", ".join(ops))
                next_id += 1
                replaced.update({n.id: folded.id for n in run})
                nodes.append(folded)
            else:
                nodes += run
            run = []
            if node is not None:
                nodes.append(node)
    edges: list[GraphEdge] = []
    seen = set()
    for edge in graph.edges:
        source, target = replaced.get(edge.source, edge.source), replaced.get(edge.target, edge.target)
        if source == target or (source, target, edge.kind) in seen:
            continue
        seen.add((source, target, edge.kind))
        edges.append(GraphEdge(source, target, edge.kind, edge.label))
    return RaceGraph(graph.title, graph.subtitle, graph.lanes, sorted(nodes, key=lambda n: (n.seq, n.id)), edges,
                     graph.from_trace, graph.fix, list(graph.notes))


def race_graph(finding: Finding, trace_path: Path | None) -> RaceGraph:
    if trace_path is None:
        return graph_from_finding(finding)
    graph = graph_from_trace(finding, trace_path)
    if isinstance(graph, RaceGraph):
        return condense(graph)
    fallback = graph_from_finding(finding)
    fallback.notes = [graph]
    return fallback


# ---- DOT --------------------------------------------------------------------------------------------------------

def to_dot(graph: RaceGraph) -> str:
    """Graphviz: one cluster (lane) per actor, left to right in happens-before order; the missing edge dashed red."""
    from .graph_svg import layout

    lines = ["digraph race {", "  rankdir=LR;", "  newrank=true;", f"  label={_dot(graph.title)};", "  labelloc=t;",
             '  node [shape=box, style="rounded,filled", fillcolor=white, fontname="monospace", fontsize=12];',
             '  edge [fontname="monospace", fontsize=12];']
    for k, (actor, name) in enumerate(graph.lanes.items()):
        lines.append(f"  subgraph cluster_{k} {{")
        lines.append(f"    label={_dot(name)}; style=filled; fillcolor=gray96; color=gray80;")
        for node in (n for n in graph.nodes if n.actor == actor):
            label = node.label + (f"\\n{node.detail}" if node.detail else "")
            style = ""
            if node.role:
                style = ', color=red, penwidth=2.5, fillcolor="#ffecec"'
                label = f"{ROLE_TAGS[node.role]}\\n{label}"
            lines.append(f"    n{node.id} [label={_dot(label)}{style}];")
        lines.append("  }")
    # The columns of the HTML picture (time left to right, the same in both): one rank per column.
    columns: dict[int, list[int]] = {}
    for node_id, (column, _lane) in layout(graph).items():
        columns.setdefault(column, []).append(node_id)
    for column in sorted(columns):
        lines.append("  { rank=same; " + " ".join(f"n{i};" for i in sorted(columns[column])) + " }")
    ordered = sorted(columns)
    for left, right in zip(ordered, ordered[1:]):
        lines.append(f"  n{min(columns[left])} -> n{min(columns[right])} [style=invis];")
    for edge in graph.edges:
        if edge.kind == "missing":
            lines.append(f"  n{edge.source} -> n{edge.target} [style=dashed, color=red, fontcolor=red, penwidth=2.5, "
                         f"constraint=false, label={_dot(edge.label)}];")
        elif edge.kind == "program":
            lines.append(f"  n{edge.source} -> n{edge.target} [color=gray60, arrowsize=0.6];")
        else:
            lines.append(f"  n{edge.source} -> n{edge.target} [color=\"#1f5fbf\", fontcolor=\"#1f5fbf\", "
                         f"label={_dot(edge.label)}];")
    lines.append("}")
    return "\n".join(lines) + "\n"


def _dot(text: str) -> str:
    escaped = str(text).replace("\\n", "\x00").replace("\\", "\\\\").replace('"', '\\"').replace("\x00", "\\n")
    return f'"{escaped}"'


# ---- writing ----------------------------------------------------------------------------------------------------
def file_stem(finding: Finding, index: int) -> str:
    return f"{index:02d}-{finding.rule}-{finding.kind or 'finding'}-{finding.fingerprint[:8]}"


def write_graphs(findings: list[Finding], merged, out_dir: str | Path) -> list[Path]:
    """For every runtime finding, <stem>.dot and <stem>.html in out_dir; returns the paths written."""
    from streamcheck.instrument.offline.graph_svg import to_html
    from streamcheck.instrument.offline.race_text import render_runtime_finding

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    written: list[Path] = []
    for index, finding in enumerate(findings, 1):
        if not is_runtime_finding(finding):
            continue
        trace = merged.trace_for(finding) if merged is not None else None
        graph = race_graph(finding, trace.path if trace is not None else None)
        stem = file_stem(finding, index)
        dot_path, html_path = out / f"{stem}.dot", out / f"{stem}.html"
        dot_path.write_text(to_dot(graph), encoding="utf-8")
        html_path.write_text(to_html(graph, finding, render_runtime_finding(finding).plain), encoding="utf-8")
        written += [dot_path, html_path]
    return written
