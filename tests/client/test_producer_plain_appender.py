"""``produce``'s common case in C (``kayak/client/producer/_per_record.c``): it takes exactly the
calls it should, leaves batches exactly as the Python ``produce`` does, hands everything else
to Python unchanged, and every acknowledged record is stored where its callback says, on
kayak's broker and on Apache Kafka."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from collections.abc import Callable
from typing import Any

import pytest

from kayak.client.producer import Producer, RecordMetadata
from kayak.client.producer.batch import ProducerBatch
from kayak.client.producer.errors import BufferFullError, ProducerClosedError
from kayak.client.producer.native import NATIVE_PRODUCE
from tests.client.conftest import RunningBroker
from tests.client.test_producer_support import create_topic, read_back, run, unique

pytestmark = [
    pytest.mark.timeout(120),
    # make test builds the extension (pip install -e .); its absence is a build failure here.
    pytest.mark.skipif(
        os.environ.get("KAYAK_PURE_PYTHON", "") not in ("", "0"),
        reason="KAYAK_PURE_PYTHON=1 selects the Python produce alone",
    ),
]

LINGER_FOREVER = {"linger.ms": 60_000}  # batches stay open while a test looks at them


def test_the_extension_is_built_and_installed_as_produce(kayak_broker: RunningBroker) -> None:
    assert NATIVE_PRODUCE, "pip install -e . did not build kayak/client/producer/_per_record.c"
    from kayak.client.producer._per_record import PlainAppender

    async def main() -> None:
        producer = Producer({"bootstrap.servers": kayak_broker.bootstrap_servers})
        assert not isinstance(producer.produce, PlainAppender)  # not started: Python's
        await producer.start()
        assert isinstance(producer.produce, PlainAppender)
        assert producer.produce.__doc__ == Producer.produce.__doc__
        await producer.close()
        assert not isinstance(producer.produce, PlainAppender)

    run(main())


def _open_batch(producer: Producer, topic: str) -> ProducerBatch:
    state = producer._topics[topic]
    batch = state.queues[state.sticky].open
    assert batch is not None
    return batch


def _batch_shape(producer: Producer, topic: str) -> dict[str, Any]:
    """What a batch holds that both paths must leave alike (timestamps aside: they read the
    clock; see _timestamps_consistent)."""
    return _shape(producer, _open_batch(producer, topic))


def _shape(producer: Producer, batch: ProducerBatch) -> dict[str, Any]:
    return {
        "values": list(batch.values),
        "reports": list(batch.reports or []),
        "report_positions": batch.report_positions,
        "report_kinds": batch.report_kinds,
        "record_count": batch.record_count,
        "size": batch.size,
        "plain": batch.plain,
        "stamped_per_record": batch.timestamps is not None,
        "memory_used": producer._memory.used,
    }


def _timestamps_consistent(batch: ProducerBatch, since_ms: int, until_ms: int) -> None:
    stamps = batch.timestamps
    if stamps is None:
        assert since_ms <= batch.timestamp <= until_ms
    else:
        assert len(stamps) == batch.record_count
        assert stamps == sorted(stamps) and since_ms <= stamps[0] and stamps[-1] <= until_ms


def test_batches_are_left_as_the_python_produce_leaves_them(kayak_broker: RunningBroker) -> None:
    """The same calls, once through ``producer.produce`` (C where it can) and once through the
    Python method alone, on two producers: identical batches and memory charged, over enough
    milliseconds for per-record timestamps to start."""
    bootstrap = kayak_broker.bootstrap_servers
    topic = create_topic(bootstrap, unique("plain"))

    def callback(error: BaseException | None, metadata: RecordMetadata) -> None:
        pass

    async def fill(
        producer: Producer, produce: Callable[..., None], snapshots: list[dict[str, Any]]
    ) -> None:
        for i in range(3000):
            if i % 97 == 5 and i > 1000:
                produce(topic, b"v%d" % i)  # no callback: report positions start
            else:
                produce(topic, b"v%d" % i, on_delivery=callback)
            if i % 500 == 0:
                await asyncio.sleep(0.002)  # a new millisecond mid-batch
            if i == 1000:  # before any record without a callback goes to Python
                snapshots.append(_batch_shape(producer, topic))

    async def shapes(use_c: bool) -> list[dict[str, Any]]:
        config = {"bootstrap.servers": bootstrap, "batch.size": 1_000_000, **LINGER_FOREVER}
        async with Producer(config) as producer:
            await producer.partitions_for(topic)  # known: no record waits for metadata
            producer.produce(topic, b"first", on_delivery=callback)  # the batch opens
            since = _open_batch(producer, topic).timestamp
            produce = producer.produce if use_c else producer.produce.fallback  # type: ignore[attr-defined]
            snapshots: list[dict[str, Any]] = []
            await fill(producer, produce, snapshots)
            _timestamps_consistent(_open_batch(producer, topic), since, since + 60_000)
            snapshots.append(_batch_shape(producer, topic))
            await producer.flush()
            return snapshots

    in_c, in_python = run(shapes(True)), run(shapes(False))
    assert in_c[-1]["record_count"] == 3001
    assert in_c[0]["stamped_per_record"]  # the milliseconds changed
    assert in_c[-1]["report_positions"] is not None  # the no-callback records were noticed
    assert in_c == in_python


class CountingFallback:
    """Stands in for the Python produce behind a PlainAppender, counting what reaches it."""

    def __init__(self) -> None:
        self.calls: list[tuple[tuple[object, ...], dict[str, object]]] = []

    def __call__(self, *args: object, **kwargs: object) -> None:
        self.calls.append((args, kwargs))


def _appender(producer: Producer, fallback: CountingFallback) -> Any:
    from kayak.client.producer._per_record import PlainAppender
    from kayak.client.producer.accumulator import RECORD_OVERHEAD
    from kayak.client.producer.batch import CALLBACK, FUTURE, RECORD_MEMORY_OVERHEAD

    return PlainAppender(
        fallback, producer._topics, producer._waiting, producer._memory, producer._batch_size,
        producer._max_record_size, RECORD_OVERHEAD, RECORD_MEMORY_OVERHEAD, CALLBACK, FUTURE,
    )  # fmt: skip


def _ignore(error: BaseException | None, metadata: RecordMetadata) -> None:
    pass


# Each call, and whether the C path takes it (False: the Python produce gets it, unchanged).
CALLS: list[tuple[str, Callable[[str], tuple[tuple[object, ...], dict[str, object]]], bool]] = [
    ("plain", lambda t: ((t, b"v"), {"on_delivery": _ignore}), True),
    (
        "Nones by name",
        lambda t: (
            (t, b"v"),
            {
                "key": None,
                "headers": None,
                "partition": None,
                "timestamp": None,
                "on_delivery": _ignore,
            },
        ),
        True,
    ),
    # The batch's first record without a callback: Python starts the report positions.
    ("no callback yet", lambda t: ((t, b"v"), {}), False),
    ("a key", lambda t: ((t, b"v"), {"key": b"k"}), False),
    ("headers", lambda t: ((t, b"v"), {"headers": [("h", b"1")]}), False),
    ("a partition", lambda t: ((t, b"v"), {"partition": 0}), False),
    ("a timestamp", lambda t: ((t, b"v"), {"timestamp": 1}), False),
    ("a bytearray", lambda t: ((t, bytearray(b"v")), {}), False),
    ("a None value", lambda t: ((t, None), {}), False),
    ("positional key", lambda t: ((t, b"v", b"k"), {}), False),
    ("positional timestamp", lambda t: ((t, b"v", None, None, None, 5, _ignore), {}), False),
    # The sync facade hands its records over as seven positional arguments.
    ("all positional", lambda t: ((t, b"v", None, None, None, None, _ignore), {}), True),
    ("too many", lambda t: ((t, b"v", None, None, None, None, _ignore, None), {}), False),
    ("an unknown keyword", lambda t: ((t, b"v"), {"keys": None}), False),
    ("an unknown topic", lambda t: ((t + "-other", b"v"), {}), False),
    ("too large", lambda t: ((t, b"x" * 2_000_000), {}), False),
]


@pytest.mark.parametrize(("name", "make", "in_c"), CALLS, ids=[c[0] for c in CALLS])
def test_what_the_c_path_takes_and_what_it_hands_to_python(
    kayak_broker: RunningBroker,
    name: str,
    make: Callable[[str], tuple[tuple[object, ...], dict[str, object]]],
    in_c: bool,
) -> None:
    bootstrap = kayak_broker.bootstrap_servers
    topic = create_topic(bootstrap, unique("route"))

    async def main() -> None:
        async with Producer({"bootstrap.servers": bootstrap, **LINGER_FOREVER}) as producer:
            await producer.partitions_for(topic)  # known: no record waits for metadata
            producer.produce(topic, b"first", on_delivery=_ignore)
            batch = _open_batch(producer, topic)
            batch.timestamp = batch.timestamps = None  # type: ignore[assignment]
            fallback = CountingFallback()
            appender = _appender(producer, fallback)
            before = _batch_shape(producer, topic)
            args, kwargs = make(topic)
            # Pin the millisecond so that the clock never sends the call to Python.
            for _ in range(100):
                batch.timestamp = _now_ms()
                appender(*args, **kwargs)
                if in_c and fallback.calls:
                    fallback.calls.clear()  # the clock ticked in between: try again
                    continue
                break
            after = _batch_shape(producer, topic)
            if in_c:
                assert fallback.calls == []
                assert after["record_count"] == before["record_count"] + 1
                assert after["values"][-1] == args[1]
                assert after["memory_used"] > before["memory_used"]
            else:
                assert fallback.calls == [(args, kwargs)]
                assert after == before  # nothing changed before handing over
            await producer.flush()

    run(main())


def _now_ms() -> int:
    from kayak.protocol.records.builder import now_ms

    return now_ms()


def test_states_the_c_path_leaves_to_python(kayak_broker: RunningBroker) -> None:
    """Disabled, a full buffer.memory, memory waiters, records waiting for a topic, a full
    batch, a keyed batch, no open batch: each goes to Python, nothing changed."""
    bootstrap = kayak_broker.bootstrap_servers
    topic = create_topic(bootstrap, unique("states"))

    async def main() -> None:
        async with Producer({"bootstrap.servers": bootstrap, **LINGER_FOREVER}) as producer:
            await producer.partitions_for(topic)  # known: no record waits for metadata
            producer.produce(topic, b"first", on_delivery=_ignore)
            batch = _open_batch(producer, topic)
            fallback = CountingFallback()
            appender = _appender(producer, fallback)
            memory = producer._memory

            def goes_to_python(why: str) -> None:
                before = _shape(producer, batch)
                fallback.calls.clear()
                batch.timestamp, batch.timestamps = _now_ms(), None
                appender(topic, b"v", on_delivery=_ignore)
                assert len(fallback.calls) == 1, why
                assert _shape(producer, batch) == before, why

            appender.enabled = False
            goes_to_python("disabled")
            appender.enabled = True
            limit, memory.limit = memory.limit, memory.used
            goes_to_python("buffer.memory full")
            memory.limit = limit
            memory.waiters.append((1, asyncio.get_running_loop().create_future()))
            goes_to_python("someone waits for buffer.memory")
            memory.waiters.clear()
            producer._waiting["elsewhere"] = []
            goes_to_python("records wait for a topic's metadata")
            producer._waiting.clear()
            size, batch.size = batch.size, producer._batch_size
            goes_to_python("the batch is full")
            batch.size = size
            batch.plain = False
            goes_to_python("the batch has keys")
            batch.plain = True
            queue = producer._topics[topic].queues[0]
            queue.open = None
            goes_to_python("no open batch")
            queue.open = batch
            batch.timestamp = batch.timestamps = None  # type: ignore[assignment]
            fallback.calls.clear()
            for _ in range(100):  # and back to C
                batch.timestamp = _now_ms()
                appender(topic, b"v", on_delivery=_ignore)
                if not fallback.calls:
                    break
                fallback.calls.clear()
            assert fallback.calls == []
            await producer.flush()

    run(main())


def test_a_reference_taken_before_close_raises_after_it(kayak_broker: RunningBroker) -> None:
    bootstrap = kayak_broker.bootstrap_servers
    topic = create_topic(bootstrap, unique("closed"))

    async def main() -> None:
        producer = Producer({"bootstrap.servers": bootstrap})
        await producer.start()
        produce = producer.produce
        produce(topic, b"before")
        await producer.close()
        with pytest.raises(ProducerClosedError):
            produce(topic, b"after")

    run(main())


def test_a_full_buffer_memory_raises_buffer_full(kayak_broker: RunningBroker) -> None:
    bootstrap = kayak_broker.bootstrap_servers
    topic = create_topic(bootstrap, unique("full"))

    async def main() -> None:
        config = {"bootstrap.servers": bootstrap, "buffer.memory": 64 * 1024, **LINGER_FOREVER}
        async with Producer(config) as producer:
            produce = producer.produce
            with pytest.raises(BufferFullError):
                for _ in range(10_000):
                    produce(topic, b"x" * 100)
            assert producer._memory.used <= producer._memory.limit

    run(main())


def test_transactional_producers_keep_the_python_produce(kayak_broker: RunningBroker) -> None:
    from kayak.client.producer._per_record import PlainAppender

    async def main() -> None:
        config = {"bootstrap.servers": kayak_broker.bootstrap_servers,
                  "transactional.id": unique("tx")}  # fmt: skip
        async with Producer(config) as producer:
            assert not isinstance(producer.produce, PlainAppender)

    run(main())


def test_every_acknowledged_record_is_stored_where_its_callback_says(
    kafka_cluster: RunningBroker,
) -> None:
    """60,000 records over many batches (small batch.size), the C path and Python's mixed
    (keys, headers and no-callback records among them), two partitions: every callback's
    offset holds its record, read back by confluent-kafka."""
    bootstrap = kafka_cluster.bootstrap_servers
    topic = create_topic(bootstrap, unique("stored"), 2)
    count = 60_000
    reported: dict[int, tuple[int, int]] = {}
    errors: list[BaseException] = []

    def callback_for(i: int) -> Callable[[BaseException | None, RecordMetadata], None]:
        def on_delivery(error: BaseException | None, metadata: RecordMetadata) -> None:
            if error is not None:
                errors.append(error)
            reported[i] = (metadata.partition, metadata.offset)

        return on_delivery

    async def main() -> None:
        config = {"bootstrap.servers": bootstrap, "batch.size": 16_384, "linger.ms": 2}
        async with Producer(config) as producer:
            for i in range(count):
                value = b"value-%d" % i
                if i % 1000 == 7:
                    producer.produce(topic, value, key=b"k%d" % i, on_delivery=callback_for(i))
                elif i % 1000 == 8:
                    producer.produce(topic, value, headers=[("n", b"%d" % i)],
                                     on_delivery=callback_for(i))  # fmt: skip
                elif i % 101 == 0:
                    producer.produce(topic, value)
                else:
                    producer.produce(topic, value, on_delivery=callback_for(i))
                if i % 2000 == 0:
                    await asyncio.sleep(0)  # batches leave while more are made
            await producer.flush()

    run(main(), timeout=90)
    assert errors == []
    stored = read_back(bootstrap, topic, 2, count)
    assert len(stored) == count
    at = {(s.partition, s.offset): s for s in stored}
    for i, where in reported.items():
        assert at[where].value == b"value-%d" % i
    assert len(reported) == count - len(range(0, count, 101)) + sum(
        1 for i in range(0, count, 101) if i % 1000 in (7, 8)
    )
    assert sorted(s.value for s in stored) == sorted(b"value-%d" % i for i in range(count))


def test_pure_python_selects_the_python_produce(kayak_broker: RunningBroker) -> None:
    script = (
        "import asyncio, sys\n"
        "from kayak.client.producer import Producer\n"
        "from kayak.client.producer.native import NATIVE_PRODUCE\n"
        "async def main():\n"
        f"    config = {{'bootstrap.servers': '{kayak_broker.bootstrap_servers}'}}\n"
        "    async with Producer(config) as p:\n"
        "        print(NATIVE_PRODUCE, type(p.produce).__name__)\n"
        "asyncio.run(main())\n"
    )
    env = {**os.environ, "KAYAK_PURE_PYTHON": "1"}
    out = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True,
                         text=True, timeout=60, check=True)  # fmt: skip
    assert out.stdout.split() == ["False", "method"]


@pytest.mark.parametrize("positions", [None, [0, 2, 3, 7]])
@pytest.mark.parametrize("timestamps", [None, [1000 + 3 * i for i in range(8)]])
@pytest.mark.parametrize(("base_offset", "log_append_time"), [(100, -1), (-1, -1), (7, 5000)])
def test_record_metadata_in_c_is_the_python_reference(
    monkeypatch: pytest.MonkeyPatch,
    positions: list[int] | None,
    timestamps: list[int] | None,
    base_offset: int,
    log_append_time: int,
) -> None:
    from kayak.client.producer import batch as batch_module
    from kayak.client.producer.batch import PartitionQueue

    batch = ProducerBatch(PartitionQueue("t", 3), 0, 0.0, 0.0, 999)
    batch.report_positions, batch.timestamps = positions, timestamps
    count = 4 if positions is not None else 8
    in_c = batch._metadata(count, base_offset, log_append_time)
    assert isinstance(in_c, list)
    monkeypatch.setattr(batch_module, "per_record", None)
    in_python = list(batch._metadata(count, base_offset, log_append_time))
    assert in_c == in_python
    assert all(type(m) is RecordMetadata for m in in_c)
    assert in_c[-1].partition == 3 and len(in_c) == count


def test_sends_futures_report_every_record_where_it_is_stored(
    kafka_cluster: RunningBroker,
) -> None:
    """``send``'s common case goes through the C path with its future, the rest through
    Python: 20,000 records over many batches; every future's offset holds its record."""
    bootstrap = kafka_cluster.bootstrap_servers
    topic = create_topic(bootstrap, unique("send"), 2)
    count = 20_000

    async def main() -> list[RecordMetadata]:
        config = {"bootstrap.servers": bootstrap, "batch.size": 16_384, "linger.ms": 2}
        async with Producer(config) as producer:
            assert producer._plain_appender is not None
            futures = []
            for i in range(count):
                key = b"k%d" % i if i % 500 == 3 else None
                futures.append(await producer.send(topic, b"value-%d" % i, key=key))
            kinds = {batch.report_kinds for q in producer._topics[topic].queues
                     for batch in [q.open] if batch is not None}  # fmt: skip
            assert kinds <= {0, 1}  # FUTURE only: no callback kind from the C path
            await producer.flush()
            return [await f for f in futures]

    stored_at = run(main(), timeout=90)
    stored = {(s.partition, s.offset): s.value for s in read_back(bootstrap, topic, 2, count)}
    assert len(stored) == count
    for i, metadata in enumerate(stored_at):
        assert stored[(metadata.partition, metadata.offset)] == b"value-%d" % i


