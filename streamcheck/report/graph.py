"""`streamcheck report --graph DIR`: each finding's happens-before picture, as Graphviz DOT and as a self-contained
HTML page with an inline SVG (no Graphviz, no JavaScript, no network needed to look at it).

The picture: one horizontal lane per actor (streams, NCCL streams, host threads), named as the report names them;
the events of the witness in order along the lanes (left to right = happens-before, laid out by longest path);
the two racing accesses highlighted in red; the edges that exist drawn solid (event waits, enqueues, syncs,
collectives; program order as a thin lane line); the missing edge dashed red with the code that adds it.

Where a trace of the finding's rank is at hand, the graph is streamcheck.hb's witness subgraph (the earlier
actor's chain around the write, the waiter's chain up to the read, and what they were ordered after). Without a
trace it is drawn from the finding's own data: the two accesses, the collective's launch, and the missing edge.
"""

from __future__ import annotations

import html
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable

from streamcheck.findings import Finding

from .runtime import describe, display_path, is_runtime_finding, stream_label

ROLE_TAGS = {"earlier": "earlier access", "later": "racing access"}
MAX_TRACE_EVENTS = 2_000_000  # beyond this the networkx graph gets too big: draw from the finding's data instead


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


def graph_from_trace(finding: Finding, trace_path: Path) -> RaceGraph | None:
    """hb.py's witness subgraph for the finding, or None when the trace does not hold the finding's accesses."""
    from streamcheck.hb import HappensBefore
    from streamcheck.instrument.detector import Access, Race
    from streamcheck.instrument.trace import EVENTS, read_trace

    extra = finding.extra
    earlier_data, later_data = extra["earlier"], extra["later"]
    limit = int(later_data.get("seq", -1))
    if limit < 0 or limit > MAX_TRACE_EVENTS:
        return None
    hb = HappensBefore(find_races=False)
    seq = 0
    for event in read_trace(trace_path):
        name = event.get("e")
        if name == "header":
            continue
        if name in EVENTS and (seq <= limit or name in ("site", "stream_name", "storage_info")):
            hb.add(event, seq)
        seq += 1

    def access(data: dict) -> Access:
        return Access(str(data["actor"]), str(data.get("thread", "")), bool(data.get("is_write")),
                      int(data.get("site", -1)), str(data.get("op", "")), int(data.get("seq", -1)), 0,
                      str(data.get("stream") or ""))

    earlier, later = access(earlier_data), access(later_data)
    if (earlier.seq, earlier.actor) not in hb.access_nodes or (later.seq, later.actor) not in hb.access_nodes:
        return None
    race = Race(finding.kind, int(extra.get("storage", 0)), int(extra.get("start", 0)), int(extra.get("end", 0)),
                earlier, later)
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


def _title(finding: Finding) -> str:
    return f"{finding.rule} {finding.kind}: {finding.message}"


def race_graph(finding: Finding, trace_path: Path | None) -> RaceGraph:
    if trace_path is not None:
        graph = graph_from_trace(finding, trace_path)
        if graph is not None:
            return graph
    graph = graph_from_finding(finding)
    if trace_path is not None:
        graph.notes = [f"The trace {trace_path} does not hold this finding's accesses: only they are drawn."]
    return graph


# ---- DOT --------------------------------------------------------------------------------------------------------
_EDGE_COLOR = {"missing": "red", "program": "gray60", "enqueue": "gray40"}


def to_dot(graph: RaceGraph) -> str:
    """Graphviz: one cluster (lane) per actor, left to right in happens-before order; the missing edge dashed red."""
    lines = ["digraph race {", "  rankdir=LR;", "  newrank=true;", f"  label={_dot(graph.title)};", "  labelloc=t;",
             '  node [shape=box, style="rounded,filled", fillcolor=white, fontname="monospace", fontsize=10];',
             '  edge [fontname="monospace", fontsize=9];']
    for k, (actor, name) in enumerate(graph.lanes.items()):
        lines.append(f"  subgraph cluster_{k} {{")
        lines.append(f"    label={_dot(name)}; style=filled; fillcolor=gray96; color=gray80;")
        for node in (n for n in graph.nodes if n.actor == actor):
            label = f"#{node.seq} {node.label}" + (f"\\n{node.detail}" if node.detail else "")
            style = ""
            if node.role:
                style = ', color=red, penwidth=2.5, fillcolor="#ffecec"'
                label = f"{ROLE_TAGS[node.role]}\\n{label}"
            lines.append(f"    n{node.id} [label={_dot(label)}{style}];")
        lines.append("  }")
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


