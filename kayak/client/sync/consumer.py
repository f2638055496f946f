"""The blocking ``Consumer``: :class:`kayak.client.consumer.Consumer` on the shared loop,
iterated record by record without a trip to the loop per buffered record."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from kayak.client.config import ConsumerConfig
from kayak.client.consumer import Consumer as AsyncConsumer
from kayak.client.consumer import ConsumerRecord
from kayak.client.consumer.iteration import Handout
from kayak.client.sync.facade import SyncFacade
from kayak.client.sync.forwarding import blocking, on_loop
from kayak.client.types import TopicPartition

__all__ = ["Consumer"]


class Consumer(SyncFacade[AsyncConsumer]):
    """Blocking ``kayak.client.consumer.Consumer``, connected when constructed.

    ``poll(timeout_ms)`` returns ``{TopicPartition: [ConsumerRecord, ...]}`` (empty if
    nothing came in time); ``for record in consumer`` blocks for each next record.
    Rebalance listeners and commit callbacks run on the loop thread.
    """

    def __init__(
        self, config: Mapping[str, object] | ConsumerConfig | None = None, /, **kwargs: Any
    ) -> None:
        # Set before the facade starts the consumer (start goes through _call).
        self._handout: Handout | None = None
        super().__init__(lambda: AsyncConsumer(config, **kwargs), start=True)
        self._handout = Handout(self._target, self._loop.run)

    def _call(self, name: str, *args: Any, **kwargs: Any) -> Any:
        # Records the iterator peeked and handed out are taken first (see
        # kayak.client.consumer.iteration), so every other call sees per-record positions.
        if self._handout is not None:
            self._handout.settle_pending()
        return super()._call(name, *args, **kwargs)

    def poll(
        self, timeout_ms: int = 0, max_records: int | None = None
    ) -> dict[TopicPartition, list[ConsumerRecord]]:
        """Records fetched so far, waiting up to ``timeout_ms`` for some (``getmany``)."""
        return self.getmany(timeout_ms=timeout_ms, max_records=max_records)

    def __iter__(self) -> Iterator[ConsumerRecord]:
        """One record per step, as ``async for`` gives them; records already buffered are
        handed out without a trip to the loop thread per record."""
        assert self._handout is not None
        return self._handout

    getmany = blocking(AsyncConsumer.getmany)
    getmany_values = blocking(AsyncConsumer.getmany_values)
    getone = blocking(AsyncConsumer.getone)
    commit = blocking(AsyncConsumer.commit)
    committed = blocking(AsyncConsumer.committed)
    position = blocking(AsyncConsumer.position)
    beginning_offsets = blocking(AsyncConsumer.beginning_offsets)
    end_offsets = blocking(AsyncConsumer.end_offsets)
    topics = blocking(AsyncConsumer.topics)
    partitions_for_topic = blocking(AsyncConsumer.partitions_for_topic)
    subscribe = on_loop(AsyncConsumer.subscribe)
    unsubscribe = on_loop(AsyncConsumer.unsubscribe)
    assign = on_loop(AsyncConsumer.assign)
    assignment = on_loop(AsyncConsumer.assignment)
    subscription = on_loop(AsyncConsumer.subscription)
    seek = on_loop(AsyncConsumer.seek)
    seek_to_beginning = on_loop(AsyncConsumer.seek_to_beginning)
    seek_to_end = on_loop(AsyncConsumer.seek_to_end)
    pause = on_loop(AsyncConsumer.pause)
    resume = on_loop(AsyncConsumer.resume)
    paused = on_loop(AsyncConsumer.paused)
    highwater = on_loop(AsyncConsumer.highwater)
    last_stable_offset = on_loop(AsyncConsumer.last_stable_offset)
    group_metadata = on_loop(AsyncConsumer.group_metadata)
    statistics = on_loop(AsyncConsumer.statistics)
