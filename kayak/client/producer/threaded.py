"""``produce``/``poll``/``flush`` for a thread that is not the producer's event loop: the
blocking facade's (:class:`kayak.client.sync.Producer`) confluent-kafka-style producing.

``produce`` in the caller's thread only puts the record in an outbox (a deque: appending is
safe from any thread) and, when the outbox was idle, asks the loop once to take it; the loop
hands the outbox's records to the asyncio ``Producer.produce`` in turns of
:data:`HAND_OVER_TURN` records. Nothing crosses threads per record but a deque append.

Delivery reports come back the same way: the batch puts ``(on_delivery, error, metadata)``
into :class:`DeliveryReports` (one ``extend`` per batch) and ``poll``/``flush`` call them in
the caller's thread, as confluent-kafka's do.

Errors ``produce`` would raise on the loop (a record too large, a partition the topic does
not have, a value that is not bytes) reach the record's ``on_delivery`` instead (logged if it
has none), since the caller has moved on. When ``buffer.memory`` is full the loop waits for
room; the outbox is bounded by :data:`OUTBOX_LIMIT` records, beyond which ``produce`` blocks
(at most ``max.block.ms``, then ``BufferFullError``), as the Java client's ``send`` blocks.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections import deque
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from kayak.client.producer.batch import DeliveryCallback, Value
from kayak.client.producer.errors import BufferFullError, ProducerClosedError
from kayak.client.producer.record_metadata import UNKNOWN_OFFSET, RecordMetadata
from kayak.client.producer.record_sizes import Headers
from kayak.errors import KafkaTimeoutError

if TYPE_CHECKING:
    from kayak.client.producer.producer import Producer

log = logging.getLogger(__name__)

__all__ = ["HAND_OVER_TURN", "OUTBOX_LIMIT", "DeliveryReports", "ThreadedProduce"]

OUTBOX_LIMIT = 100_000
"""Records ``produce``d in the caller's thread and not yet taken by the loop; ``produce``
waits beyond it (the loop is behind, or ``buffer.memory`` is full)."""
HAND_OVER_TURN = 1000
"""Records the loop takes from the outbox before letting its other work (the senders) run."""
_FULL_RETRY_S = 0.001  # buffer.memory full: look again this soon (batches leave meanwhile)

_Report = tuple[DeliveryCallback, BaseException | None, RecordMetadata]
_Record = tuple[str, Value, Any, Any, int | None, int | None, DeliveryCallback | None]


class DeliveryReports(deque[_Report]):
    """Delivery reports waiting for the caller's ``poll``; ``arrived`` is set when some come."""

    def __init__(self) -> None:
        super().__init__()
        self.arrived = threading.Event()

    def append(self, report: _Report) -> None:
        super().append(report)
        self.arrived.set()

    def extend(self, reports: Iterable[_Report]) -> None:
        super().extend(reports)
        self.arrived.set()