# ---- SVG / HTML -------------------------------------------------------------------------------------------------
LANE_LABEL_W = 260
COL_W = 206
NODE_W = 184
NODE_H = 46
LANE_H = 110
TOP = 40


def layout(graph: RaceGraph) -> dict[int, tuple[int, int]]:
    """node -> (column, lane). Nodes are placed in trace order and columns never decrease along it, so time runs
    left to right across lanes; a node moves one column right of whatever it was ordered after (missing edge left
    out), so every existing edge points right, and nodes that follow each other without an edge share a column."""
    lane_index = {actor: i for i, actor in enumerate(graph.lanes)}
    column: dict[int, int] = {}
    preds: dict[int, list[int]] = {n.id: [] for n in graph.nodes}
    for edge in graph.edges:
        if edge.kind != "missing" and edge.source in preds and edge.target in preds:
            preds[edge.target].append(edge.source)
    floor = 0
    for node in sorted(graph.nodes, key=lambda n: (n.seq, n.id)):  # trace order is a topological order
        floor = max([floor] + [column[p] + 1 for p in preds[node.id] if p in column])
        column[node.id] = floor
    return {n.id: (column[n.id], lane_index[n.actor]) for n in graph.nodes}


def to_svg(graph: RaceGraph) -> str:
    place = layout(graph)
    columns = max((c for c, _ in place.values()), default=0) + 1
    width = LANE_LABEL_W + columns * COL_W + 40
    height = TOP + len(graph.lanes) * LANE_H + 12

    def center(node_id: int) -> tuple[float, float]:
        col, lane = place[node_id]
        return LANE_LABEL_W + col * COL_W + COL_W / 2, TOP + lane * LANE_H + LANE_H / 2

    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
           f'viewBox="0 0 {width} {height}" font-family="DejaVu Sans Mono, Menlo, Consolas, monospace">',
           "<defs>",
           _marker("arrow", "#1f5fbf"), _marker("arrow-gray", "#8a8a8a"), _marker("arrow-red", "#d01c1c"),
           "</defs>",
           f'<rect x="0" y="0" width="{width}" height="{height}" fill="white"/>']
    out.append(_legend(width))
    for i, (actor, name) in enumerate(graph.lanes.items()):
        y = TOP + i * LANE_H
        fill = "#f4f6fa" if i % 2 == 0 else "#fafbfd"
        out.append(f'<rect x="0" y="{y}" width="{width}" height="{LANE_H}" fill="{fill}" stroke="#d8dde6"/>')
        lines = _wrap(name, 32)[:3]
        top = y + LANE_H / 2 - 8 * len(lines) + 4
        for k, line in enumerate(lines):
            out.append(_text(12, top + 16 * k, line, size=12, weight="bold", fill="#1a2433"))
        out.append(_text(12, top + 16 * len(lines) + 2, actor, size=10, fill="#5a6578"))
        out.append(f'<line x1="{LANE_LABEL_W}" y1="{y + LANE_H / 2}" x2="{width - 20}" y2="{y + LANE_H / 2}" '
                   f'stroke="#c5ccd8" stroke-width="1" stroke-dasharray="2,4"/>')
    by_id = {n.id: n for n in graph.nodes}
    for edge in graph.edges:  # under the nodes
        if edge.kind == "missing" or edge.source not in place or edge.target not in place:
            continue
        out.append(_edge(center(edge.source), center(edge.target), edge, same_lane=(
            by_id[edge.source].actor == by_id[edge.target].actor)))
    top_used = set()  # nodes with a cross-lane edge at their top: their role tag goes below them
    for edge in graph.edges:
        if edge.source in place and edge.target in place and place[edge.source][1] != place[edge.target][1]:
            upper, lower = sorted((edge.source, edge.target), key=lambda n: place[n][1])
            top_used.add(lower)
    for node in graph.nodes:
        out.append(_node(node, center(node.id), tag_below=node.id in top_used))
    missing = graph.missing()
    if missing.source in place and missing.target in place:
        out.append(_edge(center(missing.source), center(missing.target), missing, same_lane=False))
    out.append("</svg>")
    return "\n".join(out)


