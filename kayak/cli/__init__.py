"""The ``kayak`` command line: one click group, one module per command family."""

from __future__ import annotations

from kayak.cli.main import main

__all__ = ["main"]
