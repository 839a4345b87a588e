"""streamcheck.instrument.offline.hb: the graph's edges, race queries by reachability, and witnesses (missing edge, last ordered point)."""

from __future__ import annotations

from streamcheck.instrument.offline.hb import HappensBefore, _subtract, _union
from streamcheck.instrument.trace import TraceWriter, read_trace

S0, S1, NCCL = "cuda:0/s0", "cuda:0/s1", "nccl:pg/0"


class Recorder(TraceWriter):
    """A TraceWriter that keeps its events as dicts (what read_trace would yield)."""

    def __init__(self) -> None:
        self.events: list[dict] = []

    def _emit(self, event: dict) -> None:
        self.events.append(event)


def _graph(build) -> HappensBefore:
    recorder = Recorder()
    build(recorder)
    return HappensBefore.from_events(recorder.events)


def test_interval_helpers():
    assert _subtract([(0, 8)], 2, 4) == [(0, 2), (4, 8)]
    assert _subtract([(0, 2), (4, 8)], 0, 5) == [(5, 8)]
    assert _union([(0, 2)], [(2, 4), (6, 7)]) == [(0, 4), (6, 7)]


def test_edges_of_a_wait_stream():
    def build(t):
        t.kernel("T", S0, writes=[(1, 0, 4)], op="w")
        t.event_record("T", 5, S0)
        t.event_wait("T", 5, S1)
        t.kernel("T", S1, reads=[(1, 0, 4)], op="r")

    hb = _graph(build)
    assert hb.chains == {S0: [0, 1], S1: [2, 3]}
    assert {(u, v, d["kind"]) for u, v, d in hb.graph.edges(data=True)} == {
        (0, 1, "program"), (1, 2, "event"), (2, 3, "program")}
    assert hb.races() == []


def test_hpz_witness_points_at_the_launch_stream():
    def build(t):
        t.kernel("T", S0, writes=[(1, 0, 64)], site=1, op="copy_")
        t.collective("T", S1, NCCL, reads=[(1, 0, 64)], writes=[(2, 0, 128)], async_op=True, work=3, site=2,
                     op="all_gather")

    hb = _graph(build)
    (race,) = hb.races()
    assert (race.kind, race.earlier.op, race.later.op, race.later.actor, race.later.stream) == (
        "RAW", "copy_", "all_gather", NCCL, S1)
    assert not hb.ordered(race.earlier, race.later)
    witness = hb.witness(race)
    launch = hb.chains[S1][0]
    assert hb.graph.nodes[launch]["label"] == "launch all_gather"
    assert witness.missing_edge == (hb.node_of(race.earlier), launch)
    assert witness.waiter == S1
    assert witness.last_ordered is None


def test_witness_names_the_last_point_that_was_ordered():
    """s1 waited for s0 once, before s0's write: that record is the closest existing ordering."""

    def build(t):
        t.kernel("T", S0, writes=[(1, 0, 64)], op="first write")
        t.event_record("T", 5, S0)
        t.event_wait("T", 5, S1)
        t.kernel("T", S0, writes=[(1, 0, 64)], op="second write")
        t.kernel("T", S1, reads=[(1, 0, 64)], op="read")

    hb = _graph(build)
    (race,) = hb.races()
    assert (race.kind, race.earlier.op, race.later.op) == ("RAW", "second write", "read")
    witness = hb.witness(race)
    assert hb.graph.nodes[witness.last_ordered]["label"] == "event record"
    assert witness.missing_edge == (hb.node_of(race.earlier), hb.node_of(race.later))
    sub = hb.witness_subgraph(witness)
    assert sub.edges[witness.missing_edge]["missing"] is True
    assert sub.has_edge(witness.last_ordered, hb.chains[S1][0])  # the wait that did happen is drawn


def test_free_witness_and_dot(tmp_path):
    path = tmp_path / "t.jsonl"
    with TraceWriter(path) as t:
        t.site(7, [["model.py", 30, "forward"]])
        t.alloc(1, 64, S0)
        t.kernel("T", S1, reads=[(1, 0, 64)], site=7, op="side read")
        t.free("T", 1)
        t.kernel("T", S0, writes=[(2, 0, 64)], op="next work")  # the pool stream's next work may reuse block 1
    hb = HappensBefore.from_events(read_trace(path))
    (race,) = hb.races()
    assert (race.kind, race.earlier.op, race.later.op, race.later.actor) == ("FREE", "side read", "free", S0)
    assert (race.reuse.actor, race.reuse.op, race.reuse.seq) == (S0, "next work", 4)
    witness = hb.witness(race)
    assert hb.graph.nodes[witness.later_node]["label"] == "free"
    dot = hb.witness_dot(witness)
    assert 'label="#2 side read\\nmodel.py:30", color=red, penwidth=2' in dot
    assert f"  n{witness.earlier_node} -> n{witness.later_node} [style=dashed, color=red, label=\"missing\"];" in dot


def test_graph_only_mode_finds_no_races_but_keeps_nodes():
    events = [{"e": "kernel", "thread": "T", "stream": S0, "writes": [[1, 0, 4]]},
              {"e": "kernel", "thread": "T", "stream": S1, "writes": [[1, 0, 4]]}]
    assert len(HappensBefore.from_events(events).races()) == 1
    graph_only = HappensBefore.from_events(events, find_races=False)
    assert graph_only.races() == [] and graph_only.graph.number_of_nodes() == 2