class ThreadedProduce:
    """The outbox, the reports and the loop side of one facade's ``produce``."""

    def __init__(self, producer: Producer, loop: asyncio.AbstractEventLoop) -> None:
        self._producer = producer
        self._loop = loop
        self._outbox: deque[_Record] = deque()
        self._scheduled = False
        self._max_block = producer.config.max_block_ms / 1000
        self.reports = DeliveryReports()
        self.closed = False  # set by the facade's close(): produce() refuses from then on

    def attach(self) -> None:
        """On the loop, once the producer is started: its reports come here from now on."""
        self._producer._accumulator.delivery_queue = self.reports

    # -- the caller's thread --------------------------------------------------------------------

    def produce(
        self,
        topic: str,
        value: Value,
        key: bytes | bytearray | memoryview | None = None,
        headers: Headers | None = None,
        partition: int | None = None,
        timestamp: int | None = None,
        on_delivery: DeliveryCallback | None = None,
    ) -> None:
        if self.closed:
            raise ProducerClosedError("the producer is closed")
        outbox = self._outbox
        outbox.append((topic, value, key, headers, partition, timestamp, on_delivery))
        if not self._scheduled:
            self._scheduled = True
            self._loop.call_soon_threadsafe(self._hand_over)
        if len(outbox) >= OUTBOX_LIMIT:
            self._wait_for_room()

    def _wait_for_room(self) -> None:
        deadline = time.monotonic() + self._max_block
        while len(self._outbox) >= OUTBOX_LIMIT:
            if time.monotonic() > deadline:
                raise BufferFullError(
                    f"{len(self._outbox)} records produced are still waiting for "
                    f"buffer.memory after max.block.ms ({self._max_block * 1000:g} ms)"
                )
            time.sleep(_FULL_RETRY_S)

    def poll(self, timeout: float | None = None) -> int:
        """Call the delivery callbacks that are due, waiting up to ``timeout`` seconds (None
        or negative: as long as it takes) for the first; returns how many ran."""
        reports = self.reports
        reports.arrived.clear()
        served = self._serve()
        if served or timeout == 0:
            return served
        reports.arrived.wait(None if timeout is None or timeout < 0 else timeout)
        return self._serve()

    def _serve(self) -> int:
        reports = self.reports
        served = 0
        while reports:
            callback, error, metadata = reports.popleft()
            served += 1
            callback(error, metadata)
        return served

    def wait_serving(self, future: Any) -> Any:
        """Wait for ``future`` (a ``concurrent.futures.Future``), calling delivery callbacks
        as they come; then return its result."""
        arrived = self.reports.arrived
        future.add_done_callback(lambda _: arrived.set())
        try:
            while True:
                self._serve()
                if future.done():
                    return future.result()
                arrived.wait(0.1)
                arrived.clear()
        except BaseException:  # Ctrl-C, or a callback raised: stop waiting on the loop too
            future.cancel()
            raise

    # -- the loop -------------------------------------------------------------------------------

    def _hand_over(self) -> None:
        """Take a turn of the outbox's records into the producer; come back for the rest."""
        self._scheduled = False
        full = self._take(HAND_OVER_TURN)
        if self._outbox and not self._scheduled:
            self._scheduled = True
            if full:
                self._loop.call_later(_FULL_RETRY_S, self._hand_over)
            else:
                self._loop.call_soon(self._hand_over)

    def _take(self, limit: int) -> bool:
        """Produce up to ``limit`` records of the outbox; True if ``buffer.memory`` was full."""
        outbox = self._outbox
        produce = self._producer.produce
        for _ in range(limit):
            if not outbox:
                break
            record = outbox[0]
            try:
                produce(*record)
            except BufferFullError:
                return True
            except Exception as exc:  # refused (too large, no such partition, not bytes...)
                self._refused(record, exc)
            outbox.popleft()
        return False

    def _refused(self, record: _Record, error: Exception) -> None:
        topic, partition, timestamp, callback = record[0], record[4], record[5], record[6]
        if callback is None:
            log.warning("a record produced to %r was refused: %s", topic, error)
            return
        metadata = RecordMetadata(
            topic, -1 if partition is None else partition, UNKNOWN_OFFSET,
            -1 if timestamp is None else timestamp,
        )  # fmt: skip
        self.reports.append((callback, error, metadata))

    async def hand_over_all(self, timeout: float | None) -> None:
        """On the loop: every record of the outbox into the producer (waiting for memory)."""
        deadline = None if timeout is None else self._loop.time() + timeout
        while self._outbox:
            if self._take(HAND_OVER_TURN):
                if deadline is not None and self._loop.time() > deadline:
                    raise KafkaTimeoutError(
                        f"{len(self._outbox)} records produced still wait for buffer.memory "
                        f"after {timeout:g} s"
                    )
                await asyncio.sleep(_FULL_RETRY_S)
            else:
                await asyncio.sleep(0)

    async def flush(self, timeout: float | None) -> None:
        """On the loop: the outbox handed over, then the producer's ``flush``."""
        await self.hand_over_all(timeout)
        await self._producer.flush(timeout)
