"""`streamcheck scan` on the examples/ pairs that the GPU tests run: each racy script gives exactly one finding of its
rule at the line marked `# streamcheck: race`, its fixed twin none; the other example folders give no SC102-SC105
finding."""

from __future__ import annotations

from pathlib import Path

import pytest

from .helpers import positions, scan_json

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
HAZARDS = ("SC102", "SC103", "SC104", "SC105")

PAIRS = [
    ("host_read_after_d2h", "SC102", "HOST", "h"),
    ("pinned_overwrite_h2d", "SC103", "WAR", "h"),
    ("free_without_record_stream", "SC104", "FREE", "t1"),
    ("async_collective", "SC105", "RAW", "t1"),
    ("future_wait_side", "SC105", "RAW", "t"),
    ("handle_travels", "SC105", "RAW", "req.out"),
    ("host_read_after_return", "SC102", "HOST", "host"),  # read by the helper's caller
    ("cleared_container_free", "SC104", "FREE", "self.grads"),  # the elements used on a side stream by a helper
]
# Racy examples whose finding stands at another marked line: the read that needed the record (the runtime reports
# the reuse, at `race`'s free).
OTHER_LINE = [("handoff_without_record_stream", "SC104", "earlier"),
              ("record_stream_names_itself", "SC104", "record"),  # the record that protects nothing
              ("handle_left_in_flight", "SC105", "earlier"),  # at the launch the wrapper leaves in flight
              ("returned_from_side_stream", "SC104", "returned")]  # at the return that hands it over unrecorded


def _marked_line(path: Path, marker: str) -> int:
    [line] = [n for n, text in enumerate(path.read_text().splitlines(), 1) if f"# streamcheck: {marker}" in text]
    return line


@pytest.fixture
def in_examples(monkeypatch):
    monkeypatch.chdir(EXAMPLES)


@pytest.mark.parametrize("folder,rule,kind,path", PAIRS, ids=[p[1] for p in PAIRS])
def test_racy_gives_one_finding_at_the_race_line_and_fixed_none(in_examples, capsys, folder, rule, kind, path):
    code, report, _ = scan_json(capsys, "--no-cache", folder)
    racy = Path(folder) / "racy.py"
    race, earlier = _marked_line(EXAMPLES / racy, "race"), _marked_line(EXAMPLES / racy, "earlier")
    assert code == 1
    assert [(r, p, line) for r, p, line, _ in positions(report)] == [(rule, racy.as_posix(), race)]
    [finding] = report["findings"]
    assert (finding["kind"], finding["extra"]["path"]) == (kind, path)
    assert earlier in [loc["line"] for loc in finding["related"]]


@pytest.mark.parametrize("folder", ["views_offset", "user_threads", "backward_hook_hpz", "pytest_gate",
                                    "deepspeed_hpz", "hpz_race"])
def test_other_examples_give_no_hazard_finding(in_examples, capsys, folder):
    code, report, _ = scan_json(capsys, "--no-cache", "--select", ",".join(HAZARDS), folder)
    assert (code, positions(report)) == (0, [])


def test_every_example_folder_at_once(in_examples, capsys):
    """The whole examples/ tree in one scan (one program: calls may resolve across folders): still exactly the four
    hazard findings (SC101's findings on the hpZ-shaped files are its own tests' business)."""
    code, report, _ = scan_json(capsys, "--no-cache", "--select", ",".join(HAZARDS), ".")
    found = [(rule, path, line) for rule, path, line, _ in positions(report)]
    expected = [(rule, f"{folder}/racy.py", _marked_line(EXAMPLES / folder / "racy.py", "race"))
                for folder, rule, _, _ in PAIRS] + [
        (rule, f"{folder}/racy.py", _marked_line(EXAMPLES / folder / "racy.py", marker))
        for folder, rule, marker in OTHER_LINE]
    assert code == 1
    assert sorted(found) == sorted(expected)


def test_hazard_facts_come_back_from_the_facts_cache(tmp_path, monkeypatch, capsys):
    """Edit one file between two cached scans: the other files' hazard facts are read from the cache (JSON) and
    still give their findings."""
    for folder, *_ in PAIRS:
        for name in ("racy.py", "fixed.py"):
            target = tmp_path / folder / name
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text((EXAMPLES / folder / name).read_text())
    monkeypatch.chdir(tmp_path)
    cache = str(tmp_path / ".cache")
    _, first, _ = scan_json(capsys, "--cache-dir", cache, ".")
    edited = tmp_path / "host_read_after_d2h" / "fixed.py"
    edited.write_text(edited.read_text() + "\n# edited\n")
    _, second, _ = scan_json(capsys, "--cache-dir", cache, "--jobs", "2", ".")
    expected = sorted((rule, f"{folder}/racy.py", _marked_line(EXAMPLES / folder / "racy.py", "race"))
                      for folder, rule, _, _ in PAIRS)
    assert sorted((r, p, line) for r, p, line, _ in positions(first)) == expected
    assert sorted((r, p, line) for r, p, line, _ in positions(second)) == expected
    assert [f["message"] for f in second["findings"]] == [f["message"] for f in first["findings"]]
