"""`streamcheck report --graph DIR`: DOT and self-contained HTML/SVG pictures of each finding's witness."""

from __future__ import annotations

import re
from pathlib import Path

from streamcheck.cli import main
from streamcheck.instrument.offline.merge import merge
from streamcheck.instrument.offline.graph import GraphEdge, race_graph
from streamcheck.instrument.offline.graph_svg import layout
from streamcheck.instrument.offline.race_view import enrich

from .conftest import DATA, SCENARIO26_TRACE


def _nodes(dot: str) -> dict[str, str]:
    """The first line of each node's label (the role tag for the racing accesses is dropped) -> node id."""
    nodes = {}
    for node, label in re.findall(r'^    (n\d+) \[label="([^"]*)"', dot, re.M):
        lines = label.split("\\n")
        nodes[lines[1] if lines[0] in ("earlier access", "racing access") else lines[0]] = node
    return nodes


def _graph(tmp_path: Path, *inputs: Path) -> dict[str, str]:
    out = tmp_path / "graphs"
    assert main(["report", *map(str, inputs), "--graph", str(out)]) == 1
    return {p.name: p.read_text() for p in sorted(out.iterdir())}


def test_hpz_witness_from_the_trace_has_lanes_the_accesses_and_the_missing_edge(tmp_path: Path, capsys):
    files = _graph(tmp_path, DATA)
    names = list(files)
    assert len(names) == 4 and names[0].startswith("01-SC201-RAW-") and names[0].endswith(".dot")
    assert names[1] == names[0][:-4] + ".html" and names[2].startswith("02-SC202-FREE-")
    dot = files[names[0]]
    nodes = _nodes(dot)
    copy, launch, gather = nodes["aten::copy_"], nodes["launch c10d::_allgather_base_"], \
        nodes["c10d::_allgather_base_"]
    assert (f'  {copy} -> {launch} [style=dashed, color=red, fontcolor=red, penwidth=2.5, constraint=false, '
            f'label="missing: side.wait_stream(compute)"];') in dot
    assert f'  {launch} -> {gather} [color="#1f5fbf", fontcolor="#1f5fbf", label="collective"];' in dot
    # the edges that do exist: the all-gather stream waited for the forward's collective and the compute stream for
    # the all-gather stream (event), the autograd thread enqueued the backward all-gather
    assert f'  {nodes["event record"]} -> {nodes["event wait"]} [color="#1f5fbf", fontcolor="#1f5fbf", ' \
           f'label="event"];' in dot
    assert f'  {nodes["thread start"]} -> {launch} [color="#1f5fbf", fontcolor="#1f5fbf", label="enqueue"];' in dot
    assert f'    {copy} [label="earlier access\\naten::copy_\\npartition_parameters.py:1643", color=red' in dot
    assert f'    {gather} [label="racing access\\nc10d::_allgather_base_\\npartition_parameters.py:93", ' \
           f'color=red' in dot
    lanes = re.findall(r'^    label="([^"]*)"; style=filled', dot, re.M)
    assert lanes == ["compute stream cuda:0", "side stream created at parameter_offload.py:138 on cuda:0",
                     "NCCL stream of group 1 on cuda:0", "host thread T139911"]


def test_hpz_html_is_self_contained_with_the_picture(tmp_path: Path, capsys):
    files = _graph(tmp_path, DATA)
    page = next(text for name, text in files.items() if name.startswith("01-") and name.endswith(".html"))
    assert page.startswith("<!DOCTYPE html>") and "<script" not in page and "http://" not in page.replace(
        'xmlns="http://www.w3.org/2000/svg"', "")
    svg = re.search(r"<svg .*?</svg>", page, re.S).group(0)
    assert svg.count('stroke-dasharray="9,6"') == 1  # the missing edge, dashed red
    assert ">missing: side.wait_stream(compute)</text>" in svg
    assert svg.count('fill="#ffecec" stroke="#d01c1c" stroke-width="3"') == 2  # the two accesses
    for lane in ("compute stream cuda:0", "NCCL stream of group 1 on", "host thread T139911"):
        assert f">{lane}</text>" in svg
    assert ">side stream created at</text>" in svg and ">parameter_offload.py:138</text>" in svg  # wrapped
    assert "<b>fix:</b> add `side.wait_stream(compute)` before the c10d::_allgather_base_ is launched" in page
    assert "  seen 4 times on ranks 0, 1 (rank 0: 2, rank 1: 2)" in page  # the text report under the picture


def test_every_existing_edge_points_right_and_time_runs_left_to_right():
    report = merge([DATA])
    finding = enrich(report.findings[0])
    graph = race_graph(finding, report.trace_for(finding).path)
    place = layout(graph)
    for edge in graph.edges:
        if edge.kind != "missing":
            assert place[edge.source][0] < place[edge.target][0], edge
    by_seq = sorted(graph.nodes, key=lambda n: (n.seq, n.id))
    assert [place[n.id][0] for n in by_seq] == sorted(place[n.id][0] for n in by_seq)
    assert graph.missing() == GraphEdge(7, 9, "missing", "missing: side.wait_stream(compute)")


def test_without_a_trace_the_picture_is_drawn_from_the_finding(rank_files: Path, tmp_path: Path, capsys):
    files = _graph(tmp_path, rank_files)
    dot = next(text for name, text in files.items() if name.startswith("01-") and name.endswith(".dot"))
    assert _nodes(dot) == {"aten::copy_": "n0", "launch c10d::_allgather_base_": "n1",
                           "c10d::_allgather_base_": "n2"}
    assert ('  n0 -> n1 [style=dashed, color=red, fontcolor=red, penwidth=2.5, constraint=false, '
            'label="missing: side.wait_stream(compute)"];') in dot
    assert '  n1 -> n2 [color="#1f5fbf", fontcolor="#1f5fbf", label="collective"];' in dot
    page = next(text for name, text in files.items() if name.startswith("01-") and name.endswith(".html"))
    assert "No trace of this rank was given: only the two accesses are drawn" in page


def test_the_shipped_scenario_26_trace(tmp_path: Path, capsys):
    files = _graph(tmp_path, SCENARIO26_TRACE)
    dot = next(text for name, text in files.items() if name.endswith(".dot"))
    nodes = _nodes(dot)
    assert f'  {nodes["aten::copy_"]} -> {nodes["launch c10d::_allgather_base_"]} [style=dashed, color=red' \
           in dot
    assert 'label="side stream created at partitioned_param_coordinator.py:115 on cuda:0"' in dot


def test_free_picture_suggests_record_stream(tmp_path: Path, capsys):
    files = _graph(tmp_path, DATA)
    dot = next(text for name, text in files.items() if name.startswith("02-") and name.endswith(".dot"))
    nodes = _nodes(dot)
    assert f'  {nodes["aten::mm"]} -> {nodes["free"]} [style=dashed, color=red, fontcolor=red, ' \
           f'penwidth=2.5, constraint=false, label="missing: t.record_stream(compute)"];' in dot
