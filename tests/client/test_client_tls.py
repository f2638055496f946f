"""kayak's own clients over TLS against kayak's broker and Apache Kafka (its ``SSL`` and
``MTLS`` listeners, PEM key stores): SSL and mutual TLS, asyncio and blocking, and every refusal
(untrusted CA, wrong host name, no client certificate) raised at once as an error naming the
broker and the reason. A certificate for another host name needs a broker of its own: kayak's
only."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import ssl
import threading
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from kayak.broker.security.listeners import parse_listeners
from kayak.broker.server import Broker
from kayak.client import Admin, Consumer, Producer, TopicPartition, sync
from kayak.client.security import SslAuthenticationError
from kayak.errors import ConfigError, KayakError
from tests.fixtures.certs import KEY_PASSWORD, TlsFiles
from tests.fixtures.jvm import SecuredApacheKafka
from tests.security.threaded_broker import ThreadedBroker

pytestmark = pytest.mark.timeout(60)

# Long enough that a client retrying an authentication failure would outlast the test's
# timeout: these failures must come back at once.
PATIENT = {"request.timeout.ms": 100_000}


def _broker(path: Path, files: TlsFiles, cert: Path, key: Path, **extra: Any) -> ThreadedBroker:
    return ThreadedBroker(
        path,
        listeners=parse_listeners("SSL://127.0.0.1:0"),
        ssl_certificate_location=cert,
        ssl_key_location=key,
        allow_everyone_if_no_acl_found=True,  # ACLs are not what these tests are about
        **extra,
    )


@pytest.fixture(scope="module")
def tls_broker(tmp_path_factory: pytest.TempPathFactory, tls_files: TlsFiles) -> Iterator[Broker]:
    path = tmp_path_factory.mktemp("tls-broker")
    with _broker(path, tls_files, tls_files.server_cert, tls_files.server_key) as broker:
        yield broker


@pytest.fixture(scope="module")
def mtls_broker(tmp_path_factory: pytest.TempPathFactory, tls_files: TlsFiles) -> Iterator[Broker]:
    path = tmp_path_factory.mktemp("mtls-broker")
    with _broker(
        path, tls_files, tls_files.server_cert, tls_files.server_key, ssl_ca_location=tls_files.ca
    ) as broker:
        yield broker


@dataclass
class TlsTarget:
    """A broker's TLS listeners: ``tls`` (no client certificate asked) and ``mtls`` (one
    required), and the certificates its CA signed."""

    kind: str
    tls: str
    mtls: str
    files: TlsFiles
    broker: Broker | None = None  # kayak's mutual-TLS broker, to ask for its sessions


@pytest.fixture(params=["kayak", "apache-kafka"])
def target(request: pytest.FixtureRequest, tls_files: TlsFiles) -> TlsTarget:
    if request.param == "apache-kafka":
        kafka: SecuredApacheKafka = request.getfixturevalue("apache_kafka_secured")
        assert kafka.tls is not None
        return TlsTarget(
            "apache-kafka",
            kafka.bootstrap_servers_for("SSL"),
            kafka.bootstrap_servers_for("MTLS"),
            kafka.tls,
        )
    tls: Broker = request.getfixturevalue("tls_broker")
    mtls: Broker = request.getfixturevalue("mtls_broker")
    return TlsTarget(
        "kayak",
        tls.bootstrap_servers_for("SSL"),
        mtls.bootstrap_servers_for("SSL"),
        tls_files,
        mtls,
    )


def ssl_config(address: str, files: TlsFiles, **extra: object) -> dict[str, object]:
    return {
        "bootstrap.servers": address,
        "security.protocol": "SSL",
        "ssl.ca.location": str(files.ca),
        **extra,
    }


async def round_trip(config: dict[str, object]) -> list[bytes]:
    """Create a topic, produce three records and read them back, all over ``config``."""
    topic = f"tls-{uuid.uuid4().hex[:8]}"
    async with Admin(config) as admin:
        await admin.create_topics([topic])
    async with Producer(config) as producer:
        for i in range(3):
            await producer.send_and_wait(topic, b"secret-%d" % i)
    async with Consumer(config, auto_offset_reset="earliest") as consumer:
        consumer.assign([TopicPartition(topic, 0)])
        found: list[bytes] = []
        while len(found) < 3:
            batches = await consumer.getmany(timeout_ms=5_000)
            found += [r.value for records in batches.values() for r in records if r.value]
    return found


def test_async_clients_over_tls(target: TlsTarget) -> None:
    config = ssl_config(target.tls, target.files)
    assert asyncio.run(round_trip(config)) == [b"secret-0", b"secret-1", b"secret-2"]


def test_sync_clients_over_mutual_tls_with_an_encrypted_key(target: TlsTarget) -> None:
    files = target.files
    config = ssl_config(
        target.mtls,
        files,
        **{
            "ssl.certificate.location": str(files.client_cert),
            "ssl.key.location": str(files.client_encrypted_key),
            "ssl.key.password": KEY_PASSWORD,
        },
    )
    topic = f"mtls-{uuid.uuid4().hex[:8]}"
    with sync.Admin(config) as admin:
        admin.create_topics([topic])
    with sync.Producer(config) as producer:
        producer.send_and_wait(topic, b"over mutual TLS")
    with sync.Consumer(config, auto_offset_reset="earliest") as consumer:
        consumer.assign([TopicPartition(topic, 0)])
        record = consumer.getone()
        # kayak's broker took the subject of our certificate as the principal (Apache Kafka
        # does not say; that it let the connection through shows it took the certificate).
        if target.broker is not None:
            principals = {str(s.principal) for s in target.broker.connection_sessions()}
            assert any("CN=alice" in p for p in principals), principals
    assert record.value == b"over mutual TLS"


def test_an_untrusted_broker_certificate_fails_at_once(target: TlsTarget) -> None:
    config = ssl_config(
        target.tls, target.files, **PATIENT, **{"ssl.ca.location": str(target.files.rogue_ca)}
    )

    async def start() -> None:
        async with Producer(config):
            pass

    with pytest.raises(SslAuthenticationError) as info:
        asyncio.run(start())
    message = str(info.value)
    assert target.tls in message
    assert "certificate verify failed" in message and "ssl.ca.location" in message


@pytest.mark.kayak_only("a broker whose certificate names another host: one of the test's own")
def test_a_certificate_for_another_host_fails_unless_the_check_is_off(
    tmp_path: Path, tls_files: TlsFiles
) -> None:
    with _broker(
        tmp_path / "data", tls_files, tls_files.wrong_host_cert, tls_files.wrong_host_key
    ) as broker:
        config = ssl_config(broker.bootstrap_servers_for("SSL"), tls_files, **PATIENT)
        with pytest.raises(SslAuthenticationError, match="not for this host name") as info:
            sync.Admin(config)
        assert broker.bootstrap_servers_for("SSL") in str(info.value)
        unchecked = {**config, "ssl.endpoint.identification.algorithm": "none"}
        with sync.Admin(unchecked) as admin:
            assert admin.describe_cluster().brokers


def test_a_broker_wanting_a_client_certificate_says_so(target: TlsTarget) -> None:
    """Under TLS 1.3 the broker refuses a missing (or untrusted) client certificate by
    closing the connection after the handshake, which a broker at its connection limit also
    does: retried, but the error says what to check."""
    config = ssl_config(target.mtls, target.files, **{"request.timeout.ms": 1_000})
    rogue = {
        **config,
        "ssl.certificate.location": str(target.files.rogue_client_cert),
        "ssl.key.location": str(target.files.rogue_client_key),
    }
    for settings in (config, rogue):
        with pytest.raises(KayakError, match=r"set ssl\.certificate\.location") as info:
            sync.Admin(settings)
        assert target.mtls in str(info.value)


def test_a_wrong_key_password_is_a_config_error(mtls_broker: Broker, tls_files: TlsFiles) -> None:
    config = ssl_config(
        mtls_broker.bootstrap_servers_for("SSL"),
        tls_files,
        **{
            "ssl.certificate.location": str(tls_files.client_cert),
            "ssl.key.location": str(tls_files.client_encrypted_key),
            "ssl.key.password": "not-it",
        },
    )
    with pytest.raises(ConfigError) as info:
        sync.Consumer(config)
    assert info.value.name == "ssl.key.password" and "not-it" not in str(info.value)


def test_a_client_certificate_refused_during_the_handshake_is_named(tls_files: TlsFiles) -> None:
    """A TLS 1.2 broker refuses an untrusted client certificate with an alert in the
    handshake (OpenSSL: unknown_ca; Java, so Apache Kafka: certificate_unknown, or
    bad_certificate when there is none, asserted above): the error says what to set. The
    broker here is a bare TLS server (in a thread: asyncio's would drop the alert)."""
    server_context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server_context.maximum_version = ssl.TLSVersion.TLSv1_2
    server_context.load_cert_chain(tls_files.server_cert, tls_files.server_key)
    server_context.load_verify_locations(tls_files.ca)
    server_context.verify_mode = ssl.CERT_REQUIRED
    listener = socket.create_server(("127.0.0.1", 0))
    address = f"127.0.0.1:{listener.getsockname()[1]}"

    def serve() -> None:
        with contextlib.suppress(OSError):  # ssl.SSLError too: the refusal itself
            connection, _ = listener.accept()
            with server_context.wrap_socket(connection, server_side=True):
                pass

    server = threading.Thread(target=serve, daemon=True)
    server.start()
    config = ssl_config(
        address,
        tls_files,
        **PATIENT,
        **{
            "ssl.certificate.location": str(tls_files.rogue_client_cert),
            "ssl.key.location": str(tls_files.rogue_client_key),
        },
    )
    try:
        with pytest.raises(SslAuthenticationError) as info:
            sync.Admin(config)
    finally:
        listener.close()
        server.join(10)
    message = str(info.value)
    assert address in message and "unknown ca" in message.lower()
    assert "set ssl.certificate.location" in message
