"""Kafka Connect's compacted internal topics on kayak, after a long life (issue 26).

A distributed worker (Kafka Connect 4.3) creates its config, offsets and status topics on a
kayak broker whose cleaner runs every 200 ms, with topic settings (``config.storage.*`` etc.)
that make them cleanable at once: segments rolled every second, any dirty ratio, tombstones
kept one second. Kafka's own ``FileStreamSource`` connector copies a file's lines to a topic
while the worker lives through what fills those topics with superseded records: 200 config
changes, a pause and resume, a stop (KIP-875) and resume, a second connector deleted for
good, the first deleted and created again, a restart after SIGTERM and one after SIGKILL.

Then the three topics hold a small fraction of what was written (the cleaner compacted them;
the deleted connector's tombstone is gone too, after ``delete.retention.ms``), the offsets
topic still holds the source's position, and a worker started on the compacted topics
rebuilds its state from them: the connector's config is the last one written, the deleted
connector stays deleted, its task runs, and it resumes the file where the offsets topic says,
so the output topic holds every line of the file exactly once, in order. The broker logged
no cleaner trouble, and ``kayak log verify`` finds its data directory clean.

Exactly once (not merely at least once) is what must hold here: every stop but the SIGKILL
is graceful (a stopping task commits its source offsets), and the SIGKILL comes only after
every line written so far is in the output topic and several offset flushes (every 500 ms)
have passed, so the committed position covers every line sent. A line read twice means a
lost or stale source offset: a record the cleaner dropped that it should have kept.
"""

from __future__ import annotations

import collections
import json
import signal
import time
import urllib.error
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from kayak.client import TopicPartition
from kayak.client.admin.models import NewTopic
from kayak.client.sync import Admin, Consumer
from tests.broker.conftest import BrokerProcess
from tests.broker.test_log_cleaner_broker import verify_data_dir
from tests.fixtures.jvm import free_port
from tests.jvm.peer_support import (
    DISTRIBUTED,
    ConnectWorker,
    read_topic,
    wait_until,
    worker_properties,
)

pytestmark = pytest.mark.timeout(240)

CONFIG_TOPIC, OFFSET_TOPIC, STATUS_TOPIC = "cc-configs", "cc-offsets", "cc-status"
INTERNAL_TOPICS = (CONFIG_TOPIC, OFFSET_TOPIC, STATUS_TOPIC)
SOURCE, DOOMED = "lines-source", "doomed-source"
FILE_SOURCE = "org.apache.kafka.connect.file.FileStreamSourceConnector"
STRING_CONVERTER = "org.apache.kafka.connect.storage.StringConverter"
# Cleanable at once: a new segment every second, any dirty ratio, tombstones kept 1 s.
QUICK_COMPACTION = {
    "segment.ms": 1000,
    "min.cleanable.dirty.ratio": 0.01,
    "delete.retention.ms": 1000,
}


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[BrokerProcess]:
    broker = BrokerProcess(tmp_path / "data", ["--log-cleaner-backoff-ms", "200"]).start()
    yield broker
    if broker.process is not None:
        broker.stop()


def compacting_worker(bootstrap: str, directory: Path) -> ConnectWorker:
    """A distributed worker whose three internal topics (one partition each) are created
    by Connect with ``QUICK_COMPACTION`` (Connect passes ``<kind>.storage.<topic config>``
    on to CreateTopics, and makes them ``cleanup.policy=compact`` itself)."""
    topics: dict[str, object] = {
        "config.storage.topic": CONFIG_TOPIC,
        "offset.storage.topic": OFFSET_TOPIC,
        "status.storage.topic": STATUS_TOPIC,
        "offset.storage.partitions": 1,
        "status.storage.partitions": 1,
    }
    for kind in ("config", "offset", "status"):
        topics[f"{kind}.storage.replication.factor"] = 1
        topics |= {f"{kind}.storage.{k}": v for k, v in QUICK_COMPACTION.items()}
    properties = worker_properties(
        bootstrap,
        free_port(),
        **{
            "group.id": "compaction-connect",
            **topics,
            # After the SIGKILL the dead member must leave the group before the new worker
            # can lead it (kept short), and what it held is handed out at once.
            "session.timeout.ms": 6000,
            "heartbeat.interval.ms": 1000,
            "scheduled.rebalance.max.delay.ms": 0,
        },
    )
    return ConnectWorker(directory, DISTRIBUTED, properties)


def file_source(path: Path, topic: str, generation: int) -> dict[str, str]:
    """FileStreamSource's config; ``generation`` changes it (and so its task's config)."""
    return {
        "connector.class": FILE_SOURCE,
        "tasks.max": "1",
        "file": str(path),
        "topic": topic,
        "key.converter": STRING_CONVERTER,
        "value.converter": STRING_CONVERTER,
        "generation": str(generation),
    }


