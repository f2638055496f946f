"""Kafka Streams (4.3, ``tests/jvm/java/StreamsApp.java``) with
``processing.guarantee=exactly_once_v2``, against kayak's broker and Apache Kafka 4.3 (the
reference).

The topology upper-cases every input record (stateless) and counts the input by word (a
repartition topic, a state store and its changelog), each count update written to a counts
topic. Under exactly-once every input is processed once whatever fails, so a read_committed
reader (confluent-kafka's consumer) must find:

* every input id mapped exactly once: never twice, none missing;
* each word's count updates, in order, 1, 2, ..., its number of inputs: no update repeated
  or skipped (a repeat would be input counted twice, state restored from a changelog that
  kept an aborted update, or an output of an aborted transaction).

The failures: the Streams JVM is killed (SIGKILL) with a backlog in flight and started again
with the same application id and state directory (its successor fences the old producer
and aborts its open transaction; the state store is restored from the changelog); on
kayak's broker the broker is killed (SIGKILL) and restarted too (the run's Apache Kafka is
shared, so it is not killed).
"""

from __future__ import annotations

import collections
import signal
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition

from tests.broker.conftest import BrokerProcess
from tests.broker.interop_helpers import create_topic
from tests.fixtures.jvm import TOOL_JVM_OPTIONS, ApacheKafka, java_command
from tests.jvm.peer_support import Background, wait_until

pytestmark = pytest.mark.timeout(300)

STREAMS_APP = Path(__file__).with_name("java") / "StreamsApp.java"
WORDS = ["alpha", "beta", "gamma", "delta", "epsilon"]
INPUT_PARTITIONS = 3
EXACTLY_ONCE = (
    "processing.guarantee=exactly_once_v2",
    # A killed instance's successor waits for the old member to leave the group: keep the
    # session short (Apache Kafka's group.min.session.timeout.ms is 6 s).
    "consumer.session.timeout.ms=6000",
    "consumer.heartbeat.interval.ms=1000",
)
Record = tuple[str, str]  # (key, value)


@pytest.fixture(scope="module")
def kayak_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    broker = BrokerProcess(tmp_path_factory.mktemp("streams-eos") / "data").start()
    yield broker
    if broker.process is not None:
        broker.stop()


@pytest.fixture(params=["kayak", "apache-kafka"])
def target(request: pytest.FixtureRequest) -> tuple[str, BrokerProcess | None]:
    """(bootstrap, kayak's broker when it is the target: it may be killed)."""
    if request.param == "apache-kafka":
        kafka: ApacheKafka = request.getfixturevalue("apache_kafka")
        return kafka.bootstrap_servers, None
    broker: BrokerProcess = request.getfixturevalue("kayak_broker")
    return broker.bootstrap_servers, broker


