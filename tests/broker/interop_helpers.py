"""Shared pieces of the third-party interop tests (``test_interop_*.py``); holds no tests.

- :func:`create_topic`: make a topic through kayak's own wire client, so a scenario does not
  depend on the admin API of the client under test.
- :func:`run_isolated`: run a scenario in a fresh child process, so a client that crashes
  (librdkafka aborts or segfaults on some protocol bugs) fails the test instead of killing
  pytest. The child's exception, with its traceback, is raised again in the parent.
- :func:`stored_batches`: the batches the broker stored, read with a raw Fetch.
- :func:`restart_broker`: a clean restart of the ``broker_process`` fixture's broker.
"""

from __future__ import annotations

import multiprocessing
import signal
import threading
import time
import traceback
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from kayak.protocol.messages import CreateTopicsRequest
from kayak.protocol.messages.create_topics_request import CreatableTopic, CreatableTopicConfig
from kayak.protocol.messages.fetch_request import FetchPartition, FetchRequest, FetchTopic
from kayak.protocol.records import iter_batches
from tests.broker.wire import WireClient

CODECS = ("none", "gzip", "snappy", "lz4", "zstd")

# Low group timeouts, as far as each client lets them go.
SESSION_TIMEOUT_MS, HEARTBEAT_MS = 6000, 1000


def unique(prefix: str) -> str:
    """A topic or group name no other test uses."""
    return f"{prefix}-{uuid.uuid4().hex[:8]}"

def subscribe_when_known(consumer: Any, topic: str, **listener: Any) -> None:
    """Subscribe a kafka-python consumer once its metadata names ``topic``'s partitions.

    A member that joins before its metadata names the topic is assigned nothing and rejoins
    once the metadata arrives. kafka-python 3.0.12 can lose that rejoin's assignment: if a
    poll's timeout ends while the SyncGroup answer is on its way, the finished join is never
    awaited, and as the leader's new assignment matches the metadata nothing rejoins again. The
    member then holds no partitions and sends no heartbeats. Under load a 200 ms poll met this
    about one run in ten (the broker answered every request).
    """
    deadline = time.monotonic() + 30
    while not consumer.partitions_for_topic(topic):
        assert time.monotonic() < deadline, f"kafka-python never saw {topic}"
        time.sleep(0.05)
    consumer.subscribe([topic], **listener)


def create_topic(
    bootstrap: str, name: str, partitions: int = 1, configs: dict[str, str] | None = None
) -> None:
    wire = WireClient(bootstrap)
    try:
        topic = CreatableTopic(
            name,
            partitions,
            1,
            configs=[CreatableTopicConfig(k, v) for k, v in (configs or {}).items()],
        )
        response: Any = wire.request(CreateTopicsRequest(topics=[topic], timeout_ms=5000), 5)
    finally:
        wire.close()
    result = response.topics[0]
    assert result.error_code == 0, f"create {name}: {result.error_code} {result.error_message}"


@dataclass(frozen=True)
class StoredBatch:
    partition: int
    codec: str  # "none", "gzip", "snappy", "lz4", "zstd"
    producer_id: int
    producer_epoch: int
    base_sequence: int
    base_offset: int
    record_count: int


def stored_batches(bootstrap: str, topic: str, partitions: int) -> list[StoredBatch]:
    """The record batches the broker holds for ``topic``, read with a raw Fetch.

    So a client that silently fell back to no compression, or never turned idempotence on,
    or a broker that rewrote batches, shows up.
    """
    wire = WireClient(bootstrap)
    try:
        request = FetchRequest(
            max_wait_ms=0,
            min_bytes=0,
            max_bytes=64 << 20,
            topics=[
                FetchTopic(
                    topic=topic,
                    partitions=[
                        FetchPartition(partition=p, fetch_offset=0, partition_max_bytes=16 << 20)
                        for p in range(partitions)
                    ],
                )
            ],
        )
        response: Any = wire.request(request, 11)
    finally:
        wire.close()
    batches: list[StoredBatch] = []
    for topic_response in response.responses:
        for data in topic_response.partitions:
            assert data.error_code == 0, f"fetch {topic}-{data.partition_index}: {data.error_code}"
            for batch in iter_batches(bytes(data.records or b"")):
                batches.append(
                    StoredBatch(
                        data.partition_index,
                        batch.compression.name.lower(),
                        batch.producer_id,
                        batch.producer_epoch,
                        batch.base_sequence,
                        batch.base_offset,
                        batch.record_count,
                    )
                )
    return batches


