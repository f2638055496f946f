"""CreateAcls, DescribeAcls, DeleteAcls: managing the ACLs, as Kafka answers them.

Creating and deleting need ALTER on the cluster, describing needs DESCRIBE on it; without
it every binding or filter (or, for DescribeAcls, the response) carries
CLUSTER_AUTHORIZATION_FAILED. A binding Kafka would not store is refused on its own with
INVALID_REQUEST; the others are stored.
"""

from __future__ import annotations

from kayak.broker.context import RequestContext
from kayak.broker.security.acls import (
    AccessControlEntry,
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    Authorizer,
    PatternType,
    ResourcePattern,
    ResourceType,
)
from kayak.broker.security.acls.checks import allowed_on_cluster
from kayak.broker.security.acls.model import validate_binding
from kayak.broker.security.acls.store import AclStoreError
from kayak.errors import ErrorCode
from kayak.protocol.messages.create_acls_request import AclCreation, CreateAclsRequest
from kayak.protocol.messages.create_acls_response import AclCreationResult, CreateAclsResponse
from kayak.protocol.messages.delete_acls_request import DeleteAclsFilter, DeleteAclsRequest
from kayak.protocol.messages.delete_acls_response import (
    DeleteAclsFilterResult,
    DeleteAclsMatchingAcl,
    DeleteAclsResponse,
)
from kayak.protocol.messages.describe_acls_request import DescribeAclsRequest
from kayak.protocol.messages.describe_acls_response import (
    AclDescription,
    DescribeAclsResource,
    DescribeAclsResponse,
)

_NO_AUTHORIZER = "no authorizer is configured on the broker"


async def handle_create_acls(ctx: RequestContext, request: CreateAclsRequest) -> CreateAclsResponse:
    authorizer = ctx.broker.authorizer
    refusal = _refusal(ctx, authorizer, AclOperation.ALTER, "create ACLs")
    if refusal is not None:
        code, message = refusal
        return CreateAclsResponse(
            results=[AclCreationResult(code, message) for _ in request.creations]
        )
    assert authorizer is not None
    results: list[AclCreationResult] = []
    valid: list[AclBinding] = []
    for creation in request.creations:
        binding = _binding(creation)
        problem = validate_binding(binding)
        literal = binding.pattern.pattern_type is PatternType.LITERAL
        if problem is None and ctx.version == 0 and not literal:
            problem = "version 0 supports only LITERAL resource patterns"
        if problem is None:
            valid.append(binding)
            results.append(AclCreationResult(ErrorCode.NONE, None))
        else:
            results.append(AclCreationResult(ErrorCode.INVALID_REQUEST, problem))
    if valid:
        try:
            authorizer.create(valid)
        except AclStoreError as exc:  # a damaged acls.json: nothing was written
            failed = AclCreationResult(ErrorCode.UNKNOWN_SERVER_ERROR, str(exc))
            results = [failed if r.error_code == ErrorCode.NONE else r for r in results]
    return CreateAclsResponse(results=results)


async def handle_describe_acls(
    ctx: RequestContext, request: DescribeAclsRequest
) -> DescribeAclsResponse:
    authorizer = ctx.broker.authorizer
    refusal = _refusal(ctx, authorizer, AclOperation.DESCRIBE, "describe ACLs")
    if refusal is not None:
        code, message = refusal
        return DescribeAclsResponse(error_code=code, error_message=message)
    assert authorizer is not None
    wanted = _filter(
        request.resource_type_filter,
        request.resource_name_filter,
        request.pattern_type_filter,
        request.principal_filter,
        request.host_filter,
        request.operation,
        request.permission_type,
    )
    if isinstance(wanted, str):
        return DescribeAclsResponse(error_code=ErrorCode.INVALID_REQUEST, error_message=wanted)
    grouped: dict[ResourcePattern, list[AclDescription]] = {}
    for binding in authorizer.acls(wanted):
        entry = binding.entry
        grouped.setdefault(binding.pattern, []).append(
            AclDescription(entry.principal, entry.host, entry.operation, entry.permission)
        )
    return DescribeAclsResponse(
        error_message=None,
        resources=[
            DescribeAclsResource(p.resource_type, p.name, p.pattern_type, acls)
            for p, acls in grouped.items()
        ],
    )


