"""TLS listeners: confluent-kafka, kafka-python and aiokafka over SSL, mutual TLS, refusals,
and fetches over TLS (which cannot use sendfile) returning exactly what was produced."""

from __future__ import annotations

import asyncio
import ssl
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from kayak.broker.security.listeners import parse_listeners
from kayak.broker.security.principal import Principal
from kayak.broker.server import Broker
from kayak.protocol.messages import (
    ApiVersionsRequest,
    CreateTopicsRequest,
    FetchRequest,
    ProduceRequest,
)
from kayak.protocol.messages.create_topics_request import CreatableTopic
from kayak.protocol.messages.fetch_request import FetchPartition, FetchTopic
from kayak.protocol.messages.produce_request import PartitionProduceData, TopicProduceData
from kayak.protocol.records import build_record_batch, parse_batches
from tests.broker.wire import WireClient
from tests.fixtures.certs import TlsFiles
from tests.security.threaded_broker import ThreadedBroker
from tests.security.tls_wire import TlsWireClient

pytestmark = pytest.mark.timeout(90)

LISTENERS = parse_listeners("PLAINTEXT://127.0.0.1:0,SSL://127.0.0.1:0")
ALICE = Principal("User", "CN=alice,O=kayak tests")


def tls_settings(files: TlsFiles, *, mutual: bool = False, **extra: Any) -> dict[str, Any]:
    return {
        "listeners": LISTENERS,
        "ssl_certificate_location": files.server_cert,
        "ssl_key_location": files.server_key,
        "ssl_ca_location": files.ca if mutual else None,
        "allow_everyone_if_no_acl_found": True,  # ACLs are not what these tests are about
        **extra,
    }


@pytest.fixture
def tls_broker(tmp_path: Path, tls_files: TlsFiles) -> Iterator[Broker]:
    with ThreadedBroker(tmp_path / "data", **tls_settings(tls_files)) as broker:
        yield broker


@pytest.fixture
def mtls_broker(tmp_path: Path, tls_files: TlsFiles) -> Iterator[Broker]:
    with ThreadedBroker(tmp_path / "data", **tls_settings(tls_files, mutual=True)) as broker:
        yield broker


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


# -- third-party clients over SSL ------------------------------------------------------------


def confluent_round_trip(
    bootstrap: str, topic: str, config: dict[str, Any], n: int
) -> list[bytes | None]:
    from confluent_kafka import Consumer, Producer

    producer = Producer({"bootstrap.servers": bootstrap, **config})
    for i in range(n):
        producer.produce(topic, f"v{i}".encode())
    assert producer.flush(20) == 0
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": unique("g"),
            "auto.offset.reset": "earliest",
            **config,
        }
    )
    consumer.subscribe([topic])
    values: list[bytes | None] = []
    try:
        for _ in range(100):
            if len(values) >= n:
                break
            for message in consumer.consume(n, timeout=0.5):
                assert message.error() is None, message.error()
                values.append(message.value())
    finally:
        consumer.close()
    return values


def test_confluent_kafka_over_ssl(tls_broker: Broker, tls_files: TlsFiles) -> None:
    topic = unique("ssl")
    config = {"security.protocol": "SSL", "ssl.ca.location": str(tls_files.ca)}
    values = confluent_round_trip(tls_broker.bootstrap_servers_for("SSL"), topic, config, 20)
    assert values == [f"v{i}".encode() for i in range(20)]


