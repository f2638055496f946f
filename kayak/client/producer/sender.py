"""Getting batches to the brokers: one produce loop per broker, and what keeps them on course.

:class:`Sender` routes every partition's queue to the :class:`BrokerSender` of the broker that
leads it, and keeps that routing true: it refreshes metadata when a broker says it does not
lead a partition (or cannot be reached) and moves queues when leadership moved; it expires
batches past ``delivery.timeout.ms``; and it bumps the idempotent producer's epoch when asked.

Each :class:`BrokerSender` sleeps until one of its partitions has a ready batch (a batch
filled up, ``linger.ms`` passed, a retry's backoff ended, a response freed an in-flight slot),
then drains ready batches into Produce requests, one batch per partition per request, up to
``max.in.flight.requests.per.connection`` requests in flight. Each response settles its
batches: stored (futures resolved), retried (back in the queue, in order, after a backoff),
or failed (futures failed with the ``kayak.errors`` exception for the broker's error code).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
from collections.abc import Iterable
from dataclasses import dataclass, field

from kayak.client.backoff import BackoffStrategy, Deadline
from kayak.client.cluster import Cluster, ClusterMetadata
from kayak.client.config import ProducerConfig
from kayak.client.connection import BrokerConnection, RecordsView
from kayak.client.producer.accumulator import RecordAccumulator, describe_failure, expired
from kayak.client.producer.batch import PartitionQueue, ProducerBatch
from kayak.client.producer.idempotence import IdempotenceManager
from kayak.client.security.errors import is_authentication_error
from kayak.errors import (
    ErrorCode,
    KafkaError,
    KayakError,
    NetworkError,
    TransactionAbortedError,
    UnsupportedVersionError,
    error_for_code,
)
from kayak.protocol.message import Message
from kayak.protocol.messages import ProduceRequest
from kayak.protocol.messages.produce_request import PartitionProduceData, TopicProduceData
from kayak.protocol.messages.produce_response import PartitionProduceResponse, ProduceResponse
from kayak.protocol.records.record import NO_SEQUENCE

log = logging.getLogger(__name__)

__all__ = ["MIN_PRODUCE_VERSION", "BrokerSender", "Sender", "TopicState", "check_produce_version"]

MIN_PRODUCE_VERSION = 3
"""Produce v3 (Kafka 0.11) is the first to carry magic-2 record batches, all kayak writes."""

_EXPIRY_CHECK_MAX_INTERVAL = 1.0  # seconds; batches are also expired when deadlines come due
_MIN_REFRESH_INTERVAL = 0.01  # seconds between metadata refreshes, whatever the backoff says


@dataclass(slots=True)
class TopicState:
    """What ``send`` needs of a topic: its partition count, the partitions with a leader, and
    each partition's queue."""

    name: str
    partition_count: int
    available: list[int]
    queues: list[PartitionQueue] = field(default_factory=list)
    sticky: int = -1
    """The partition a sticky partitioner gives keyless records until its next batch (-1:
    ask the partitioner)."""


def check_produce_version(connection: BrokerConnection) -> int:
    """The Produce version to use with ``connection``'s broker; a clear error if too old."""
    version = connection.version_for(ProduceRequest)
    if version < MIN_PRODUCE_VERSION:
        raise UnsupportedVersionError(
            f"the broker at {connection.host}:{connection.port} speaks Produce up to "
            f"v{version}; kayak's producer writes magic-2 record batches, which need Produce "
            f"v{MIN_PRODUCE_VERSION}+ (Kafka 0.11 or later)"
        )
    return version


