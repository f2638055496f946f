"""Several listeners at once: each answers Metadata, DescribeCluster and FindCoordinator with
its own (or its advertised) address, in one broker and across ``kayak broker --shards``."""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from kayak.broker.security.listeners import parse_listeners
from kayak.broker.server import Broker
from kayak.protocol import Message
from kayak.protocol.messages import (
    DescribeClusterRequest,
    FindCoordinatorRequest,
    MetadataRequest,
)
from tests.broker.wire import WireClient
from tests.fixtures.certs import TlsFiles
from tests.security.threaded_broker import ThreadedBroker
from tests.security.tls_wire import TlsWireClient

pytestmark = pytest.mark.timeout(60)

Address = tuple[str, int]


def tls_settings(files: TlsFiles, listeners: str, advertised: str = "") -> dict[str, object]:
    return {
        "listeners": parse_listeners(listeners),
        "advertised_listeners": (
            parse_listeners(advertised, "advertised.listeners") if advertised else ()
        ),
        "ssl_certificate_location": files.server_cert,
        "ssl_key_location": files.server_key,
        # ACLs are not what these tests are about
        "allow_everyone_if_no_acl_found": True,
    }


def addresses_seen(client: WireClient | TlsWireClient) -> dict[str, set[Address]]:
    """The broker addresses each cluster API answers with on ``client``'s connection."""
    metadata: Message = client.request(MetadataRequest(topics=None), 12)
    cluster: Message = client.request(DescribeClusterRequest(), 0)
    coordinator: Message = client.request(FindCoordinatorRequest(key="g"), 1)
    old_coordinator: Message = client.request(FindCoordinatorRequest(key="g"), 0)
    return {
        "metadata": {(b.host, b.port) for b in metadata.brokers},  # type: ignore[attr-defined]
        "describe_cluster": {(b.host, b.port) for b in cluster.brokers},  # type: ignore[attr-defined]
        "find_coordinator": {
            (coordinator.host, coordinator.port),  # type: ignore[attr-defined]
            (old_coordinator.host, old_coordinator.port),  # type: ignore[attr-defined]
        },
    }


def seen_on(broker: Broker, protocol: str, files: TlsFiles) -> dict[str, set[Address]]:
    """addresses_seen through the listener of ``protocol``, connecting to where it listens."""
    host, port = broker.bound_address(protocol)  # the advertised one may not resolve here
    bound = f"{host}:{port}"
    client: WireClient | TlsWireClient
    client = TlsWireClient(bound, files) if protocol == "SSL" else WireClient(bound)
    try:
        return addresses_seen(client)
    finally:
        client.close()


@pytest.fixture
def two_listeners(tmp_path: Path, tls_files: TlsFiles) -> Iterator[Broker]:
    settings = tls_settings(tls_files, "PLAINTEXT://127.0.0.1:0,SSL://127.0.0.1:0")
    with ThreadedBroker(tmp_path / "data", **settings) as broker:
        yield broker


def test_each_listener_answers_with_its_own_address(
    two_listeners: Broker, tls_files: TlsFiles
) -> None:
    broker = two_listeners
    plain = broker.listener_address("PLAINTEXT")
    tls = broker.listener_address("SSL")
    assert plain != tls
    assert broker.bootstrap_servers == f"{plain[0]}:{plain[1]}"  # the first listener
    for api, seen in seen_on(broker, "PLAINTEXT", tls_files).items():
        assert seen == {plain}, api
    for api, seen in seen_on(broker, "SSL", tls_files).items():
        assert seen == {tls}, api


def test_advertised_listeners_are_what_clients_are_told(
    tmp_path: Path, tls_files: TlsFiles
) -> None:
    settings = tls_settings(
        tls_files,
        "PLAINTEXT://127.0.0.1:0,SSL://127.0.0.1:0",
        advertised="PLAINTEXT://kafka.example:19092,SSL://localhost:0",
    )
    with ThreadedBroker(tmp_path / "data", **settings) as broker:
        ssl_port = broker.listener_address("SSL")[1]
        for api, seen in seen_on(broker, "PLAINTEXT", tls_files).items():
            assert seen == {("kafka.example", 19092)}, api
        for api, seen in seen_on(broker, "SSL", tls_files).items():
            assert seen == {("localhost", ssl_port)}, api  # port 0: the port bound


def test_a_listener_port_in_use_stops_the_start(tmp_path: Path, tls_files: TlsFiles) -> None:
    with ThreadedBroker(tmp_path / "a", **tls_settings(tls_files, "PLAINTEXT://127.0.0.1:0")) as a:
        taken = a.listener_address("PLAINTEXT")[1]
        settings = tls_settings(tls_files, f"SSL://127.0.0.1:0,PLAINTEXT://127.0.0.1:{taken}")
        second = ThreadedBroker(tmp_path / "b", **settings)
        with pytest.raises(OSError, match=f"PLAINTEXT://127.0.0.1:{taken}"):
            second.__enter__()


# -- shards ----------------------------------------------------------------------------------

_LISTENER_LINE = re.compile(r"kayak broker (\d+) listener (\w+) on [\d.]+:(\d+)")


def start_sharded(data_dir: Path, files: TlsFiles, log_path: Path) -> subprocess.Popen[bytes]:
    args = [
        sys.executable, "-m", "kayak", "-v", "broker",
        "--data-dir", str(data_dir),
        "--shards", "2",
        "--listeners", "PLAINTEXT://127.0.0.1:0,SSL://127.0.0.1:0",
        "--ssl-certificate-location", str(files.server_cert),
        "--ssl-key-location", str(files.server_key),
        "--no-schema-registry",
        "--allow-everyone-if-no-acl-found",
        "--group-initial-rebalance-delay-ms", "0",
    ]  # fmt: skip
    with open(log_path, "wb") as log:
        return subprocess.Popen(args, stdout=log, stderr=log)


def wait_for_listeners(
    process: subprocess.Popen[bytes], log_path: Path
) -> dict[tuple[int, str], int]:
    """(node id, listener) -> port, once both shards logged both listeners."""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"broker exited: {log_path.read_text()[-2000:]}")
        found = {
            (int(node), name): int(port)
            for node, name, port in _LISTENER_LINE.findall(log_path.read_text())
        }
        if len(found) == 4:
            return found
        time.sleep(0.05)
    raise RuntimeError(f"shards did not start: {log_path.read_text()[-2000:]}")


def test_shards_list_every_shard_on_the_listener_asked(tmp_path: Path, tls_files: TlsFiles) -> None:
    log_path = tmp_path / "broker.log"
    process = start_sharded(tmp_path / "data", tls_files, log_path)
    try:
        ports = wait_for_listeners(process, log_path)
        assert len(set(ports.values())) == 4  # every shard on its own port per listener
        plain = {("127.0.0.1", ports[node, "PLAINTEXT"]) for node in (0, 1)}
        tls = {("127.0.0.1", ports[node, "SSL"]) for node in (0, 1)}
        for node in (0, 1):
            client = WireClient(f"127.0.0.1:{ports[node, 'PLAINTEXT']}")
            try:
                seen = addresses_seen(client)
            finally:
                client.close()
            assert seen["metadata"] == plain
            assert seen["find_coordinator"] <= plain
            secure = TlsWireClient(f"127.0.0.1:{ports[node, 'SSL']}", tls_files)
            try:
                seen = addresses_seen(secure)
            finally:
                secure.close()
            assert seen["metadata"] == tls
            assert seen["find_coordinator"] <= tls
    finally:
        process.send_signal(signal.SIGTERM)
        assert process.wait(30) == 0, log_path.read_text()[-2000:]
