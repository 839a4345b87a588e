"""The pytest plugin on CPU (pytester, each run in a fresh interpreter): it never imports torch unless asked, says
once that it does nothing without CUDA, and — with the detector replaced by a stand-in that "finds" the recorded hpZ
race — fails exactly the tests that had a race, honours streamcheck_ignore, and keeps a test's own failure.
"""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

from streamcheck.findings import Finding
from streamcheck.instrument.pytest_plugin import kept, render

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "tests" / "instrument" / "offline" / "data"  # the recorded hpZ run (see make_hpz.py there)

PLUGIN = "streamcheck.instrument.pytest_plugin"


def _plugin_args() -> list[str]:
    """Load the plugin from this source tree, whether or not the environment installed its entry point."""
    return ["-p", "no:streamcheck", "-p", PLUGIN]


def _hpz_finding_line() -> str:
    return (DATA / "streamcheck-rank1.jsonl").read_text().splitlines()[1]


def _torch_has_cuda() -> bool:
    import torch

    return torch.cuda.is_available()


def test_without_the_option_torch_is_never_imported(pytester: pytest.Pytester):
    pytester.makepyfile(test_plain="""
        import sys

        def test_plugin_loaded_and_torch_not_imported():
            assert "streamcheck.instrument.pytest_plugin" in sys.modules
            assert "torch" not in sys.modules
            assert "streamcheck.instrument.watch" not in sys.modules
    """)
    result = pytester.runpytest_subprocess(*_plugin_args())
    result.assert_outcomes(passed=1)
    assert "streamcheck" not in result.stdout.str().split("collected")[0]  # no header line without the option


def test_the_entry_point_is_declared():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert project["entry-points"]["pytest11"] == {"streamcheck": PLUGIN}


def test_the_marker_is_registered(pytester: pytest.Pytester):
    pytester.makepyfile(test_marked="""
        import pytest

        @pytest.mark.streamcheck_ignore("SC202")
        def test_marked():
            pass
    """)
    result = pytester.runpytest_subprocess("--strict-markers", *_plugin_args())
    result.assert_outcomes(passed=1)
    markers = pytester.runpytest_subprocess("--markers", *_plugin_args())
    markers.stdout.fnmatch_lines(["@pytest.mark.streamcheck_ignore(*rules): streamcheck --streamcheck ignores *"])


@pytest.mark.skipif("_torch_has_cuda()", reason="checks the machine without CUDA")
def test_without_cuda_it_says_so_once_and_changes_nothing(pytester: pytest.Pytester):
    pytester.makepyfile(test_cpu="""
        def test_passes():
            pass

        def test_fails():
            assert 1 == 2
    """)
    result = pytester.runpytest_subprocess("--streamcheck", *_plugin_args())
    result.assert_outcomes(passed=1, failed=1)
    out = result.stdout.str()
    assert out.count("streamcheck: CUDA is not available on this machine; --streamcheck does nothing") == 1
    assert "stream-ordering race" not in out and not list(pytester.path.glob("**/streamcheck-rank*.jsonl"))
    quiet = pytester.runpytest_subprocess("-q", "--streamcheck", *_plugin_args()).stdout.str()
    assert quiet.count("streamcheck: CUDA is not available on this machine; --streamcheck does nothing") == 1


STAND_IN_CONFTEST = f'''
"""A stand-in for the runtime watch: tests call `race()` to make it report the recorded hpZ finding."""
import json
import os

import pytest

import streamcheck.instrument.pytest_plugin as plugin
import streamcheck.instrument.watch as watch_module
from streamcheck.findings import Finding

FINDING = Finding.from_dict(json.loads({_hpz_finding_line()!r}))
plugin.cuda_unavailable_reason = lambda: None


class StandInWatch:
    current = None
    started = 0

    def __init__(self, out_dir, **options):
        self.options = options
        self.found = []

    def start(self):
        StandInWatch.current = self
        StandInWatch.started += 1
        return self

    def results(self):
        return list(self.found)

    def stop(self):
        StandInWatch.current = None
        return list(self.found)

    @property
    def errors(self):  # what the real watch collects when instrumentation switched itself off
        return ["RuntimeError('hook failed')"] if os.environ.get("BREAK_WATCH") == "1" else []


watch_module.Watch = StandInWatch


@pytest.fixture
def race():
    return lambda: StandInWatch.current.found.append(FINDING)


@pytest.fixture
def race_at_teardown():
    yield
    StandInWatch.current.found.append(FINDING)
'''

