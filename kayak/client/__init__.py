"""kayak's asyncio Kafka client: configuration, partitioners, retry backoff, and (soon) the
producer, consumer and admin clients built on them.

Import what you need from the submodules, e.g. ``from kayak.client.config import
ProducerConfig``.
"""

from __future__ import annotations
