"""kayak broker --shards N supervision: crashed shards come back, crash loops and kills end it.

Every test runs the real supervisor with two real shard processes.
"""

from __future__ import annotations

import os
import re
import signal
import socket
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from tests.broker.confluent_support import (
    Acked,
    idempotent_producer,
    read_topic_to_end,
    record_deliveries,
)
from tests.broker.conftest import BrokerProcess

pytestmark = pytest.mark.timeout(120)

HOST = "127.0.0.1"
TOPIC, PARTITIONS = "supervised", 4
RECORDS, VALUE_SIZE = 12_000, 2_000  # 24 MB: many fetch responses and read buffers' worth
_LISTENING = re.compile(r"kayak broker (\d+) listening on [\d.]+:(\d+),.*?\((\w+) start")


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[BrokerProcess]:
    broker = BrokerProcess(tmp_path / "data", extra_args=["--shards", "2"]).start()
    wait_for_listening(broker, {0: 1, 1: 1})
    yield broker
    if broker.process is not None:
        broker.stop()


def wait_for_listening(
    broker: BrokerProcess, counts: dict[int, int], timeout: float = 30.0
) -> dict[int, list[tuple[int, str]]]:
    """Wait until shard n logged ``counts[n]`` listening lines; each shard's (port, start kind)."""
    deadline = time.monotonic() + timeout
    while True:
        seen: dict[int, list[tuple[int, str]]] = {n: [] for n in counts}
        for node, port, kind in _LISTENING.findall(broker.log_text()):
            seen.setdefault(int(node), []).append((int(port), kind))
        if all(len(seen[n]) >= c for n, c in counts.items()):
            return seen
        assert time.monotonic() < deadline, broker.log_text()[-3000:]
        time.sleep(0.05)


def shard_pids(supervisor_pid: int) -> dict[int, int]:
    """node id -> pid of the supervisor's live shard processes."""
    children = Path(f"/proc/{supervisor_pid}/task/{supervisor_pid}/children").read_text()
    shards: dict[int, int] = {}
    for pid in map(int, children.split()):
        try:
            args = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except FileNotFoundError:
            continue
        if state != "Z":
            shards[int(args[args.index(b"--node-id") + 1])] = pid
    return shards


def pid_alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return False
    return state != "Z"


