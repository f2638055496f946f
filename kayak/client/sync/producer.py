"""The blocking ``Producer``: :class:`kayak.client.producer.Producer` on the shared loop,
with confluent-kafka's ``produce``/``poll``/``flush`` (:mod:`kayak.client.producer.threaded`)."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Mapping
from typing import Any, Self

from kayak.client.producer import Producer as AsyncProducer
from kayak.client.producer.threaded import ThreadedProduce
from kayak.client.sync.facade import SyncFacade
from kayak.client.sync.forwarding import blocking, future_of, on_loop
from kayak.client.sync.loop import forget_open

__all__ = ["Producer"]


class Producer(SyncFacade[AsyncProducer]):
    """Blocking ``kayak.client.producer.Producer``, connected when constructed.

    ``send(...)`` returns a ``concurrent.futures.Future`` of the record's ``RecordMetadata``
    at once (blocking only while the asyncio ``send`` blocks, for buffer space or metadata),
    so many sends are in flight; ``flush()`` waits for all of them; ``close()`` delivers
    what is buffered and disconnects.

    ``produce(topic, value, key=None, headers=None, partition=None, timestamp=None,
    on_delivery=None)`` is confluent-kafka's: it returns at once, and ``on_delivery(error,
    metadata)`` runs in the caller's thread, in ``poll(timeout)`` or ``flush()``
    (:mod:`kayak.client.producer.threaded`).
    """

    def __init__(self, config: Mapping[str, object] | None = None, /, **kwargs: Any) -> None:
        super().__init__(lambda: AsyncProducer(config, **kwargs), start=True)
        self._threaded = ThreadedProduce(self._target, self._loop.loop)
        self._loop.call(self._threaded.attach)
        self.produce = self._threaded.produce
        self.poll = self._threaded.poll

    # produce(topic, value, key=None, headers=None, partition=None, timestamp=None,
    # on_delivery=None) and poll(timeout=None): see kayak.client.producer.threaded.
    produce: Callable[..., None]
    poll: Callable[..., int]

    send = future_of(AsyncProducer.send)
    send_batch = future_of(AsyncProducer.send_batch)
    send_and_wait = blocking(AsyncProducer.send_and_wait)

    def flush(self, timeout: float | None = None) -> None:
        """Send everything ``produce``d or sent so far, wait until it is delivered (or failed),
        calling ``produce``'s delivery callbacks in this thread meanwhile, as confluent-kafka's
        ``flush`` does. Raises ``KafkaTimeoutError`` after ``timeout`` seconds."""
        self._threaded.wait_serving(self._loop.submit(self._threaded.flush(timeout)))

    def close(self, timeout: float | None = None) -> None:
        """Deliver what is buffered (``produce``d records too), call the delivery callbacks
        due, and disconnect; idempotent."""
        if self.closed:
            return
        self._threaded.closed = True
        try:
            self._loop.run(self._threaded.hand_over_all(timeout))
        finally:
            future = self._loop.submit(self._target.close(timeout))
            self._closed = True
            forget_open(self)
            self._threaded.wait_serving(future)

    partitions_for = blocking(AsyncProducer.partitions_for)
    statistics = on_loop(AsyncProducer.statistics)
    init_transactions = blocking(AsyncProducer.init_transactions)
    begin_transaction = on_loop(AsyncProducer.begin_transaction)
    send_offsets_to_transaction = blocking(AsyncProducer.send_offsets_to_transaction)

    def commit_transaction(self, timeout: float | None = None) -> None:
        """Commit the transaction, ``produce``d records included (they are delivered first;
        their callbacks run here); as ``kayak.client.producer.Producer.commit_transaction``."""
        self._loop.run(self._threaded.hand_over_all(timeout))
        self._threaded.wait_serving(self._loop.submit(self._target.commit_transaction(timeout)))

    def abort_transaction(self, timeout: float | None = None) -> None:
        """Abort the transaction: records ``produce``d into it fail (their callbacks run
        here with ``TransactionAbortedError``)."""
        self._loop.run(self._threaded.hand_over_all(timeout))
        self._threaded.wait_serving(self._loop.submit(self._target.abort_transaction(timeout)))

    @contextlib.contextmanager
    def transaction(self) -> Iterator[Self]:
        """``with producer.transaction():`` begins a transaction, commits it when the block
        ends, or aborts it if the block raises (and re-raises)."""
        self.begin_transaction()
        try:
            yield self
        except BaseException:
            manager = self._target._transaction
            if manager is not None and manager.can_abort:
                self.abort_transaction()
            raise
        self.commit_transaction()
