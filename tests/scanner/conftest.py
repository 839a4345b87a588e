"""Fixtures for the scan driver's tests."""

from __future__ import annotations

import pytest

from streamcheck.scanner import driver

from . import fake_rules


@pytest.fixture
def fake_backend(monkeypatch):
    """Make `streamcheck scan` use the fake rules (see fake_rules.py); returns the list of extracted paths."""
    monkeypatch.setattr(driver, "default_backend", lambda config: fake_rules.backend(
        fake_rules.FakeOptions(stream_contexts=config.stream_contexts)))
    fake_rules.extract_calls.clear()
    fake_rules.analyze_calls.clear()
    return fake_rules.extract_calls
