"""kayak's asyncio admin client: ``Admin`` and the values it takes and returns.

::

    from kayak.client.admin import Admin, NewTopic

    async with Admin(bootstrap_servers="localhost:9092") as admin:
        await admin.create_topics([NewTopic("orders", num_partitions=3)])
        lag = await admin.group_lag("billing")
"""

from __future__ import annotations

from kayak.client.admin._topics import topic_name_problem
from kayak.client.admin.client import Admin, AdminClosedError, lag_of
from kayak.client.admin.models import (
    BrokerDescription,
    ClusterDescription,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    CreatedTopic,
    GroupDescription,
    GroupListing,
    MemberDescription,
    NewTopic,
    OffsetAndTimestamp,
    OffsetSpec,
    PartitionDescription,
    ResourceType,
    TopicDescription,
)
from kayak.client.types import OffsetAndMetadata, TopicPartition

__all__ = [
    "Admin",
    "AdminClosedError",
    "BrokerDescription",
    "ClusterDescription",
    "ConfigEntry",
    "ConfigResource",
    "ConfigSource",
    "CreatedTopic",
    "GroupDescription",
    "GroupListing",
    "MemberDescription",
    "NewTopic",
    "OffsetAndMetadata",
    "OffsetAndTimestamp",
    "OffsetSpec",
    "PartitionDescription",
    "ResourceType",
    "TopicDescription",
    "TopicPartition",
    "lag_of",
    "topic_name_problem",
]
