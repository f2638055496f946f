"""The broker's web server as its settings describe it: TLS, authentication, roles, guards."""

from __future__ import annotations

import logging
import os
import socket
from collections.abc import Callable, Collection, Sequence

from aiohttp.typedefs import Middleware

from kayak.broker.config import BrokerConfig
from kayak.broker.metrics.endpoint import metrics_routes
from kayak.broker.security.credentials import CredentialStore
from kayak.broker.security.login_limiter import LoginLimiter
from kayak.broker.security.tls import server_context
from kayak.broker.web.auth import PasswordVerifier, VerifiedPasswords, basic_auth, writer_check
from kayak.broker.web.errors import JSON_CONTENT_TYPE
from kayak.broker.web.guards import json_bodies_only, own_hosts_only, same_origin_writes
from kayak.broker.web.server import WebLimits, WebServer

log = logging.getLogger(__name__)

# Something more the web server serves, added before it starts (the CLI hands in the web
# console's: the broker itself knows nothing of the console).
WebMount = Callable[[WebServer, BrokerConfig], None]

JSON_MEDIA_TYPES = ("application/json",)


def broker_web_server(
    config: BrokerConfig,
    host: str,
    port: int,
    credentials: PasswordVerifier | None,
    *,
    body_media_types: Collection[str] = JSON_MEDIA_TYPES,
    error_content_type: str = JSON_CONTENT_TYPE,
    limits: WebLimits | None = None,
    limiter: LoginLimiter | None = None,
    mounts: Sequence[WebMount] = (),
) -> WebServer:
    """A :class:`WebServer` on ``host:port`` secured as ``config`` says.

    In order, every request meets: when authentication is off, a ``Host`` that is not one
    of the broker's names (:func:`own_host_names`) refused (421); cross-site refusal (403)
    and a JSON body type (415) for anything that changes state; then, when
    ``config.registry_auth_required``, HTTP basic authentication against ``credentials``
    (401) and the writer role for changes (403). With ``schema_registry_tls``, HTTPS with
    the broker's certificate. ``limiter`` is the broker's failed-login limiter (shared with
    SASL; one of the server's own when not given).
    """
    middlewares: list[Middleware] = [
        same_origin_writes(error_content_type),
        json_bodies_only(body_media_types, error_content_type),
    ]
    allowed_hosts = own_host_names(config, host)
    if not config.registry_auth_required and "*" not in allowed_hosts:
        # Without passwords, the Host check is what keeps DNS rebinding out (421).
        middlewares.insert(0, own_hosts_only(allowed_hosts, error_content_type))
    if config.registry_auth_required:
        if credentials is None:
            log.warning("web: authentication is on but the broker has no user store; "
                        "every request will be refused")  # fmt: skip
        middlewares.append(
            basic_auth(
                credentials,
                may_write=writer_check(config.schema_registry_writers, config.super_users),
                failed_delay_s=config.connection_failed_authentication_delay_ms / 1000,
                error_content_type=error_content_type,
                limiter=limiter,
                verified=VerifiedPasswords(version=_store_version(credentials)),
            )
        )
    ssl_context = None
    if config.schema_registry_tls:
        assert config.ssl_certificate_location is not None  # BrokerConfig.validate checks
        assert config.ssl_key_location is not None
        # No client certificates are asked for: web clients authenticate with HTTP basic.
        ssl_context = server_context(
            config.ssl_certificate_location, config.ssl_key_location, config.ssl_key_password
        )
    web = WebServer(
        host, port, ssl_context,
        limits=limits, middlewares=middlewares, error_content_type=error_content_type,
    )  # fmt: skip
    web.add_routes(metrics_routes(config))  # the running broker's, found per request
    for mount in mounts:
        mount(web, config)
    return web


def own_host_names(config: BrokerConfig, host: str) -> frozenset[str]:
    """The names a request's ``Host`` may carry (besides IP literals and loopback names):
    the address served on, the broker's listener and advertised host names, this machine's
    host name and ``--schema-registry-allowed-hosts`` (``*``: any)."""
    names = {host, config.host, socket.gethostname(), *config.schema_registry_allowed_hosts}
    if config.advertised_host:
        names.add(config.advertised_host)
    for listener in (*config.effective_listeners, *config.advertised_listeners):
        names.add(listener.host)
    return frozenset(name.lower() for name in names if name)


def _store_version(credentials: PasswordVerifier | None) -> Callable[[], object]:
    """What changes when the users change: the credentials file's identity, size and time
    (the store replaces the file on every write), so remembered passwords are forgotten."""
    if not isinstance(credentials, CredentialStore):
        return lambda: None
    path = credentials.path

    def version() -> object:
        try:
            stat = os.stat(path)
        except FileNotFoundError:
            return None
        return (stat.st_ino, stat.st_size, stat.st_mtime_ns)

    return version
