"""Offsets on the driver: which partitions to read, from where to where, and in how many tasks.

Spark's checkpoint keeps a streaming source's offsets as JSON; this source writes
``{"topic": {"0": next_offset, ...}}`` like Spark's Kafka source, always in one canonical
order (topics by name, partitions by number), because Spark tells "no new data" from "new
data" by comparing the JSON it gets with the JSON it has.

The driver talks to the cluster through one blocking ``Admin`` (Metadata and ListOffsets);
records are only ever read in executors.
"""

from __future__ import annotations

import logging
import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from itertools import pairwise

from kayak.client.admin import OffsetSpec as AdminOffsetSpec
from kayak.client.sync import Admin
from kayak.client.types import TopicPartition
from kayak.errors import KayakError
from kayak.spark.options import EARLIEST, LATEST, KayakSparkError, OffsetSpec, ReadOptions

__all__ = [
    "OffsetRange",
    "OffsetResolver",
    "from_json",
    "limit_offsets",
    "split_ranges",
    "to_json",
]

log = logging.getLogger(__name__)

Offsets = dict[TopicPartition, int]


@dataclass(frozen=True, slots=True)
class OffsetRange:
    """Offsets ``[from_offset, until_offset)`` of one partition: one Spark task's work."""

    topic: str
    partition: int
    from_offset: int
    until_offset: int

    @property
    def size(self) -> int:
        return self.until_offset - self.from_offset


def to_json(offsets: Mapping[TopicPartition, int]) -> dict[str, dict[str, int]]:
    """Offsets as Spark's Kafka source writes them, in canonical order."""
    result: dict[str, dict[str, int]] = {}
    for tp in sorted(offsets):
        result.setdefault(tp.topic, {})[str(tp.partition)] = offsets[tp]
    return result


def from_json(data: Mapping[str, object]) -> Offsets:
    """Offsets from a checkpoint's JSON (``{"topic": {"0": 23}}``)."""
    offsets: Offsets = {}
    for topic, partitions in data.items():
        if not isinstance(partitions, Mapping):
            raise KayakSparkError(f"bad offsets in the checkpoint for topic {topic!r}: {data!r}")
        for partition, offset in partitions.items():
            offsets[TopicPartition(topic, int(partition))] = int(offset)
    return offsets


def limit_offsets(start: Mapping[TopicPartition, int], latest: Offsets, max_rows: int) -> Offsets:
    """Where to end a micro-batch that may read at most ``max_rows`` records.

    The budget is shared in proportion to each partition's backlog (rounded down, the
    leftover going to the largest remainders), so busy partitions do not starve quiet ones;
    a partition with a backlog gets at least one record whenever the budget allows, so none
    waits forever behind busier ones.
    """
    backlog = {tp: end - start.get(tp, end) for tp, end in latest.items()}
    total = sum(n for n in backlog.values() if n > 0)
    if total <= max_rows:
        return dict(latest)
    shares: dict[TopicPartition, int] = {}
    remainders: list[tuple[int, float, TopicPartition]] = []
    for tp, n in backlog.items():
        if n <= 0:
            continue
        exact = max_rows * n / total
        shares[tp] = math.floor(exact)
        # Partitions given nothing so far come first, then the largest fractions.
        remainders.append((0 if shares[tp] == 0 else 1, -(exact - shares[tp]), tp))
    leftover = max_rows - sum(shares.values())
    for _, _, tp in sorted(remainders):
        if leftover <= 0:
            break
        if shares[tp] < backlog[tp]:
            shares[tp] += 1
            leftover -= 1
    # Partitions without a backlog (or gone backwards: reported later) keep their latest.
    return {tp: start[tp] + shares[tp] if tp in shares else end for tp, end in latest.items()}


