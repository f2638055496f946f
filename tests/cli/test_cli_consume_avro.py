"""``kayak consume -s value=avro -r URL``: Confluent-framed Avro decoded through the broker's
schema registry (kcat's -s/-r), printed as JSON; undecodable records shown raw with one
line on stderr; an unreachable registry fails at once. In-process through click's runner."""

from __future__ import annotations

import json
import re
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from kayak.cli.main import cli
from kayak.client.sync import Producer
from kayak.serde.avro import AvroSerializer
from tests.broker.conftest import BrokerProcess

pytestmark = pytest.mark.timeout(120)

ORDER = {
    "type": "record",
    "name": "Order",
    "fields": [
        {"name": "id", "type": "long"},
        {"name": "item", "type": "string"},
        {"name": "raw", "type": "bytes"},
    ],
}
KEY = {"type": "record", "name": "OrderKey", "fields": [{"name": "id", "type": "long"}]}


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    process = BrokerProcess(Path(tmp_path_factory.mktemp("avro-cli")) / "data", web=True).start()
    yield process
    process.stop()


@pytest.fixture(scope="module")
def registry(broker: BrokerProcess) -> str:
    assert broker.log_path is not None
    return str(re.findall(r"schema registry on (\S+)", broker.log_path.read_text())[-1])


@pytest.fixture(scope="module")
def orders(broker: BrokerProcess, registry: str) -> str:
    """Topic ``orders``: two Avro records (Avro key and value), then a record that is not
    Avro, one framed with an unknown schema id, and a tombstone."""
    serializer = AvroSerializer(registry)
    with Producer(bootstrap_servers=broker.bootstrap_servers) as producer:
        for number, item in ((1, "kayak"), (2, "paddle")):
            producer.send_and_wait(
                "orders",
                serializer.serialize("orders-value", ORDER, {"id": number, "item": item,
                                                             "raw": b"\x00\xff"}),
                key=serializer.serialize("orders-key", KEY, {"id": number}),
            )  # fmt: skip
        producer.send_and_wait("orders", b"plain text")
        producer.send_and_wait("orders", b"\x00\x00\x00\x03\xe7" + b"\x02")  # schema id 999
        producer.send_and_wait("orders", None)
    return "orders"


def consume(broker: BrokerProcess, *args: str) -> Result:
    return CliRunner().invoke(
        cli, ["-b", broker.bootstrap_servers, "consume", *args, "-o", "beginning", "-e"]
    )


def test_avro_values_and_keys_print_as_json(
    broker: BrokerProcess, registry: str, orders: str
) -> None:
    result = consume(broker, orders, "-s", "value=avro", "-r", registry, "-Z")
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert [json.loads(line) for line in lines[:2]] == [
        {"id": 1, "item": "kayak", "raw": "AP8="},  # Avro bytes as base64
        {"id": 2, "item": "paddle", "raw": "AP8="},
    ]
    raw = result.stdout_bytes.splitlines()[2:]  # as they are, as kcat prints them
    assert raw == [b"plain text", b"\x00\x00\x00\x03\xe7\x02", b"NULL"]
    # One line per record that could not be decoded, naming it and why; no traceback.
    problems = result.stderr.splitlines()
    assert len(problems) == 2 and "Traceback" not in result.stderr
    assert problems[0].startswith("kayak consume: orders-0@2: value shown raw:")
    assert "magic byte" in problems[0]
    assert "orders-0@3" in problems[1] and "unknown schema id 999" in problems[1]

    # -J: the decoded objects in key and payload; -s avro decodes both; -X names the registry.
    result = consume(broker, orders, "-s", "avro", "-X", f"schema.registry.url={registry}",
                     "-J", "-c", "2")  # fmt: skip
    assert result.exit_code == 0, result.output
    first = json.loads(result.stdout.splitlines()[0])
    assert first["key"] == {"id": 1}
    assert first["payload"] == {"id": 1, "item": "kayak", "raw": "AP8="}
    assert result.stderr == ""

    # Only keys: values print as they are; -f's %k shows the key as JSON.
    result = consume(broker, orders, "-s", "key=avro", "-r", registry, "-f", "%k", "-c", "1")
    assert result.exit_code == 0 and result.stdout == '{"id": 1}\n', result.output


def test_registry_mistakes_are_one_line(broker: BrokerProcess, orders: str) -> None:
    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    started = time.monotonic()
    result = consume(broker, orders, "-s", "value=avro", "-r", f"http://127.0.0.1:{port}")
    assert time.monotonic() - started < 2.0  # within 2 s (and well before Kafka's timeouts)
    assert result.exit_code == 1 and result.stdout == ""
    assert result.stderr.count("\n") == 1 and "schema registry" in result.stderr, result.stderr

    missing = consume(broker, orders, "-s", "value=avro")
    assert missing.exit_code == 2 and "-r URL" in missing.stderr
    wrong = consume(broker, orders, "-s", "value=protobuf", "-r", "http://127.0.0.1:1")
    assert wrong.exit_code == 2 and "protobuf" in wrong.stderr
