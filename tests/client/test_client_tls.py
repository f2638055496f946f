"""kayak's own clients over TLS against kayak's broker: SSL and mutual TLS, asyncio and
blocking, and every refusal (untrusted CA, wrong host name, no client certificate) raised at
once as an error naming the broker and the reason."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from kayak.broker.security.listeners import parse_listeners
from kayak.broker.server import Broker
from kayak.client import Admin, Consumer, Producer, TopicPartition, sync
from kayak.client.security import SslAuthenticationError
from kayak.errors import ConfigError, KayakError
from tests.fixtures.certs import KEY_PASSWORD, TlsFiles
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


def ssl_config(broker: Broker, files: TlsFiles, **extra: object) -> dict[str, object]:
    return {
        "bootstrap.servers": broker.bootstrap_servers_for("SSL"),
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


def test_async_clients_over_tls(tls_broker: Broker, tls_files: TlsFiles) -> None:
    config = ssl_config(tls_broker, tls_files)
    assert asyncio.run(round_trip(config)) == [b"secret-0", b"secret-1", b"secret-2"]


def test_sync_clients_over_mutual_tls_with_an_encrypted_key(
    mtls_broker: Broker, tls_files: TlsFiles
) -> None:
    config = ssl_config(
        mtls_broker,
        tls_files,
        **{
            "ssl.certificate.location": str(tls_files.client_cert),
            "ssl.key.location": str(tls_files.client_encrypted_key),
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
        # The broker took the subject of our certificate as the principal.
        principals = {str(s.principal) for s in mtls_broker.connection_sessions()}
    assert record.value == b"over mutual TLS"
    assert any("CN=alice" in p for p in principals), principals


def test_an_untrusted_broker_certificate_fails_at_once(
    tls_broker: Broker, tls_files: TlsFiles
) -> None:
    config = ssl_config(
        tls_broker, tls_files, **PATIENT, **{"ssl.ca.location": str(tls_files.rogue_ca)}
    )

    async def start() -> None:
        async with Producer(config):
            pass

    with pytest.raises(SslAuthenticationError) as info:
        asyncio.run(start())
    message = str(info.value)
    assert tls_broker.bootstrap_servers_for("SSL") in message
    assert "certificate verify failed" in message and "ssl.ca.location" in message


def test_a_certificate_for_another_host_fails_unless_the_check_is_off(
    tmp_path: Path, tls_files: TlsFiles
) -> None:
    with _broker(
        tmp_path / "data", tls_files, tls_files.wrong_host_cert, tls_files.wrong_host_key
    ) as broker:
        config = ssl_config(broker, tls_files, **PATIENT)
        with pytest.raises(SslAuthenticationError, match="not for this host name") as info:
            sync.Admin(config)
        assert broker.bootstrap_servers_for("SSL") in str(info.value)
        unchecked = {**config, "ssl.endpoint.identification.algorithm": "none"}
        with sync.Admin(unchecked) as admin:
            assert admin.describe_cluster().brokers


def test_a_broker_wanting_a_client_certificate_says_so(
    mtls_broker: Broker, tls_files: TlsFiles
) -> None:
    """Under TLS 1.3 the broker refuses a missing (or untrusted) client certificate by
    closing the connection after the handshake, which a broker at its connection limit also
    does: retried, but the error says what to check."""
    config = ssl_config(mtls_broker, tls_files, **{"request.timeout.ms": 1_000})
    rogue = {
        **config,
        "ssl.certificate.location": str(tls_files.rogue_client_cert),
        "ssl.key.location": str(tls_files.rogue_client_key),
    }
    for settings in (config, rogue):
        with pytest.raises(KayakError, match=r"set ssl\.certificate\.location") as info:
            sync.Admin(settings)
        assert mtls_broker.bootstrap_servers_for("SSL") in str(info.value)


def test_a_wrong_key_password_is_a_config_error(mtls_broker: Broker, tls_files: TlsFiles) -> None:
    config = ssl_config(
        mtls_broker,
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
