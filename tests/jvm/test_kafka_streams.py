"""Kafka Streams (4.3, ``tests/jvm/java/StreamsApp.java``) against kayak's broker.

The topology maps every input record (upper-cases its value: stateless) and counts the input
by word (a repartition topic, then a state store with a compacted changelog topic). Input is
produced with kayak's Python client; the outputs are read back with it.

The guarantee is at-least-once (kayak has no transactions yet), so the assertions are:

* before any restart, the output is exact: every input mapped once, every word's latest
  count equal to the number of inputs with that word;
* after the broker is restarted mid-run (SIGTERM, or SIGKILL: a crash), every input is still
  mapped (possibly more than once) and each word's latest count is at least the true count:
  input processed again after the restart is counted again, never lost.
"""

from __future__ import annotations

import collections
import signal
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from kayak.client import TopicPartition
from kayak.client.admin import NewTopic
from kayak.client.sync import Admin, Producer
from tests.broker.conftest import BrokerProcess
from tests.fixtures.jvm import TOOL_JVM_OPTIONS, java_command
from tests.jvm.peer_support import Background, read_topic, wait_until

STREAMS_APP = Path(__file__).with_name("java") / "StreamsApp.java"
WORDS = ["alpha", "beta", "gamma", "delta", "epsilon"]
INPUT_PARTITIONS = 3
# (record id, mapped value) of every mapped record; the latest count of every word
Outputs = tuple[list[tuple[str, str]], dict[str, int]]


@pytest.fixture(scope="module")
def kayak_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    broker = BrokerProcess(tmp_path_factory.mktemp("streams") / "data").start()
    yield broker
    if broker.process is not None:
        broker.stop()


class StreamsRun:
    """One application id: its topics, the JVM running the topology, the inputs sent."""

    def __init__(self, broker: BrokerProcess, directory: Path) -> None:
        self.broker = broker
        self.app_id = f"wc-{uuid.uuid4().hex[:8]}"
        self.input, self.mapped, self.counts = (
            f"{self.app_id}-{name}" for name in ("input", "mapped", "counts")
        )
        self.sent: dict[str, str] = {}  # record id -> word
        with Admin(bootstrap_servers=broker.bootstrap_servers) as admin:
            admin.create_topics(
                [
                    NewTopic(self.input, INPUT_PARTITIONS, 1),
                    NewTopic(self.mapped, 1, 1),
                    NewTopic(self.counts, 1, 1),
                ]
            )
        command = java_command(
            str(STREAMS_APP),
            [broker.bootstrap_servers, self.app_id, self.input, self.mapped, self.counts,
             str(directory / "state")],
            jvm_options=TOOL_JVM_OPTIONS,
        )  # fmt: skip
        self.app = Background(command, directory / f"{self.app_id}.log")

    def produce(self, count: int) -> None:
        """``count`` more records: id ``r<n>`` → a word chosen by n."""
        start = len(self.sent)
        with Producer(bootstrap_servers=self.broker.bootstrap_servers, linger_ms=5) as producer:
            for n in range(start, start + count):
                record_id, word = f"r{n}", WORDS[(n * 7) % len(WORDS) if n % 3 else 0]
                self.sent[record_id] = word
                producer.send(self.input, word.encode(), key=record_id.encode())
            producer.flush()

    def truth(self) -> collections.Counter[str]:
        return collections.Counter(self.sent.values())

    def mapped_output(self) -> list[tuple[str, str]]:
        return [
            (k.decode(), v.decode())
            for k, v in read_topic(self.broker.bootstrap_servers, self.mapped)
            if k is not None and v is not None
        ]

    def latest_counts(self) -> dict[str, int]:
        latest: dict[str, int] = {}
        for key, value in read_topic(self.broker.bootstrap_servers, self.counts):
            assert key is not None and value is not None
            latest[key.decode()] = int(value.decode())
        return latest

    def wait_processed(self, timeout: float = 180.0) -> Outputs:
        """Wait until every input is mapped and every count reached its truth."""
        truth = self.truth()

        def outputs() -> Outputs:
            if not self.app.alive():
                raise AssertionError(f"Streams stopped:\n{self.app.output()[-4000:]}")
            return self.mapped_output(), self.latest_counts()

        def complete(seen: Outputs) -> bool:
            mapped, counts = seen
            return {k for k, _ in mapped} >= set(self.sent) and all(
                counts.get(word, 0) >= n for word, n in truth.items()
            )

        try:
            return wait_until(outputs, complete, timeout, "all input processed")
        except AssertionError as e:
            raise AssertionError(f"{e}\nStreams log:\n{self.app.output()[-4000:]}") from None


