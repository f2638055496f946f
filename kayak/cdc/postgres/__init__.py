"""PostgreSQL capture: logical decoding with the built-in ``pgoutput`` plugin.

:func:`enable` prepares a database (publication), :class:`PostgresSource` captures it
(initial snapshot, then the replication slot's stream), :func:`disable` cleans up.
"""

from __future__ import annotations

from kayak.cdc.postgres.slot import disable, enable
from kayak.cdc.postgres.source import PostgresSource

__all__ = ["PostgresSource", "disable", "enable"]
