"""The SVG picture of a RaceGraph (graph.py) and the self-contained HTML page around it.

Lanes are horizontal bands, one per actor, named on the left; nodes are placed by `layout` (trace order, left to
right); existing edges are drawn under the nodes (grey program order along a lane, blue waits / syncs / launches
between lanes), the missing edge last, dashed red, with its label on a white plate so that it stays readable.
"""

from __future__ import annotations

import html
import re

from streamcheck.findings import Finding

from .graph import ROLE_TAGS, GraphEdge, GraphNode, RaceGraph
from .race_view import display_path

# ---- SVG / HTML -------------------------------------------------------------------------------------------------
# Sized for a 1280-pixel-wide window: a lane label column, then ~5 event columns; every text at least 12 px.
LANE_LABEL_W = 230
COL_W = 196
NODE_W = 178
NODE_H = 50
LANE_H = 112
MIN_FONT = 12
LEGEND_W = 1030
# A drawing wider than this does not fit a 1280-pixel window: its frame then opens scrolled to the right end, where
# the racing access is (the last event of the witness), with the write before it (CSS only, no script).
WIDE_PX = 1200
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
    missing_label_w = _label_width(graph.missing().label, 14) if any(e.kind == "missing" for e in graph.edges) else 0
    # Wide enough for the lanes, the whole legend and the missing edge's label (never clipped).
    width = int(max(LANE_LABEL_W + columns * COL_W + 40, LEGEND_W, LANE_LABEL_W + missing_label_w + 20))
    # Too wide for one window: the page opens at the right end (to_html), so the lane names and the legend are
    # drawn there too.
    wide = width > WIDE_PX
    if wide:
        width += LANE_LABEL_W
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
    out.append(_legend(width - LEGEND_W if wide else 0))
    for i, (actor, name) in enumerate(graph.lanes.items()):
        y = TOP + i * LANE_H
        fill = "#f4f6fa" if i % 2 == 0 else "#fafbfd"
        out.append(f'<rect x="0" y="{y}" width="{width}" height="{LANE_H}" fill="{fill}" stroke="#d8dde6"/>')
        lines = _wrap(name, 26)[:3]
        top = y + LANE_H / 2 - 8 * len(lines) + 4
        for left in (12, width - LANE_LABEL_W + 16) if wide else (12,):
            for k, line in enumerate(lines):
                out.append(_text(left, top + 16 * k, line, size=13, weight="bold", fill="#1a2433"))
            out.append(_text(left, top + 16 * len(lines) + 2, actor, size=12, fill="#5a6578"))
        line_end = width - LANE_LABEL_W if wide else width - 20
        out.append(f'<line x1="{LANE_LABEL_W}" y1="{y + LANE_H / 2}" x2="{line_end}" y2="{y + LANE_H / 2}" '
                   f'stroke="#c5ccd8" stroke-width="1" stroke-dasharray="2,4"/>')
    by_id = {n.id: n for n in graph.nodes}
    for edge in graph.edges:  # under the nodes
        if edge.kind == "missing" or edge.source not in place or edge.target not in place:
            continue
        out.append(_edge(center(edge.source), center(edge.target), edge, same_lane=(
            by_id[edge.source].actor == by_id[edge.target].actor), canvas_w=width))
    top_used = set()  # nodes with a cross-lane edge at their top: their role tag goes below them
    for edge in graph.edges:
        if edge.source in place and edge.target in place and place[edge.source][1] != place[edge.target][1]:
            upper, lower = sorted((edge.source, edge.target), key=lambda n: place[n][1])
            top_used.add(lower)
    for node in graph.nodes:
        out.append(_node(node, center(node.id), tag_below=node.id in top_used))
    missing = graph.missing()
    if missing.source in place and missing.target in place:
        out.append(_edge(center(missing.source), center(missing.target), missing, same_lane=False, canvas_w=width))
    out.append("</svg>")
    return "\n".join(out)


def _marker(name: str, color: str) -> str:
    return (f'<marker id="{name}" viewBox="0 0 10 10" refX="9" refY="5" markerUnits="userSpaceOnUse" '
            f'markerWidth="11" markerHeight="11" orient="auto-start-reverse">'
            f'<path d="M 0 0 L 10 5 L 0 10 z" fill="{color}"/></marker>')


def _legend(left: float = 0) -> str:
    x = left + LANE_LABEL_W
    parts = [_text(left + 12, 24, "lanes: streams, threads; time runs left to right", size=12, fill="#5a6578")]
    items = [("#8a8a8a", "", "program order"), ("#1f5fbf", "", "existing edge (wait, sync, launch)"),
             ("#d01c1c", "7,5", "missing edge")]
    x = max(x, left + 400)
    for color, dash, label in items:
        dash_attr = f' stroke-dasharray="{dash}"' if dash else ""
        parts.append(f'<line x1="{x}" y1="20" x2="{x + 34}" y2="20" stroke="{color}" stroke-width="2.5"{dash_attr}/>')
        parts.append(_text(x + 40, 24, label, size=12, fill="#1a2433"))
        x += 60 + 7.5 * len(label)
    return "\n".join(parts)


