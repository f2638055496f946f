"""PostgreSQL log sequence numbers (LSNs): the ``hi/lo`` text PostgreSQL writes, as ints."""

from __future__ import annotations

__all__ = ["format_lsn", "parse_lsn"]


def format_lsn(lsn: int) -> str:
    """An LSN as PostgreSQL writes it (``16/B374D848``)."""
    return f"{lsn >> 32:X}/{lsn & 0xFFFFFFFF:X}"


def parse_lsn(text: str) -> int:
    """PostgreSQL's ``hi/lo`` LSN text → int."""
    hi, _, lo = text.partition("/")
    return (int(hi, 16) << 32) | int(lo, 16)