def test_kafka_python_over_ssl(tls_broker: Broker, tls_files: TlsFiles) -> None:
    from kafka import KafkaConsumer, KafkaProducer

    topic = unique("kp")
    bootstrap = tls_broker.bootstrap_servers_for("SSL")
    ssl_args: dict[str, Any] = {
        "security_protocol": "SSL",
        "ssl_cafile": str(tls_files.ca),
        "ssl_check_hostname": True,
    }
    producer = KafkaProducer(bootstrap_servers=bootstrap, **ssl_args)
    for i in range(10):
        producer.send(topic, f"k{i}".encode())
    producer.flush(20)
    producer.close()
    consumer = KafkaConsumer(
        topic,
        bootstrap_servers=bootstrap,
        auto_offset_reset="earliest",
        consumer_timeout_ms=5000,
        **ssl_args,
    )
    values = [message.value for _, message in zip(range(10), consumer, strict=False)]
    consumer.close()
    assert values == [f"k{i}".encode() for i in range(10)]


def test_aiokafka_over_mutual_tls(mtls_broker: Broker, tls_files: TlsFiles) -> None:
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
    from aiokafka.helpers import create_ssl_context

    topic = unique("aio")
    bootstrap = mtls_broker.bootstrap_servers_for("SSL")

    async def scenario() -> list[bytes]:
        context = create_ssl_context(
            cafile=str(tls_files.ca),
            certfile=str(tls_files.client_cert),
            keyfile=str(tls_files.client_encrypted_key),
            password="key-secret",
        )
        producer = AIOKafkaProducer(
            bootstrap_servers=bootstrap, security_protocol="SSL", ssl_context=context
        )
        await producer.start()
        try:
            for i in range(10):
                await producer.send_and_wait(topic, f"a{i}".encode())
        finally:
            await producer.stop()
        consumer = AIOKafkaConsumer(
            topic,
            bootstrap_servers=bootstrap,
            security_protocol="SSL",
            ssl_context=context,
            auto_offset_reset="earliest",
        )
        await consumer.start()
        try:
            values: list[bytes] = []
            while len(values) < 10:
                batch = await asyncio.wait_for(consumer.getmany(timeout_ms=500), 10)
                values += [m.value for ms in batch.values() for m in ms]
            return values
        finally:
            await consumer.stop()

    assert asyncio.run(scenario()) == [f"a{i}".encode() for i in range(10)]


# -- mutual TLS ------------------------------------------------------------------------------


def test_mutual_tls_principal_is_the_certificate_subject(
    mtls_broker: Broker, tls_files: TlsFiles
) -> None:
    topic = unique("mtls")
    config = {
        "security.protocol": "SSL",
        "ssl.ca.location": str(tls_files.ca),
        "ssl.certificate.location": str(tls_files.client_cert),
        "ssl.key.location": str(tls_files.client_key),
    }
    values = confluent_round_trip(mtls_broker.bootstrap_servers_for("SSL"), topic, config, 5)
    assert len(values) == 5
    client = TlsWireClient(
        mtls_broker.bootstrap_servers_for("SSL"),
        tls_files,
        cert=tls_files.client_cert,
        key=tls_files.client_key,
    )
    try:
        client.request(ApiVersionsRequest(), 0)
        principals = {
            s.principal for s in mtls_broker.connection_sessions() if s.listener.name == "SSL"
        }
        assert ALICE in principals
        plaintext = {
            s.principal for s in mtls_broker.connection_sessions() if s.listener.name != "SSL"
        }
        assert ALICE not in plaintext
    finally:
        client.close()


def refused(bootstrap: str, files: TlsFiles, cert: Path | None, key: Path | None) -> bool:
    """True if the broker refuses the client (handshake alert, or closes before answering)."""
    try:
        client = TlsWireClient(bootstrap, files, cert=cert, key=key)
    except (ssl.SSLError, ConnectionError):
        return True
    try:
        # TLS 1.3: the server checks the client's certificate after the client considers
        # the handshake done, so the refusal arrives as the answer to the first request.
        client.request(ApiVersionsRequest(), 0)
    except (ssl.SSLError, ConnectionError):
        return True
    finally:
        client.close()
    return False


