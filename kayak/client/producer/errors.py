"""Errors only the producer raises (the Kafka error codes are in :mod:`kayak.errors`)."""

from __future__ import annotations

from kayak.errors import KayakError

__all__ = ["BufferFullError", "ProducerClosedError"]


class ProducerClosedError(KayakError):
    """The producer was closed (or never started): it sends nothing more."""


class BufferFullError(KayakError, BufferError):
    """``produce`` found ``buffer.memory`` full: it does not wait (``send`` does). Let the
    event loop run so batches leave (``await producer.flush()``), then produce again. A
    ``BufferError``, as confluent-kafka's ``produce`` raises when its queue is full."""