def _marker(name: str, color: str) -> str:
    return (f'<marker id="{name}" viewBox="0 0 10 10" refX="9" refY="5" markerUnits="userSpaceOnUse" '
            f'markerWidth="11" markerHeight="11" orient="auto-start-reverse">'
            f'<path d="M 0 0 L 10 5 L 0 10 z" fill="{color}"/></marker>')


def _legend(width: int) -> str:
    x = LANE_LABEL_W
    parts = [_text(12, 24, "lanes = streams / threads; time runs left to right", size=11, fill="#5a6578")]
    items = [("#8a8a8a", "", "program order"), ("#1f5fbf", "", "existing edge (wait, sync, launch)"),
             ("#d01c1c", "7,5", "missing edge")]
    x = max(x, 420)
    for color, dash, label in items:
        dash_attr = f' stroke-dasharray="{dash}"' if dash else ""
        parts.append(f'<line x1="{x}" y1="20" x2="{x + 34}" y2="20" stroke="{color}" stroke-width="2.5"{dash_attr}/>')
        parts.append(_text(x + 40, 24, label, size=11, fill="#1a2433"))
        x += 60 + 7 * len(label)
    return "\n".join(parts)


def _edge(a: tuple[float, float], b: tuple[float, float], edge: GraphEdge, same_lane: bool) -> str:
    (x1, y1), (x2, y2) = a, b
    if edge.kind == "missing":
        color, width, dash, marker = "#d01c1c", 3, ' stroke-dasharray="9,6"', "arrow-red"
    elif edge.kind == "program":
        color, width, dash, marker = "#8a8a8a", 1.5, "", "arrow-gray"
    else:
        color, width, dash, marker = "#1f5fbf", 2, "", "arrow"
    half_w, half_h = NODE_W / 2, NODE_H / 2
    if same_lane:
        path = f"M {x1 + half_w} {y1} L {x2 - half_w - 2} {y2}"
        mid = ((x1 + x2) / 2, y1 - 8)
    elif x2 - x1 > 1.5 * COL_W:  # from the right side of the source to the left side of the target, like a timeline
        start_x, end_x = x1 + half_w, x2 - half_w - 2
        dx = (end_x - start_x) / 2
        path = f"M {start_x} {y1} C {start_x + dx} {y1}, {end_x - dx} {y2}, {end_x} {y2}"
        mid = ((start_x + end_x) / 2, (y1 + y2) / 2)
    else:  # the same column (or close): leave through the top or bottom, with a bow that leaves room for the label
        start_y = y1 + (half_h if y2 > y1 else -half_h)
        end_y = y2 - (half_h + 2 if y2 > y1 else -half_h - 2)
        bow = 55 if abs(x2 - x1) < 1 else 0
        dy = (end_y - start_y) / 2
        path = f"M {x1} {start_y} C {x1 + bow} {start_y + dy}, {x2 + bow} {end_y - dy}, {x2} {end_y}"
        mid = ((x1 + x2) / 2 + bow * 0.75, (start_y + end_y) / 2)
    parts = [f'<path d="{path}" fill="none" stroke="{color}" stroke-width="{width}"{dash} '
             f'marker-end="url(#{marker})"/>']
    if edge.label:
        size = 13 if edge.kind == "missing" else 10
        weight = "bold" if edge.kind == "missing" else "normal"
        label_w = len(edge.label) * size * 0.62 + 8
        parts.append(f'<rect x="{mid[0] - label_w / 2}" y="{mid[1] - size}" width="{label_w}" height="{size + 6}" '
                     f'fill="white" fill-opacity="0.92" rx="3"/>')
        parts.append(_text(mid[0], mid[1], edge.label, size=size, fill=color, weight=weight, anchor="middle"))
    return "\n".join(parts)