def read_committed(bootstrap: str, topic: str, partitions: int) -> list[Record]:
    """What read_committed readers see of ``topic`` now (up to each last stable offset), in
    partition and offset order."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"eos-check-{uuid.uuid4().hex[:8]}",
            "isolation.level": "read_committed",
            "enable.partition.eof": True,
            "enable.auto.commit": False,
        }
    )
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    by_partition: dict[int, list[Record]] = {p: [] for p in range(partitions)}
    at_end: set[int] = set()
    deadline = time.monotonic() + 30
    try:
        while len(at_end) < partitions:
            assert time.monotonic() < deadline, f"{topic}: only {sorted(at_end)} read to the end"
            message = consumer.poll(0.2)
            if message is None:
                continue
            partition, error = message.partition(), message.error()
            assert partition is not None
            if error is not None:
                if error.code() == KafkaError._PARTITION_EOF:
                    at_end.add(partition)
                    continue
                raise KafkaException(error)
            at_end.discard(partition)
            key, value = message.key() or b"", message.value() or b""
            by_partition[partition].append((key.decode(), value.decode()))
    finally:
        consumer.close()
    return [record for p in range(partitions) for record in by_partition[p]]


class StreamsRun:
    """One application id: its topics, the Streams JVM, and the inputs sent."""

    def __init__(self, bootstrap: str, directory: Path) -> None:
        self.bootstrap = bootstrap
        self.app_id = f"eos-{uuid.uuid4().hex[:8]}"
        self.input, self.mapped, self.counts = (
            f"{self.app_id}-{name}" for name in ("input", "mapped", "counts")
        )
        self.sent: dict[str, str] = {}  # record id -> word
        create_topic(bootstrap, self.input, INPUT_PARTITIONS)
        create_topic(bootstrap, self.mapped, 1)
        create_topic(bootstrap, self.counts, 1)
        command = java_command(
            str(STREAMS_APP),
            [bootstrap, self.app_id, self.input, self.mapped, self.counts,
             str(directory / "state"), *EXACTLY_ONCE],
            jvm_options=TOOL_JVM_OPTIONS,
        )  # fmt: skip
        self.app = Background(command, directory / f"{self.app_id}.log")

    def start(self) -> None:
        """Start the JVM (again) and wait until it runs."""
        after = len(self.app.output())
        self.app.start()
        self.app.wait_for("STATE RUNNING", after=after)

    def produce(self, count: int) -> None:
        """``count`` more records: id ``r<n>`` → a word chosen by n."""
        producer = Producer({"bootstrap.servers": self.bootstrap, "linger.ms": 5})
        for n in range(len(self.sent), len(self.sent) + count):
            record_id, word = f"r{n}", WORDS[(n * 7) % len(WORDS) if n % 3 else 0]
            self.sent[record_id] = word
            producer.produce(self.input, word.encode(), key=record_id.encode())
            producer.poll(0)
        assert producer.flush(30) == 0, "input still undelivered"

    def truth(self) -> collections.Counter[str]:
        return collections.Counter(self.sent.values())

    def outputs(self) -> tuple[list[Record], dict[str, list[int]]]:
        """The mapped records, and each word's count updates in order (read_committed)."""
        updates: dict[str, list[int]] = collections.defaultdict(list)
        for word, count in read_committed(self.bootstrap, self.counts, 1):
            updates[word].append(int(count))
        return read_committed(self.bootstrap, self.mapped, 1), dict(updates)

    def wait_processed(self, timeout: float = 150.0) -> tuple[list[Record], dict[str, list[int]]]:
        """Wait until every input is mapped and every word's last update is its truth."""
        truth = self.truth()

        def seen() -> tuple[list[Record], dict[str, list[int]]]:
            if not self.app.alive():
                raise AssertionError(f"Streams stopped:\n{self.app.output()[-4000:]}")
            return self.outputs()

        def complete(found: tuple[list[Record], dict[str, list[int]]]) -> bool:
            mapped, updates = found
            return {k for k, _ in mapped} >= set(self.sent) and all(
                updates.get(word, [0])[-1] >= n for word, n in truth.items()
            )

        try:
            return wait_until(seen, complete, timeout, "all input processed")
        except AssertionError as e:
            raise AssertionError(f"{e}\nStreams log:\n{self.app.output()[-4000:]}") from None

    def check_exactly_once(self) -> None:
        mapped, updates = self.wait_processed()
        time.sleep(1.0)  # let anything processed twice reach the topics too
        mapped, updates = self.outputs()
        repeated = [k for k, n in collections.Counter(k for k, _ in mapped).items() if n > 1]
        assert not repeated, f"{len(repeated)} inputs mapped more than once, e.g. {repeated[:5]}"
        assert sorted(mapped) == sorted((k, w.upper()) for k, w in self.sent.items())
        truth = self.truth()
        assert set(updates) == set(truth)
        for word, n in truth.items():
            assert updates[word] == list(range(1, n + 1)), (
                f"{word}: {len(updates[word])} updates for {n} inputs; first wrong at "
                f"{next(i for i, c in enumerate(updates[word] + [-1]) if c != i + 1)}"
            )


def test_exactly_once_v2_through_kills(
    target: tuple[str, BrokerProcess | None], tmp_path: Path
) -> None:
    bootstrap, kayak = target
    run = StreamsRun(bootstrap, tmp_path)
    try:
        run.start()
        run.produce(300)
        run.check_exactly_once()  # with no failure

        run.produce(3000)  # a backlog Streams is working through ...
        time.sleep(0.5)
        assert run.app.stop(signal.SIGKILL) == -signal.SIGKILL  # ... when it is killed
        if kayak is not None:
            run.produce(300)
            assert kayak.stop(signal.SIGKILL) == -signal.SIGKILL
            kayak.restart()
        run.start()
        if kayak is not None:
            time.sleep(2.0)  # mid-restore or mid-backlog: the broker goes down again
            assert kayak.stop(signal.SIGKILL) == -signal.SIGKILL
            kayak.restart()
        run.produce(200)
        run.check_exactly_once()
        assert run.app.alive() and "UNCAUGHT" not in run.app.output(), run.app.output()[-4000:]
    finally:
        run.app.stop()
