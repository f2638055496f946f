"""DescribeClientQuotas: kayak enforces no client quotas, so none is ever configured.

Kafka's tools ask anyway: ``kafka-configs --describe --entity-type users`` describes a user's
quotas next to its SCRAM credentials, and fails outright on a broker without the API. The
answer is Kafka's for a cluster with no quota set: no entries, after the same checks
(DESCRIBE_CONFIGS on the cluster; a filter naming an unknown or repeated entity type, or
mixing ``ip`` with ``user``/``client-id``, is refused). AlterClientQuotas is not served: a
quota kayak would not enforce is refused as an unsupported API rather than stored.
"""

from __future__ import annotations

from kayak.broker.context import RequestContext
from kayak.broker.security.acls.checks import allowed_on_cluster
from kayak.broker.security.acls.model import AclOperation
from kayak.errors import ClusterAuthorizationFailedError, InvalidRequestError, KafkaError
from kayak.protocol.messages.describe_client_quotas_request import (
    ComponentData,
    DescribeClientQuotasRequest,
)
from kayak.protocol.messages.describe_client_quotas_response import DescribeClientQuotasResponse

ENTITY_TYPES = ("user", "client-id", "ip")
MATCH_EXACT, MATCH_DEFAULT, MATCH_ANY = 0, 1, 2


async def handle_describe_client_quotas(
    ctx: RequestContext, request: DescribeClientQuotasRequest
) -> DescribeClientQuotasResponse:
    if not allowed_on_cluster(ctx, AclOperation.DESCRIBE_CONFIGS):
        return _refused(ClusterAuthorizationFailedError(
            "Cluster authorization failed: DESCRIBE_CONFIGS on the cluster is needed"
        ))  # fmt: skip
    try:
        check_filter(request.components)
    except KafkaError as exc:
        return _refused(exc)
    return DescribeClientQuotasResponse(error_code=0, error_message=None, entries=[])


def check_filter(components: list[ComponentData]) -> None:
    """Kafka's checks of a quota filter; :class:`InvalidRequestError` naming the problem."""
    seen: set[str] = set()
    for component in components:
        kind = component.entity_type
        if kind in seen:
            raise InvalidRequestError(f"Duplicate {kind} filter component entity type")
        if kind not in ENTITY_TYPES:
            raise InvalidRequestError(f"Custom entity type '{kind}' not supported")
        if component.match_type not in (MATCH_EXACT, MATCH_DEFAULT, MATCH_ANY):
            raise InvalidRequestError(f"Unexpected match type: {component.match_type}")
        if component.match_type == MATCH_EXACT and component.match is None:
            raise InvalidRequestError(f"An exact match of {kind} needs a name")
        seen.add(kind)
    if "ip" in seen and seen & {"user", "client-id"}:
        raise InvalidRequestError(
            "Invalid entity filter component combination, IP filter component should not be "
            "used with user or clientId filter component."
        )


def _refused(error: KafkaError) -> DescribeClientQuotasResponse:
    return DescribeClientQuotasResponse(
        error_code=error.code, error_message=error.message, entries=None
    )