def check_codecs(stored: list[StoredBatch], codec: str) -> None:
    """The batches were stored compressed with ``codec``. librdkafka, kafka-python and aiokafka
    all send a batch uncompressed when compressing would not make it smaller (small batches
    do that), so some "none" batches are allowed, but at least one must use the codec."""
    codecs = {b.codec for b in stored}
    assert codec in codecs and codecs <= {codec, "none"}, stored


def restart_broker(broker: Any) -> None:
    """SIGTERM the ``broker_process`` fixture's broker (a clean stop) and start it again.

    ``BrokerProcess.start`` looks for "listening on" anywhere in its log, which it appends to,
    so on a restart it finds the previous run's line and returns before the new process
    listens (a conftest.py bug, reported). Wait here for the new run's line as well.
    """
    before = broker.log_text().count("listening on")
    assert broker.stop() == 0, "the broker did not exit cleanly on SIGTERM"
    broker.restart()
    wait_until(lambda: broker.log_text().count("listening on") > before, 30, "the restarted broker")


class RestartLater(threading.Thread):
    """Restart the broker (cleanly) ``delay`` seconds from now, while a client is busy."""

    def __init__(self, broker: Any, delay: float) -> None:
        super().__init__(daemon=True)
        self.broker, self.delay = broker, delay
        self.error: BaseException | None = None

    def run(self) -> None:
        time.sleep(self.delay)
        try:
            restart_broker(self.broker)
        except BaseException as exc:
            self.error = exc

    def finish(self) -> None:
        self.join(60)
        assert not self.is_alive(), "the restart did not finish"
        if self.error is not None:
            raise AssertionError(f"the restart failed: {self.error!r}") from self.error


def check_idempotent_batches(stored: list[StoredBatch], partitions: int) -> None:
    """One producer id on every batch, and per partition sequences that run on from 0 with
    no gap and no repeat (starting again at 0 if the producer bumped its epoch): what an
    idempotent producer wrote, deduplicated by the broker."""
    producer_ids = {b.producer_id for b in stored}
    assert len(producer_ids) == 1 and min(producer_ids) >= 0, producer_ids
    for partition in range(partitions):
        batches = sorted(
            (b for b in stored if b.partition == partition), key=lambda b: b.base_offset
        )
        assert len(batches) > 1, "the test means to span several batches"
        epoch, expected = -1, 0
        for batch in batches:
            if batch.producer_epoch != epoch:
                assert batch.producer_epoch > epoch, f"epoch went back: {batch}"
                epoch, expected = batch.producer_epoch, 0
            assert batch.base_sequence == expected, f"sequence gap or repeat at {batch}"
            expected += batch.record_count


def idempotent_records(count: int) -> list[Triple]:
    return [(b"k%d" % (i % 11), b"idem-%04d" % i, [("i", b"%d" % i)]) for i in range(count)]


def wait_until(
    predicate: Callable[[], bool], timeout: float, what: str, interval: float = 0.05
) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(interval)


Triple = tuple[bytes | None, bytes | None, list[tuple[str, bytes | None]]]


def records_for(tag: str, count: int, keyed: bool, null_headers: bool = True) -> list[Triple]:
    """``count`` (key, value, headers) triples: headers include a repeated and (for clients
    that can send one) a null one; keyed sets include a tombstone and an empty value."""
    out: list[Triple] = []
    for i in range(count):
        key = b"key-%d" % (i % 7) if keyed else None
        text = b"%s-%s-%04d-" % (tag.encode(), b"k" if keyed else b"u", i)
        value: bytes | None = text + b"x" * ((i * 37) % 400)
        if keyed and i == 1:
            value = None
        elif keyed and i == 2:
            value = b""
        headers: list[tuple[str, bytes | None]] = [
            ("h", b"%d" % i),
            ("h", b"again"),
            ("tag", tag.encode()),
        ]
        if null_headers and i % 5 == 0:
            headers.append(("null", None))
        out.append((key, value, headers))
    return out


