"""The fetch path: pipelined Fetch requests per broker, responses buffered undecoded.

Kafka's Java consumer and librdkafka keep one Fetch in flight per broker and look at a
response before asking for more, so the broker idles while the client works and the other
way round. kayak's fetcher asks again the moment a response arrives: it reads only the batch
headers (:func:`~kayak.protocol.records.scan_batches`, no record is decoded) to learn where
each partition continues, sends the next Fetch from there, and only then lets the
application decode the response it got (:class:`~.completed.CompletedFetch`, lazily).

Up to ``fetch.pipeline.depth`` requests go to one broker at once, so the broker prepares the
next answer while the previous one is on the wire and the one before is being decoded. Where
a request beyond the first should start is only known once the first is answered, so it is
predicted: a partition's answers cover about the same number of offsets each time (its
``span``), and an answer begins with the whole batch holding the requested offset, so the
next request aims half a batch past where the previous one is expected to end (see
``PartitionState.predict_after``). Predictions are only made below the high watermark, so
such a request is answered at once. One that falls short overlaps the previous answer (those
batches are skipped by their headers, never decoded); one that overshoots leaves a gap: that
answer is dropped and fetching restarts where the data ends (``stats`` counts both). With
one partition this is what keeps more than one request in flight.

A request is held by the broker (``fetch.max.wait.ms``) only when none of its partitions has
data waiting, so that is only allowed when every partition a broker leads is caught up, and
then the request goes out alone: brokers answer a connection's requests in order, so
anything sent behind a held request would wait too. (For that reason fetches go on a
connection of their own, ``Cluster.fetch_connection``: ListOffsets, OffsetFetch and metadata
requests never queue behind a held Fetch.) While any partition has a backlog, every request
carries one (caught-up partitions ride along) and is answered at once. That includes a
partition held back only because its unread data fills its share of the buffer: its next
request goes out the moment the application reads it, and must not find a long poll for the
caught-up partitions ahead of it (unless a poll waits for those partitions alone).

Memory: a partition with fetched, unread data is fetched again only while it holds less than
its share of ``prefetch.max.bytes`` and everything buffered is below that cap (a partition
with nothing buffered may always fetch, so every partition progresses).

Errors: a moved leader (NOT_LEADER_OR_FOLLOWER, FENCED_LEADER_EPOCH, ...) refreshes metadata
and the partition is fetched from its new leader; OFFSET_OUT_OF_RANGE resets the position by
``auto.offset.reset`` (or, with ``none``, raises from the next poll); errors the application
must see are raised from the next poll.

Handing buffered responses out to polls is the base class's, :mod:`.fetch_buffer`.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
import uuid
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from kayak.client.backoff import backoff_from_config
from kayak.client.cluster import Cluster
from kayak.client.config import ConsumerConfig
from kayak.client.connection import BrokerConnection
from kayak.client.consumer.completed import AbortedTransactions, CompletedFetch
from kayak.client.consumer.fetch_buffer import FetchBuffer
from kayak.client.consumer.subscription import PartitionState, SubscriptionState
from kayak.client.security.errors import is_authentication_error
from kayak.client.types import TopicPartition
from kayak.errors import (
    ErrorClass,
    ErrorCode,
    KayakError,
    OffsetOutOfRangeError,
    RecordTooLargeError,
    error_for_code,
)
from kayak.protocol.messages.fetch_request import FetchPartition, FetchRequest, FetchTopic
from kayak.protocol.messages.fetch_response import FetchResponse, PartitionData
from kayak.protocol.primitives import ZERO_UUID
from kayak.protocol.records import scan_batches

log = logging.getLogger(__name__)

__all__ = ["FetchStats", "Fetcher"]

# Fetch v4 is the first to carry magic 2 batches and aborted transactions, v13 the first to
# name topics by id; 16 is what librdkafka 2.x sends.
MAX_FETCH_VERSION = 16
FIRST_TOPIC_ID_VERSION = 13
FIRST_LEADER_EPOCH_VERSION = 9
READ_COMMITTED = 1

# Partition errors after which the leader must be looked up again.
_STALE_LEADER = frozenset(
    {
        ErrorCode.NOT_LEADER_OR_FOLLOWER,
        ErrorCode.FENCED_LEADER_EPOCH,
        ErrorCode.UNKNOWN_LEADER_EPOCH,
        ErrorCode.LEADER_NOT_AVAILABLE,
        ErrorCode.REPLICA_NOT_AVAILABLE,
        ErrorCode.KAFKA_STORAGE_ERROR,
        ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
        ErrorCode.UNKNOWN_TOPIC_ID,
        ErrorCode.INCONSISTENT_TOPIC_ID,
        ErrorCode.OFFSET_NOT_AVAILABLE,
        ErrorCode.NOT_COORDINATOR,
    }
)


@dataclass(slots=True)
class FetchStats:
    """Counters for tests, benchmarks and curious operators."""

    requests: int = 0
    responses: int = 0
    bytes: int = 0  # record bytes buffered for the application (complete batches)
    max_in_flight: int = 0  # the most Fetch requests ever out to one broker at once
    predicted: int = 0  # partition fetches sent from a predicted offset
    gaps: int = 0  # predicted fetches that overshot: their answer was dropped
    overlap_bytes: int = 0  # bytes fetched twice because a prediction fell short
    in_flight: dict[int, int] = field(default_factory=dict)  # node -> requests out now


@dataclass(slots=True)
class _Wanted:
    """One partition in one Fetch request, as it was when the request was made."""

    state: PartitionState
    epoch: int
    fetch_epoch: int
    offset: int

    @property
    def is_current(self) -> bool:
        state = self.state
        return state.epoch == self.epoch and state.fetch_epoch == self.fetch_epoch


class Fetcher(FetchBuffer):
    """Keeps assigned partitions' data flowing into a buffer the consumer drains."""

    def __init__(
        self,
        cluster: Cluster,
        subscriptions: SubscriptionState,
        config: ConsumerConfig,
        *,
        on_reset_needed: Callable[[], None] = lambda: None,
    ) -> None:
        self._cluster = cluster
        self._subscriptions = subscriptions
        self._config = config
        self._on_reset_needed = on_reset_needed
        self._read_committed = config.isolation_level == "read_committed"
        self._retry_backoff = backoff_from_config(config)
        self._completed: deque[CompletedFetch] = deque()
        self._buffered_bytes = 0
        self._long_poll_out: set[int] = set()  # nodes with a request that may long-poll
        self._data_ready = asyncio.Event()
        self._waiting_for: set[TopicPartition] | None = None
        self._errors: list[KayakError] = []
        self._tasks: set[asyncio.Future[None]] = set()
        self._metadata_refresh: asyncio.Future[None] | None = None
        self._retry_timer: asyncio.TimerHandle | None = None
        self._closed = False
        self.stats = FetchStats()

    # -- sending ------------------------------------------------------------------------

    def wake(self) -> None:
        """Send whatever Fetch requests can go now (cheap; call after any change)."""
        if self._closed:
            return
        now = time.monotonic()
        by_node, held_back, retry_at, leaders_missing = self._fetchable_by_node(now)
        for node, states in by_node.items():
            self._send_to(node, states, may_long_poll=node not in held_back)
        if leaders_missing:
            self.refresh_metadata()
        if retry_at < math.inf:
            self._wake_at(retry_at)

    def _fetchable_by_node(
        self, now: float
    ) -> tuple[dict[int, list[PartitionState]], set[int], float, bool]:
        """Partitions to fetch now, by leader; also the leaders of partitions held back only
        by the buffer while their broker has more (no long poll may go to those: see
        :meth:`_send_to`), unless a poll waits for other partitions only."""
        config = self._config
        assignment = self._subscriptions.assignment
        share = config.prefetch_max_bytes // max(len(assignment), 1)
        full = self._buffered_bytes >= config.prefetch_max_bytes
        by_node: dict[int, list[PartitionState]] = {}
        held_back: set[int] = set()
        waiting = self._waiting_for
        retry_at = math.inf
        leaders_missing = False
        ahead = config.max_partition_fetch_bytes
        for state in assignment.values():
            if state.paused or state.position is None or state.reset_strategy:
                continue
            if state.in_flight and not (
                state.can_predict()
                and not full
                and state.buffered_bytes + (state.in_flight + 1) * ahead <= share
            ):
                continue
            if state.buffered_bytes and (full or state.buffered_bytes >= share):
                if state.has_backlog() and (waiting is None or state.tp in waiting):
                    held_back.add(self._cluster.leader(state.tp.topic, state.tp.partition))
                continue
            if state.retry_at > now:
                retry_at = min(retry_at, state.retry_at)
                continue
            leader = self._cluster.leader(state.tp.topic, state.tp.partition)
            if leader < 0:
                leaders_missing = True
                continue
            by_node.setdefault(leader, []).append(state)
        return by_node, held_back, retry_at, leaders_missing

    def _send_to(self, node: int, states: list[PartitionState], *, may_long_poll: bool) -> None:
        """Send ``node`` the requests it may still take for ``states``."""
        in_flight = self.stats.in_flight.get(node, 0)
        depth = self._config.fetch_pipeline_depth
        if node in self._long_poll_out or in_flight >= depth:
            return
        if not any(state.has_backlog() for state in states):
            idle = [state for state in states if not state.in_flight]
            if in_flight or not idle or not may_long_poll:
                # Wait for the quick answers, or for a partition held back by the buffer
                # (its request, due once the application reads it, must not queue behind a
                # held one; the caught-up partitions ride along with it).
                return
            self._send(node, idle, long_poll=True)
            return
        for _ in range(depth - in_flight):
            ready = [s for s in states if not s.in_flight or s.can_predict()]
            if not ready:
                return
            self._send(node, ready, long_poll=False)

    def _send(self, node: int, states: list[PartitionState], *, long_poll: bool) -> None:
        wanted = []
        for state in states:
            predicted = state.in_flight > 0
            offset = state.predicted_offset if predicted else state.fetch_offset
            self.stats.predicted += predicted
            state.in_flight += 1
            state.predict_after(offset, predicted=predicted)
            wanted.append(_Wanted(state, state.epoch, state.fetch_epoch, offset))
        in_flight = self.stats.in_flight[node] = self.stats.in_flight.get(node, 0) + 1
        self.stats.max_in_flight = max(self.stats.max_in_flight, in_flight)
        self.stats.requests += 1
        if long_poll:
            self._long_poll_out.add(node)
        task = asyncio.ensure_future(self._fetch(node, wanted, long_poll))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _fetch(self, node: int, wanted: list[_Wanted], long_poll: bool) -> None:
        try:
            connection = await self._cluster.fetch_connection(node)
            request, version, names = self._request(connection, wanted)
            timeout = (self._config.request_timeout_ms + request.max_wait_ms) / 1000
            response: FetchResponse = await connection.request(request, version, timeout=timeout)
        except (KayakError, OSError) as exc:
            if not self._closed:
                log.info("fetch from broker %d failed: %s", node, exc)
                if is_authentication_error(exc) and not self._errors:
                    # Credentials or certificates refused: the next poll raises it (as Java's
                    # consumer does), and fetching is retried after the backoff.
                    self._errors.append(exc)
                self._back_off([w.state for w in wanted if w.is_current], refresh=True)
        except asyncio.CancelledError:
            for w in wanted:
                if w.is_current:
                    w.state.in_flight -= 1
            raise
        else:
            self.stats.responses += 1
            self._handle_response(response, wanted, names)
        finally:
            self.stats.in_flight[node] -= 1
            if long_poll:
                self._long_poll_out.discard(node)
        self.wake()
        self._data_ready.set()

    def _request(
        self, connection: BrokerConnection, wanted: list[_Wanted]
    ) -> tuple[FetchRequest, int, dict[uuid.UUID, str]]:
        """The Fetch request for ``wanted`` at the best version; also topic names by id."""
        config = self._config
        topics = self._cluster.metadata.topics
        version = connection.version_for(FetchRequest, MAX_FETCH_VERSION)
        ids = {w.state.tp.topic: _topic_id(topics.get(w.state.tp.topic)) for w in wanted}
        if version >= FIRST_TOPIC_ID_VERSION and ZERO_UUID in ids.values():
            version = FIRST_TOPIC_ID_VERSION - 1  # metadata without topic ids: fetch by name
        by_topic: dict[str, FetchTopic] = {}
        for w in wanted:
            tp = w.state.tp
            fetch_topic = by_topic.get(tp.topic)
            if fetch_topic is None:
                fetch_topic = by_topic[tp.topic] = FetchTopic(tp.topic, ids[tp.topic], [])
            info = topics.get(tp.topic)
            partition = info.partitions.get(tp.partition) if info else None
            leader_epoch = partition.leader_epoch if partition is not None else -1
            fetch_topic.partitions.append(
                FetchPartition(
                    partition=tp.partition,
                    current_leader_epoch=leader_epoch
                    if version >= FIRST_LEADER_EPOCH_VERSION
                    else -1,
                    fetch_offset=w.offset,
                    partition_max_bytes=config.max_partition_fetch_bytes,
                )
            )
        request = FetchRequest(
            max_wait_ms=config.fetch_max_wait_ms,
            min_bytes=config.fetch_min_bytes,
            max_bytes=config.fetch_max_bytes,
            isolation_level=READ_COMMITTED if self._read_committed else 0,
            session_id=0,
            session_epoch=-1,  # no fetch session: every request is complete
            topics=list(by_topic.values()),
            rack_id=config.client_rack,
        )
        return request, version, {topic_id: name for name, topic_id in ids.items()}

    # -- receiving ----------------------------------------------------------------------

    def _handle_response(
        self, response: FetchResponse, wanted: list[_Wanted], names: dict[uuid.UUID, str]
    ) -> None:
        if response.error_code:
            log.info("fetch failed: %s", error_for_code(response.error_code).error_name)
            self._back_off([w.state for w in wanted if w.is_current], refresh=False)
            return
        answers: dict[TopicPartition, PartitionData] = {}
        for topic in response.responses:
            name = topic.topic or names.get(topic.topic_id, "")
            for data in topic.partitions:
                answers[TopicPartition(name, data.partition_index)] = data
        for w in wanted:
            if not w.is_current:
                continue  # seeked, reset, unassigned or refetched while the request was out
            w.state.in_flight -= 1
            answer = answers.get(w.state.tp)
            if answer is not None:
                try:
                    self.handle_partition(w.state, w.offset, answer)
                except KayakError as exc:  # batch headers that contradict themselves
                    self._errors.append(exc)
                    w.state.retry_at = math.inf  # until the application seeks past them
            elif w.offset == w.state.fetch_offset:
                w.state.high_watermark = None  # no word on it: long-poll for it next

    def handle_partition(self, state: PartitionState, offset: int, data: PartitionData) -> None:
        """Take one partition's answer to a fetch from ``offset``: buffer what continues the
        partition's data, or act on its error."""
        frontier = state.fetch_offset
        if data.error_code:
            if data.error_code in _STALE_LEADER or offset == frontier:
                self._partition_error(state, offset, data.error_code)
            else:
                state.restart_fetching()  # a predicted offset the broker did not like
            return
        state.high_watermark = data.high_watermark
        if data.last_stable_offset >= 0:
            state.last_stable_offset = data.last_stable_offset
        if data.log_start_offset >= 0:
            state.log_start_offset = data.log_start_offset
        records = data.records
        if not isinstance(records, bytes | bytearray | memoryview):
            records = b""
        scan = scan_batches(records)
        every = list(scan)
        if offset > frontier and (not every or every[0].base_offset > frontier):
            # A predicted request that started past where the data ends (its answer starts
            # with the batch holding the predicted offset): drop it, fetch from the end.
            self.stats.gaps += 1
            state.restart_fetching()
            return
        if not every:
            # A partial batch alone: the response's byte budget ran out before it (fetch again),
            # or, from brokers before KIP-74, one batch is larger than the partition's budget.
            if len(records) >= self._config.max_partition_fetch_bytes and offset == frontier:
                self._record_too_large(state, offset, len(records))
            return
        state.span = every[-1].next_offset - every[0].base_offset
        state.batch_offsets = max(state.span // len(every), 1)
        headers = [h for h in every if h.next_offset > frontier]
        self.stats.overlap_bytes += sum(h.size for h in every[: len(every) - len(headers)])
        if not headers:
            return  # all of it arrived already
        end_offset = headers[-1].next_offset
        state.fetch_offset = end_offset
        size = scan.complete_bytes - headers[0].position
        aborted = AbortedTransactions(data.aborted_transactions) if self._read_committed else None
        fetch = CompletedFetch(
            state,
            records,
            headers,
            frontier,
            end_offset,
            size=size,
            check_crcs=self._config.check_crcs,
            aborted=aborted,
        )
        state.buffered_bytes += size
        self._buffered_bytes += size
        self.stats.bytes += size
        self._completed.append(fetch)

    def _partition_error(self, state: PartitionState, offset: int, code: int) -> None:
        tp = state.tp
        if code == ErrorCode.OFFSET_OUT_OF_RANGE:
            strategy = self._config.auto_offset_reset
            if strategy == "none":
                self._errors.append(
                    OffsetOutOfRangeError(
                        f"{tp}: offset {offset} is out of range and auto.offset.reset is "
                        "'none': seek() to a valid offset"
                    )
                )
                state.retry_at = math.inf
                return
            log.info("%s: offset %d is out of range; resetting to %s", tp, offset, strategy)
            state.request_reset(strategy)
            self._on_reset_needed()
            return
        if code in _STALE_LEADER:
            log.debug("%s: %s; refreshing metadata", tp, error_for_code(code).error_name)
            self._back_off([state], refresh=True)
            return
        error = error_for_code(code)
        if error.error_class is ErrorClass.FATAL:
            self._errors.append(error(f"fetching {tp} at offset {offset}: {error.default_message}"))
            state.retry_at = math.inf
            return
        log.info("%s: fetch error %s; retrying", tp, error.error_name)
        self._back_off([state], refresh=False)

    def _record_too_large(self, state: PartitionState, offset: int, size: int) -> None:
        self._errors.append(
            RecordTooLargeError(
                f"{state.tp}: the batch at offset {offset} is larger than the {size} bytes the "
                "broker returned; raise max.partition.fetch.bytes and fetch.max.bytes"
            )
        )
        state.retry_at = math.inf

    def _back_off(self, states: Iterable[PartitionState], *, refresh: bool) -> None:
        """Fetch ``states`` again from their data's end, after ``retry.backoff.ms``."""
        delay = self._retry_backoff.delay(0)
        now = time.monotonic()
        for state in states:
            state.restart_fetching()
            state.retry_at = now + delay
        if refresh:
            self.refresh_metadata()

    def _wake_at(self, when: float) -> None:
        if self._retry_timer is not None and self._retry_timer.when() <= when:
            return
        if self._retry_timer is not None:
            self._retry_timer.cancel()
        loop = asyncio.get_running_loop()
        delay = max(when - time.monotonic(), 0.0)
        self._retry_timer = loop.call_at(loop.time() + delay, self._retry_due)

    def _retry_due(self) -> None:
        self._retry_timer = None
        self.wake()

    def refresh_metadata(self) -> None:
        """Look leaders up again in the background, then fetch from them."""
        if self._metadata_refresh is not None and not self._metadata_refresh.done():
            return
        self._metadata_refresh = asyncio.ensure_future(self._refresh_metadata())

    async def _refresh_metadata(self) -> None:
        try:
            await self._cluster.refresh_metadata(self._subscriptions.topics)
        except KayakError as exc:
            log.info("metadata refresh failed: %s", exc)
            await asyncio.sleep(self._retry_backoff.delay(0))
        self.wake()

    # -- closing ------------------------------------------------------------------------

    async def close(self) -> None:
        self._closed = True
        if self._retry_timer is not None:
            self._retry_timer.cancel()
        pending = [*self._tasks]
        if self._metadata_refresh is not None:
            pending.append(self._metadata_refresh)
        for task in pending:
            task.cancel()
        if pending:
            await asyncio.gather(*pending, return_exceptions=True)
        self._completed.clear()
        self._buffered_bytes = 0


def _topic_id(info: object) -> uuid.UUID:
    topic_id = getattr(info, "topic_id", None)
    return topic_id if isinstance(topic_id, uuid.UUID) else ZERO_UUID
