"""Listeners as Kafka spells them: ``PLAINTEXT://127.0.0.1:9092,SASL_SSL://0.0.0.0:9093``.

A listener's name is its security protocol (kayak has no ``listener.security.protocol.map``).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from kayak.errors import ConfigError


class SecurityProtocol(Enum):
    """Kafka's ``security.protocol`` values."""

    PLAINTEXT = "PLAINTEXT"
    SSL = "SSL"
    SASL_PLAINTEXT = "SASL_PLAINTEXT"
    SASL_SSL = "SASL_SSL"

    @property
    def uses_tls(self) -> bool:
        return self in (SecurityProtocol.SSL, SecurityProtocol.SASL_SSL)

    @property
    def uses_sasl(self) -> bool:
        return self in (SecurityProtocol.SASL_PLAINTEXT, SecurityProtocol.SASL_SSL)


@dataclass(frozen=True, slots=True)
class Listener:
    """One address the broker listens on (or advertises), and how clients must talk to it."""

    protocol: SecurityProtocol
    host: str
    port: int

    @property
    def name(self) -> str:
        return self.protocol.value

    def __str__(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{self.name}://{host}:{self.port}"


def parse_listeners(text: str, what: str = "listeners") -> tuple[Listener, ...]:
    """Parse a comma-separated listener list; ``ConfigError`` naming the bad entry.

    Each protocol may appear once (it is the listener's name). An empty host means all
    interfaces, as in Kafka (``PLAINTEXT://:9092``).
    """
    listeners: list[Listener] = []
    for entry in (part.strip() for part in text.split(",")):
        if not entry:
            continue
        listener = _parse_one(entry, what)
        if any(other.protocol is listener.protocol for other in listeners):
            raise ConfigError(what, f"names {listener.name} twice")
        listeners.append(listener)
    if not listeners:
        raise ConfigError(what, "is empty; e.g. PLAINTEXT://127.0.0.1:9092")
    return tuple(listeners)


def _parse_one(entry: str, what: str) -> Listener:
    name, sep, address = entry.partition("://")
    if not sep:
        raise ConfigError(what, f"{entry!r} is not NAME://HOST:PORT")
    try:
        protocol = SecurityProtocol(name.upper())
    except ValueError:
        known = ", ".join(p.value for p in SecurityProtocol)
        raise ConfigError(what, f"{entry!r}: {name!r} is not one of {known}") from None
    host, sep, port_text = address.rpartition(":")
    if not sep or not port_text.isdigit() or not 0 <= int(port_text) <= 65535:
        raise ConfigError(what, f"{entry!r} has no valid port")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    return Listener(protocol, host or "0.0.0.0", int(port_text))