def split_ranges(
    ranges: list[OffsetRange], min_partitions: int | None, max_records: int | None
) -> list[OffsetRange]:
    """Split big ranges so there are at least ``min_partitions`` tasks and none reads more
    than ``max_records`` records; a range is split into equal parts, in proportion to its
    share of all the records to read."""
    ranges = [r for r in ranges if r.size > 0]
    total = sum(r.size for r in ranges)
    parts_of: dict[OffsetRange, int] = dict.fromkeys(ranges, 1)
    if max_records is not None:
        for r in ranges:
            parts_of[r] = max(parts_of[r], math.ceil(r.size / max_records))
    if min_partitions is not None and sum(parts_of.values()) < min_partitions and total:
        for r in ranges:
            parts_of[r] = max(parts_of[r], math.ceil(r.size * min_partitions / total))
    result: list[OffsetRange] = []
    for r in ranges:
        parts = min(parts_of[r], r.size)
        bounds = [r.from_offset + r.size * i // parts for i in range(parts + 1)]
        result.extend(
            OffsetRange(r.topic, r.partition, lo, hi) for lo, hi in pairwise(bounds) if hi > lo
        )
    return result


class OffsetResolver:
    """The driver's view of the cluster for one query: partitions and their offsets."""

    def __init__(self, options: ReadOptions) -> None:
        self.options = options
        self._admin: Admin | None = None
        self._pattern = (
            re.compile(options.subscribe_pattern) if options.subscribe_pattern is not None else None
        )

    @property
    def admin(self) -> Admin:
        if self._admin is None or self._admin.closed:
            try:
                self._admin = Admin(self.options.admin_config())
            except KayakError as exc:
                raise KayakSparkError(
                    f"cannot reach Kafka at kafka.bootstrap.servers="
                    f"{self.options.bootstrap_servers!r}: {exc}"
                ) from exc
        return self._admin

    def close(self) -> None:
        if self._admin is not None:
            self._admin.close()
            self._admin = None

    # -- partitions ------------------------------------------------------------------------

    def partitions(self) -> list[TopicPartition]:
        """The partitions the subscription covers now, sorted."""
        options = self.options
        if options.assign is not None:
            return self._assigned(options.assign)
        if self._pattern is not None:
            topics = self.admin.list_topics()
            pattern = self._pattern
            return sorted(
                TopicPartition(name, p.partition)
                for name, topic in topics.items()
                if pattern.fullmatch(name)
                for p in topic.partitions
            )
        assert options.subscribe is not None
        errors: dict[str, KayakError] = {}
        described = self.admin.describe_topics(options.subscribe, errors=errors)
        for topic, error in errors.items():
            # As Spark's Kafka source: a subscribed topic that does not exist yet is read
            # once it does; until then it has no partitions.
            log.warning("subscribed topic %r cannot be read yet: %s", topic, error)
        return sorted(
            TopicPartition(name, p.partition)
            for name, topic in described.items()
            for p in topic.partitions
        )

    def _assigned(self, assign: Mapping[str, tuple[int, ...]]) -> list[TopicPartition]:
        errors: dict[str, KayakError] = {}
        described = self.admin.describe_topics(list(assign), errors=errors)
        for topic, error in errors.items():
            raise KayakSparkError(f"option 'assign': topic {topic!r} cannot be read: {error}")
        found: list[TopicPartition] = []
        for topic, partitions in assign.items():
            exists = {p.partition for p in described[topic].partitions}
            missing = sorted(set(partitions) - exists)
            if missing:
                raise KayakSparkError(
                    f"option 'assign': topic {topic!r} has no partition "
                    f"{', '.join(map(str, missing))} (it has {len(exists)} partitions)"
                )
            found.extend(TopicPartition(topic, p) for p in partitions)
        return sorted(found)

    # -- offsets ---------------------------------------------------------------------------

    def list_offsets(self, specs: Mapping[TopicPartition, int]) -> dict[TopicPartition, int]:
        """ListOffsets for ``{tp: EARLIEST | LATEST | timestamp}``; -1 where no record is at
        or after a timestamp."""
        if not specs:
            return {}
        try:
            found = self.admin.list_offsets(specs, isolation_level=self.options.isolation_level)
        except KayakError as exc:
            raise KayakSparkError(f"looking up offsets failed: {exc}") from exc
        return {tp: found[tp].offset for tp in specs}

    def earliest(self, tps: Iterable[TopicPartition]) -> Offsets:
        return self.list_offsets(dict.fromkeys(tps, AdminOffsetSpec.EARLIEST))

    def latest(self, tps: Iterable[TopicPartition]) -> Offsets:
        return self.list_offsets(dict.fromkeys(tps, AdminOffsetSpec.LATEST))

    def start_offsets(self, tps: list[TopicPartition]) -> Offsets:
        """Where reading starts: by timestamp if asked, else ``startingOffsets``."""
        options = self.options
        if options.starting_timestamp is not None:
            specs = self._timestamps(tps, options.starting_timestamp, "startingOffsetsByTimestamp")
            found = self.list_offsets(specs)
            missing = [tp for tp, offset in found.items() if offset < 0]
            if missing and options.timestamp_strategy == "error":
                shown = ", ".join(f"{tp.topic}-{tp.partition}" for tp in missing)
                raise KayakSparkError(
                    f"startingTimestamp/startingOffsetsByTimestamp: no record at or after the "
                    f"timestamp in {shown}; set startingOffsetsByTimestampStrategy=latest to "
                    "start at the end there instead"
                )
            if missing:
                found.update(self.latest(missing))
            return found
        return self._resolve(tps, options.starting, "startingOffsets")

    def end_offsets(self, tps: list[TopicPartition]) -> Offsets:
        """Where a batch query stops: by timestamp if asked, else ``endingOffsets``."""
        options = self.options
        if options.ending_timestamp is not None:
            specs = self._timestamps(tps, options.ending_timestamp, "endingOffsetsByTimestamp")
            found = self.list_offsets(specs)
            missing = [tp for tp, offset in found.items() if offset < 0]
            found.update(self.latest(missing))  # nothing at or after it: read to the end
            return found
        return self._resolve(tps, options.ending, "endingOffsets")

    def _timestamps(
        self, tps: list[TopicPartition], spec: object, name: str
    ) -> dict[TopicPartition, int]:
        from kayak.spark.options import TimestampSpec

        assert isinstance(spec, TimestampSpec)
        if spec.everywhere is not None:
            return dict.fromkeys(tps, spec.everywhere)
        wanted = {
            TopicPartition(topic, p): ts
            for topic, parts in spec.per_partition.items()
            for p, ts in parts.items()
        }
        _check_covers(name, wanted, tps)
        return wanted

    def _resolve(self, tps: list[TopicPartition], spec: OffsetSpec, name: str) -> Offsets:
        if spec.default is not None:
            return self.list_offsets(dict.fromkeys(tps, spec.default))
        wanted = {
            TopicPartition(topic, p): offset
            for topic, parts in spec.per_partition.items()
            for p, offset in parts.items()
        }
        _check_covers(name, wanted, tps)
        special = {tp: o for tp, o in wanted.items() if o in (EARLIEST, LATEST)}
        return {**wanted, **self.list_offsets(special)}

    # -- data loss -------------------------------------------------------------------------

    def checked_ranges(self, ranges: list[OffsetRange]) -> list[OffsetRange]:
        """Ranges whose start is still in the log; what was deleted before it (retention,
        DeleteRecords) fails the query or, with failOnDataLoss=false, is skipped."""
        ranges = [r for r in ranges if r.until_offset != r.from_offset]
        if not ranges:
            return []
        earliest = self.earliest({TopicPartition(r.topic, r.partition) for r in ranges})
        checked = []
        for r in ranges:
            start = earliest[TopicPartition(r.topic, r.partition)]
            if r.until_offset < r.from_offset:
                report_data_loss(
                    self.options.fail_on_data_loss,
                    f"{r.topic}-{r.partition}: offsets went back from {r.from_offset} to "
                    f"{r.until_offset} (topic deleted and re-created, or log truncated); "
                    "records may have been missed",
                )
                continue
            if r.from_offset < start:
                report_data_loss(
                    self.options.fail_on_data_loss,
                    f"{r.topic}-{r.partition}: offsets {r.from_offset} to {start - 1} were "
                    f"deleted (retention or DeleteRecords) before they were read; the log now "
                    f"starts at {start}",
                )
                if start >= r.until_offset:
                    continue
                r = OffsetRange(r.topic, r.partition, start, r.until_offset)
            checked.append(r)
        return checked


def report_data_loss(fail: bool, message: str) -> None:
    """Raise (failOnDataLoss=true) or log a warning and go on (false)."""
    if fail:
        raise KayakSparkError(
            f"data loss: {message}. Set the option failOnDataLoss=false to skip what is "
            "missing and go on"
        )
    log.warning("data loss (failOnDataLoss=false, skipping): %s", message)


def _check_covers(
    name: str, wanted: Mapping[TopicPartition, int], tps: list[TopicPartition]
) -> None:
    """JSON offsets must name exactly the partitions read (as in Spark)."""
    missing = sorted(set(tps) - set(wanted))
    extra = sorted(set(wanted) - set(tps))
    if missing or extra:
        parts = []
        if missing:
            parts.append("missing " + ", ".join(f"{tp.topic}-{tp.partition}" for tp in missing))
        if extra:
            parts.append(
                "not read by this query " + ", ".join(f"{tp.topic}-{tp.partition}" for tp in extra)
            )
        raise KayakSparkError(
            f"option {name!r} must give an offset for every partition read, and only those "
            f"(-2 for earliest, -1 for latest): {'; '.join(parts)}"
        )
