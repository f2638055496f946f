"""Which request and response header version goes with which API version.

Flexible API versions (KIP-482) use request header v2 and response header v1, others use v1
and v0. Two exceptions: ControlledShutdown v0 predates the client id (header v0), and the
ApiVersions response always uses header v0 so that a client that guessed a too-new version
can still read the broker's answer.
"""

from __future__ import annotations

import functools

from kayak.protocol.messages import ApiKey, request_class, response_class


# Cached: asked once per request and once per response, it was 0.3-0.4 µs of each.
@functools.cache
def request_header_version(api_key: int, api_version: int) -> int:
    """The RequestHeader version for a request of ``api_key`` at ``api_version``."""
    if api_key == ApiKey.CONTROLLED_SHUTDOWN and api_version == 0:
        return 0
    return 2 if request_class(api_key).is_flexible(api_version) else 1


@functools.cache
def response_header_version(api_key: int, api_version: int) -> int:
    """The ResponseHeader version for a response to ``api_key`` at ``api_version``."""
    if api_key == ApiKey.API_VERSIONS:
        return 0
    return 1 if response_class(api_key).is_flexible(api_version) else 0
