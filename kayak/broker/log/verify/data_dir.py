"""A whole data directory: the partitions ``topics.json`` and the disk name, each verified.

:class:`VerifyPlan` finds the partitions before any log is read (so a caller can size a
progress bar), and :meth:`VerifyPlan.verify` checks each with
:func:`~kayak.broker.log.verify.partition.verify_partition`.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kayak.broker.catalog import CATALOG_FILE
from kayak.broker.log.loader import LOG_END
from kayak.broker.log.partition import LOG_START_CHECKPOINT
from kayak.broker.log.verify.partition import PartitionReport, segment_paths, verify_partition
from kayak.broker.log.verify.problems import DataDirError, Problem, ProblemKind
from kayak.broker.log.verify.reader import DEFAULT_CHUNK_SIZE, ProgressCallback

log = logging.getLogger(__name__)

# As kayak.broker.server names it (the broker writes it there); the storage layer does not
# import the server.
META_FILE = "meta.properties"
# What a partition directory holds besides segments (all of them may be missing).
_RECORDS = (LOG_START_CHECKPOINT, LOG_END)


@dataclass(frozen=True, slots=True)
class PartitionLocation:
    """A partition to verify: where it lives and what ``topics.json`` says of it."""

    topic: str
    partition: int
    directory: Path
    leader_epoch: int | None = None

    def log_bytes(self) -> int:
        """The size of its segment files (0 if the directory does not exist)."""
        if not self.directory.is_dir():
            return 0
        return sum(path.stat().st_size for path in segment_paths(self.directory))


@dataclass
class VerifyReport:
    """Every partition checked, and the problems found."""

    data_dir: Path
    check_crc: bool
    partitions: list[PartitionReport] = field(default_factory=list)
    problems: list[Problem] = field(default_factory=list)  # not tied to one partition

    @property
    def all_problems(self) -> list[Problem]:
        return self.problems + [p for part in self.partitions for p in part.all_problems]

    @property
    def ok(self) -> bool:
        return not self.all_problems

    @property
    def segments(self) -> int:
        return sum(len(p.segments) for p in self.partitions)

    @property
    def batches(self) -> int:
        return sum(p.batches for p in self.partitions)

    @property
    def records(self) -> int:
        return sum(p.records for p in self.partitions)

    @property
    def size(self) -> int:
        return sum(p.size for p in self.partitions)


@dataclass
class VerifyPlan:
    """The partitions of a data directory to verify, found before any log is read."""

    data_dir: Path
    partitions: list[PartitionLocation]
    problems: list[Problem]

    @classmethod
    def discover(cls, data_dir: Path, topic: str | None = None) -> VerifyPlan:
        """Find the partitions (of ``topic`` only, if given) from topics.json and the disk.

        Raises :class:`DataDirError` if ``data_dir`` is missing, not a kayak data directory
        (neither ``topics.json`` nor ``meta.properties``), or has no such topic.
        """
        if not data_dir.is_dir():
            missing = "does not exist" if not data_dir.exists() else "is not a directory"
            raise DataDirError(f"{data_dir} {missing}")
        catalog_path = data_dir / CATALOG_FILE
        if not catalog_path.exists() and not (data_dir / META_FILE).exists():
            raise DataDirError(
                f"{data_dir} is not a kayak data directory (no {CATALOG_FILE} or {META_FILE})"
            )
        try:
            return cls._discover(data_dir, topic)
        except OSError as exc:
            raise DataDirError(f"cannot read {data_dir}: {exc}") from exc

    @classmethod
    def _discover(cls, data_dir: Path, topic: str | None) -> VerifyPlan:
        catalog_path = data_dir / CATALOG_FILE
        problems: list[Problem] = []
        catalog = _read_catalog(catalog_path, problems)
        found: dict[tuple[str, int], PartitionLocation] = {}
        for name, epochs in (catalog or {}).items():
            for index, epoch in enumerate(epochs):
                found[name, index] = PartitionLocation(
                    name, index, data_dir / f"{name}-{index}", epoch
                )
        unknown = [
            loc for loc in _partition_dirs(data_dir) if (loc.topic, loc.partition) not in found
        ]
        for location in unknown:
            found[location.topic, location.partition] = location
        if topic is not None:
            found = {key: loc for key, loc in found.items() if loc.topic == topic}
            unknown = [loc for loc in unknown if loc.topic == topic]
            if not found:
                raise DataDirError(f"{data_dir} has no topic {topic!r}")
        if catalog is not None:
            problems.extend(_not_in_catalog(location, catalog) for location in unknown)
        partitions = sorted(found.values(), key=lambda loc: (loc.topic, loc.partition))
        return cls(data_dir, partitions, problems)

    @property
    def total_bytes(self) -> int:
        """Bytes of segment files verification will read."""
        return sum(location.log_bytes() for location in self.partitions)

    def verify(
        self,
        *,
        check_crc: bool = True,
        chunk_size: int = DEFAULT_CHUNK_SIZE,
        on_bytes: ProgressCallback | None = None,
    ) -> VerifyReport:
        """Check every partition found; see :func:`verify_partition`."""
        report = VerifyReport(self.data_dir, check_crc, problems=list(self.problems))
        for location in self.partitions:
            log.debug("verifying %s", location.directory)
            report.partitions.append(
                verify_partition(
                    location.directory,
                    topic=location.topic,
                    partition=location.partition,
                    leader_epoch=location.leader_epoch,
                    check_crc=check_crc,
                    chunk_size=chunk_size,
                    on_bytes=on_bytes,
                )
            )
        return report


def verify_data_dir(
    data_dir: Path,
    *,
    topic: str | None = None,
    check_crc: bool = True,
    chunk_size: int = DEFAULT_CHUNK_SIZE,
    on_bytes: ProgressCallback | None = None,
) -> VerifyReport:
    """Check a broker data directory (strictly read-only); raises :class:`DataDirError`."""
    plan = VerifyPlan.discover(data_dir, topic)
    return plan.verify(check_crc=check_crc, chunk_size=chunk_size, on_bytes=on_bytes)


def _read_catalog(path: Path, problems: list[Problem]) -> dict[str, list[int]] | None:
    """Topic name → current leader epoch per partition; None if topics.json is unreadable."""
    try:
        document: Any = json.loads(path.read_text())
    except FileNotFoundError:
        return {}  # a broker that never created a topic
    except (OSError, ValueError) as exc:
        problems.append(Problem(path, ProblemKind.CATALOG, f"unreadable: {exc}"))
        return None
    try:
        catalog: dict[str, list[int]] = {}
        for name, entry in document["topics"].items():
            owners = list(entry["owners"])
            catalog[str(name)] = [int(e) for e in entry.get("epochs", [0] * len(owners))]
            if len(catalog[name]) != len(owners):
                raise ValueError(
                    f"topic {name!r} has {len(owners)} owners but {len(catalog[name])} epochs"
                )
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        problems.append(Problem(path, ProblemKind.CATALOG, f"not a cluster map: {exc!r}"))
        return None
    return catalog


def _partition_dirs(data_dir: Path) -> Iterator[PartitionLocation]:
    """Directories named TOPIC-PARTITION that hold partition data."""
    for child in sorted(data_dir.iterdir()):
        name, _, index = child.name.rpartition("-")
        if not (name and index.isdigit() and child.is_dir()):
            continue
        if segment_paths(child) or any((child / record).exists() for record in _RECORDS):
            yield PartitionLocation(name, int(index), child)


def _not_in_catalog(location: PartitionLocation, catalog: dict[str, list[int]]) -> Problem:
    if location.topic not in catalog:
        message = f"topic {location.topic!r} is not in {CATALOG_FILE} (a deleted topic's data?)"
    else:
        count = len(catalog[location.topic])
        message = f"{CATALOG_FILE} gives topic {location.topic!r} only {count} partitions"
    return Problem(location.directory, ProblemKind.CATALOG, message)