def _label_width(label: str, size: int) -> float:
    return len(label) * size * 0.62 + 8


def _edge(a: tuple[float, float], b: tuple[float, float], edge: GraphEdge, same_lane: bool,
          canvas_w: float = 0) -> str:
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
    css = ' class="missing-edge"' if edge.kind == "missing" else ""
    parts = [f'<path{css} d="{path}" fill="none" stroke="{color}" stroke-width="{width}"{dash} '
             f'marker-end="url(#{marker})"/>']
    if edge.label:
        size = 14 if edge.kind == "missing" else MIN_FONT
        weight = "bold" if edge.kind == "missing" else "normal"
        label_w = _label_width(edge.label, size)
        if canvas_w:  # keep the plate on the canvas: a long label near an edge of the drawing shifts inwards
            mid = (min(max(mid[0], label_w / 2 + 4), canvas_w - label_w / 2 - 4), mid[1])
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
    css = f' class="access-{node.role}"' if node.role else ""
    parts = [f'<rect{css} x="{x}" y="{y}" width="{NODE_W}" height="{NODE_H}" rx="7" fill="{fill}" '
             f'stroke="{stroke}" stroke-width="{width}"/>']
    # An event is named by its op and, where known, its source line; a trace position ("event #305") says nothing.
    label_y = c[1] - 5 if node.detail else c[1] + 5
    parts.append(_text(c[0], label_y, _fit(_short_op(node.label), 21), size=13, fill="#1a2433", anchor="middle",
                       weight="bold" if node.role else "normal"))
    if node.detail:
        parts.append(_text(c[0], c[1] + 14, _fit(node.detail, 23), size=MIN_FONT,
                           fill="#d01c1c" if node.role else "#5a6578", anchor="middle"))
    if node.role:
        parts.append(_text(c[0], y + NODE_H + 15 if tag_below else y - 6, ROLE_TAGS[node.role], size=MIN_FONT,
                           fill="#d01c1c", anchor="middle", weight="bold"))
    return "\n".join(parts)


def _text(x: float, y: float, text: str, size: int = 11, fill: str = "black", anchor: str = "start",
          weight: str = "normal") -> str:
    return (f'<text x="{x:.1f}" y="{y:.1f}" font-size="{size}" fill="{fill}" text-anchor="{anchor}" '
            f'font-weight="{weight}">{html.escape(str(text))}</text>')


def _wrap(text: str, width: int) -> list[str]:
    """Words to lines of at most `width` characters; a longer word (a long file name) is broken, never overflows."""
    words = [piece for word in text.split() for piece in
             (word[i:i + width] for i in range(0, len(word), width))]
    lines: list[str] = []
    for word in words:
        if lines and len(lines[-1]) + 1 + len(word) <= width:
            lines[-1] += " " + word
        else:
            lines.append(word)
    return lines or [""]


def _short_op(label: str) -> str:
    """Drop the operator namespace in the picture: "launch c10d::_allgather_base_" -> "launch _allgather_base_"."""
    return re.sub(r"\b(aten|c10d|_c10d_functional|prims)::", "", label)


def _fit(text: str, chars: int) -> str:
    """Shorten to `chars`; a `file.py:123` keeps its line number and the end of the file name."""
    if len(text) <= chars:
        return text
    site = re.fullmatch(r"(.+)(:\d+)", text)
    if site and len(site.group(2)) < chars - 4:
        return "…" + text[len(text) - chars + 1:]
    return text[: chars - 1] + "…"


def to_html(graph: RaceGraph, finding: Finding, report_text: str) -> str:
    notes = "".join(f"<p class=note>{html.escape(n)}</p>" for n in graph.notes)
    svg = to_svg(graph)
    width = int(re.search(r'width="(\d+)"', svg).group(1))
    picture_class = "picture wide" if width > WIDE_PX else "picture"
    where = f"{display_path(finding.primary.path)}:{finding.primary.line}"
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<title>{html.escape(f"{finding.rule} {finding.kind} at {where}")}</title>
<style>
body {{ font-family: system-ui, sans-serif; margin: 24px; color: #1a2433; }}
h1 {{ font-size: 18px; margin: 0 0 6px 0; }} .sub {{ color: #5a6578; margin: 0 0 14px 0; }}
.fix {{ background: #eef7ee; border-left: 4px solid #2e8b3a; padding: 8px 12px; margin: 12px 0; }}
.note {{ color: #8a5a00; }} pre {{ background: #f6f7f9; padding: 12px; overflow-x: auto; font-size: 12px; }}
.picture {{ overflow-x: auto; border: 1px solid #d8dde6; }} .picture svg {{ display: block; direction: ltr; }}
.picture.wide {{ direction: rtl; }}
</style></head><body>
<h1>{html.escape(graph.title)}</h1>
<p class=sub>{html.escape(graph.subtitle)}</p>
<div class="{picture_class}">
{svg}
</div>
<div class=fix><b>fix:</b> {html.escape(graph.fix)}</div>
{notes}
<pre>{html.escape(report_text)}</pre>
</body></html>
"""


