"""``topics.json`` on disk: read-modify-write of many changes at once, under the shared lock.

:class:`CatalogStore` is the blocking half of :class:`~kayak.broker.catalog.TopicCatalog`:
it runs in an executor thread (or on the caller's thread for the synchronous API) and never
touches live broker state. One :meth:`CatalogStore.commit` takes the cross-process ``flock``,
brings the document up to date (from memory when no other process wrote since, else from
the file), applies a whole batch of edits to it, and makes the result durable with one
write, one ``fsync`` of the file and one of the directory, however many edits the batch held.

The document carries a ``version`` that every write increments under the lock, so whoever
reads two states of it can tell which is newer. Stored topic entries are never mutated: an
edit replaces an entry, so a published :class:`Snapshot` can be read by the event loop while
the next commit is being built here.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import re
import shutil
import threading
import uuid
from collections.abc import Callable, Container, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kayak.broker.log.files import fsync_directory
from kayak.errors import KafkaError, KafkaStorageError

log = logging.getLogger(__name__)

CATALOG_FILE = "topics.json"
LOCK_FILE = "topics.lock"
DELETE_SUFFIX = "-delete"

Entry = dict[str, Any]  # one topic as topics.json holds it; replaced, never mutated


@dataclass(frozen=True)
class Snapshot:
    """One state of the document: its version and its topics (read-only by convention)."""

    version: int
    topics: Mapping[str, Entry]

    @classmethod
    def parse(cls, text: str) -> Snapshot:
        """A snapshot from topics.json's text (a file without ``version`` is version 0)."""
        document = json.loads(text)
        return cls(int(document.get("version", 0)), document["topics"])


EMPTY = Snapshot(0, {})


@dataclass
class FilePlan:
    """Directory work a batch of edits asks for, done before the document is written."""

    data_dir: Path
    create: list[Path] = field(default_factory=list)
    doomed: list[Path] = field(default_factory=list)  # (old path) renamed for deletion

    def partition_dirs(self, name: str, indexes: Sequence[int]) -> list[Path]:
        """The directories of ``name``'s partitions ``indexes``."""
        return [self.data_dir / f"{name}-{index}" for index in indexes]


# An edit changes the topics it is given (or raises a KafkaError, which fails it alone) and
# returns what its caller gets back.
Edit = Callable[[dict[str, Entry], FilePlan], object]


@dataclass
class Written:
    """What one commit did: the document after it, and each edit's result or error."""

    base_version: int  # the version the edits were applied to
    snapshot: Snapshot
    changed: frozenset[str]  # topics whose entry the batch replaced, added or removed
    results: list[object]  # per edit: its return value, or the KafkaError it raised
    stat: tuple[int, int, int] | None  # topics.json's (inode, mtime, size) after the commit


class CatalogStore:
    """The file, its lock, and the last document this process read or wrote."""

    def __init__(self, data_dir: Path) -> None:
        self.data_dir = data_dir
        self.path = data_dir / CATALOG_FILE
        self._lock_path = data_dir / LOCK_FILE
        # One commit at a time in this process (the flock orders processes, not threads).
        self._guard = threading.Lock()
        # The document as this process last wrote it, valid while the lock file still holds
        # our token and topics.json is the file we wrote: no other process wrote since.
        self._cached: _Cached | None = None

    def read(self) -> Snapshot:
        """The document as the file holds it now (no lock: the file is replaced atomically)."""
        try:
            return Snapshot.parse(self.path.read_text())
        except FileNotFoundError:
            return EMPTY

    def stat(self) -> tuple[int, int, int]:
        """topics.json's (inode, mtime, size): a change of any says another write happened."""
        return _stat_of(self.path)

    def commit(self, edits: Sequence[Edit]) -> Written:
        """Apply ``edits`` in order to the latest document and make the result durable.

        An edit that raises :class:`KafkaError` fails alone. An ``OSError`` writing the file
        fails every edit that changed something, with KAFKA_STORAGE_ERROR; nothing reaches
        the file then.
        """
        with self._guard, self._flock() as lock_fd:
            current = self._current(lock_fd)
            base = current.snapshot
            topics = _Tracked(base.topics)
            plan = FilePlan(self.data_dir)
            results: list[object] = []
            for edit in edits:
                try:
                    results.append(edit(topics, plan))
                except KafkaError as exc:
                    results.append(exc)
            changed = frozenset(topics.touched)
            if not changed:
                return Written(base.version, base, changed, results, self._stat_or_none())
            snapshot = Snapshot(base.version + 1, dict(topics))
            texts = dict(current.texts)
            for name in changed:
                entry = topics.get(name)
                if entry is None:
                    texts.pop(name, None)
                else:
                    texts[name] = _entry_text(name, entry)
            try:
                stat = self._write(snapshot, texts, plan, lock_fd)
            except OSError as exc:
                log.error("cannot write %s: %s", self.path, exc)
                self._cached = None
                failure = KafkaStorageError(f"writing {self.path} failed: {exc}")
                results = [r if isinstance(r, KafkaError) else failure for r in results]
                return Written(base.version, base, frozenset(), results, None)
        _remove_doomed(plan.doomed)
        return Written(base.version, snapshot, changed, results, stat)

    # -- inside the lock ----------------------------------------------------------------

    @contextlib.contextmanager
    def _flock(self) -> Iterator[int]:
        fd = os.open(self._lock_path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield fd
        finally:
            os.close(fd)  # drops the flock

    def _current(self, lock_fd: int) -> _Cached:
        cached = self._cached
        if (
            cached is not None
            and os.pread(lock_fd, 64, 0) == cached.token
            and self._stat_or_none() == cached.stat
        ):
            return cached
        snapshot = self.read()
        texts = {name: _entry_text(name, entry) for name, entry in snapshot.topics.items()}
        return _Cached(b"", None, snapshot, texts)

    def _write(
        self, snapshot: Snapshot, texts: dict[str, str], plan: FilePlan, lock_fd: int
    ) -> tuple[int, int, int]:
        renamed = _rename_for_deletion(plan.doomed)
        try:
            if renamed:
                # The renames are durable before the topic leaves the document: a crash from
                # here on leaves only directories the next start knows it may delete.
                fsync_directory(self.data_dir)
            for directory in plan.create:
                directory.mkdir(exist_ok=True)
            # Each topic's text is kept from the write that last changed it: one write costs
            # what changed plus one join, not a serialization of every topic.
            text = f'{{"version":{snapshot.version},"topics":{{{",".join(texts.values())}}}}}'
            # Per process temp name: shards sharing the data directory never share it.
            tmp = self.path.with_name(f"{self.path.name}.{os.getpid()}.tmp")
            with open(tmp, "w") as f:
                f.write(text)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, self.path)
        except BaseException:
            # The document still lists the topics: their data must be where it says.
            _restore_renamed(renamed, self.data_dir)
            raise
        plan.doomed[:] = [marked for _, marked in renamed]
        # One directory fsync makes the replace and every new partition directory durable.
        fsync_directory(self.data_dir)
        stat = _stat_of(self.path)
        token = uuid.uuid4().hex.encode()
        os.ftruncate(lock_fd, 0)
        os.pwrite(lock_fd, token, 0)
        self._cached = _Cached(token, stat, snapshot, texts)
        return stat

    def _stat_or_none(self) -> tuple[int, int, int] | None:
        try:
            return _stat_of(self.path)
        except FileNotFoundError:
            return None