def _node(node: GraphNode, c: tuple[float, float], tag_below: bool = False) -> str:
    x, y = c[0] - NODE_W / 2, c[1] - NODE_H / 2
    if node.role:
        fill, stroke, width = "#ffecec", "#d01c1c", 3
    else:
        fill, stroke, width = "white", "#7d8797", 1.2
    parts = [f'<rect x="{x}" y="{y}" width="{NODE_W}" height="{NODE_H}" rx="7" fill="{fill}" stroke="{stroke}" '
             f'stroke-width="{width}"/>']
    parts.append(_text(c[0], c[1] - 5, _fit(_short_op(node.label), 26), size=11, fill="#1a2433", anchor="middle",
                       weight="bold" if node.role else "normal"))
    second = node.detail or f"event #{node.seq}"
    parts.append(_text(c[0], c[1] + 12, _fit(second, 29), size=10, fill="#d01c1c" if node.role else "#5a6578",
                       anchor="middle"))
    if node.role:
        parts.append(_text(c[0], y + NODE_H + 14 if tag_below else y - 6, ROLE_TAGS[node.role], size=11, fill="#d01c1c", anchor="middle",
                           weight="bold"))
    return "\n".join(parts)


def _text(x: float, y: float, text: str, size: int = 11, fill: str = "black", anchor: str = "start",
          weight: str = "normal") -> str:
    return (f'<text x="{x:.1f}" y="{y:.1f}" font-size="{size}" fill="{fill}" text-anchor="{anchor}" '
            f'font-weight="{weight}">{html.escape(str(text))}</text>')


def _wrap(text: str, width: int) -> list[str]:
    lines: list[str] = []
    for word in text.split():
        if lines and len(lines[-1]) + 1 + len(word) <= width:
            lines[-1] += " " + word
        else:
            lines.append(word)
    return lines or [""]


def _short_op(label: str) -> str:
    """Drop the operator namespace in the picture: "launch c10d::_allgather_base_" -> "launch _allgather_base_"."""
    return re.sub(r"\b(aten|c10d|_c10d_functional|prims)::", "", label)


def _fit(text: str, chars: int) -> str:
    return text if len(text) <= chars else text[: chars - 1] + "…"


def to_html(graph: RaceGraph, finding: Finding, report_text: str) -> str:
    notes = "".join(f"<p class=note>{html.escape(n)}</p>" for n in graph.notes)
    where = f"{display_path(finding.primary.path)}:{finding.primary.line}"
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<title>{html.escape(f"{finding.rule} {finding.kind} at {where}")}</title>
<style>
body {{ font-family: system-ui, sans-serif; margin: 24px; color: #1a2433; }}
h1 {{ font-size: 18px; margin: 0 0 6px 0; }} .sub {{ color: #5a6578; margin: 0 0 14px 0; }}
.fix {{ background: #eef7ee; border-left: 4px solid #2e8b3a; padding: 8px 12px; margin: 12px 0; }}
.note {{ color: #8a5a00; }} pre {{ background: #f6f7f9; padding: 12px; overflow-x: auto; font-size: 12px; }}
.picture {{ overflow-x: auto; border: 1px solid #d8dde6; }}
</style></head><body>
<h1>{html.escape(graph.title)}</h1>
<p class=sub>{html.escape(graph.subtitle)}</p>
<div class=picture>
{to_svg(graph)}
</div>
<div class=fix><b>fix:</b> {html.escape(graph.fix)}</div>
{notes}
<pre>{html.escape(report_text)}</pre>
</body></html>
"""


# ---- writing ----------------------------------------------------------------------------------------------------
def file_stem(finding: Finding, index: int) -> str:
    return f"{index:02d}-{finding.rule}-{finding.kind or 'finding'}-{finding.fingerprint[:8]}"


def write_graphs(findings: list[Finding], merged, out_dir: str | Path) -> list[Path]:
    """For every runtime finding, <stem>.dot and <stem>.html in out_dir; returns the paths written."""
    from streamcheck.report.runtime_text import render_runtime_finding

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
