"""Where replicated changes are applied: SQLite (the embedded default) and PostgreSQL."""

from __future__ import annotations

from kayak.pipeline.targets.base import AppliedChange, Target, key_text
from kayak.pipeline.targets.factory import TargetUnavailableError, check_target, open_target
from kayak.pipeline.targets.types import TargetSchemaError

__all__ = [
    "AppliedChange",
    "Target",
    "TargetSchemaError",
    "TargetUnavailableError",
    "check_target",
    "key_text",
    "open_target",
]
