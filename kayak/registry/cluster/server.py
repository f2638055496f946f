"""The standalone registry: a :class:`ClusterSchemaStore` behind the REST API over HTTP.

The server answers as the broker's embedded registry does (same routes, Confluent-shaped
errors, 415 for a body that is not JSON, 403 for a cross-site write from a browser), without
the broker's TLS and users: put it on a loopback or private address.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping

from aiohttp import web
from aiohttp.typedefs import Handler

from kayak.registry.api import CONTENT_TYPE, REQUEST_MEDIA_TYPES, SchemaRegistryApi
from kayak.registry.cluster.store import ClusterSchemaStore
from kayak.registry.store import TOPIC

log = logging.getLogger(__name__)

MAX_BODY_BYTES = 8 * 1024 * 1024  # a schema is a few KiB; this refuses only abuse
_BODY_METHODS = frozenset({"POST", "PUT", "PATCH"})
_WRITE_METHODS = _BODY_METHODS | {"DELETE"}


def _error(status: int, message: str, headers: Mapping[str, str] | None = None) -> web.Response:
    body = json.dumps({"error_code": status, "message": message}, separators=(",", ":"))
    return web.Response(
        status=status, headers=dict(headers or {}), body=body.encode(), content_type=CONTENT_TYPE
    )


@web.middleware
async def _refusals(request: web.Request, handler: Handler) -> web.StreamResponse:
    """aiohttp's own refusals and unexpected failures as Confluent-shaped error documents;
    writes a browser page could send (a form, plain text, another site's Origin) refused."""
    origin = request.headers.get("Origin")
    if request.method in _WRITE_METHODS and origin is not None:
        own = f"{request.scheme}://{request.host}".lower()
        if origin.lower() != own:
            return _error(403, f"cross-origin {request.method} refused: Origin is not {own!r}")
    if request.method in _BODY_METHODS and request.content_type not in REQUEST_MEDIA_TYPES:
        return _error(415, f"Content-Type must be one of {', '.join(REQUEST_MEDIA_TYPES)}")
    try:
        return await handler(request)
    except web.HTTPException as exc:
        if exc.status < 400:
            raise
        kept = {"Allow": exc.headers["Allow"]} if "Allow" in exc.headers else {}
        return _error(exc.status, exc.reason, kept)
    except Exception:  # one failing request must not take the server down
        log.exception("registry: %s %s failed", request.method, request.path)
        return _error(500, "internal server error")


class StandaloneRegistry:
    """Replays ``topic`` (``_schemas``) of the cluster ``properties`` reach and serves the
    REST API on ``host:port`` (0: an ephemeral port) until :meth:`stop`."""

    def __init__(
        self, properties: Mapping[str, str], host: str, port: int, topic: str = TOPIC
    ) -> None:
        self.store = ClusterSchemaStore(properties, topic)
        self._requested = (host, port)
        self._runner: web.AppRunner | None = None
        self.host, self.port = host, port

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"

    async def start(self) -> None:
        await self.store.start()
        try:
            app = web.Application(middlewares=[_refusals], client_max_size=MAX_BODY_BYTES)
            app.add_routes(SchemaRegistryApi(self.store).routes())
            runner = web.AppRunner(app, handle_signals=False, access_log=None)
            await runner.setup()
            self._runner = runner
            site = web.TCPSite(runner, *self._requested, reuse_address=True)
            await site.start()
            bound = runner.addresses[0]
            self.host, self.port = str(bound[0]), int(bound[1])
        except BaseException:
            await self.stop()
            raise

    async def stop(self) -> None:
        if self._runner is not None:
            runner, self._runner = self._runner, None
            await runner.cleanup()
        await self.store.close()
