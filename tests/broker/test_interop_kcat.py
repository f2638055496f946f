"""kcat (the Debian build, its own librdkafka) against the real broker process."""

from __future__ import annotations

import json
import shutil
import subprocess

import pytest

from tests.broker.conftest import BrokerProcess
from tests.broker.interop_helpers import CODECS, check_codecs, create_topic, stored_batches, unique

KCAT = shutil.which("kcat") or shutil.which("kafkacat")

pytestmark = pytest.mark.skipif(KCAT is None, reason="kcat is not installed (apt install kcat)")


def kcat(*args: str, stdin: bytes | None = None, timeout: float = 30) -> str:
    assert KCAT is not None
    done = subprocess.run(
        [KCAT, *args], input=stdin, capture_output=True, timeout=timeout, check=False
    )
    assert done.returncode == 0, (
        f"kcat {' '.join(args)} exited {done.returncode}: {done.stderr.decode(errors='replace')}"
    )
    return done.stdout.decode()


@pytest.mark.timeout(60)
@pytest.mark.parametrize("codec", CODECS)
def test_produce_and_consume_every_codec(broker_process: BrokerProcess, codec: str) -> None:
    bootstrap = broker_process.bootstrap_servers
    topic = unique(f"kcat-{codec}")
    create_topic(bootstrap, topic, 1)
    lines = [f"key-{i % 5}:value {i} {'y' * (i * 13 % 300)}" for i in range(200)]
    kcat(
        "-P", "-b", bootstrap, "-t", topic, "-K:", "-z", codec,
        "-H", "source=kcat", "-X", "linger.ms=20",
        stdin="".join(line + "\n" for line in lines).encode(),
    )  # fmt: skip
    out = kcat("-C", "-b", bootstrap, "-t", topic, "-e", "-q", "-f", "%k=%s|%h|%o\n")
    expected = [
        f"{key}={value}|source=kcat|{offset}"
        for offset, (key, value) in enumerate(line.split(":", 1) for line in lines)
    ]
    assert out.splitlines() == expected
    stored = stored_batches(bootstrap, topic, 1)
    check_codecs(stored, codec)

    plain = kcat("-C", "-b", bootstrap, "-t", topic, "-e", "-q", "-f", "%k=%s\n")
    assert plain.splitlines() == [line.replace(":", "=", 1) for line in lines]


@pytest.mark.timeout(30)
def test_metadata_listing(broker_process: BrokerProcess) -> None:
    bootstrap = broker_process.bootstrap_servers
    port = bootstrap.rsplit(":", 1)[1]
    topic = unique("kcat-listed")
    create_topic(bootstrap, topic, 3)

    text = kcat("-L", "-b", bootstrap)
    assert " 1 brokers:" in text
    assert f"broker 0 at 127.0.0.1:{port}" in text
    assert f'topic "{topic}" with 3 partitions:' in text
    for p in range(3):
        assert f"partition {p}, leader 0, replicas: 0, isrs: 0" in text
    assert "__consumer_offsets" not in text, "internal topics are listed only when asked for"

    listing = json.loads(kcat("-L", "-J", "-b", bootstrap, "-t", topic))
    assert listing["brokers"] == [{"id": 0, "name": f"127.0.0.1:{port}"}]
    (described,) = listing["topics"]
    assert described["topic"] == topic
    assert "error" not in described, described
    partitions = sorted(described["partitions"], key=lambda p: p["partition"])
    assert [p["partition"] for p in partitions] == [0, 1, 2]
    for p in partitions:
        assert p["leader"] == 0
        assert p["replicas"] == [{"id": 0}]
        assert p["isrs"] == [{"id": 0}]
        assert "error" not in p, p

    missing = json.loads(kcat("-L", "-J", "-b", bootstrap, "-t", unique("kcat-auto")))
    (auto,) = missing["topics"]
    # librdkafka's metadata request allows auto-creation; kayak's default creates the topic.
    assert "error" not in auto and len(auto["partitions"]) == 1, auto
