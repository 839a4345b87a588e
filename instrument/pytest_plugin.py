"""`pytest --streamcheck`: run each test under streamcheck's race detector and fail the tests whose run had a race.

Installed as a pytest plugin (entry point `pytest11`), so the option is there wherever streamcheck is installed:

    pytest --streamcheck tests/gpu                     # a race fails the test and prints the report
    pytest --streamcheck --streamcheck-out sc/ ...     # keep the findings: `streamcheck report sc/`

- Each test runs under `streamcheck.watch()` from the start of its setup to the end of its teardown. Races seen by
  the end of the test's call fail the test, with the report (kind, tensor, both accesses with their streams and
  places, the fix) as the failure message; races first seen in teardown (a tensor freed while another stream may
  still use it) make the teardown an error. A test that fails by itself keeps its own failure; the races are
  attached to it as a report section.
- Opt out per test or per module (pytestmark): `@pytest.mark.streamcheck_ignore("SC202")` ignores those rules
  (rule ids, or race kinds such as "FREE"); without arguments it ignores every finding of the test.
- Without CUDA (or without torch) it does nothing except say so once, in the report header.
- Importing this module imports neither torch nor the detector: that happens only when --streamcheck is given, so
  test suites that do not ask for it start as before.
"""

from __future__ import annotations

import os
import tempfile
from typing import Any

import pytest

IGNORE_MARK = "streamcheck_ignore"


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("streamcheck", "CUDA stream-ordering race detection")
    group.addoption("--streamcheck", action="store_true", default=False,
                    help="run each test under streamcheck's runtime race detector (needs CUDA) and fail the tests "
                         "whose run had a stream-ordering race")
    group.addoption("--streamcheck-out", metavar="DIR", default=None,
                    help="directory for the findings (JSONL; read them with `streamcheck report DIR`); "
                         "default: a new temporary directory")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", f"{IGNORE_MARK}(*rules): streamcheck --streamcheck ignores these rules (SC201-SC204) or "
                   "race kinds (RAW, WAR, WAW, FREE, HOST) in this test; no argument: ignore all its findings")
    if config.getoption("streamcheck", default=False):
        config.pluginmanager.register(StreamcheckGate(config), "streamcheck-gate")


def ignored(item: pytest.Item) -> set[str] | None:
    """The rules / kinds the test's streamcheck_ignore marks name; None when a mark without arguments ignores all."""
    names: set[str] = set()
    for mark in item.iter_markers(IGNORE_MARK):
        if not mark.args:
            return None
        names.update(str(arg).upper() for arg in mark.args)
    return names


def kept(findings: list, ignore: set[str] | None) -> list:
    if ignore is None:
        return []
    return [f for f in findings if f.rule.upper() not in ignore and f.kind.upper() not in ignore]


def cuda_unavailable_reason() -> str | None:
    """Why the gate cannot run here, or None when it can. Imports torch (only called with --streamcheck)."""
    try:
        import torch
    except ImportError:
        return "torch is not installed"
    if not torch.cuda.is_available():
        return "CUDA is not available on this machine"
    return None


class StreamcheckGate:
    """The per-test watch and the verdict, registered only when --streamcheck is given."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        self.reason = cuda_unavailable_reason()
        self.out_dir = config.getoption("streamcheck_out") or None
        self.watch: Any = None
        self.reported: set[str] = set()  # fingerprints already reported for the running test
        self.failed_tests: list[str] = []
        self.errors: list[str] = []  # "test id: error" where instrumentation switched itself off
        # one findings file per xdist worker (gw3 -> rank 3), so that workers never write into one file
        worker = os.environ.get("PYTEST_XDIST_WORKER", "gw0")
        self.rank = int(worker[2:]) if worker[2:].isdigit() else 0

    # ---- header and summary -------------------------------------------------------------------------------------
    def pytest_report_header(self, config: pytest.Config) -> str:
        if self.reason:
            return f"streamcheck: {self.reason}; --streamcheck does nothing"
        return f"streamcheck: every test runs under the race detector; findings in {self._out()}"

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        if self.reason and self.config.get_verbosity() < 0:  # -q hides the header: say it here instead
            terminalreporter.write_line(self.pytest_report_header(self.config))
        for error in self.errors:  # a gate that switched itself off must not pass silently
            terminalreporter.write_line(f"streamcheck: instrumentation error, detector off for the rest of {error}",
                                        yellow=True)
        if self.reason or not self.failed_tests:
            return
        terminalreporter.write_sep("=", "streamcheck", red=True)
        noun = "test" if len(self.failed_tests) == 1 else "tests"
        terminalreporter.write_line(f"{len(self.failed_tests)} {noun} with stream-ordering races: "
                                    f"{', '.join(self.failed_tests)}")
        terminalreporter.write_line(f"all findings: streamcheck report {self._out()}")

    def _out(self) -> str:
        if self.out_dir is None:
            self.out_dir = tempfile.mkdtemp(prefix="streamcheck-pytest-")
        return self.out_dir

    # ---- one watch per test -------------------------------------------------------------------------------------
    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_setup(self, item: pytest.Item):
        if not self.reason:
            self._start()
        return (yield)

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_call(self, item: pytest.Item):
        try:
            result = yield
        except BaseException:
            self._verdict(item, "call", fail=False)
            raise
        self._verdict(item, "call", fail=True)
        return result

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_teardown(self, item: pytest.Item, nextitem: pytest.Item | None):
        try:
            result = yield
        finally:
            watch = self.watch
            findings = self._stop()
            self.errors += [f"{item.nodeid}: {error}" for error in getattr(watch, "errors", ())]
        self._verdict(item, "teardown", fail=True, findings=findings)
        return result

    def _start(self) -> None:
        from streamcheck.instrument.watch import Watch

        self.reported = set()
        watch = Watch(self._out(), rank=self.rank, world_size=1, echo=False, append=True)
        try:
            watch.start()
        except RuntimeError as exc:  # another watch runs already (e.g. under `streamcheck run`): leave it to that
            self.reason = f"not started ({exc})"
            return
        self.watch = watch

    def _stop(self) -> list:
        watch, self.watch = self.watch, None
        return watch.stop() if watch is not None else []

    def _verdict(self, item: pytest.Item, when: str, fail: bool, findings: list | None = None) -> None:
        if findings is None:
            findings = self.watch.results() if self.watch is not None else []
        new = [f for f in kept(findings, ignored(item)) if f.fingerprint not in self.reported]
        if not new:
            return
        self.reported.update(f.fingerprint for f in new)
        text = render(new)
        if not fail:  # the test failed by itself: keep its failure, add the races to its report
            item.add_report_section(when, "streamcheck", text)
            return
        if item.nodeid not in self.failed_tests:
            self.failed_tests.append(item.nodeid)
        noun = "race" if len(new) == 1 else "races"
        pytest.fail(f"streamcheck: {len(new)} stream-ordering {noun} in this test "
                    f"(opt out with @pytest.mark.{IGNORE_MARK}(\"{new[0].rule}\"))\n\n{text}", pytrace=False)


def render(findings: list) -> str:
    """The findings as `streamcheck report` prints them, without colours."""
    import io

    from streamcheck.report import ReportContext, write_report
    from streamcheck.instrument.offline.race_view import enrich
    from streamcheck.instrument.offline.race_text import layout as race_layout

    out = io.StringIO()
    context = ReportContext(scope="this test", layout=race_layout)
    write_report("text", [enrich(f) for f in findings], out, context)
    text = out.getvalue()
    return text[: text.rfind("Found ")].rstrip() + "\n"  # the summary line says nothing the message does not
