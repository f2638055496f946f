"""SQLite capture: triggers write every change into a log table beside the base table.

The design is ScyllaDB's CDC log table: ``enable`` installs ``AFTER INSERT/UPDATE/DELETE``
triggers on the base table that append a row (change id, op, before and after images as
JSON, time) to ``<table>_kayak_cdc_log`` in the same transaction as the change, so a change
is logged exactly when it commits; :class:`SqliteSource` reads the log in change-id order and
trims only what the broker acknowledged.
"""

from __future__ import annotations

from kayak.cdc.sqlite.schema import read_table_schema
from kayak.cdc.sqlite.source import SqliteSource
from kayak.cdc.sqlite.triggers import disable, enable, install_triggers, log_table_name

__all__ = [
    "SqliteSource",
    "disable",
    "enable",
    "install_triggers",
    "log_table_name",
    "read_table_schema",
]
