"""The producer's failures: bad settings, brokers that are gone or stalled, full buffers,
records that cannot go. Each must fail clearly and within the configured time."""

from __future__ import annotations

import asyncio
import time
import tracemalloc

import pytest

from kayak.client.producer import Producer, ProducerClosedError
from kayak.errors import (
    ConfigError,
    KafkaTimeoutError,
    RecordTooLargeError,
    UnknownTopicOrPartitionError,
)
from tests.client.conftest import RunningBroker, _free_port
from tests.client.test_producer_support import (
    Stoppable,
    create_topic,
    read_back,
    run,
    stoppable_broker,
    unique,
)

pytestmark = pytest.mark.timeout(60)
__all__ = ["stoppable_broker"]  # the fixture, imported to be found


@pytest.fixture
def broker(stoppable_broker: Stoppable) -> Stoppable:
    """kayak's broker and Tansu, each of this test's own: these tests pause or kill it, so
    not the run's shared Apache Kafka."""
    return stoppable_broker


@pytest.mark.parametrize(
    ("settings", "complaint"),
    [
        ({"linger.ms": -1}, "linger.ms"),
        ({"lingr.ms": 5}, "did you mean"),
        ({"acks": "2"}, "acks"),
        ({"compression.type": "brotli"}, "compression.type"),
        ({"acks": 1, "enable.idempotence": True}, "idempotent"),
        ({"max.in.flight.requests.per.connection": 6, "enable.idempotence": True}, "at most 5"),
        ({"transactional.id": "tx", "enable.idempotence": False}, "transactional.id"),
        ({"bootstrap.servers": "localhost"}, "port"),
        ({"batch.num.messages": 10}, "batch.size"),
    ],
)
def test_bad_settings_fail_at_construction_naming_the_property(
    settings: dict[str, object], complaint: str
) -> None:
    config: dict[str, object] = {"bootstrap.servers": "127.0.0.1:9092", **settings}
    with pytest.raises(ConfigError) as raised:
        Producer(config)
    assert complaint in str(raised.value)


def test_acks_below_all_turns_idempotence_off_quietly() -> None:
    assert (
        Producer({"bootstrap.servers": "127.0.0.1:9092", "acks": 1}).config.enable_idempotence
        is False
    )
    assert Producer(bootstrap_servers="127.0.0.1:9092").config.enable_idempotence is True


def test_a_dead_bootstrap_address_fails_start_within_max_block_ms() -> None:
    producer = Producer(
        {"bootstrap.servers": f"127.0.0.1:{_free_port()}"},
        max_block_ms=800,
        request_timeout_ms=5_000,
    )
    start = time.monotonic()
    with pytest.raises(KafkaTimeoutError, match=r"bootstrap\.servers"):
        run(producer.start())
    assert time.monotonic() - start < 3


def test_not_started_or_closed_producer_refuses_to_send() -> None:
    async def main() -> None:
        producer = Producer({"bootstrap.servers": "127.0.0.1:9092"})
        with pytest.raises(ProducerClosedError, match="not started"):
            await producer.send("t", b"x")
        await producer.close()
        with pytest.raises(ProducerClosedError):
            await producer.send("t", b"x")

    run(main())


def test_record_errors_unknown_topics_and_bad_arguments(any_broker: RunningBroker) -> None:
    topic = create_topic(any_broker.bootstrap_servers, unique("errors"), 2)

    async def main() -> None:
        async with Producer(
            {"bootstrap.servers": any_broker.bootstrap_servers, "allow.auto.create.topics": False},
            max_block_ms=700,
            max_request_size=10_000,
        ) as producer:
            with pytest.raises(RecordTooLargeError, match=r"max\.request\.size"):
                await producer.send(topic, bytes(20_000))
            with pytest.raises(RecordTooLargeError):
                await producer.send_batch(topic, [b"small", bytes(20_000)])
            with pytest.raises(TypeError, match="encode"):
                await producer.send(topic, "text")  # type: ignore[arg-type]
            with pytest.raises(TypeError, match="header"):
                await producer.send(topic, b"v", headers=[("h", "text")])  # type: ignore[list-item]
            with pytest.raises(ValueError, match="2 partitions"):
                await producer.send(topic, b"v", partition=5)
            with pytest.raises(ValueError, match="keys"):
                await producer.send_batch(topic, [b"a", b"b"], keys=[b"k"])
            start = time.monotonic()
            with pytest.raises(UnknownTopicOrPartitionError, match=r"max\.block\.ms"):
                await producer.send("no-such-topic", b"v")
            assert time.monotonic() - start < 3
            # The producer is still fine after all that.
            metadata = await producer.send_and_wait(topic, b"ok", key=bytearray(b"k"))
            assert metadata.offset == 0

    run(main())