def test_append_future_takes_the_common_case_only(kayak_broker: RunningBroker) -> None:
    bootstrap = kayak_broker.bootstrap_servers
    topic = create_topic(bootstrap, unique("future"))

    async def main() -> None:
        async with Producer({"bootstrap.servers": bootstrap, **LINGER_FOREVER}) as producer:
            await producer.partitions_for(topic)
            producer.produce(topic, b"first")
            producer.produce(topic, b"second", on_delivery=_ignore)  # positions started
            batch = _open_batch(producer, topic)
            appender = _appender(producer, CountingFallback())
            future = asyncio.get_running_loop().create_future()
            assert not appender.append_future(topic + "-unknown", b"v", future)
            assert not appender.append_future(topic, bytearray(b"v"), future)
            for _ in range(100):
                batch.timestamp, batch.timestamps = _now_ms(), None
                if appender.append_future(topic, b"v", future):
                    break
            assert batch.reports[-1] is future and batch.values[-1] == b"v"
            assert batch.report_kinds == 3  # CALLBACK | FUTURE
            assert batch.report_positions == [1, 2]
            with pytest.raises(TypeError):
                appender.append_future(topic, b"v")
            await producer.flush()
            assert (await future).offset == 2

    run(main())


def test_a_subclass_with_its_own_produce_keeps_it(kayak_broker: RunningBroker) -> None:
    topic = create_topic(kayak_broker.bootstrap_servers, unique("subclass"))
    seen: list[bytes] = []

    class Counting(Producer):
        def produce(self, topic: str, value: Any, *args: Any, **kwargs: Any) -> None:
            seen.append(value)
            super().produce(topic, value, *args, **kwargs)

    async def main() -> None:
        async with Counting({"bootstrap.servers": kayak_broker.bootstrap_servers}) as producer:
            producer.produce(topic, b"a")
            producer.produce(topic, b"b")
            await producer.flush()

    run(main())
    assert seen == [b"a", b"b"]


