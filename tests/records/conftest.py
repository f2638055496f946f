"""Fixtures for the record-batch tests."""

from __future__ import annotations

import pytest

from tests.records import kafka_python_codecs


@pytest.fixture
def kafka_python_all_codecs(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """kafka-python with every codec available (cramjam stand-ins for missing libraries)."""
    return kafka_python_codecs.install(monkeypatch)
