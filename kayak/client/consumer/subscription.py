"""What the consumer reads: its subscription or manual assignment, and each partition's state.

Two offsets per partition: ``position``, the next offset the application will be given, and
``fetch_offset``, the first offset not yet fetched (everything below it has arrived). With
fetches pipelined the second runs ahead of the first by whatever is buffered; requests
beyond it (``predicted_offset``, see :mod:`.fetcher`) may be out too. ``epoch`` counts
seeks and resets: a fetch response or buffered data made under an older epoch is dropped,
so nothing fetched before a ``seek()`` ever reaches the application after it.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Iterable
from enum import Enum

from kayak.client.consumer.listener import RebalanceListener
from kayak.client.statistics import PartitionCounters
from kayak.client.types import TopicPartition
from kayak.errors import KayakError

log = logging.getLogger(__name__)

__all__ = ["PartitionState", "SubscriptionState", "SubscriptionType"]


class SubscriptionType(Enum):
    NONE = "none"
    TOPICS = "topics"  # subscribe(["a", "b"])
    PATTERN = "pattern"  # subscribe(pattern="a.*")
    MANUAL = "manual"  # assign([...])


class PartitionState:
    """One assigned partition: where the application is, where fetching is, and flags."""

    __slots__ = (
        "batch_offsets",
        "buffered_bytes",
        "counters",
        "epoch",
        "fetch_epoch",
        "fetch_offset",
        "high_watermark",
        "in_flight",
        "last_stable_offset",
        "log_start_offset",
        "paused",
        "position",
        "predicted_offset",
        "processed",
        "reset_strategy",
        "retry_at",
        "span",
        "tp",
    )

    def __init__(self, tp: TopicPartition, counters: PartitionCounters | None = None) -> None:
        self.tp = tp
        # Statistics, kept by the subscription across reassignments of the partition.
        self.counters = counters if counters is not None else PartitionCounters()
        self.position: int | None = None  # None: look up the committed offset or reset
        self.fetch_offset = -1
        self.epoch = 0
        self.fetch_epoch = 0  # counts restarts of fetching at fetch_offset (mispredictions)
        self.reset_strategy: str | None = None  # "earliest"/"latest" while a reset is due
        self.paused = False
        self.in_flight = 0  # fetch requests for this partition that are out
        self.span = 0  # offsets the last answer's whole batches covered
        self.batch_offsets = 1  # offsets per batch in the last answer, on average
        self.predicted_offset = -1  # where a request sent now should start
        self.buffered_bytes = 0  # bytes of fetched, not yet consumed batches
        self.retry_at = 0.0  # monotonic time before which not to fetch (after an error)
        self.high_watermark: int | None = None
        self.last_stable_offset: int | None = None
        self.log_start_offset: int | None = None
        # The position the application has finished with: what auto-commit commits.
        self.processed: int | None = None

    def __repr__(self) -> str:
        return (
            f"<PartitionState {self.tp} position={self.position} fetch={self.fetch_offset} "
            f"epoch={self.epoch}{' paused' if self.paused else ''}>"
        )

    @property
    def has_position(self) -> bool:
        return self.position is not None and self.reset_strategy is None

    def seek(self, offset: int) -> None:
        """Read from ``offset`` next; everything fetched before is discarded."""
        self.position = offset
        self.fetch_offset = offset
        self.reset_strategy = None
        self.epoch += 1
        self.in_flight = 0
        self.buffered_bytes = 0
        self.retry_at = 0.0

    def request_reset(self, strategy: str) -> None:
        """Look the offset up by ``strategy`` (earliest/latest) before fetching again."""
        self.reset_strategy = strategy
        self.epoch += 1
        self.in_flight = 0
        self.buffered_bytes = 0

    def restart_fetching(self) -> None:
        """Forget the requests that are out (their answers will be ignored) and fetch from
        ``fetch_offset`` next; what is buffered stays valid."""
        self.fetch_epoch += 1
        self.in_flight = 0

    def has_backlog(self) -> bool:
        """Whether the broker said there is more to read than has been asked for."""
        return self.high_watermark is not None and self.fetch_offset < self.high_watermark

    def can_predict(self) -> bool:
        """Whether another request may go out before the ones in flight are answered: the
        next one's offsets are predicted from the last answer's ``span``, and must all be
        below the high watermark (data the broker answers at once, never a long poll)."""
        return (
            self.span > 0
            and self.high_watermark is not None
            and self.predicted_offset < self.high_watermark
        )

    def predict_after(self, offset: int, *, predicted: bool) -> None:
        """A request from ``offset`` goes out: where should the one after it start?

        An answer holds whole batches up to the byte limit, so it ends where a batch does,
        and the next answer begins with the batch that did not fit. Aiming at the middle of
        that batch (half a batch past the expected end) tolerates half a batch of error
        either way; a request from a predicted offset (mid-batch) gets its batch from the
        start, half a batch earlier.
        """
        half = self.batch_offsets // 2
        start = offset - half if predicted else offset
        self.predicted_offset = start + self.span + half


class SubscriptionState:
    """The topics subscribed to (or the manual assignment) and every assigned partition."""

    def __init__(self, on_change: Callable[[], None] = lambda: None) -> None:
        self.type = SubscriptionType.NONE
        self.topics: frozenset[str] = frozenset()
        self.pattern: re.Pattern[str] | None = None
        self.listener: RebalanceListener | None = None
        self.assignment: dict[TopicPartition, PartitionState] = {}
        # Records and bytes consumed per partition ever assigned (statistics).
        self.counters: dict[TopicPartition, PartitionCounters] = {}
        self._on_change = on_change

    # -- choosing what to read -----------------------------------------------------------

    def subscribe(self, topics: Iterable[str], listener: RebalanceListener | None) -> None:
        self._check_type(SubscriptionType.TOPICS)
        names = frozenset(topics)
        for name in names:
            if not isinstance(name, str) or not name.strip():
                raise ValueError(f"{name!r} is not a topic name")
        self.type = SubscriptionType.TOPICS if names else SubscriptionType.NONE
        self.topics = names
        self.pattern = None
        self.listener = listener

    def subscribe_pattern(
        self, pattern: re.Pattern[str], listener: RebalanceListener | None
    ) -> None:
        self._check_type(SubscriptionType.PATTERN)
        self.type = SubscriptionType.PATTERN
        self.pattern = pattern
        self.topics = frozenset()
        self.listener = listener

    def match_pattern(self, topics: Iterable[str]) -> bool:
        """Take the topics the pattern matches (internal ones excluded); True if they changed."""
        assert self.pattern is not None
        matched = frozenset(t for t in topics if self.pattern.fullmatch(t))
        changed = matched != self.topics
        self.topics = matched
        return changed

    def assign_manually(self, partitions: Iterable[TopicPartition]) -> None:
        self._check_type(SubscriptionType.MANUAL)
        wanted = set(partitions)
        self.type = SubscriptionType.MANUAL if wanted else SubscriptionType.NONE
        self.topics = frozenset(tp.topic for tp in wanted)
        self._set_assignment(wanted)

    def unsubscribe(self) -> None:
        self.type = SubscriptionType.NONE
        self.topics = frozenset()
        self.pattern = None
        self.listener = None
        self._set_assignment(set())

    def _check_type(self, wanted: SubscriptionType) -> None:
        if self.type not in (SubscriptionType.NONE, wanted):
            raise KayakError(
                f"the consumer already uses {self.type.value} subscription; subscribe(), "
                "subscribe(pattern=...) and assign() exclude each other: unsubscribe() first"
            )

    @property
    def uses_group_assignment(self) -> bool:
        return self.type in (SubscriptionType.TOPICS, SubscriptionType.PATTERN)

    # -- the assignment -------------------------------------------------------------------

    def set_group_assignment(self, partitions: Iterable[TopicPartition]) -> None:
        """The partitions the group gave this member (kept states survive)."""
        self._set_assignment(set(partitions))

    def add_partitions(self, partitions: Iterable[TopicPartition]) -> None:
        self._set_assignment(set(self.assignment) | set(partitions))

    def remove_partitions(self, partitions: Iterable[TopicPartition]) -> None:
        self._set_assignment(set(self.assignment) - set(partitions))

    def _set_assignment(self, wanted: set[TopicPartition]) -> None:
        kept = {tp: state for tp, state in self.assignment.items() if tp in wanted}
        for tp in wanted - kept.keys():
            counters = self.counters.get(tp)
            if counters is None:
                counters = self.counters[tp] = PartitionCounters()
            kept[tp] = PartitionState(tp, counters)
        for tp in self.assignment.keys() - wanted:
            self.assignment[tp].epoch += 1  # anything still in flight for it is void
        self.assignment = kept
        self._on_change()

    def state(self, tp: TopicPartition) -> PartitionState:
        found = self.assignment.get(tp)
        if found is None:
            raise KayakError(f"{tp} is not assigned to this consumer")
        return found

    def states(self, partitions: Iterable[TopicPartition]) -> list[PartitionState]:
        return [self.state(tp) for tp in partitions]

    def missing_positions(self) -> list[PartitionState]:
        return [s for s in self.assignment.values() if not s.has_position]

    def positions(self) -> dict[TopicPartition, int]:
        return {
            tp: s.position
            for tp, s in self.assignment.items()
            if s.position is not None and s.reset_strategy is None
        }

    def processed_positions(self) -> dict[TopicPartition, int]:
        return {tp: s.processed for tp, s in self.assignment.items() if s.processed is not None}

    def changed(self) -> None:
        """Tell the fetcher something affecting what to fetch changed."""
        self._on_change()