def call(worker: ConnectWorker, method: str, path: str, body: object = None) -> Any:
    """A REST call, again while the herder answers 409 (a rebalance under way)."""
    deadline = time.monotonic() + 60
    while True:
        try:
            return worker.call(method, path, body)
        except urllib.error.HTTPError as e:
            if e.code != 409 or time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def append_lines(path: Path, written: list[str], count: int) -> None:
    """``count`` more whole lines at the end of the source file (and in ``written``)."""
    new = [f"line-{len(written) + i:05d}" for i in range(count)]
    with open(path, "a") as f:
        f.writelines(line + "\n" for line in new)
    written.extend(new)


def output_lines(bootstrap: str, topic: str) -> list[str]:
    return [(value or b"").decode() for _, value in read_topic(bootstrap, topic)]


def wait_lines(bootstrap: str, topic: str, written: list[str]) -> list[str]:
    """The output topic once it holds as many lines as were written."""
    return wait_until(
        lambda: output_lines(bootstrap, topic), lambda found: len(found) >= len(written),
        timeout=60, what=f"{len(written)} lines in {topic}",
    )  # fmt: skip


def log_end_and_live(bootstrap: str, topic: str) -> tuple[int, int]:
    """(log end offset: how many records were ever written, how many a reader finds now)."""
    partition = TopicPartition(topic, 0)
    with Consumer(bootstrap_servers=bootstrap, enable_auto_commit=False) as consumer:
        end = consumer.end_offsets([partition])[partition]
    return end, len(read_topic(bootstrap, topic))


def compacted(bootstrap: str) -> dict[str, tuple[int, int]]:
    """(log end, live records) of each internal topic."""
    return {topic: log_end_and_live(bootstrap, topic) for topic in INTERNAL_TOPICS}


def well_compacted(found: dict[str, tuple[int, int]]) -> bool:
    """Hundreds of config and status records written, a handful live; the offsets topic has
    fewer records (a write per offset flush with news), one key live and a few not yet
    cleanable (the active segment is never cleaned)."""
    (config_end, config_live), (offset_end, offset_live), (status_end, status_live) = (
        found[topic] for topic in INTERNAL_TOPICS
    )
    return (
        config_live * 10 < config_end
        and status_live * 10 < status_end
        and offset_live * 3 < offset_end
    )


def config_keys(bootstrap: str) -> list[str]:
    return [(key or b"").decode() for key, _ in read_topic(bootstrap, CONFIG_TOPIC)]


def committed_position(bootstrap: str, file: Path) -> int | None:
    """The FileStreamSource position (a byte offset in ``file``) the offsets topic holds
    last for the source: Connect's key ``[connector, {"filename": file}]``."""
    position = None
    for key, value in read_topic(bootstrap, OFFSET_TOPIC):
        if key is not None and json.loads(key) == [SOURCE, {"filename": str(file)}]:
            position = None if value is None else json.loads(value)["position"]
    return position


def restart(worker: ConnectWorker, sig: int = signal.SIGTERM) -> None:
    assert worker.jvm is not None
    code = worker.jvm.stop(sig)
    if sig == signal.SIGKILL:
        assert code == -signal.SIGKILL
    worker.start()
    worker.wait_running(SOURCE)


def wait_state(worker: ConnectWorker, name: str, state: str) -> None:
    wait_until(
        lambda: call(worker, "GET", f"/connectors/{name}/status")["connector"]["state"],
        lambda found: found == state, timeout=30, what=f"{name} {state}",
    )  # fmt: skip


@dataclass
class Source:
    """The file the connector reads, every line written to it, and its config's history."""

    worker: ConnectWorker
    bootstrap: str
    file: Path
    written: list[str] = field(default_factory=list)
    generation: int = 0

    def config(self) -> dict[str, str]:
        return file_source(self.file, "lines", self.generation)

    def change_config(self, times: int, lines_each: int = 0) -> None:
        """PUT a new config ``times`` times, appending ``lines_each`` lines after each."""
        for _ in range(times):
            self.generation += 1
            call(self.worker, "PUT", f"/connectors/{SOURCE}/config", self.config())
            self.append(lines_each)

    def append(self, count: int) -> None:
        append_lines(self.file, self.written, count)

    def wait_all_lines(self) -> None:
        wait_lines(self.bootstrap, "lines", self.written)


def start_connectors(worker: ConnectWorker, source: Source, doomed_file: Path) -> None:
    """Start the worker, check the topics Connect made, and run both connectors."""
    worker.start()
    with Admin(bootstrap_servers=source.bootstrap) as admin:
        for topic in INTERNAL_TOPICS:
            configs = admin.describe_configs(topic)
            assert configs["cleanup.policy"].value == "compact", topic
            assert configs["segment.ms"].value == "1000", topic
    call(worker, "PUT", f"/connectors/{DOOMED}/config",
         file_source(doomed_file, "doomed-lines", 0))  # fmt: skip
    call(worker, "PUT", f"/connectors/{SOURCE}/config", source.config())
    worker.wait_running(SOURCE)
    worker.wait_running(DOOMED)
    source.wait_all_lines()


