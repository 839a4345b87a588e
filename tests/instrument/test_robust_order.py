"""Issue 19 D20: the pytest plugin's gate does not depend on the order tests run in (pytest-randomly shuffles them).

The gated tests of test_pytest_plugin.py run here in reverse order (a conftest hook, so that the check needs no
pytest-randomly in CI); exactly the same tests must fail, and the summary must name the same racy tests.
"""

from __future__ import annotations

import pytest

from test_pytest_plugin import GATED_TESTS, STAND_IN_CONFTEST, _plugin_args

REVERSED = STAND_IN_CONFTEST + '''

def pytest_collection_modifyitems(items):
    items.reverse()
'''


def test_d20_gate_is_the_same_in_reverse_order(pytester: pytest.Pytester):
    pytester.makeconftest(REVERSED)
    pytester.makepyfile(test_gate=GATED_TESTS)
    result = pytester.runpytest_subprocess("--streamcheck", "--streamcheck-out", "sc", "-rA", *_plugin_args())
    result.assert_outcomes(passed=4, failed=3, errors=1)
    out = result.stdout.str().splitlines()
    failed = sorted(line.split(" - ")[0] for line in out if line.startswith(("FAILED ", "ERROR ")))
    assert failed == ["ERROR test_gate.py::test_freed_at_teardown", "FAILED test_gate.py::test_fails_by_itself",
                      "FAILED test_gate.py::test_other_rule_ignored", "FAILED test_gate.py::test_racy"]
    (summary,) = [line for line in out if line.startswith("3 tests with stream-ordering races: ")]
    # in the order they ran (reversed); the sets are what test_pytest_plugin asserts in the file's order
    assert summary == ("3 tests with stream-ordering races: test_gate.py::test_freed_at_teardown, "
                       "test_gate.py::test_other_rule_ignored, test_gate.py::test_racy")
