"""Shared settings for the protocol tests."""

from __future__ import annotations

import pytest


def pytest_configure(config: pytest.Config) -> None:
    # kafka-python loads its JSON specs through deprecated importlib.resources helpers.
    for message in ("read_text is deprecated", "open_text is deprecated"):
        config.addinivalue_line("filterwarnings", f"ignore:{message}:DeprecationWarning")