async def handle_delete_acls(ctx: RequestContext, request: DeleteAclsRequest) -> DeleteAclsResponse:
    authorizer = ctx.broker.authorizer
    refusal = _refusal(ctx, authorizer, AclOperation.ALTER, "delete ACLs")
    if refusal is not None:
        code, message = refusal
        return DeleteAclsResponse(
            filter_results=[DeleteAclsFilterResult(code, message) for _ in request.filters]
        )
    assert authorizer is not None
    parsed = [_delete_filter(f) for f in request.filters]
    try:
        deleted = iter(authorizer.delete(f for f in parsed if not isinstance(f, str)))
    except AclStoreError as exc:  # a damaged acls.json: nothing was deleted
        failed = DeleteAclsFilterResult(ErrorCode.UNKNOWN_SERVER_ERROR, str(exc))
        return DeleteAclsResponse(filter_results=[failed for _ in request.filters])
    results: list[DeleteAclsFilterResult] = []
    for wanted in parsed:
        if isinstance(wanted, str):
            results.append(DeleteAclsFilterResult(ErrorCode.INVALID_REQUEST, wanted))
        else:
            matched = [_matching_acl(b) for b in next(deleted)]
            results.append(DeleteAclsFilterResult(ErrorCode.NONE, None, matched))
    return DeleteAclsResponse(filter_results=results)


def _refusal(
    ctx: RequestContext, authorizer: Authorizer | None, operation: AclOperation, action: str
) -> tuple[int, str] | None:
    if authorizer is None:
        return ErrorCode.SECURITY_DISABLED, _NO_AUTHORIZER
    if not allowed_on_cluster(ctx, operation):
        return ErrorCode.CLUSTER_AUTHORIZATION_FAILED, f"not authorized to {action}"
    return None


def _binding(creation: AclCreation) -> AclBinding:
    return AclBinding(
        ResourcePattern(
            ResourceType.from_code(creation.resource_type),
            creation.resource_name,
            PatternType.from_code(creation.resource_pattern_type),
        ),
        AccessControlEntry(
            creation.principal,
            creation.host,
            AclOperation.from_code(creation.operation),
            AclPermissionType.from_code(creation.permission_type),
        ),
    )


def _delete_filter(wanted: DeleteAclsFilter) -> AclBindingFilter | str:
    return _filter(
        wanted.resource_type_filter,
        wanted.resource_name_filter,
        wanted.pattern_type_filter,
        wanted.principal_filter,
        wanted.host_filter,
        wanted.operation,
        wanted.permission_type,
    )


def _filter(
    resource_type: int,
    name: str | None,
    pattern_type: int,
    principal: str | None,
    host: str | None,
    operation: int,
    permission: int,
) -> AclBindingFilter | str:
    """The filter a request describes, or why Kafka would refuse it (an UNKNOWN element)."""
    parsed = AclBindingFilter(
        ResourceType.from_code(resource_type),
        name,
        PatternType.from_code(pattern_type),
        principal,
        host,
        AclOperation.from_code(operation),
        AclPermissionType.from_code(permission),
    )
    unknown = [
        what
        for what, value in (
            ("resource type", parsed.resource_type),
            ("pattern type", parsed.pattern_type),
            ("operation", parsed.operation),
            ("permission type", parsed.permission),
        )
        if value == 0
    ]
    if unknown:
        return f"the filter has an unknown {', '.join(unknown)}"
    return parsed


def _matching_acl(binding: AclBinding) -> DeleteAclsMatchingAcl:
    pattern, entry = binding.pattern, binding.entry
    return DeleteAclsMatchingAcl(
        ErrorCode.NONE,
        None,
        pattern.resource_type,
        pattern.name,
        pattern.pattern_type,
        entry.principal,
        entry.host,
        entry.operation,
        entry.permission,
    )
