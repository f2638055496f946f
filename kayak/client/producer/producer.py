"""The asyncio producer: ``send`` records, get their offsets back.

::

    async with Producer({"bootstrap.servers": "localhost:9092"}, linger_ms=5) as producer:
        future = await producer.send("events", b"value", key=b"key")  # enqueued
        metadata = await future                                        # stored
        results = await (await producer.send_batch("events", [b"a", b"b", b"c"]))

``send`` returns once the record is in its partition's batch; it waits only when
``buffer.memory`` is full (at most ``max.block.ms``) or for the topic's metadata the first time.
The future it returns resolves to a :class:`RecordMetadata` when the broker has stored the
record (``acks``), or fails with the ``kayak.errors`` exception that stopped it.

``produce`` is ``send`` without a future or a coroutine per record: a plain call whose
``on_delivery(error, metadata)`` callback runs when the record's batch completes (see
:mod:`~kayak.client.producer.append`; it raises ``BufferFullError`` rather than wait)::

    producer.produce("events", b"value", on_delivery=lambda error, metadata: ...)

``send_batch`` takes a whole list of values and encodes each partition's share in one pass;
one future resolves to the metadata of all of them, in order.

Transactions (``transactional.id``; see :mod:`~kayak.client.producer.transactions`)::

    async with Producer(bootstrap_servers="localhost:9092", transactional_id="copier-1") as p:
        await p.init_transactions()
        async with p.transaction():           # begin; commit at the end, abort on error
            await p.send("out", b"value")
            await p.send_offsets_to_transaction(offsets, consumer.group_metadata())

Configuration is by Kafka property name (see :class:`~kayak.client.config.ProducerConfig`);
``retry_backoff`` takes any :class:`~kayak.client.backoff.BackoffStrategy` in place of the
exponential backoff ``retry.backoff.ms``/``retry.backoff.max.ms`` describe.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping, Sequence
from types import TracebackType
from typing import Any, Self

from kayak.client.backoff import BackoffStrategy, Deadline, backoff_from_config
from kayak.client.cluster import Cluster
from kayak.client.config import ProducerConfig
from kayak.client.connection import BrokerConnection
from kayak.client.partitioner import Partitioner
from kayak.client.producer.accumulator import BufferMemory, RecordAccumulator
from kayak.client.producer.append import RecordAppender
from kayak.client.producer.batch import (
    ProducerBatch,
    Value,
)
from kayak.client.producer.errors import BufferFullError, ProducerClosedError
from kayak.client.producer.idempotence import IdempotenceManager
from kayak.client.producer.record_metadata import RecordMetadata, RecordMetadataList
from kayak.client.producer.record_sizes import Headers
from kayak.client.producer.send_batch import BulkEnqueuer, sticky_without_key
from kayak.client.producer.sender import Sender, TopicState, check_produce_version
from kayak.client.producer.statistics import producer_statistics
from kayak.client.producer.transactions import TransactionManager, check_transactions_supported
from kayak.client.statistics import (
    ClientStatistics,
    StatsReporter,
    cluster_connections,
    reporter_for,
)
from kayak.client.types import ConsumerGroupMetadata, OffsetAndMetadata, TopicPartition
from kayak.errors import (
    ConfigError,
    KafkaTimeoutError,
    KayakError,
    UnknownTopicOrPartitionError,
    UnsupportedVersionError,
)
from kayak.protocol.messages import InitProducerIdRequest
from kayak.protocol.records import BATCH_HEADER_SIZE, Codec

log = logging.getLogger(__name__)

__all__ = ["BufferFullError", "Headers", "Producer", "ProducerClosedError"]

_CODECS = {
    "none": Codec.NONE,
    "gzip": Codec.GZIP,
    "snappy": Codec.SNAPPY,
    "lz4": Codec.LZ4,
    "zstd": Codec.ZSTD,
}

YIELD_EVERY = 1000
"""``send`` lets the event loop run once per this many records, a millisecond or two apart: it
seldom has to wait, and a loop that only awaits it would otherwise starve every other task,
the producer's own senders and ``linger.ms`` timers included. (More often costs throughput:
each turn of the loop is a few microseconds.)"""


class Producer(RecordAppender):
    """An asyncio Kafka producer: batching, compression, retries, idempotence.

    ``config`` maps Kafka producer property names to values; keyword arguments take the same
    names with ``_`` for ``.`` (``linger_ms=5``). ``retry_backoff`` replaces the retry backoff
    strategy. Call ``await start()`` (or use ``async with``) before sending.
    """

    def __init__(
        self,
        config: Mapping[str, object] | None = None,
        /,
        *,
        retry_backoff: BackoffStrategy | None = None,
        **kwargs: object,
    ) -> None:
        self.config = ProducerConfig.from_user(config, **kwargs)
        self._backoff = retry_backoff or backoff_from_config(self.config)
        self._partitioner: Partitioner = self.config.make_partitioner()
        self._sticky_without_key = sticky_without_key(self._partitioner)
        self._codec = _CODECS[self.config.compression_type]
        self._max_block = self.config.max_block_ms / 1000
        # A batch must fit a request, whatever batch.size says.
        self._batch_size = min(
            self.config.batch_size, self.config.max_request_size - BATCH_HEADER_SIZE
        )
        # The largest record that fits a request (and the buffer) on its own.
        self._max_record_size = min(
            self.config.max_request_size - BATCH_HEADER_SIZE, self.config.buffer_memory
        )
        self._started = False
        self._closed = False
        self._statistics = ClientStatistics(
            "producer", self.config.client_id, lambda: cluster_connections(self._cluster_or_none)
        )
        self._cluster_or_none: Cluster | None = None
        self._reporter: StatsReporter | None = None
        self._unyielded = 0
        self._closing: asyncio.Future[None] | None = None
        # Set by start():
        self._cluster: Cluster
        self._memory: BufferMemory
        self._accumulator: RecordAccumulator
        self._sender: Sender
        self._bulk: BulkEnqueuer
        self._topics: dict[str, TopicState] = {}
        self._waiting = {}  # produce()d records by topic, waiting for its metadata
        self._waiting_tasks = set()
        self._idempotence: IdempotenceManager | None = None
        self._transaction: TransactionManager | None = None
        self._plain_appender = None
        self._loop: asyncio.AbstractEventLoop
        self._create_future: Callable[[], asyncio.Future[RecordMetadata]]

    def __repr__(self) -> str:
        servers = ",".join(f"{h}:{p}" for h, p in self.config.bootstrap_servers)
        state = "closed" if self._closed else "running" if self._started else "not started"
        return f"<Producer {servers} {state}>"

    # -- life cycle -------------------------------------------------------------------------------

    async def start(self) -> None:
        """Connect to the cluster and, when idempotent, get a producer id.

        Raises ``KafkaTimeoutError`` if no bootstrap server answers within ``max.block.ms``
        (or ``request.timeout.ms``, if shorter), ``UnsupportedVersionError`` for a broker too old
        to take magic-2 record batches (Kafka before 0.11).
        """
        if self._started or self._closed:
            raise ProducerClosedError("a producer can be started only once")
        self._loop = asyncio.get_running_loop()
        deadline = Deadline(self._max_block)
        cluster = Cluster(self.config)
        try:
            await self._connect(cluster, deadline)
        except BaseException:
            await cluster.close()
            raise
        self._cluster = self._cluster_or_none = cluster
        self._memory = BufferMemory(self.config.buffer_memory)
        self._accumulator = RecordAccumulator(
            linger_ms=self.config.linger_ms,
            delivery_timeout_ms=self.config.delivery_timeout_ms,
            max_request_size=self.config.max_request_size,
            codec=self._codec,
            memory=self._memory,
            idempotence=self._idempotence,
            on_batch_failed=lambda batch, error: self._sender.batch_failed(batch, error),
            on_unrouted_data=lambda: self._sender.request_refresh(),
        )
        self._sender = Sender(
            cluster=cluster,
            config=self.config,
            accumulator=self._accumulator,
            idempotence=self._idempotence,
            backoff=self._backoff,
        )
        self._topics = self._sender.topics
        if self._transaction is not None:
            self._transaction.attach(self._accumulator.queues.values, self._accumulator.drop_unsent)
        self._bulk = BulkEnqueuer(
            config=self.config,
            partitioner=self._partitioner,
            accumulator=self._accumulator,
            memory=self._memory,
            batch_size=self._batch_size,
            max_record_size=self._max_record_size,
            max_block=self._max_block,
            loop=self._loop,
            is_closed=lambda: self._closed,
        )
        self._create_future = self._loop.create_future
        self._started = True
        self._install_plain_appender()
        self._reporter = reporter_for(
            self.config.statistics_interval_ms, self.config.stats_cb, self.statistics
        )
        if self._reporter is not None:
            self._reporter.start()

    async def _connect(self, cluster: Cluster, deadline: Deadline) -> None:
        servers = ", ".join(f"{h}:{p}" for h, p in self.config.bootstrap_servers)
        try:
            async with asyncio.timeout(deadline.remaining()):
                await cluster.bootstrap()
        except TimeoutError:
            raise KafkaTimeoutError(
                f"no broker of bootstrap.servers ({servers}) answered within max.block.ms "
                f"({self.config.max_block_ms} ms)"
            ) from None
        connection = await cluster.any_connection()
        check_produce_version(connection)
        if self.config.transactional_id is not None:
            check_transactions_supported(connection)
            # init_transactions() gets the producer id, from the transaction coordinator.
            self._idempotence = self._transaction = TransactionManager(
                cluster,
                self._backoff,
                transactional_id=self.config.transactional_id,
                transaction_timeout_ms=self.config.transaction_timeout_ms,
            )
        elif self.config.enable_idempotence and self._supports_idempotence(connection):
            self._idempotence = IdempotenceManager(cluster, self._backoff)
            await self._idempotence.initialize(deadline)

    def _supports_idempotence(self, connection: BrokerConnection) -> bool:
        try:
            connection.version_for(InitProducerIdRequest)
        except UnsupportedVersionError:
            if "enable.idempotence" in self.config.explicitly_set:
                raise UnsupportedVersionError(
                    "the broker does not support InitProducerId (Kafka 0.11+), which "
                    "enable.idempotence=true needs"
                ) from None
            log.warning("the broker cannot do idempotence (no InitProducerId): turned it off")
            return False
        return True

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    async def flush(self, timeout: float | None = None) -> None:
        """Send everything buffered now, without waiting for ``linger.ms``, and wait until
        each of those records is stored or has failed (see their futures).

        Raises ``KafkaTimeoutError`` if that takes longer than ``timeout`` seconds.
        """
        self._require_started()
        if self._waiting_tasks:  # produce()d records waiting for their topic's metadata
            try:
                async with asyncio.timeout(timeout):
                    await self._wait_for_waiting_topics()
            except TimeoutError:
                raise KafkaTimeoutError(
                    f"flush: records still wait for their topic's metadata after {timeout:g} s"
                ) from None
        waiters = self._accumulator.waiters()
        if not waiters:
            return
        self._accumulator.flushing += 1
        self._sender.wake_all()
        try:
            async with asyncio.timeout(timeout):
                await asyncio.gather(*waiters)
        except TimeoutError:
            pending = sum(not w.done() for w in waiters)
            raise KafkaTimeoutError(
                f"flush: {pending} batches still undelivered after {timeout:g} s"
            ) from None
        finally:
            self._accumulator.flushing -= 1

    # -- transactions -----------------------------------------------------------------------------

    async def init_transactions(self, timeout: float | None = None) -> None:
        """Register ``transactional.id`` with its transaction coordinator: get a producer id
        and epoch, fencing any older producer of the id and aborting what it left open. Call
        once, after ``start()``, before the first transaction.

        ``timeout`` is in seconds (default ``max.block.ms``); after ``KafkaTimeoutError`` the
        call may be repeated. See :mod:`kayak.client.producer.transactions` for the errors.
        """
        transaction = self._require_transactional()
        await transaction.initialize(self._deadline(timeout))

    def begin_transaction(self) -> None:
        """Open a transaction: every record sent until it ends belongs to it (local only; the
        coordinator hears of it with the first partition or offsets added)."""
        self._require_transactional().begin()

    async def send_offsets_to_transaction(
        self,
        offsets: Mapping[TopicPartition, OffsetAndMetadata | int],
        group_metadata: ConsumerGroupMetadata | str,
        timeout: float | None = None,
    ) -> None:
        """Commit a consumer group's ``offsets`` (the next offset to read, per partition) as
        part of the open transaction: visible to the group only if it commits.

        ``group_metadata`` is the consuming ``Consumer.group_metadata()`` (generation and
        member id let the group refuse a member it has moved on from, KIP-447), or a group id
        alone. A failure makes the transaction abortable (``TransactionAbortRequiredError``),
        a timeout (``timeout`` seconds, default ``max.block.ms``) too.
        """
        transaction = self._require_transactional()
        if isinstance(group_metadata, str):
            group_metadata = ConsumerGroupMetadata(group_metadata)
        await transaction.send_offsets(offsets, group_metadata, self._deadline(timeout))

    async def commit_transaction(self, timeout: float | None = None) -> None:
        """Deliver every record of the transaction (``flush``), then commit it: its records
        become visible to ``read_committed`` consumers, its offsets to the group.

        Raises ``TransactionAbortRequiredError`` if any record or step of the transaction
        failed (call ``abort_transaction()``), ``KafkaTimeoutError`` after ``timeout``
        seconds (default ``max.block.ms``: call ``commit_transaction()`` again to wait on),
        and a fatal error such as ``ProducerFencedError`` as itself.
        """
        transaction = self._require_transactional()
        await transaction.commit(self.flush, self._deadline(timeout))

    async def abort_transaction(self, timeout: float | None = None) -> None:
        """Abort the open transaction: records not sent yet fail with
        ``TransactionAbortedError``, those in flight are waited for, and the coordinator
        writes abort markers, so ``read_committed`` consumers never see any of them. Recovers
        from ``TransactionAbortRequiredError``; ``timeout`` as for ``commit_transaction``."""
        transaction = self._require_transactional()
        await transaction.abort(self._accumulator.waiters, self._deadline(timeout))

    def transaction(self) -> _Transaction:
        """``async with producer.transaction():`` begins a transaction, commits it when the
        block ends, or aborts it if the block raises (and re-raises)."""
        return _Transaction(self)

    def _require_transactional(self) -> TransactionManager:
        self._require_started()
        if self._transaction is None:
            raise ConfigError(
                "transactional.id",
                "is not set: transactions need a producer configured with a transactional.id",
            )
        if self._closed:
            raise ProducerClosedError("the producer is closed")
        return self._transaction

    def _deadline(self, timeout: float | None) -> Deadline:
        return Deadline(self._max_block if timeout is None else timeout)

    async def close(self, timeout: float | None = None) -> None:
        """Deliver what is buffered, then disconnect.

        Records not delivered after ``timeout`` seconds (None: wait as long as their
        ``delivery.timeout.ms`` allows) fail with ``KafkaTimeoutError``; ``send`` raises
        ``ProducerClosedError`` from the moment ``close`` is called. Closing twice is fine.
        """
        if self._closing is not None:
            await asyncio.shield(self._closing)
            return
        self._closed = True
        self._uninstall_plain_appender()
        self._closing = asyncio.get_running_loop().create_future()
        try:
            if self._started:
                await self._drain_then_stop(timeout)
        finally:
            self._closing.set_result(None)

    async def _drain_then_stop(self, timeout: float | None) -> None:
        self._accumulator.closing = True
        if self._transaction is not None:
            self._transaction.closing = True
        self._sender.wake_all()
        try:
            await self.flush(timeout)
        except KafkaTimeoutError:
            self._abort_undelivered(timeout)
        finally:
            self._abandon_waiting(ProducerClosedError("the producer was closed"))
            self._memory_waiters_fail(ProducerClosedError("the producer was closed"))
            if self._reporter is not None:
                await self._reporter.stop()
            if self._transaction is not None:
                await self._transaction.close()
            await self._sender.stop()
            await self._cluster.close()

    def _abort_undelivered(self, timeout: float | None) -> None:
        def error_for(batch: ProducerBatch) -> KafkaTimeoutError:
            last = batch.last_error
            reason = f"; last error: {last}" if last is not None else ""
            return KafkaTimeoutError(
                f"producer closed with records for {batch.topic}-{batch.partition} "
                f"undelivered after the close timeout ({timeout:g} s){reason}"
            )

        records = self._accumulator.abort_all(error_for)
        log.warning("producer closed after %g s with %d records undelivered", timeout, records)

    def _memory_waiters_fail(self, error: KayakError) -> None:
        for _, waiter in self._memory.waiters:
            if not waiter.done():
                waiter.set_exception(error)
        self._memory.waiters.clear()

    def statistics(self) -> dict[str, Any]:
        """What this producer has done, as a dict laid out like librdkafka's statistics:
        ``msg_cnt``/``msg_size`` (records buffered, not yet acknowledged), ``tx``/``tx_bytes``
        and ``rx``/``rx_bytes`` (requests and bytes, all connections), ``txmsgs``/
        ``txmsg_bytes`` (records acknowledged, and their encoded batches' bytes), ``brokers``
        (per connection: requests by API, bytes, round-trip times in µs, requests in flight)
        and ``topics`` (per partition). See :mod:`kayak.client.statistics`; also delivered
        every ``statistics.interval.ms`` to ``stats_cb``."""
        return producer_statistics(self._statistics, self._accumulator if self._started else None)

    def _require_started(self) -> None:
        if not self._started:
            raise ProducerClosedError(
                "the producer is closed" if self._closed else
                "the producer is not started: await producer.start() or use 'async with'"
            )  # fmt: skip

    # -- topics -----------------------------------------------------------------------------------

    async def partitions_for(self, topic: str) -> list[int]:
        """The partitions of ``topic`` (waiting up to ``max.block.ms`` for its metadata)."""
        state = await self._topic_state(topic)
        return list(range(state.partition_count))

    async def _topic_state(self, topic: str) -> TopicState:
        self._require_started()
        if self._closed:
            raise ProducerClosedError("the producer is closed")
        return await self._fetch_topic_state(topic)

    async def _fetch_topic_state(self, topic: str) -> TopicState:
        """``topic``'s state, waiting up to ``max.block.ms`` for its metadata the first time."""
        state = self._topics.get(topic)
        if state is not None:
            return state
        try:
            await self._cluster.topic(topic, timeout=self._max_block)
        except UnknownTopicOrPartitionError:
            raise UnknownTopicOrPartitionError(
                f"topic {topic!r} is not in the cluster's metadata after max.block.ms "
                f"({self.config.max_block_ms} ms): create it first"
            ) from None
        self._sender.reroute()
        return self._sender.add_topic(topic)

    # -- sending ----------------------------------------------------------------------------------

    async def send(
        self,
        topic: str,
        value: Value,
        key: bytes | bytearray | memoryview | None = None,
        headers: Headers | None = None,
        partition: int | None = None,
        timestamp: int | None = None,
    ) -> asyncio.Future[RecordMetadata]:
        """Add one record to its partition's batch; return the future of its metadata.

        ``timestamp`` is in milliseconds since the epoch (default: now). ``partition`` bypasses
        the partitioner. Raises ``KafkaTimeoutError`` if ``buffer.memory`` stays full (or the
        topic's metadata does not come) for ``max.block.ms``, ``RecordTooLargeError`` for a
        record larger than ``max.request.size`` or ``buffer.memory``.
        """
        if self._transaction is not None:
            self._transaction.check_can_send()
        appender = self._plain_appender
        if (
            appender is not None
            and key is None
            and headers is None
            and partition is None
            and timestamp is None
        ):
            future = self._create_future()
            if not appender.append_future(topic, value, future):  # the common case, in C
                await self._append_in_python(topic, value, None, None, None, None, future)
        else:
            future = await self._append_in_python(
                topic, value, key, headers, partition, timestamp, None
            )
        self._unyielded += 1
        if self._unyielded >= YIELD_EVERY:
            # A loop that only awaits send() never suspends: let the senders (and the rest
            # of the application) run now and then, so batches leave while more are made.
            self._unyielded = 0
            await asyncio.sleep(0)
        return future

    async def send_and_wait(
        self,
        topic: str,
        value: Value,
        key: Value = None,
        headers: Headers | None = None,
        partition: int | None = None,
        timestamp: int | None = None,
    ) -> RecordMetadata:
        """``send`` one record and wait until it is stored."""
        future = await self.send(topic, value, key, headers, partition, timestamp)
        return await future

    async def send_batch(
        self,
        topic: str,
        values: Sequence[Value],
        keys: Sequence[Value] | None = None,
        headers: Sequence[Headers | None] | None = None,
        partition: int | None = None,
    ) -> asyncio.Future[RecordMetadataList]:
        """Add many records at once; one future resolves to all their metadata, in order.

        Each partition's records are encoded together in one pass (split at ``batch.size``),
        which is much cheaper per record than ``send``. All records get the same timestamp,
        now. Records follow whatever was sent to their partitions before. If any of them
        fails, the future fails with that error (others may still have been stored).
        """
        if self._transaction is not None:
            self._transaction.check_can_send()
        state = await self._topic_state(topic)
        return await self._bulk.enqueue(topic, state, values, keys, headers, partition)


class _Transaction:
    """``Producer.transaction()``: begin on entry, commit or abort on exit."""

    def __init__(self, producer: Producer) -> None:
        self._producer = producer

    async def __aenter__(self) -> Producer:
        self._producer.begin_transaction()
        return self._producer

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if exc is None:
            await self._producer.commit_transaction()
        elif self._producer._transaction is not None and self._producer._transaction.can_abort:
            await self._producer.abort_transaction()