def mixed_records(tag: str, count: int, null_headers: bool = True) -> list[Triple]:
    """Keyed and unkeyed records, interleaved: ``count`` of each."""
    keyed = records_for(tag, count, True, null_headers)
    unkeyed = records_for(tag, count, False, null_headers)
    return [r for pair in zip(keyed, unkeyed, strict=True) for r in pair]


def check_round_trip(
    sent: list[tuple[int, int, Triple]], consumed: dict[int, list[tuple[int, Triple]]]
) -> None:
    """``sent``: (partition, offset, record) in send order, as the client reported them;
    ``consumed``: per partition, (offset, record) in consumption order. Everything must come
    back exactly, in order, on the partition and at the offset the producer was told."""
    expected: dict[int, list[tuple[int, Triple]]] = {}
    for partition, offset, record in sent:
        expected.setdefault(partition, []).append((offset, record))
    assert sorted(consumed) == sorted(expected), "records came back on other partitions"
    for partition, records in expected.items():
        got = consumed[partition]
        offsets = [offset for offset, _ in records]
        assert offsets == list(range(len(records))), f"partition {partition} offsets {offsets}"
        assert len(got) == len(records), f"partition {partition}: {len(got)} != {len(records)}"
        for (offset, record), (got_offset, got_record) in zip(records, got, strict=True):
            assert (got_offset, got_record) == (offset, record), (
                f"partition {partition}: expected {offset} {record!r}, "
                f"consumed {got_offset} {got_record!r}"
            )
    keyed_partitions: dict[bytes, set[int]] = {}
    for partition, _, (key, _, _) in sent:
        if key is not None:
            keyed_partitions.setdefault(key, set()).add(partition)
    assert keyed_partitions, "no keyed records"
    assert all(len(p) == 1 for p in keyed_partitions.values()), keyed_partitions


# -- isolation in a child process ---------------------------------------------------------


class ChildCrashed(AssertionError):
    """The child process died without reporting (a signal such as SIGSEGV or SIGABRT)."""


def _child(conn: Any, fn: Callable[..., Any], args: tuple[Any, ...]) -> None:
    try:
        result = fn(*args)
    except BaseException as exc:
        conn.send(("error", f"{type(exc).__name__}: {exc}", traceback.format_exc()))
    else:
        conn.send(("ok", result, ""))
    conn.close()


def run_isolated(fn: Callable[..., Any], *args: Any, timeout: float = 60.0) -> Any:
    """``fn(*args)`` in a spawned child process; its return value (must pickle).

    An exception in the child fails the caller with the child's traceback; a child killed by a
    signal fails with the signal's name, so a client crash is a test failure.
    """
    ctx = multiprocessing.get_context("spawn")
    parent_end, child_end = ctx.Pipe(duplex=False)
    process = ctx.Process(target=_child, args=(child_end, fn, args), daemon=True)
    process.start()
    child_end.close()
    try:
        if not parent_end.poll(timeout):
            process.join(0.5)
            if process.exitcode is None:
                process.kill()
                process.join(5)
                raise AssertionError(f"{fn.__name__} did not finish within {timeout}s")
            raise _crashed(fn, process.exitcode)
        try:
            status, value, trace = parent_end.recv()
        except EOFError:
            process.join(5)
            raise _crashed(fn, process.exitcode) from None
    finally:
        parent_end.close()
    process.join(10)
    if process.exitcode is None:
        process.kill()
    if status == "error":
        raise AssertionError(f"{fn.__name__} failed in its child process: {value}\n{trace}")
    return value


def _crashed(fn: Callable[..., Any], code: int | None) -> ChildCrashed:
    if code is not None and code < 0:
        how = f"killed by {signal.Signals(-code).name}"
    else:
        how = f"exited with code {code} without a result"
    return ChildCrashed(f"{fn.__name__}: the client process {how}")
