"""The ``authorized_operations`` bit fields of Metadata, DescribeCluster and DescribeGroups.

Bit ``n`` is set when the principal may do the ACL operation with code ``n`` on the
resource, among the operations Kafka defines for that resource type; without an authorizer
every one is allowed. Operations kayak never allows anyone on an internal topic (writing,
deleting, altering it) are left out there.
"""

from __future__ import annotations

from kayak.broker.context import RequestContext
from kayak.broker.security.acls import AclOperation, is_internal_topic
from kayak.broker.security.acls.checks import GROUP, TOPIC, allowed, allowed_on_cluster

_O = AclOperation
TOPIC_OPERATIONS = (
    _O.READ, _O.WRITE, _O.CREATE, _O.DESCRIBE, _O.DELETE, _O.ALTER,
    _O.DESCRIBE_CONFIGS, _O.ALTER_CONFIGS,
)  # fmt: skip
CLUSTER_OPERATIONS = (
    _O.CREATE, _O.CLUSTER_ACTION, _O.DESCRIBE_CONFIGS, _O.ALTER_CONFIGS, _O.IDEMPOTENT_WRITE,
    _O.ALTER, _O.DESCRIBE,
)  # fmt: skip
GROUP_OPERATIONS = (_O.READ, _O.DESCRIBE, _O.DELETE)
_NEVER_ON_INTERNAL = frozenset({_O.WRITE, _O.CREATE, _O.DELETE, _O.ALTER, _O.ALTER_CONFIGS})
NOT_REQUESTED = -(2**31)  # what the field holds when the client did not ask


def _bits(operations: list[AclOperation]) -> int:
    return sum(1 << int(operation) for operation in operations)


def topic_operations(ctx: RequestContext, topic: str) -> int:
    internal = is_internal_topic(topic)
    return _bits(
        [
            op
            for op in TOPIC_OPERATIONS
            if not (internal and op in _NEVER_ON_INTERNAL) and allowed(ctx, op, TOPIC, topic)
        ]
    )


def cluster_operations(ctx: RequestContext) -> int:
    return _bits([op for op in CLUSTER_OPERATIONS if allowed_on_cluster(ctx, op)])


def group_operations(ctx: RequestContext, group: str) -> int:
    return _bits([op for op in GROUP_OPERATIONS if allowed(ctx, op, GROUP, group)])