def test_the_counters_are_c_integers_that_python_reads_and_writes_as_ints() -> None:
    from kayak.client.producer import _per_record
    from kayak.client.producer.accumulator import BufferMemory

    memory = BufferMemory(1 << 20)
    assert isinstance(memory, _per_record.MemoryCounters)
    memory.used += 1_000
    memory.used -= 400
    assert (memory.limit, memory.used) == (1 << 20, 600)
    assert ProducerBatch.__mro__[1] is _per_record.BatchCounters
    with pytest.raises(TypeError):
        memory.used = "600"  # type: ignore[assignment]
    with pytest.raises(OverflowError):
        memory.limit = 1 << 64
    assert memory.limit == 1 << 20  # a refused value changes nothing


def test_configure_refuses_classes_without_the_c_counters() -> None:
    from kayak.client.producer import _per_record
    from kayak.client.producer.accumulator import BufferMemory
    from kayak.client.producer.batch import PartitionQueue
    from kayak.client.producer.sender import TopicState

    class PlainBatch:
        __slots__ = ("plain", "report_positions", "reports", "timestamp", "timestamps", "values")

    with pytest.raises(TypeError, match="BatchCounters"):
        _per_record.configure(TopicState, PartitionQueue, PlainBatch, BufferMemory)
    # The producer's own classes are still the configured ones: produce keeps its C path.
    _per_record.configure(TopicState, PartitionQueue, ProducerBatch, BufferMemory)