def test_buffer_memory_bounds_what_waits_and_max_block_ms_times_out(broker: Stoppable) -> None:
    """With the broker stalled nothing is acknowledged: send() fills buffer.memory, then waits,
    then fails after max.block.ms; the memory charged never passes the limit. When the broker
    wakes up, everything accepted is delivered."""
    topic = create_topic(broker.bootstrap_servers, unique("memory"), 1)
    limit = 64 * 1024

    async def main() -> tuple[int, int]:
        async with Producer(
            {"bootstrap.servers": broker.bootstrap_servers},
            buffer_memory=limit,
            batch_size=4096,
            max_block_ms=1_000,
            request_timeout_ms=20_000,
        ) as producer:
            await producer.send_and_wait(topic, b"warm-up")
            broker.pause()
            accepted: list[asyncio.Future[object]] = []
            highest = 0
            start = time.monotonic()
            with pytest.raises(KafkaTimeoutError, match=r"buffer\.memory"):
                for i in range(100_000):
                    accepted.append(await producer.send(topic, b"%08d" % i + bytes(100)))
                    highest = max(highest, producer._memory.used)
            blocked_for = time.monotonic() - start
            assert 1.0 <= blocked_for < 4
            assert highest <= limit
            # The buffer refuses more at once, after max.block.ms again.
            with pytest.raises(KafkaTimeoutError):
                await producer.send_batch(topic, [bytes(100)] * 300)
            broker.resume()
            await producer.flush(timeout=20)
            assert all(f.done() and f.exception() is None for f in accepted)
            assert producer._memory.used == 0
            return len(accepted), highest

    accepted, _ = run(main())
    assert 200 < accepted < limit // 100
    stored = read_back(broker.bootstrap_servers, topic, 1, accepted + 1)
    values = [s.value for s in stored if s.value != b"warm-up"]
    assert [v[:8] for v in values if v] == [b"%08d" % i for i in range(accepted)]


def test_memory_stays_bounded_when_sending_far_more_than_the_buffer(broker: Stoppable) -> None:
    """Twenty buffers' worth sent in a loop that only awaits send(): the Python memory the
    producer holds stays within a small multiple of buffer.memory."""
    topic = create_topic(broker.bootstrap_servers, unique("bounded"), 1)
    limit = 256 * 1024
    payload = bytes(200)
    count = 20 * limit // len(payload)

    async def main() -> int:
        async with Producer(
            {"bootstrap.servers": broker.bootstrap_servers}, buffer_memory=limit, linger_ms=50
        ) as producer:
            tracemalloc.start()
            base = tracemalloc.get_traced_memory()[0]
            tracemalloc.reset_peak()
            last: asyncio.Future[object] | None = None
            for _ in range(count):
                last = await producer.send(topic, payload)
                assert producer._memory.used <= limit
            peak = tracemalloc.get_traced_memory()[1] - base
            tracemalloc.stop()
            assert last is not None
            await last
            return peak

    peak = run(main(), timeout=50)
    assert peak < 4 * limit, f"{peak} bytes held for a {limit}-byte buffer"


def test_close_fails_what_cannot_be_delivered_within_its_timeout(broker: Stoppable) -> None:
    topic = create_topic(broker.bootstrap_servers, unique("closing"), 1)

    async def main() -> None:
        producer = Producer(
            {"bootstrap.servers": broker.bootstrap_servers},
            linger_ms=10_000,
            reconnect_backoff_ms=50,
            reconnect_backoff_max_ms=200,
        )
        await producer.start()
        delivered = await producer.send(topic, b"delivered")
        await producer.flush()  # linger.ms is long: without a flush it would wait 10 s
        assert (await delivered).offset == 0
        futures = [await producer.send(topic, b"stranded-%d" % i) for i in range(20)]
        broker.kill()
        start = time.monotonic()
        await producer.close(timeout=1.5)
        assert 1.4 <= time.monotonic() - start < 4
        for future in futures:
            error = future.exception()
            assert isinstance(error, KafkaTimeoutError)
            assert "producer closed" in str(error)
        with pytest.raises(ProducerClosedError):
            await producer.send(topic, b"late")

    run(main())


def test_delivery_timeout_fails_records_while_the_broker_is_gone(broker: Stoppable) -> None:
    topic = create_topic(broker.bootstrap_servers, unique("expiry"), 1)

    async def main() -> None:
        async with Producer(
            {"bootstrap.servers": broker.bootstrap_servers},
            delivery_timeout_ms=1_500,
            request_timeout_ms=1_000,
            linger_ms=0,
        ) as producer:
            await producer.send_and_wait(topic, b"delivered")
            broker.kill()
            start = time.monotonic()
            future = await producer.send(topic, b"doomed")
            with pytest.raises(KafkaTimeoutError, match=r"delivery\.timeout\.ms"):
                await future
            assert time.monotonic() - start < 4
            await producer.close(timeout=1)

    run(main())
