"""ApiVersions: the table of APIs and versions this broker serves."""

from __future__ import annotations

from kayak.broker.context import RequestContext
from kayak.broker.versions import SUPPORTED_VERSIONS
from kayak.protocol.messages.api_versions_request import ApiVersionsRequest
from kayak.protocol.messages.api_versions_response import ApiVersion, ApiVersionsResponse


def supported_versions_response(error_code: int = 0) -> ApiVersionsResponse:
    """The broker's ApiVersions answer, with ``error_code`` (35 for a too-new request)."""
    keys = [ApiVersion(k, lo, hi) for k, (lo, hi) in sorted(SUPPORTED_VERSIONS.items())]
    return ApiVersionsResponse(error_code=error_code, api_keys=keys)


async def handle_api_versions(
    ctx: RequestContext, request: ApiVersionsRequest
) -> ApiVersionsResponse:
    return supported_versions_response()
