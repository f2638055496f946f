"""Creating change and dead-letter topics that do not exist yet."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from kayak.errors import ErrorCode, KafkaError

__all__ = ["ensure_topic", "topic_ensurer"]


def ensure_topic(admin: Any, topic: str) -> None:
    """Create ``topic`` with the cluster's defaults unless it exists, so the pipeline works
    with clusters that do not auto-create topics. ``admin`` is a ``kayak.client.sync.Admin``."""
    if topic in admin.list_topics():
        return
    try:
        admin.create_topics([topic])
    except KafkaError as e:
        if e.code != ErrorCode.TOPIC_ALREADY_EXISTS:  # made meanwhile: fine
            raise


def topic_ensurer(admin: Any) -> Callable[[str], None]:
    """:func:`ensure_topic` bound to ``admin``."""
    return lambda topic: ensure_topic(admin, topic)
