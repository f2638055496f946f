"""Errors only the producer raises (the Kafka error codes are in :mod:`kayak.errors`)."""

from __future__ import annotations

from kayak.errors import KayakError

__all__ = ["ProducerClosedError"]


class ProducerClosedError(KayakError):
    """The producer was closed (or never started): it sends nothing more."""
