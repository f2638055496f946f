"""kayak's asyncio Kafka client: works against kayak's broker and any Kafka cluster.

- :class:`Producer`, :class:`Consumer`, :class:`Admin` (asyncio); blocking facades of the
  same three in :mod:`kayak.client.sync` (one event loop in a background thread).
- Configuration by Kafka's property names (:mod:`kayak.client.config`), partitioners
  (:mod:`kayak.client.partitioner`), retry backoff (:mod:`kayak.client.backoff`).
- Underneath: :mod:`kayak.client.cluster` (metadata, one connection per broker) and
  :mod:`kayak.client.connection` (version negotiation, pipelined requests).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

from kayak.client.types import OffsetAndMetadata, TopicPartition

if TYPE_CHECKING:
    from kayak.client.admin import Admin, NewTopic, OffsetSpec
    from kayak.client.consumer import Consumer, ConsumerRecord, RebalanceListener
    from kayak.client.producer import Producer, RecordMetadata

# Imported on first use: a program (or a CLI command) using only the producer does not pay
# for the consumer's and the admin's modules.
_LAZY = {
    "Admin": "kayak.client.admin",
    "NewTopic": "kayak.client.admin",
    "OffsetSpec": "kayak.client.admin",
    "Consumer": "kayak.client.consumer",
    "ConsumerRecord": "kayak.client.consumer",
    "RebalanceListener": "kayak.client.consumer",
    "Producer": "kayak.client.producer",
    "RecordMetadata": "kayak.client.producer",
}


def __getattr__(name: str) -> object:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'kayak.client' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value

__all__ = [
    "Admin",
    "Consumer",
    "ConsumerRecord",
    "NewTopic",
    "OffsetAndMetadata",
    "OffsetSpec",
    "Producer",
    "RebalanceListener",
    "RecordMetadata",
    "TopicPartition",
]
