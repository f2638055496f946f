"""How the console reaches the cluster: kayak's own client, over the wire.

The console is a Kafka client like any other: an :class:`~kayak.client.Admin` per login, kept
open, and a short-lived :class:`~kayak.client.Consumer` per message-browser request. So the
pages show what the protocol says (and would work against any Kafka cluster given a
bootstrap address); only what the wire cannot tell (partition sizes on disk, uptime) comes
from the broker process itself.

When the broker's listener needs SASL, the console logs in as the user who logged in to the
web page (HTTP basic authentication against the same users), so Kafka's ACLs apply to what
that user sees and does in the console.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import hashlib
import logging
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from kayak.client import Admin, Consumer
from kayak.errors import KayakError

if TYPE_CHECKING:
    from kayak.broker.config import BrokerConfig

log = logging.getLogger(__name__)

CLIENT_ID = "kayak-console"
# A page waits at most this long for the cluster; it says so rather than hang.
PAGE_TIMEOUT_MS = 10_000
MAX_ADMINS = 16
# Listener preference: the console runs next to the broker, so a plain loopback listener
# is best; TLS needs a trust anchor the console may not have.
_PREFERENCE = ("PLAINTEXT", "SASL_PLAINTEXT", "SASL_SSL", "SSL")
_MECHANISM_PREFERENCE = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")


class ConsoleUnavailableError(KayakError):
    """The console cannot talk to the cluster (no usable listener, no login for SASL)."""


@dataclass(frozen=True, slots=True)
class Login:
    """Who is using the console: the HTTP basic credentials of the request."""

    user: str
    password: str

    @property
    def key(self) -> tuple[str, bytes]:
        """What identifies this login in caches: never the password itself."""
        return self.user, hashlib.sha256(self.password.encode("utf-8", "surrogatepass")).digest()


def login_of(authorization: str | None) -> Login | None:
    """The login in an ``Authorization: Basic`` header; None without one."""
    if not authorization or not authorization.lower().startswith("basic "):
        return None
    try:
        decoded = base64.b64decode(authorization[6:].strip(), validate=True).decode("utf-8")
    except (binascii.Error, UnicodeDecodeError):
        return None
    user, _, password = decoded.partition(":")
    return Login(user, password)


ClientSettings = Callable[[Login | None], dict[str, object]]


class Clients:
    """Admin clients by login (kept open, at most :data:`MAX_ADMINS`), consumers on demand."""

    def __init__(self, settings: ClientSettings) -> None:
        self._settings = settings
        self._admins: OrderedDict[tuple[str, bytes] | None, Admin] = OrderedDict()
        self._lock = asyncio.Lock()

    async def admin(self, login: Login | None) -> Admin:
        key = login.key if login is not None else None
        async with self._lock:
            admin = self._admins.get(key)
            if admin is None:
                admin = Admin(self._settings(login))
                self._admins[key] = admin
                while len(self._admins) > MAX_ADMINS:
                    _, oldest = self._admins.popitem(last=False)
                    await oldest.close()
            self._admins.move_to_end(key)
        try:
            await admin.start()
        except BaseException:
            async with self._lock:
                if self._admins.get(key) is admin:
                    del self._admins[key]
            await admin.close()
            raise
        return admin

    def consumer(self, login: Login | None, **overrides: object) -> Consumer:
        """A consumer without a group (unless ``group.id`` is in ``overrides``), not started."""
        settings: dict[str, object] = {
            **self._settings(login),
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            "fetch.max.wait.ms": 100,
            **overrides,
        }
        return Consumer(settings)

    async def close(self) -> None:
        admins, self._admins = list(self._admins.values()), OrderedDict()
        for admin in admins:
            await admin.close()


def static_settings(properties: Mapping[str, object]) -> ClientSettings:
    """Settings for a cluster given by client properties (``bootstrap.servers``, ...)."""

    def settings(login: Login | None) -> dict[str, object]:
        return {**_defaults(), **properties}

    return settings


def broker_settings(config: BrokerConfig) -> ClientSettings:
    """Settings that reach the broker of ``config`` on one of its own listeners.

    The address is looked up at each connection (``shards.json`` in the data directory:
    the ports actually bound, even for port 0), so the console can be mounted before the
    broker listens.
    """

    def settings(login: Login | None) -> dict[str, object]:
        name, host, port = _listener_address(config)
        properties: dict[str, object] = {
            **_defaults(),
            "bootstrap.servers": f"[{host}]:{port}" if ":" in host else f"{host}:{port}",
            "security.protocol": name,
        }
        if name.startswith("SASL_"):
            if login is None:
                raise ConsoleUnavailableError(
                    f"the broker's {name} listener needs a login, and the console has none: "
                    "turn on the web server's authentication (schema.registry.auth) or add a "
                    "PLAINTEXT listener on the loopback address"
                )
            mechanism = next(
                (m for m in _MECHANISM_PREFERENCE if m in config.sasl_enabled_mechanisms), None
            )
            if mechanism is None:
                raise ConsoleUnavailableError(
                    f"none of {', '.join(_MECHANISM_PREFERENCE)} is enabled on the broker"
                )
            properties.update(
                {"sasl.mechanism": mechanism, "sasl.username": login.user,
                 "sasl.password": login.password}
            )  # fmt: skip
        if name in ("SSL", "SASL_SSL"):
            trusted = config.ssl_ca_location or config.ssl_certificate_location
            if trusted is not None:
                properties["ssl.ca.location"] = str(trusted)
        return properties

    return settings


def _defaults() -> dict[str, object]:
    return {
        "client.id": CLIENT_ID,
        "request.timeout.ms": PAGE_TIMEOUT_MS,
        "default.api.timeout.ms": PAGE_TIMEOUT_MS,
        "socket.connection.setup.timeout.ms": 2000,
    }


def _listener_address(config: BrokerConfig) -> tuple[str, str, int]:
    """(listener name, host, port) of the listener the console uses."""
    from kayak.broker.shards import ShardRegistry  # the broker's own state, read at runtime

    listeners = {listener.name: listener for listener in config.effective_listeners}
    name = next((n for n in _PREFERENCE if n in listeners), None)
    if name is None:  # pragma: no cover - every protocol is in the preference
        raise ConsoleUnavailableError("the broker has no listener")
    for shard in ShardRegistry(config.data_dir, config.shard_count).shards():
        for listener_name, host, port in shard.listeners:
            if listener_name == name:
                return name, _reachable(host), port
    listener = listeners[name]
    if listener.port == 0:
        raise ConsoleUnavailableError("the broker is not listening yet")
    return name, _reachable(listener.host), listener.port


def _reachable(host: str) -> str:
    """A wildcard listen address is reached on the loopback interface."""
    return {"": "127.0.0.1", "0.0.0.0": "127.0.0.1", "::": "::1"}.get(host, host)