def live_a_long_life(worker: ConnectWorker, source: Source) -> None:
    """200 config changes, pause and resume, stop and resume, one connector deleted for
    good and the other deleted and created again, a restart after SIGTERM and one after
    SIGKILL; lines appended to the file all along."""
    # A config change of a running connector restarts its task through a rebalance (~1 s
    # with FileStreamSource, whose poll waits 1 s for the file): 20 of those, the other
    # 180 while it is paused or stopped (a config write each, ~50 ms).
    source.change_config(10, lines_each=1)
    call(worker, "PUT", f"/connectors/{SOURCE}/pause")
    wait_state(worker, SOURCE, "PAUSED")
    source.change_config(90)
    source.append(10)
    call(worker, "PUT", f"/connectors/{SOURCE}/resume")
    worker.wait_running(SOURCE)

    call(worker, "DELETE", f"/connectors/{DOOMED}")
    call(worker, "DELETE", f"/connectors/{SOURCE}")
    source.generation += 1  # created again; its source offsets outlive the deletion
    call(worker, "POST", "/connectors", {"name": SOURCE, "config": source.config()})
    worker.wait_running(SOURCE)
    source.append(10)
    restart(worker)

    call(worker, "PUT", f"/connectors/{SOURCE}/stop")  # KIP-875: no tasks at all
    wait_state(worker, SOURCE, "STOPPED")
    source.change_config(90)
    call(worker, "PUT", f"/connectors/{SOURCE}/resume")
    worker.wait_running(SOURCE)
    source.change_config(10, lines_each=1)
    worker.wait_running(SOURCE)

    # SIGKILL only once every line is out and its position committed (see the module doc).
    source.wait_all_lines()
    time.sleep(2.0)  # four offset flushes
    restart(worker, signal.SIGKILL)
    source.append(10)
    source.wait_all_lines()


def test_connect_restarts_on_its_compacted_internal_topics(
    broker: BrokerProcess, tmp_path: Path
) -> None:
    bootstrap = broker.bootstrap_servers
    with Admin(bootstrap_servers=bootstrap) as admin:
        admin.create_topics([NewTopic("lines", 1, 1), NewTopic("doomed-lines", 1, 1)])
    worker = compacting_worker(bootstrap, tmp_path)
    source = Source(worker, bootstrap, tmp_path / "source.txt")
    source.append(20)
    doomed_file = tmp_path / "doomed.txt"
    doomed_file.write_text("doomed\n")
    try:
        start_connectors(worker, source, doomed_file)
        live_a_long_life(worker, source)

        found = wait_until(lambda: compacted(bootstrap), well_compacted, timeout=30,
                           what="the internal topics compacted")  # fmt: skip
        assert found[CONFIG_TOPIC][0] > 200  # every config change is a record
        # The deleted connector's config went first, its tombstone after delete.retention.ms.
        wait_until(lambda: config_keys(bootstrap), lambda keys: f"connector-{DOOMED}" not in keys,
                   timeout=30, what="the deleted connector's tombstone cleaned away")  # fmt: skip
        # The compacted offsets topic holds the source's position: the whole file.
        wait_until(lambda: committed_position(bootstrap, source.file),
                   lambda position: position == source.file.stat().st_size, timeout=30,
                   what="the source's position at the end of the file")  # fmt: skip

        # A worker started on the compacted topics rebuilds its state from them.
        restart(worker)
        assert call(worker, "GET", f"/connectors/{SOURCE}/config") == {
            "name": SOURCE, **source.config(),
        }  # fmt: skip
        assert call(worker, "GET", "/connectors") == [SOURCE]
        source.append(10)
        source.wait_all_lines()
        time.sleep(1.5)  # a file read again from an older position would show by now
        lines = output_lines(bootstrap, "lines")
        repeated = sorted(line for line, n in collections.Counter(lines).items() if n > 1)
        assert not repeated, f"{len(repeated)} lines sent twice, e.g. {repeated[:5]}"
        assert lines == source.written
    except AssertionError as e:
        log = worker.jvm.output()[-4000:] if worker.jvm else ""
        raise AssertionError(f"{e}\nConnect log:\n{log}") from None
    finally:
        worker.stop()
    broker.stop()
    cleaner_trouble = [
        line for line in broker.log_text().splitlines()
        if ".cleaner" in line and (" WARNING " in line or " ERROR " in line)
    ]  # fmt: skip
    assert not cleaner_trouble, cleaner_trouble[:10]
    verified = verify_data_dir(broker.data_dir)
    assert verified.returncode == 0, verified.stdout + verified.stderr
