"""DNS rebinding: without authentication the broker's web server (registry, /metrics, the
console) answers only requests whose Host is one of its own names; raw HTTP requests on a
real ``kayak broker`` process."""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from tests.registry.conftest import RegistryBroker, start_registry_broker

pytestmark = pytest.mark.timeout(90)


def raw_get(url: str, path: str, host: str | None) -> tuple[int, bytes]:
    """GET ``path`` with exactly this Host header (None: no Host line, HTTP/1.0)."""
    parts = urlsplit(url)
    with socket.create_connection((parts.hostname or "", parts.port or 80), timeout=10) as sock:
        lines = [f"GET {path} HTTP/1.{0 if host is None else 1}"]
        if host is not None:
            lines.append(f"Host: {host}")
        lines += ["Connection: close", "", ""]
        sock.sendall("\r\n".join(lines).encode())
        data = b""
        while chunk := sock.recv(65536):
            data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    return int(head.split()[1]), body


@pytest.fixture(scope="module")
def open_registry(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RegistryBroker]:
    """A plaintext broker: the registry asks for no password. registry.internal is allowed."""
    data_dir = tmp_path_factory.mktemp("host-check") / "data"
    running = start_registry_broker(
        data_dir, "--schema-registry-allowed-hosts", "Registry.Internal"
    )
    yield running
    running.broker.stop()


@pytest.mark.parametrize("path", ["/subjects", "/metrics", "/"])
def test_a_foreign_host_is_refused(open_registry: RegistryBroker, path: str) -> None:
    status, body = raw_get(open_registry.url, path, "evil.example")
    assert status == 421, body
    document = json.loads(body)
    assert document["error_code"] == 421
    assert (
        "evil.example" in document["message"] and "not a name of this server" in document["message"]
    )
    status, _ = raw_get(open_registry.url, path, "evil.example:8081")
    assert status == 421
    assert "refused GET" in open_registry.broker.log_text()


def test_own_names_are_answered(open_registry: RegistryBroker) -> None:
    port = urlsplit(open_registry.url).port
    for host in (f"127.0.0.1:{port}", f"localhost:{port}", "localhost", "[::1]:8081",
                 "app.localhost", f"{socket.gethostname()}:{port}", "registry.internal",
                 "REGISTRY.INTERNAL:1", "10.1.2.3"):  # fmt: skip
        status, body = raw_get(open_registry.url, "/subjects", host)
        assert status == 200, (host, body)
    status, _ = raw_get(open_registry.url, "/subjects", None)  # HTTP/1.0, no Host: no browser
    assert status == 200


def test_the_check_can_be_turned_off(tmp_path: Path) -> None:
    running = start_registry_broker(tmp_path / "data", "--schema-registry-allowed-hosts", "*")
    try:
        status, _ = raw_get(running.url, "/subjects", "evil.example")
        assert status == 200
    finally:
        running.broker.stop()


def test_with_authentication_the_password_decides(tmp_path: Path) -> None:
    """A registry that asks for passwords is not open to rebinding (the page has none), and
    may sit behind any name (a proxy, a load balancer): no Host check, 401 as before."""
    running = start_registry_broker(tmp_path / "data", "--schema-registry-auth")
    try:
        status, _ = raw_get(running.url, "/subjects", "evil.example")
        assert status == 401
    finally:
        running.broker.stop()
