"""What every console handler shares: the console's state, the request's view of it, and
how pages and actions answer (HTML pages; JSON for actions, which the page's script shows).
"""

from __future__ import annotations

import functools
import hashlib
import hmac
import json
import logging
import secrets
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from aiohttp import web

from kayak.console.cluster import Clients, ConsoleUnavailableError, Login, login_of
from kayak.console.html import Html
from kayak.console.layout import CONTENT_SECURITY_POLICY, error_body, page
from kayak.console.registry import RegistryAccess, RegistryUnavailableError
from kayak.errors import KayakError, UnknownTopicOrPartitionError

if TYPE_CHECKING:
    from kayak.console.metrics_history import BrokerMetricsHistory

log = logging.getLogger(__name__)

PartitionSize = Callable[[str, int], int | None]
ListenerFacts = Callable[[], list[tuple[int, str, str, int]]]  # (node, name, host, port)


@dataclass
class ConsoleState:
    """Everything the console holds for its lifetime."""

    clients: Clients
    registry: RegistryAccess
    # bytes on disk of a partition, when the console runs inside the broker; None otherwise
    partition_size: PartitionSize | None = None
    # every shard's listeners as registered, when inside the broker
    listeners: ListenerFacts | None = None
    started: float = field(default_factory=time.time)
    # the broker's metrics sampled for the charts (kayak.console.metrics_history), when inside
    # the broker; and the address of a pipeline's page when a pipeline runs on this broker
    metrics_history: BrokerMetricsHistory | None = None
    pipeline_link: Callable[[], str | None] | None = None
    csrf_secret: bytes = field(default_factory=lambda: secrets.token_bytes(32))

    def csrf_token(self, login: Login | None) -> str:
        """The token action forms carry: tied to this process and to the user."""
        user = login.user if login is not None else ""
        return hmac.new(self.csrf_secret, user.encode(), hashlib.sha256).hexdigest()

    async def close(self) -> None:
        await self.clients.close()
        await self.registry.close()


STATE_KEY = web.AppKey("kayak_console", ConsoleState)


@dataclass(frozen=True, slots=True)
class View:
    """One request's handle on the console: who asks, and the state."""

    request: web.Request
    state: ConsoleState
    login: Login | None

    @classmethod
    def of(cls, request: web.Request) -> View:
        return cls(request, request.app[STATE_KEY], login_of(request.headers.get("Authorization")))

    @property
    def authorization(self) -> str | None:
        return self.request.headers.get("Authorization")

    @property
    def csrf_token(self) -> str:
        return self.state.csrf_token(self.login)

    def schema_lookup(self) -> Callable[[int], Awaitable[Any]] | None:
        """Schemas by id for decoding Avro, with this user's credentials."""
        if not self.state.registry.available:
            return None
        registry, authorization = self.state.registry, self.authorization

        async def lookup(schema_id: int) -> Any:
            return await registry.schema_by_id(schema_id, authorization)

        return lookup

    def html(
        self, title: str, body: Html, *, section: str, status: int = 200,
        refresh_s: int | None = None,
    ) -> web.Response:  # fmt: skip
        user = self.login.user if self.login is not None else None
        document = page(title, body, section=section, user=user, refresh_s=refresh_s)
        return html_response(document, status)


def html_response(document: str, status: int = 200) -> web.Response:
    return web.Response(
        text=document,
        status=status,
        content_type="text/html",
        charset="utf-8",
        headers={
            "Content-Security-Policy": CONTENT_SECURITY_POLICY,
            "X-Content-Type-Options": "nosniff",
            "Referrer-Policy": "same-origin",
            "Cache-Control": "no-store",
        },
    )


PageHandler = Callable[[View], Awaitable[web.StreamResponse]]


def page_handler(section: str) -> Callable[[PageHandler], Callable[[web.Request], Awaitable[web.StreamResponse]]]:  # noqa: E501
    """A page: cluster and registry failures become an error page (404 for an unknown
    topic, 502 when the cluster or registry cannot be reached), never a traceback."""

    def decorate(handler: PageHandler) -> Callable[[web.Request], Awaitable[web.StreamResponse]]:
        @functools.wraps(handler)
        async def handle(request: web.Request) -> web.StreamResponse:
            view = View.of(request)
            try:
                return await handler(view)
            except UnknownTopicOrPartitionError as exc:
                return view.html("Not found", error_body("Not found", str(exc)),
                                 section=section, status=404)  # fmt: skip
            except RegistryUnavailableError as exc:
                status = 404 if exc.status == 404 else 502
                return view.html("Schema registry", error_body("Schema registry", str(exc)),
                                 section=section, status=status)  # fmt: skip
            except (KayakError, ConsoleUnavailableError) as exc:
                log.info("console: %s %s: %s", request.method, request.path, exc)
                message = f"{type(exc).__name__}: {exc}"
                return view.html("Cluster unavailable", error_body("Cluster unavailable", message),
                                 section=section, status=502)  # fmt: skip

        return handle

    return decorate


class ActionRefused(Exception):
    """An action's input is wrong; the message is shown to the user (400)."""


ActionHandler = Callable[[View, Mapping[str, str]], Awaitable[tuple[str, str]]]


def action_handler(handler: ActionHandler) -> Callable[[web.Request], Awaitable[web.Response]]:
    """A POST from an action form: a JSON body with the CSRF token; the answer is
    ``{"message": ..., "location": ...}`` (where the page goes next) or an error document."""

    @functools.wraps(handler)
    async def handle(request: web.Request) -> web.Response:
        view = View.of(request)
        try:
            document = await request.json()
        except ValueError:
            return _action_error(400, "the body is not JSON")
        if not isinstance(document, dict):
            return _action_error(400, "the body is not a JSON object")
        fields = {str(k): str(v) for k, v in document.items()}
        if not hmac.compare_digest(fields.get("csrf", ""), view.csrf_token):
            log.warning("console: %s %s without a valid CSRF token", request.method, request.path)
            return _action_error(403, "the form is stale or forged (CSRF token); reload the page")
        try:
            message, location = await handler(view, fields)
        except ActionRefused as exc:
            return _action_error(400, str(exc))
        except (KayakError, ConsoleUnavailableError, ValueError) as exc:
            return _action_error(409 if isinstance(exc, KayakError) else 400,
                                 f"{type(exc).__name__}: {exc}")  # fmt: skip
        log.info("console: %s by %s: %s", request.path,
                 view.login.user if view.login else "anonymous", message)  # fmt: skip
        return web.json_response({"message": message, "location": location})

    return handle


def _action_error(status: int, message: str) -> web.Response:
    return web.Response(
        status=status,
        text=json.dumps({"error_code": status, "message": message}),
        content_type="application/json",
    )
