"""Errors of change data capture (sources, capture loop).

::

    KayakError
    └── CaptureError                a capture source cannot do its job
        ├── SourceSetupError        the database is not set up for capture (wal_level,
        │                           missing primary key, privileges, publication, slot)
        └── ChangeDecodeError       bytes from the database's change stream do not parse
"""

from __future__ import annotations

from kayak.errors import KayakError

__all__ = ["CaptureError", "ChangeDecodeError", "SourceSetupError"]


class CaptureError(KayakError):
    """A capture source cannot read or acknowledge changes."""


class SourceSetupError(CaptureError):
    """The source database is not (or cannot be) set up for capture; the message says why."""


class ChangeDecodeError(CaptureError):
    """A message of the database's change stream is malformed or of an unknown kind."""
