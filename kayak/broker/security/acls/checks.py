"""One-line authorization checks for request handlers.

The principal is the connection's (``User:ANONYMOUS`` without a security session) and the
host is the client's address. A broker without an authorizer allows everything.
"""

from __future__ import annotations

from kayak.broker.context import RequestContext
from kayak.broker.security.acls.model import CLUSTER_NAME, AclOperation, ResourceType
from kayak.broker.security.principal import ANONYMOUS

TOPIC, GROUP, CLUSTER = ResourceType.TOPIC, ResourceType.GROUP, ResourceType.CLUSTER


def principal_of(ctx: RequestContext) -> str:
    """``User:NAME`` of whoever sent the request."""
    return str(ctx.session.principal if ctx.session is not None else ANONYMOUS)


def allowed(ctx: RequestContext, operation: AclOperation, resource_type: ResourceType,
            name: str) -> bool:  # fmt: skip
    """Whether the request's principal may do ``operation`` on the named resource."""
    authorizer = ctx.broker.authorizer
    if authorizer is None:
        return True
    return authorizer.allowed(principal_of(ctx), ctx.client_host, operation, resource_type, name)


def allowed_on_cluster(ctx: RequestContext, operation: AclOperation) -> bool:
    """Whether the request's principal may do ``operation`` on the cluster."""
    return allowed(ctx, operation, CLUSTER, CLUSTER_NAME)


def allowed_on_any(ctx: RequestContext, operation: AclOperation,
                   resource_type: ResourceType) -> bool:  # fmt: skip
    """Whether ``operation`` is allowed on at least one resource of ``resource_type``."""
    authorizer = ctx.broker.authorizer
    if authorizer is None:
        return True
    return authorizer.allowed_on_any(principal_of(ctx), ctx.client_host, operation, resource_type)
