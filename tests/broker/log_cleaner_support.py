"""Helpers shared by the log cleaner's tests: writing keyed batches, reading a log back whole,
and what a compacted Kafka log must still serve."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from kayak.broker.log import LogConfig, PartitionLog
from kayak.broker.log.cleaner.manager import CleanerConfig, LogCleaner
from kayak.broker.log.verify import verify_partition
from kayak.protocol.records import RecordBatch, build_record_batch, parse_batches

T0 = 1_700_000_000_000
DAY_MS = 86_400_000


def compact_config(**overrides: object) -> LogConfig:
    """A compacted log's config with small segments (the floor of stored topics)."""
    properties = {"cleanup.policy": "compact", "min.cleanable.dirty.ratio": "0.01"}
    properties.update({k: str(v) for k, v in overrides.items()})
    return LogConfig.from_properties(properties)


def keyed(pairs: list[tuple[bytes, bytes | None]], timestamp: int = T0, **kw: object) -> bytes:
    return build_record_batch(
        [v for _, v in pairs],
        keys=[k for k, _ in pairs],
        timestamp=timestamp,
        **kw,  # type: ignore[arg-type]
    )


def inline_cleaner(dedupe_bytes: int = 1024 * 1024) -> LogCleaner:
    return LogCleaner(CleanerConfig(backoff_ms=0, dedupe_buffer_size=dedupe_bytes,
                                    executor="inline"))  # fmt: skip


@dataclass(frozen=True)
class Read:
    """One data record as a consumer gets it."""

    offset: int
    key: bytes | None
    value: bytes | None


def read_all(plog: PartitionLog, committed: bool = False) -> tuple[list[Read], list[RecordBatch]]:
    """Every data record and every batch from the log start to the high watermark, checking
    that batch offsets only grow and that a consumer always moves forward."""
    records: list[Read] = []
    batches: list[RecordBatch] = []
    offset = plog.log_start_offset
    while offset < plog.high_watermark:
        found = plog.read(offset, 1 << 20, committed=committed)
        if found is None:
            break
        parsed = parse_batches(found.read())
        assert parsed, f"no whole batch at offset {offset}"
        for batch in parsed:
            assert isinstance(batch, RecordBatch)
            if batches:
                assert batch.base_offset >= batches[-1].next_offset, "batch offsets go back"
            batches.append(batch)
            if not batch.is_control:
                records += [Read(r.offset, r.key, r.value) for r in batch if r.offset >= offset]
        offset = max(offset + 1, parsed[-1].next_offset)
    offsets = [r.offset for r in records]
    assert offsets == sorted(set(offsets)), "record offsets are not strictly increasing"
    return records, batches


def assert_verified(directory: Path) -> None:
    report = verify_partition(directory)
    assert report.ok, [str(p) for p in report.all_problems]