def _stat_of(path: Path) -> tuple[int, int, int]:
    st = os.stat(path)
    return st.st_ino, st.st_mtime_ns, st.st_size


def _entry_text(name: str, entry: Entry) -> str:
    return f"{json.dumps(name)}:{json.dumps(entry, separators=(',', ':'))}"


@dataclass(frozen=True)
class _Cached:
    """A document as this process wrote it, with each topic's JSON text."""

    token: bytes  # what the write left in the lock file
    stat: tuple[int, int, int] | None
    snapshot: Snapshot
    texts: dict[str, str]


class _Tracked(dict[str, Entry]):
    """The topics an edit batch works on, remembering which names it set or removed."""

    def __init__(self, topics: Mapping[str, Entry]) -> None:
        super().__init__(topics)
        self.touched: set[str] = set()

    def __setitem__(self, name: str, entry: Entry) -> None:
        self.touched.add(name)
        super().__setitem__(name, entry)

    def __delitem__(self, name: str) -> None:
        self.touched.add(name)
        super().__delitem__(name)


def mark_for_deletion(directory: Path) -> Path | None:
    """Rename a partition directory to ``NAME-IDX.<id>-delete`` (Kafka's spelling); the new
    path, or None when there is no such directory."""
    marked = directory.with_name(f"{directory.name}.{uuid.uuid4().hex}{DELETE_SUFFIX}")
    try:
        directory.rename(marked)
    except FileNotFoundError:
        return None
    return marked


def _rename_for_deletion(directories: Sequence[Path]) -> list[tuple[Path, Path]]:
    """(original, marked) for each directory renamed for deletion."""
    return [(d, marked) for d in directories if (marked := mark_for_deletion(d)) is not None]


def _restore_renamed(renamed: Sequence[tuple[Path, Path]], data_dir: Path) -> None:
    """Undo deletion renames whose catalog write failed (best effort, each logged)."""
    for original, marked in renamed:
        try:
            os.rename(marked, original)
        except OSError as exc:
            log.error("cannot restore %s after a failed catalog write: %s", original.name, exc)
    if renamed:
        with contextlib.suppress(OSError):
            fsync_directory(data_dir)


def _remove_doomed(directories: Sequence[Path]) -> None:
    for directory in directories:
        shutil.rmtree(directory, ignore_errors=True)


# What mark_for_deletion makes, and nothing else: a user's "backup-delete" folder stays.
_MARKED_FOR_DELETION = re.compile(rf".+-\d+\.[0-9a-f]{{32}}{DELETE_SUFFIX}")


def remove_orphans(data_dir: Path, catalog: Container[str]) -> None:
    """Finish deletions a crash interrupted, and touch nothing else.

    Only directories a topic deletion renamed (``…-delete``) are removed. A directory that
    looks like a partition of a topic the map does not know (a user's folder, or a topic whose
    map entry was lost) is left alone and named in one warning.
    """
    unknown: list[str] = []
    for child in sorted(data_dir.iterdir()):
        if not child.is_dir():
            continue
        if _MARKED_FOR_DELETION.fullmatch(child.name):
            log.info("removing %s: a deleted topic's data", child)
            shutil.rmtree(child, ignore_errors=True)
            continue
        name, _, index = child.name.rpartition("-")
        if index.isdigit() and name and name not in catalog and any(child.glob("*.log")):
            unknown.append(child.name)
    if unknown:
        log.warning(
            "%s: left alone %d director%s that look like partitions of topics kayak does not "
            "know: %s",
            data_dir, len(unknown), "y" if len(unknown) == 1 else "ies", ", ".join(unknown),
        )  # fmt: skip