GATED_TESTS = """
    import pytest

    def test_racy(race):
        race()

    def test_clean():
        pass

    @pytest.mark.streamcheck_ignore("SC201")
    def test_ignored_by_rule(race):
        race()

    @pytest.mark.streamcheck_ignore("raw")
    def test_ignored_by_kind(race):
        race()

    @pytest.mark.streamcheck_ignore("FREE")
    def test_other_rule_ignored(race):
        race()

    def test_fails_by_itself(race):
        race()
        assert 1 == 2

    def test_freed_at_teardown(race_at_teardown):
        pass
"""


def test_gate_fails_exactly_the_racy_tests(pytester: pytest.Pytester):
    pytester.makeconftest(STAND_IN_CONFTEST)
    pytester.makepyfile(test_gate=GATED_TESTS)
    result = pytester.runpytest_subprocess("--streamcheck", "--streamcheck-out", "sc", "-rA", *_plugin_args())
    result.assert_outcomes(passed=4, failed=3, errors=1)
    out = result.stdout.str()
    for line in ("FAILED test_gate.py::test_racy - Failed: streamcheck: 1 stream-*",
                 "FAILED test_gate.py::test_other_rule_ignored - Failed: streamcheck: 1 stream-*",
                 "FAILED test_gate.py::test_fails_by_itself - assert 1 == 2",
                 "ERROR test_gate.py::test_freed_at_teardown - Failed: streamcheck: 1 stream-*"):
        result.stdout.fnmatch_lines([line])
    result.stdout.fnmatch_lines(["*_ ERROR at teardown of test_freed_at_teardown _*",
                                 'streamcheck: 1 stream-ordering race in this test (opt out with '
                                 '@pytest.mark.streamcheck_ignore("SC201"))'])
    for name in ("test_clean", "test_ignored_by_rule", "test_ignored_by_kind"):
        assert f"PASSED test_gate.py::{name}" in out
    # the report in the failure: the compiler-style text, without the summary line
    assert "  write    aten::copy_ on compute stream cuda:1, host thread T139872\n" in out
    assert "  fix: add `side.wait_stream(compute)` before the c10d::_allgather_base_ is launched" in out
    assert "Found 1 finding" not in out
    # a test that fails by itself keeps its failure; the race is attached as a section
    assert "- Captured streamcheck call -" in out
    # the racy tests in the order they ran: not the file's order under pytest-randomly (issue 19 D20)
    summary = out.splitlines()
    at = summary.index(next(line for line in summary if line.startswith("3 tests with stream-ordering races: ")))
    assert "= streamcheck =" in summary[at - 1] and summary[at + 1] == "all findings: streamcheck report sc"
    assert sorted(summary[at].split(": ", 1)[1].split(", ")) == [
        "test_gate.py::test_freed_at_teardown", "test_gate.py::test_other_rule_ignored", "test_gate.py::test_racy"]
    assert "streamcheck: every test runs under the race detector; findings in sc" in out


def test_kept_and_render():
    import json

    finding = Finding.from_dict(json.loads(_hpz_finding_line()))
    assert kept([finding], set()) == [finding]
    assert kept([finding], {"SC202", "FREE"}) == [finding]
    assert kept([finding], {"SC201"}) == [] and kept([finding], {"RAW"}) == [] and kept([finding], None) == []
    text = render([finding])
    assert text.startswith(f"{finding.primary.path}:93:1: SC201 RAW read-after-write race on storage 0x7f3a00100000")
    assert text.endswith("  seen once on rank 1\n")


def test_an_instrumentation_error_is_said_in_the_summary(pytester: pytest.Pytester, monkeypatch):
    pytester.makeconftest(STAND_IN_CONFTEST)
    pytester.makepyfile(test_one="def test_clean():\n    pass\n")
    monkeypatch.setenv("BREAK_WATCH", "1")
    result = pytester.runpytest_subprocess("--streamcheck", *_plugin_args())
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["streamcheck: instrumentation error, detector off for the rest of "
                                 "test_one.py::test_clean: RuntimeError('hook failed')"])