class BrokerSender:
    """The produce loop of one broker: drains its partitions' ready batches into requests."""

    def __init__(self, owner: Sender, node_id: int) -> None:
        self._owner = owner
        self.node_id = node_id
        self.queues: list[PartitionQueue] = []
        self.in_flight = 0
        self._rotation = 0
        self._loop = asyncio.get_running_loop()
        self._wakeup = asyncio.Event()
        self._timer: asyncio.TimerHandle | None = None
        self._timer_at = math.inf
        self._requests: set[asyncio.Task[None]] = set()
        self._last_exchange: asyncio.Task[None] | None = None
        self._task = asyncio.ensure_future(self._run())

    def __repr__(self) -> str:
        return f"<BrokerSender node={self.node_id} partitions={len(self.queues)}>"

    # -- being woken ----------------------------------------------------------------------------

    def batch_ready(self) -> None:
        self._wakeup.set()

    def batch_opened(self, ready_at: float) -> None:
        self.wake_at(ready_at)

    def wake_at(self, when: float) -> None:
        """Drain again at loop time ``when`` (or earlier, if woken before)."""
        if when >= self._timer_at:
            return
        if self._timer is not None:
            self._timer.cancel()
        self._timer_at = when
        self._timer = self._loop.call_at(when, self._on_timer)

    def _on_timer(self) -> None:
        self._timer, self._timer_at = None, math.inf
        self._wakeup.set()

    # -- the loop -------------------------------------------------------------------------------

    async def _run(self) -> None:
        failures = 0
        while True:
            await self._wakeup.wait()
            self._wakeup.clear()
            if not any(queue.has_data for queue in self.queues):
                continue
            try:
                connection = await self._owner.cluster.connection(self.node_id)
                version = check_produce_version(connection)
            except UnsupportedVersionError as exc:
                self._owner.fail_queues(self.queues, exc)
                continue
            except KayakError as exc:
                if is_authentication_error(exc):
                    # Credentials or certificates refused: retrying cannot help, and the
                    # user should hear now, not at delivery.timeout.ms.
                    self._owner.fail_queues(self.queues, exc)
                    continue
                failures += 1
                self._owner.connection_failed(self, exc)
                await asyncio.sleep(self._owner.backoff.delay(failures - 1))
                self._wakeup.set()
                continue
            failures = 0
            self._send_ready(connection, version)

    def _send_ready(self, connection: BrokerConnection, version: int) -> None:
        accumulator = self._owner.accumulator
        max_in_flight = self._owner.max_in_flight
        now = self._loop.time()
        while self.in_flight < max_in_flight:
            batches, next_ready = accumulator.drain(self.queues, self._rotation, now, self.node_id)
            self._rotation += 1
            if not batches:
                if next_ready < math.inf:
                    self.wake_at(next_ready)
                return
            self._dispatch(connection, version, batches)

    def _dispatch(
        self, connection: BrokerConnection, version: int, batches: list[ProducerBatch]
    ) -> None:
        owner = self._owner
        by_topic: dict[str, list[PartitionProduceData]] = {}
        sending: list[ProducerBatch] = []
        for batch in batches:
            batch.attempts += 1
            try:
                records = batch.encode(owner.accumulator.codec, owner.transactional_id is not None)
            except KayakError as exc:  # e.g. a value of the wrong type slipped through
                owner.accumulator.sent(batch)
                owner.accumulator.fail(batch, exc)
                continue
            # Written to the socket as is, not copied into the request's encoding.
            by_topic.setdefault(batch.topic, []).append(
                PartitionProduceData(batch.partition, RecordsView(records))
            )
            sending.append(batch)
        if not sending:
            return
        request = ProduceRequest(
            transactional_id=owner.transactional_id,
            acks=owner.config.acks,
            timeout_ms=owner.config.request_timeout_ms,
            topic_data=[TopicProduceData(name, data) for name, data in by_topic.items()],
        )
        # Written now, so requests leave in the order batches were drained.
        try:
            waiter = connection.send(request, version, expect_response=request.acks != 0)
        except KayakError as exc:
            owner.request_failed(sending, exc)
            owner.batches_settled()
            return
        if waiter is None:  # acks=0: no answer will come, nor offsets
            for batch in sending:
                owner.accumulator.sent(batch)
                owner.accumulator.complete(batch, -1, -1)
            owner.batches_settled()
            return
        self.in_flight += 1
        before = self._last_exchange
        task = asyncio.ensure_future(self._exchange(connection, waiter, request, sending, before))
        self._last_exchange = task
        self._requests.add(task)
        task.add_done_callback(self._requests.discard)

    async def _exchange(
        self,
        connection: BrokerConnection,
        waiter: asyncio.Future[Message],
        request: ProduceRequest,
        batches: list[ProducerBatch],
        before: asyncio.Task[None] | None,
    ) -> None:
        owner = self._owner
        try:
            try:
                response: ProduceResponse = await connection.wait_response(waiter, request)
            except KayakError as exc:
                await self._after(before)
                owner.request_failed(batches, exc)
            else:
                await self._after(before)
                owner.response_received(batches, response)
        finally:
            self.in_flight -= 1
            self._wakeup.set()
            owner.batches_settled()

    @staticmethod
    async def _after(before: asyncio.Task[None] | None) -> None:
        """Answers are handled in the order their requests were sent, whichever task the
        loop wakes first (one whose answer is already in does not wait at all), so each
        partition's delivery reports follow its offsets."""
        if before is not None and not before.done():
            await asyncio.wait({before})

    async def stop(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
        tasks = [self._task, *self._requests]
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task


class Sender:
    """Routes partitions to broker loops and keeps metadata, deadlines and epochs in order."""

    def __init__(
        self,
        *,
        cluster: Cluster,
        config: ProducerConfig,
        accumulator: RecordAccumulator,
        idempotence: IdempotenceManager | None,
        backoff: BackoffStrategy,
    ) -> None:
        self.cluster = cluster
        self.config = config
        self.accumulator = accumulator
        self.idempotence = idempotence
        # Set for a transactional producer: its Produce requests and batches carry it.
        self.transactional_id = config.transactional_id if idempotence is not None else None
        self.backoff = backoff
        self.max_in_flight = config.max_in_flight_requests_per_connection
        self.topics: dict[str, TopicState] = {}
        self.brokers: dict[int, BrokerSender] = {}
        self._loop = asyncio.get_running_loop()
        self._routed: ClusterMetadata | None = None
        self._refresh_wanted = asyncio.Event()
        self._settled = asyncio.Event()
        self._bump_task: asyncio.Task[None] | None = None
        self._tasks = [
            asyncio.ensure_future(self._metadata_loop()),
            asyncio.ensure_future(self._expiry_loop()),
        ]

    # -- routing --------------------------------------------------------------------------------

    def add_topic(self, name: str) -> TopicState:
        """Start routing ``name`` (its metadata is in the cluster's cache)."""
        state = self.topics.get(name)
        if state is None:
            state = self.topics[name] = TopicState(name, 0, [])
            self._update_topic(state, self.cluster.metadata)
        return state

    def reroute(self) -> None:
        """Follow the latest metadata: partition counts, leaders, queues to broker loops."""
        metadata = self.cluster.metadata
        if metadata is self._routed:
            return
        self._routed = metadata
        for state in self.topics.values():
            self._update_topic(state, metadata)
        for node in list(self.brokers):
            if node not in metadata.brokers and not self.brokers[node].queues:
                self._retire(node)

    def _update_topic(self, state: TopicState, metadata: ClusterMetadata) -> None:
        info = metadata.topics.get(state.name)
        if info is None:
            return  # not in this answer: keep what we knew; errors will tell if it is gone
        count = max(info.partitions, default=-1) + 1
        while len(state.queues) < count:
            state.queues.append(self.accumulator.queue(state.name, len(state.queues)))
        if count != state.partition_count:
            state.sticky = -1
        state.partition_count = count
        state.available = sorted(
            p for p, part in info.partitions.items()
            if part.leader >= 0 and part.leader in metadata.brokers
        )  # fmt: skip
        for queue in state.queues:
            part = info.partitions.get(queue.partition)
            leader = part.leader if part is not None else -1
            self._route(queue, leader if leader in metadata.brokers else -1)

    def _route(self, queue: PartitionQueue, leader: int) -> None:
        if queue.leader == leader and (leader < 0 or queue.sender is not None):
            return
        old = self.brokers.get(queue.leader)
        if old is not None and queue in old.queues:
            old.queues.remove(queue)
        queue.leader = leader
        if leader < 0:
            queue.sender = None
            if queue.has_data:
                self.request_refresh()
            return
        broker = self.brokers.get(leader)
        if broker is None:
            broker = self.brokers[leader] = BrokerSender(self, leader)
        broker.queues.append(queue)
        queue.sender = broker
        if queue.has_data:
            log.debug("%s-%d now goes to broker %d", queue.topic, queue.partition, leader)
            broker.batch_ready()

    def _retire(self, node: int) -> None:
        broker = self.brokers.pop(node)
        if broker.in_flight:
            self.brokers[node] = broker  # let its answers arrive; retire it later
            return
        task = asyncio.ensure_future(broker.stop())
        self._tasks.append(task)

    def wake_all(self) -> None:
        for broker in self.brokers.values():
            broker.batch_ready()

    # -- metadata -------------------------------------------------------------------------------

    def request_refresh(self) -> None:
        self._refresh_wanted.set()

    async def _metadata_loop(self) -> None:
        failures = 0
        max_age = self.config.metadata_max_age_ms / 1000
        while True:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(max_age):
                    await self._refresh_wanted.wait()
            self._refresh_wanted.clear()
            try:
                await self.cluster.refresh_metadata()
            except KayakError as exc:
                failures += 1
                log.debug("metadata refresh failed (%d in a row): %s", failures, exc)
                self._refresh_wanted.set()
            else:
                failures = 0
            self.reroute()
            if any(q.leader < 0 and q.has_data for q in self.accumulator.queues.values()):
                self._refresh_wanted.set()
            # Space refreshes out: a burst of NOT_LEADER answers needs only one.
            delay = self.backoff.delay(max(failures - 1, 0))
            await asyncio.sleep(max(delay, _MIN_REFRESH_INTERVAL))

    def connection_failed(self, broker: BrokerSender, error: KayakError) -> None:
        """``broker`` cannot be reached: note why on its batches, and look again where the
        partitions are (the broker may be gone, its partitions led elsewhere)."""
        log.debug("cannot reach broker %d: %s", broker.node_id, error)
        for batch in self.accumulator.batches_in(broker.queues):
            batch.last_error = error
        self.request_refresh()

    # -- deadlines ------------------------------------------------------------------------------

    async def _expiry_loop(self) -> None:
        while True:
            now = self._loop.time()
            next_deadline = self.accumulator.expire(now)
            await asyncio.sleep(min(max(next_deadline - now, 0.0), _EXPIRY_CHECK_MAX_INTERVAL))

    # -- responses ------------------------------------------------------------------------------

    def response_received(self, batches: list[ProducerBatch], response: ProduceResponse) -> None:
        results: dict[tuple[str, int], PartitionProduceResponse] = {
            (topic.name, partition.index): partition
            for topic in response.responses
            for partition in topic.partition_responses
        }
        accumulator = self.accumulator
        for batch in batches:
            accumulator.sent(batch)
            result = results.get((batch.topic, batch.partition))
            if result is None:
                missing = f"the broker did not answer for {batch.topic}-{batch.partition}"
                self._settle_error(batch, NetworkError(missing))
            elif result.error_code == 0:
                accumulator.complete(batch, result.base_offset, result.log_append_time_ms)
            else:
                self._partition_error(batch, result)

    def request_failed(self, batches: list[ProducerBatch], error: KayakError) -> None:
        """The request got no answer (connection lost, timed out): every batch may retry."""
        for batch in batches:
            self.accumulator.sent(batch)
            self._settle_error(batch, error)
        if isinstance(error, NetworkError | KafkaError) or getattr(error, "retriable", False):
            self.request_refresh()

    def _partition_error(self, batch: ProducerBatch, result: PartitionProduceResponse) -> None:
        code = result.error_code
        if code == ErrorCode.DUPLICATE_SEQUENCE_NUMBER:
            # The broker already has this batch: it was stored, the earlier answer got lost.
            self.accumulator.complete(batch, result.base_offset, result.log_append_time_ms)
            return
        cls = error_for_code(code)
        detail = result.error_message or cls.default_message
        if result.record_errors:
            detail += " (" + "; ".join(
                f"record {e.batch_index}: {e.batch_index_error_message}"
                for e in result.record_errors[:3]
            ) + ")"  # fmt: skip
        error = cls(f"{batch.topic}-{batch.partition}: {detail}")
        idempotence = self.idempotence
        # A transactional producer never bumps mid-transaction: the batch fails, which fails
        # the transaction (fenced: the producer); abort_transaction() bumps if need be.
        if (
            idempotence is not None
            and not idempotence.transactional
            and batch.base_sequence != NO_SEQUENCE
        ):
            if code == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER:
                if idempotence.is_next_expected(batch.queue, batch):
                    self.request_bump(
                        f"{batch.topic}-{batch.partition} refused sequence "
                        f"{batch.base_sequence}, the next one it should expect"
                    )
                # Otherwise an earlier batch of the partition is being retried: this one
                # goes again after it.
                self._retry(batch, error)
                return
            if code in (ErrorCode.UNKNOWN_PRODUCER_ID, ErrorCode.INVALID_PRODUCER_EPOCH):
                self.request_bump(f"{batch.topic}-{batch.partition}: {cls.error_name}")
                self._retry(batch, error)
                return
        self._settle_error(batch, error)

    def _settle_error(self, batch: ProducerBatch, error: KayakError) -> None:
        retriable = bool(getattr(error, "retriable", False))
        if not retriable or batch.attempts > self.config.retries or self.accumulator.aborted:
            self.accumulator.fail(batch, error)
        elif self._loop.time() >= batch.deadline:
            batch.last_error = error
            self.accumulator.fail(batch, expired(batch, self.accumulator.delivery_timeout))
        else:
            if isinstance(error, KafkaError) and error.invalid_metadata:
                self.request_refresh()
            self._retry(batch, error)

    def _retry(self, batch: ProducerBatch, error: KayakError) -> None:
        log.debug("retrying %r after %s", batch, error)
        delay = self.backoff.delay(max(batch.attempts - 1, 0))
        self.accumulator.retry(batch, error, delay)
        if batch.queue.sender is not None:
            batch.queue.sender.wake_at(batch.retry_at)

    def batch_failed(self, batch: ProducerBatch, error: BaseException) -> None:
        """Every failed batch: log it once; a sequenced one leaves a gap, so bump the epoch."""
        if self.accumulator.aborted:
            return  # closing: nothing more will be sent
        idempotence = self.idempotence
        if idempotence is not None and idempotence.transactional:
            if not isinstance(error, TransactionAbortedError):  # dropped by an abort: no news
                log.warning("%s", describe_failure(batch, error))
            idempotence.batch_failed(batch, error)
            return
        log.warning("%s", describe_failure(batch, error))
        if idempotence is not None and batch.base_sequence != NO_SEQUENCE:
            self.request_bump(f"{batch.topic}-{batch.partition} lost sequence "
                              f"{batch.base_sequence} with a failed batch")  # fmt: skip

    def fail_queues(self, queues: Iterable[PartitionQueue], error: KayakError) -> None:
        for queue in queues:
            for batch in list(self.accumulator.batches_in([queue])):
                if batch is queue.open:
                    queue.open = None
                else:
                    queue.batches.remove(batch)
                self.accumulator.fail(batch, error)

    # -- epoch bumps ----------------------------------------------------------------------------

    def request_bump(self, reason: str) -> None:
        assert self.idempotence is not None
        self.idempotence.request_bump(reason)
        if self._bump_task is None or self._bump_task.done():
            self._bump_task = asyncio.ensure_future(self._bump())

    def batches_settled(self) -> None:
        if self.accumulator.in_flight_batches == 0:
            self._settled.set()

    async def _bump(self) -> None:
        idempotence = self.idempotence
        assert idempotence is not None
        # Answers to batches of the old epoch must all be in before sequences restart.
        while self.accumulator.in_flight_batches:
            self._settled.clear()
            with contextlib.suppress(TimeoutError):  # look again now and then, to be sure
                async with asyncio.timeout(0.1):
                    await self._settled.wait()
        attempt = 0
        while idempotence.bump_reason is not None:
            try:
                await idempotence.bump(
                    self.accumulator.queues.values(),
                    Deadline.from_ms(self.config.delivery_timeout_ms),
                )
            except KayakError as exc:
                log.warning("could not bump the producer epoch: %s", exc)
                await asyncio.sleep(self.backoff.delay(attempt))
                attempt += 1
        self.wake_all()

    # -- stopping -------------------------------------------------------------------------------

    async def stop(self) -> None:
        tasks = list(self._tasks)
        if self._bump_task is not None:
            tasks.append(self._bump_task)
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        for broker in list(self.brokers.values()):
            await broker.stop()
        self.brokers.clear()
