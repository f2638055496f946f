"""kayak's asyncio Kafka client: works against kayak's broker and any Kafka cluster.

- :class:`Producer`, :class:`Consumer`, :class:`Admin` (asyncio); blocking facades of the
  same three in :mod:`kayak.client.sync` (one event loop in a background thread).
- Configuration by Kafka's property names (:mod:`kayak.client.config`), partitioners
  (:mod:`kayak.client.partitioner`), retry backoff (:mod:`kayak.client.backoff`).
- Underneath: :mod:`kayak.client.cluster` (metadata, one connection per broker) and
  :mod:`kayak.client.connection` (version negotiation, pipelined requests).
"""

from __future__ import annotations

from kayak.client.admin import Admin, NewTopic, OffsetSpec
from kayak.client.consumer import Consumer, ConsumerRecord, RebalanceListener
from kayak.client.producer import Producer, RecordMetadata
from kayak.client.types import OffsetAndMetadata, TopicPartition

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
