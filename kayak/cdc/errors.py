"""Errors of change data capture (sources, capture loop).

::

    KayakError
    └── CaptureError                a capture source cannot do its job
        ├── SourceSetupError        the database is not set up for capture (wal_level,
        │                           missing primary key, privileges, publication, slot)
        ├── ChangeDecodeError       bytes from the database's change stream do not parse
        └── SchemaChangeError       a source schema change that is not carried (one line
                                    naming the table, the column and the change)
"""

from __future__ import annotations

from kayak.errors import KayakError

__all__ = ["CaptureError", "ChangeDecodeError", "SchemaChangeError", "SourceSetupError"]


class CaptureError(KayakError):
    """A capture source cannot read or acknowledge changes."""


class SourceSetupError(CaptureError):
    """The source database is not (or cannot be) set up for capture; the message says why."""


class ChangeDecodeError(CaptureError):
    """A message of the database's change stream is malformed or of an unknown kind."""


class SchemaChangeError(CaptureError):
    """A source table changed in a way capture does not carry (a rename it cannot tell from
    DROP + ADD, a type change the schema registry refuses…): capture stops *at* that change,
    everything before it published, nothing after it. The message is one line naming the
    table, the column and the change. ``published``: how many changes of the batch being
    published when it was raised went out before it."""

    published: int = 0