def test_mutual_tls_refuses_unknown_and_missing_client_certificates(
    mtls_broker: Broker, tls_files: TlsFiles
) -> None:
    bootstrap = mtls_broker.bootstrap_servers_for("SSL")
    assert refused(bootstrap, tls_files, tls_files.rogue_client_cert, tls_files.rogue_client_key)
    assert refused(bootstrap, tls_files, None, None)
    assert not refused(bootstrap, tls_files, tls_files.client_cert, tls_files.client_key)
    # ...and the plaintext listener of the same broker still serves.
    plain = WireClient(mtls_broker.bootstrap_servers_for("PLAINTEXT"))
    try:
        assert plain.request(ApiVersionsRequest(), 0).error_code == 0  # type: ignore[attr-defined]
    finally:
        plain.close()


def test_confluent_refuses_a_broker_certificate_for_another_host(
    tmp_path: Path, tls_files: TlsFiles
) -> None:
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient

    settings = tls_settings(tls_files)
    settings["ssl_certificate_location"] = tls_files.wrong_host_cert
    settings["ssl_key_location"] = tls_files.wrong_host_key
    errors: list[str] = []
    with ThreadedBroker(tmp_path / "data", **settings) as broker:
        config: dict[str, Any] = {
            "bootstrap.servers": broker.bootstrap_servers_for("SSL"),
            "security.protocol": "SSL",
            "ssl.ca.location": str(tls_files.ca),
            "ssl.endpoint.identification.algorithm": "https",
            "error_cb": lambda error: errors.append(str(error)),
        }
        admin = AdminClient(config)
        with pytest.raises(KafkaException):
            admin.list_topics(timeout=3)
        admin.poll(0.5)  # delivers the errors to error_cb
        with pytest.raises(ssl.SSLCertVerificationError):
            TlsWireClient(broker.bootstrap_servers_for("SSL"), tls_files)
    assert any("certificate verify failed" in error for error in errors), errors


# -- fetch over TLS --------------------------------------------------------------------------


def produce(client: TlsWireClient, topic: str, batch: bytes) -> None:
    data = TopicProduceData(topic, [PartitionProduceData(0, batch)])
    response = client.request(ProduceRequest(acks=-1, timeout_ms=5000, topic_data=[data]), 9)
    assert response.responses[0].partition_responses[0].error_code == 0  # type: ignore[attr-defined]


def fetch_all(client: TlsWireClient, topic: str, expected: int) -> list[bytes | None]:
    values: list[bytes | None] = []
    offset = 0
    while len(values) < expected:
        request = FetchRequest(
            max_wait_ms=0,
            max_bytes=4 << 20,
            topics=[
                FetchTopic(
                    topic=topic,
                    partitions=[
                        FetchPartition(0, fetch_offset=offset, partition_max_bytes=3 << 20)
                    ],
                )
            ],
        )
        partition = client.request(request, 12).responses[0].partitions[0]  # type: ignore[attr-defined]
        assert partition.error_code == 0
        batches = list(parse_batches(partition.records))
        assert batches, f"nothing fetched at offset {offset}"
        for batch in batches:
            values += [r.value for r in batch if r.offset >= offset]
            offset = batch.next_offset
    return values


def test_fetch_over_tls_returns_exactly_what_was_produced(
    tls_broker: Broker, tls_files: TlsFiles
) -> None:
    topic = unique("big")
    client = TlsWireClient(tls_broker.bootstrap_servers_for("SSL"), tls_files)
    try:
        topics = [CreatableTopic(name=topic, num_partitions=1, replication_factor=1)]
        created = client.request(CreateTopicsRequest(topics=topics), 5)
        assert created.topics[0].error_code == 0  # type: ignore[attr-defined]
        values = [bytes([i % 251]) * 1000 + i.to_bytes(4, "big") for i in range(6000)]
        for start in range(0, len(values), 500):  # ~0.5 MB per batch, ~6 MB in all
            produce(client, topic, build_record_batch(values[start : start + 500]))
        assert fetch_all(client, topic, len(values)) == values
    finally:
        client.close()