def test_internal_topics_and_exact_counts_without_restart(
    kayak_broker: BrokerProcess, tmp_path: Path
) -> None:
    """Streams creates its changelog (compacted) and repartition topics on kayak, trims the
    repartition topic with DeleteRecords, and, with no failure, counts exactly."""
    run = StreamsRun(kayak_broker, tmp_path)
    run.app.start()
    try:
        run.app.wait_for("STATE RUNNING")
        run.produce(300)
        mapped, counts = run.wait_processed()
        assert sorted(mapped) == sorted((k, w.upper()) for k, w in run.sent.items())
        assert counts == dict(run.truth())

        changelog = f"{run.app_id}-word-counts-changelog"
        repartition = f"{run.app_id}-by-word-repartition"
        with Admin(bootstrap_servers=kayak_broker.bootstrap_servers) as admin:
            topics = set(admin.list_topics())
            assert {changelog, repartition} <= topics
            assert admin.describe_configs(changelog)["cleanup.policy"].value == "compact"
            repartition_configs = admin.describe_configs(repartition)
            assert repartition_configs["cleanup.policy"].value == "delete"
            assert repartition_configs["segment.bytes"].value == str(50 * 1024 * 1024)
            # Streams deletes what it consumed from the repartition topic (DeleteRecords
            # after a commit): its log start moves up to the end.
            tps = [TopicPartition(repartition, p) for p in range(INPUT_PARTITIONS)]
            starts = wait_until(
                lambda: {tp: admin.list_offsets({tp: -2})[tp].offset for tp in tps},
                lambda s: sum(s.values()) == len(run.sent),
                60,
                "repartition records deleted",
            )
            assert sum(starts.values()) == len(run.sent)
            # The changelog holds one record per count update (no caching: 300 updates).
            assert len(read_topic(kayak_broker.bootstrap_servers, changelog)) == len(run.sent)
    finally:
        run.app.stop()


@pytest.mark.parametrize("restart_signal", [signal.SIGTERM, signal.SIGKILL], ids=["term", "kill"])
def test_broker_restart_mid_run(
    kayak_broker: BrokerProcess, tmp_path: Path, restart_signal: signal.Signals
) -> None:
    """The broker stops (cleanly, or killed) while Streams is working through a backlog and
    starts again: nothing is lost, and the counts are at least the truth (at-least-once)."""
    run = StreamsRun(kayak_broker, tmp_path)
    run.app.start()
    try:
        run.app.wait_for("STATE RUNNING")
        run.produce(200)
        mapped, counts = run.wait_processed()
        assert counts == dict(run.truth())  # exact before any failure
        assert len(mapped) == len(run.sent)

        run.produce(3000)  # a backlog Streams is still working through ...
        kayak_broker.stop(restart_signal)  # ... when the broker goes away
        kayak_broker.restart()
        run.produce(200)  # and more input after the restart

        mapped, counts = run.wait_processed()
        # No stream thread died on the way (the app shuts down on one: see StreamsApp).
        assert run.app.alive() and "UNCAUGHT" not in run.app.output(), run.app.output()[-4000:]
        assert {k for k, _ in mapped} == set(run.sent)
        assert all(value == run.sent[key].upper() for key, value in mapped)
        truth = run.truth()
        assert set(counts) == set(truth)
        assert all(counts[word] >= truth[word] for word in truth), (counts, truth)
    finally:
        run.app.stop()