def wait_until(condition: Callable[[], bool], timeout: float, message: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, message
        time.sleep(0.05)


def nothing_listens(port: int) -> bool:
    with socket.socket() as probe:
        try:
            probe.connect((HOST, port))
        except ConnectionRefusedError:
            return True
    return False


def occupy(port: int, timeout: float) -> socket.socket:
    """Listen on ``port`` as soon as it is free (so a shard cannot bind it)."""
    deadline = time.monotonic() + timeout
    while True:
        sock = socket.socket()
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((HOST, port))
            sock.listen()
            return sock
        except OSError:
            sock.close()
            assert time.monotonic() < deadline, f"port {port} never became free"
            time.sleep(0.005)


def produce_all(
    bootstrap: str, acked: list[Acked], failed: list[str], killed: threading.Event
) -> None:
    """Produce every record; the last quarter only once the shard was killed, so that the
    kill always lands mid-load however fast the broker takes the first three quarters."""
    producer = idempotent_producer(bootstrap, linger_ms=5)
    delivered = record_deliveries(acked, failed)
    for i in range(RECORDS):
        if i == RECORDS * 3 // 4:
            deadline = time.monotonic() + 60
            while not killed.is_set() and time.monotonic() < deadline:
                producer.poll(0.01)  # deliveries are reported only from poll
            if not killed.is_set():
                failed.append("the shard was never killed")
        value = b"%08d-" % i + bytes([65 + i % 26]) * (VALUE_SIZE - 9)
        while True:
            try:
                producer.produce(TOPIC, value=value, partition=i % PARTITIONS,
                                 on_delivery=delivered)  # fmt: skip
                break
            except BufferError:
                producer.poll(0.05)
        producer.poll(0)
    remaining = producer.flush(90)
    if remaining:
        failed.append(f"{remaining} records undelivered")


def read_back(bootstrap: str) -> dict[int, list[tuple[int, bytes | None]]]:
    """Every record of every partition, as (offset, value) in log order."""
    read = read_topic_to_end(bootstrap, TOPIC, PARTITIONS)
    assert len(read.at_end) == PARTITIONS, "did not reach the end of every partition"
    return read.records


def test_killed_shard_is_restarted_and_loses_no_acknowledged_record(
    cluster: BrokerProcess,
) -> None:
    assert cluster.process is not None
    supervisor = cluster.process.pid
    first_pids = shard_pids(supervisor)
    ports = {node: seen[0][0] for node, seen in wait_for_listening(cluster, {0: 1, 1: 1}).items()}
    admin = AdminClient({"bootstrap.servers": f"{HOST}:{ports[0]}"})
    admin.create_topics([NewTopic(TOPIC, PARTITIONS, 1)])[TOPIC].result(15)
    leaders = admin.list_topics(TOPIC, timeout=10).topics[TOPIC].partitions
    on_victim = {p.id for p in leaders.values() if p.leader == 1}
    assert 0 < len(on_victim) < PARTITIONS, "the topic is not spread over both shards"

    acked: list[Acked] = []
    failed: list[str] = []
    killed = threading.Event()
    worker = threading.Thread(
        target=produce_all, args=(f"{HOST}:{ports[0]}", acked, failed, killed)
    )
    worker.start()
    victim_share = RECORDS * len(on_victim) // PARTITIONS

    def acked_on_victim() -> int:
        return sum(1 for partition, _, _ in list(acked) if partition in on_victim)

    wait_until(lambda: acked_on_victim() >= victim_share // 4, 60, "the load never got going")
    victim = first_pids[1]
    os.kill(victim, signal.SIGKILL)
    killed.set()
    assert acked_on_victim() < victim_share, "the shard was killed after its load was done"

    seen = wait_for_listening(cluster, {0: 1, 1: 2})
    assert seen[1][1] == (ports[1], "unclean"), "restarted shard: same port, recovered log"
    restarted = shard_pids(supervisor)[1]
    assert restarted != victim
    restart_line = (
        f"shard 1 (pid {victim}, port {ports[1]}) exited unexpectedly (killed by SIGKILL); "
        "restarting it in 0.5s"
    )
    assert restart_line in cluster.log_text()
    worker.join(120)
    assert not worker.is_alive()
    assert not failed, failed[:3]
    assert len(acked) == RECORDS
    assert {partition for partition, _, _ in acked} == set(range(PARTITIONS))

    log = read_back(f"{HOST}:{ports[1]}")
    stored = {(p, offset): value for p, records in log.items() for offset, value in records}
    for partition, offset, value in acked:
        assert stored.get((partition, offset)) == value, f"acked record lost: {partition}/{offset}"
    values = [value for records in log.values() for _, value in records]
    assert len(values) == len(set(values)) == RECORDS, "a record is missing or stored twice"
    assert shard_pids(supervisor) == {0: first_pids[0], 1: restarted}, "shard 0 was restarted"
    assert cluster.stop() == 0


def test_shard_crashing_repeatedly_makes_the_supervisor_give_up(cluster: BrokerProcess) -> None:
    assert cluster.process is not None
    supervisor = cluster.process
    ports = {node: seen[0][0] for node, seen in wait_for_listening(cluster, {0: 1, 1: 1}).items()}
    pids = shard_pids(supervisor.pid)
    os.kill(pids[1], signal.SIGKILL)
    squatter = occupy(ports[1], timeout=1.0)  # every restart of shard 1 now fails to bind
    try:
        code = supervisor.wait(60)
    finally:
        squatter.close()
    cluster.process = None
    assert code != 0
    text = cluster.log_text()
    assert "shard 1 crashed 6 times within 60s (last: status 1); giving up" in text
    # the kill, then four failed restarts; the fifth failed restart is the one too many
    assert len(re.findall(r"shard 1 .* exited unexpectedly \(killed by SIGKILL\)", text)) == 1
    assert len(re.findall(r"shard 1 .* exited unexpectedly \(status 1\)", text)) == 4
    assert "address already in use" in text
    assert not pid_alive(pids[0])
    assert len(re.findall(r"kayak\.broker: shutting down$", text, re.MULTILINE)) == 1
    assert nothing_listens(ports[0])


def test_sigterm_stops_every_shard_and_exits_0(cluster: BrokerProcess) -> None:
    assert cluster.process is not None
    ports = {node: seen[0][0] for node, seen in wait_for_listening(cluster, {0: 1, 1: 1}).items()}
    pids = shard_pids(cluster.process.pid)
    assert sorted(pids) == [0, 1]
    assert cluster.stop(signal.SIGTERM) == 0
    assert not any(pid_alive(pid) for pid in pids.values())
    assert all(nothing_listens(port) for port in ports.values())
    assert len(re.findall(r"kayak\.broker: shutting down$", cluster.log_text(), re.M)) == 2


def test_kill_9_of_the_supervisor_ends_every_shard(cluster: BrokerProcess) -> None:
    assert cluster.process is not None
    ports = {node: seen[0][0] for node, seen in wait_for_listening(cluster, {0: 1, 1: 1}).items()}
    pids = shard_pids(cluster.process.pid)
    assert cluster.stop(signal.SIGKILL) == -signal.SIGKILL
    wait_until(lambda: not any(pid_alive(pid) for pid in pids.values()), 5,
               "a shard outlived its supervisor")  # fmt: skip
    assert all(nothing_listens(port) for port in ports.values())
    text = cluster.log_text()
    assert text.count("exited; shutting down") == 2, "shards did not shut down cleanly"
    restarted = BrokerProcess(cluster.data_dir, extra_args=["--shards", "2"]).start()
    try:
        seen = wait_for_listening(restarted, {0: 2, 1: 2})
        # both shards shut down cleanly, so both may trust their logs (this needs the
        # clean-shutdown marker to be per shard: with one shared marker the first shard to
        # start consumes it and the second recovers needlessly)
        assert [seen[n][1][1] for n in (0, 1)] == ["clean", "clean"]
    finally:
        restarted.stop()
