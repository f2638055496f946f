"""KIP-848's ConsumerGroupHeartbeat and ConsumerGroupDescribe, answered as a Kafka 3.9 broker
answers them with the new protocol disabled (``group.coordinator.rebalance.protocols=classic``).

kayak's coordinator runs classic groups only. A client with ``group.protocol=consumer`` that
found no ConsumerGroupHeartbeat v1 in ApiVersions would wait forever without a word
(librdkafka 2.16 retries its coordinator lookup in silence), so both APIs are advertised
and answered UNSUPPORTED_VERSION with a message that says what to do:
librdkafka then raises a fatal error at once, the Java consumer an
UnsupportedVersionException; AdminClients fall back to DescribeGroups for the description.
"""

from __future__ import annotations

import logging

from kayak.broker.context import RequestContext
from kayak.errors import ErrorCode
from kayak.protocol.messages.consumer_group_describe_request import ConsumerGroupDescribeRequest
from kayak.protocol.messages.consumer_group_describe_response import (
    ConsumerGroupDescribeResponse,
    DescribedGroup,
)
from kayak.protocol.messages.consumer_group_heartbeat_request import (
    ConsumerGroupHeartbeatRequest,
)
from kayak.protocol.messages.consumer_group_heartbeat_response import (
    ConsumerGroupHeartbeatResponse,
)

log = logging.getLogger(__name__)

UNSUPPORTED = (
    "kayak runs classic consumer groups only: the consumer group protocol of KIP-848 "
    "(group.protocol=consumer) is not supported; use group.protocol=classic"
)


async def handle_consumer_group_heartbeat(
    ctx: RequestContext, request: ConsumerGroupHeartbeatRequest
) -> ConsumerGroupHeartbeatResponse:
    log.warning(
        "client %s (%s) asked to join group %s with group.protocol=consumer: refused, "
        "kayak runs classic groups only",
        ctx.client_id,
        ctx.client_host,
        request.group_id,
    )
    return ConsumerGroupHeartbeatResponse(
        error_code=ErrorCode.UNSUPPORTED_VERSION, error_message=UNSUPPORTED
    )


async def handle_consumer_group_describe(
    ctx: RequestContext, request: ConsumerGroupDescribeRequest
) -> ConsumerGroupDescribeResponse:
    return ConsumerGroupDescribeResponse(
        groups=[
            DescribedGroup(
                error_code=ErrorCode.UNSUPPORTED_VERSION, error_message=UNSUPPORTED, group_id=g
            )
            for g in request.group_ids
        ]
    )
