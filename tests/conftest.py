"""Test-suite-wide setup: the `pytester` fixture, for the tests of the pytest plugin (tests/report)."""

pytest_plugins = ["pytester"]
