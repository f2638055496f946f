"""Registry fixtures: a real ``kayak broker`` process serving the registry on a free port."""

from __future__ import annotations

import base64
import http.client
import json
import re
import ssl
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

from tests.broker.conftest import BrokerProcess

_REGISTRY = re.compile(r"schema registry on (https?://[\d.]+:\d+)")


def registry_url(broker: BrokerProcess) -> str:
    """The URL the broker's latest start announced (the line precedes ``listening on``)."""
    found = _REGISTRY.findall(broker.log_text())
    assert found, f"no registry (started with web=True?): {broker.log_text()[-2000:]}"
    return str(found[-1])


@dataclass
class Answer:
    status: int
    document: Any
    headers: dict[str, str]
    raw: bytes


def call(url: str, method: str, path: str, body: Any = None, raw: bytes | None = None,
         headers: dict[str, str] | None = None, *, auth: tuple[str, str] | None = None,
         tls: ssl.SSLContext | None = None) -> Answer:  # fmt: skip
    """One HTTP(S) request on a fresh connection; the answer's JSON (or None if not JSON).

    ``auth``: (user, password) for HTTP basic; ``tls``: the client context for https URLs.
    """
    parts = urlsplit(url)
    connection: http.client.HTTPConnection
    if parts.scheme == "https":
        connection = http.client.HTTPSConnection(
            parts.hostname or "", parts.port, timeout=10, context=tls
        )
    else:
        connection = http.client.HTTPConnection(parts.hostname or "", parts.port, timeout=10)
    try:
        payload = raw if raw is not None else None if body is None else json.dumps(body).encode()
        sent = {"Content-Type": "application/vnd.schemaregistry.v1+json", **(headers or {})}
        if auth is not None:
            token = base64.b64encode(f"{auth[0]}:{auth[1]}".encode()).decode()
            sent["Authorization"] = f"Basic {token}"
        connection.request(method, path, body=payload, headers=sent)
        response = connection.getresponse()
        data = response.read()
        try:
            document = json.loads(data) if data else None
        except ValueError:
            document = None
        return Answer(response.status, document, dict(response.getheaders()), data)
    finally:
        connection.close()


def record_schema(name: str, *fields: tuple[str, Any] | tuple[str, Any, Any]) -> str:
    """A record schema as text; a field is (name, type) or (name, type, default)."""
    out = []
    for f in fields:
        entry: dict[str, Any] = {"name": f[0], "type": f[1]}
        if len(f) == 3:
            entry["default"] = f[2]
        out.append(entry)
    return json.dumps({"type": "record", "name": name, "fields": out})


@dataclass
class RegistryBroker:
    broker: BrokerProcess
    url: str

    def restart(self) -> None:
        self.broker.stop()
        self.broker.start()
        self.url = registry_url(self.broker)


def start_registry_broker(data_dir: Path, *extra: str) -> RegistryBroker:
    broker = BrokerProcess(data_dir, extra_args=["--schema-registry-port", "0", *extra]).start()
    return RegistryBroker(broker, registry_url(broker))


@pytest.fixture(scope="package")
def shared_registry(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RegistryBroker]:
    """One broker for the tests that only add subjects of their own (fast)."""
    running = start_registry_broker(tmp_path_factory.mktemp("registry") / "data")
    yield running
    running.broker.stop()


@pytest.fixture
def url(shared_registry: RegistryBroker) -> str:
    return shared_registry.url


@pytest.fixture
def own_registry(tmp_path: Path) -> Iterator[RegistryBroker]:
    """A broker of this test's own, for restarts and global settings."""
    running = start_registry_broker(tmp_path / "data")
    yield running
    if running.broker.process is not None:
        running.broker.stop()


@pytest.fixture
def subject() -> str:
    """A subject no other test uses."""
    return f"subject-{uuid.uuid4().hex[:10]}"
