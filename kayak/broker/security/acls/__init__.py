"""ACLs in Kafka's model: the model, their durable store, the authorizer handlers consult,
and the topics no client may change (``internal_topics``).

``checks`` (handler one-liners) imports the broker context; import it directly, not from here,
so that the context may name :class:`Authorizer` without a cycle.
"""

from __future__ import annotations

from kayak.broker.security.acls.authorizer import Authorizer
from kayak.broker.security.acls.internal_topics import INTERNAL_TOPICS, is_internal_topic
from kayak.broker.security.acls.model import (
    CLUSTER_NAME,
    AccessControlEntry,
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourcePattern,
    ResourceType,
)
from kayak.broker.security.acls.store import AclStore, AclStoreError

__all__ = [
    "CLUSTER_NAME",
    "INTERNAL_TOPICS",
    "AccessControlEntry",
    "AclBinding",
    "AclBindingFilter",
    "AclOperation",
    "AclPermissionType",
    "AclStore",
    "AclStoreError",
    "Authorizer",
    "PatternType",
    "ResourcePattern",
    "ResourceType",
    "is_internal_topic",
]
