"""The registry's state, kept durably in the compacted topic ``_schemas``.

Every change is one record batch written to ``_schemas`` through the broker's
:class:`~kayak.broker.log.LogWriter`, on disk (whatever ``--flush`` says) and readable by
fetches before the change is applied in memory and answered; on start the topic is replayed
from the beginning, so the topic *is* the registry. Keys and values are JSON shaped like
Confluent's::

    {"keytype":"SCHEMA","subject":"s","version":1,"magic":1}
        -> {"subject":"s","version":1,"id":7,"schema":"...","deleted":false}   (null: hard delete)
    {"keytype":"CONFIG","subject":null,"magic":0} -> {"compatibilityLevel":"FULL"}  (null: unset)
    {"keytype":"DELETE_SUBJECT","subject":"s","magic":0} -> {"subject":"s","version":3}
    {"keytype":"SCHEMA_ID","magic":0} -> {"maxId":7}   (kayak's own: never tombstoned)

The topic is created with the first change, not at start: a broker whose registry is never
used lists no extra topic. Schema ids are global: the same schema (by identity form) keeps
its id under every subject, and a new schema gets one more than the highest id ever handed
out, so ids only grow and never change meaning, across restarts and hard deletes.

The topic is compacted, so replay sees only each key's latest record. An id lives in the
SCHEMA values that carry it; the last of them can only go when its key is tombstoned (a hard
delete), and once the cleaner has removed the tombstone too, nothing would show that the id
was ever used. So every hard delete writes, in the same batch as its tombstones, the
``SCHEMA_ID`` record: the highest id handed out so far. Its one key is never tombstoned,
compaction keeps its latest (and highest) value, and replay takes the maximum of it and
every id it sees. A topic written before that record existed (or by Confluent's registry)
replays as before; at start, if the highest id it shows is carried by no SCHEMA value left
and by no ``SCHEMA_ID`` record, the store writes one (:meth:`SchemaStore.secure_ids`)
before the cleaner can remove the tombstones (that takes ``delete.retention.ms`` after a
first cleaning). Writes are serialised by one lock: a change is decided on the state the
previous change left, never on a state that is about to change.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from kayak.broker.catalog import Partition, TopicCatalog
from kayak.broker.log import LogWriter
from kayak.broker.log.replay import replay_records
from kayak.broker.registry import errors
from kayak.broker.registry.compatibility import DEFAULT_LEVEL, CompatibilityLevel
from kayak.broker.registry.schema import AvroSchema, parse_avro
from kayak.errors import KafkaError, TopicExistsError
from kayak.protocol.records import build_record_batch

log = logging.getLogger(__name__)

TOPIC = "_schemas"
# What applying a record that is not the registry's can raise: JSON that is not JSON, too
# deep, or not shaped like a key or value of ours.
# Confluent's registry writes these too; they change nothing kayak keeps.
_IGNORED_KEYTYPES = frozenset({"DELETE_SUBJECT", "NOOP", "MODE", "CLEAR_SUBJECT", "CONTEXT"})
_NOT_THE_REGISTRYS = (
    ValueError, KeyError, TypeError, AttributeError, RecursionError, errors.RegistryError
)  # fmt: skip

# Decides whether a registration may go ahead: (new schema, live versions oldest first) ->
# the reasons it may not (empty: it may).
CompatibilityCheck = Callable[[AvroSchema, list[tuple[int, AvroSchema]]], list[str]]


@dataclass(slots=True)
class SubjectVersion:
    """One version of a subject."""

    subject: str
    version: int
    schema_id: int
    schema: AvroSchema
    deleted: bool = False


def _json_bytes(document: dict[str, Any]) -> bytes:
    return json.dumps(document, separators=(",", ":")).encode()


def schema_key(subject: str, version: int) -> bytes:
    return _json_bytes({"keytype": "SCHEMA", "subject": subject, "version": version, "magic": 1})


def config_key(subject: str | None) -> bytes:
    return _json_bytes({"keytype": "CONFIG", "subject": subject, "magic": 0})


def delete_subject_key(subject: str) -> bytes:
    return _json_bytes({"keytype": "DELETE_SUBJECT", "subject": subject, "magic": 0})


# The one key of the highest schema id handed out; never tombstoned (see the module doc).
SCHEMA_ID_KEY = _json_bytes({"keytype": "SCHEMA_ID", "magic": 0})


def schema_id_value(max_id: int) -> bytes:
    return _json_bytes({"maxId": max_id})


def schema_value(entry: SubjectVersion) -> bytes:
    return _json_bytes({
        "subject": entry.subject,
        "version": entry.version,
        "id": entry.schema_id,
        "schema": entry.schema.text,
        "deleted": entry.deleted,
    })  # fmt: skip


class SchemaStore:
    """Subjects, versions, ids and compatibility settings, durable in ``_schemas``."""

    def __init__(self, catalog: TopicCatalog, writer: LogWriter) -> None:
        self._catalog = catalog
        self._partition: Partition | None = None
        self._writer = writer
        self._lock = asyncio.Lock()
        self._subjects: dict[str, dict[int, SubjectVersion]] = {}
        self._schemas: dict[int, AvroSchema] = {}  # every id ever written
        self._ids: dict[str, int] = {}  # identity form -> id
        self._configs: dict[str | None, CompatibilityLevel] = {}  # None: the global level
        self._next_id = 1
        self._recorded_max_id = 0  # the highest SCHEMA_ID record replay saw

    @classmethod
    def open(cls, catalog: TopicCatalog, writer: LogWriter) -> SchemaStore:
        """The store, with the state ``_schemas`` holds if it exists."""
        store = cls(catalog, writer)
        if catalog.get(TOPIC) is not None:
            try:
                store._partition = catalog.partition(TOPIC, 0)
                store._replay(store._partition)
            except KafkaError as exc:
                # The broker still serves every other partition; writes here fail clearly.
                log.error("schema registry state unavailable: %s", exc)
        return store

    async def secure_ids(self) -> None:
        """Write the ``SCHEMA_ID`` record if the highest id replay saw survives only in
        records compaction may remove (a topic older than that record); see the module doc.

        A failure is logged, not raised: the registry still serves, and the next hard delete
        writes the record anyway.
        """
        async with self._lock:
            max_id = self._next_id - 1
            carried = max((entry.schema_id for versions in self._subjects.values()
                           for entry in versions.values()), default=0)  # fmt: skip
            if max_id <= max(carried, self._recorded_max_id):
                return
            try:
                await self._write([SCHEMA_ID_KEY], [schema_id_value(max_id)])
            except errors.RegistryError as exc:
                log.error("cannot record the highest schema id %d: %s", max_id, exc)
                return
            self._recorded_max_id = max_id
            log.info("recorded the highest schema id %d, which only tombstoned records showed",
                     max_id)  # fmt: skip

    def _topic_partition(self) -> Partition:
        """``_schemas``' only partition, creating the topic (on shard 0) the first time."""
        if self._partition is None:
            if self._catalog.get(TOPIC) is None:
                with contextlib.suppress(TopicExistsError):
                    # Not internal: like Confluent's, any Kafka client may list and read it.
                    self._catalog.create(TOPIC, 1, {"cleanup.policy": "compact"}, owners=[0])
            self._partition = self._catalog.partition(TOPIC, 0)
        return self._partition

    # -- reading ------------------------------------------------------------------------

    def subjects(self, include_deleted: bool = False) -> list[str]:
        return sorted(
            subject
            for subject, versions in self._subjects.items()
            if include_deleted or any(not v.deleted for v in versions.values())
        )

    def versions(self, subject: str, include_deleted: bool = False) -> list[SubjectVersion]:
        """The subject's versions, oldest first (40401 if it has none to show)."""
        found = [
            v
            for _, v in sorted(self._subjects.get(subject, {}).items())
            if include_deleted or not v.deleted
        ]
        if not found:
            raise errors.subject_not_found(subject)
        return found

    def version(
        self, subject: str, version: int | None, include_deleted: bool = False
    ) -> SubjectVersion:
        """One version (None: the latest); 40401 / 40402 when there is no such thing."""
        every = self.versions(subject, include_deleted)
        if version is None:
            return every[-1]
        for entry in every:
            if entry.version == version:
                return entry
        raise errors.version_not_found(subject, version)

    def schema(self, schema_id: int) -> AvroSchema:
        """The schema with this id, while some subject version (even soft-deleted) uses it."""
        schema = self._schemas.get(schema_id)
        if schema is None or not self.usages(schema_id):
            raise errors.schema_not_found(f"Schema {schema_id} not found")
        return schema

    def usages(self, schema_id: int, include_deleted: bool = True) -> list[SubjectVersion]:
        return [
            entry
            for subject in sorted(self._subjects)
            for _, entry in sorted(self._subjects[subject].items())
            if entry.schema_id == schema_id and (include_deleted or not entry.deleted)
        ]

    def find(
        self, subject: str, schema: AvroSchema, include_deleted: bool = False
    ) -> SubjectVersion | None:
        """The subject's newest version with this schema."""
        for entry in sorted(self._subjects.get(subject, {}).values(), key=lambda e: -e.version):
            if entry.schema.identity == schema.identity and (include_deleted or not entry.deleted):
                return entry
        return None

    def has_subject(self, subject: str) -> bool:
        return bool(self._subjects.get(subject)) or subject in self._configs

    def compatibility(self, subject: str | None) -> CompatibilityLevel | None:
        """The level set for ``subject`` (None: the global one), or None if unset."""
        return self._configs.get(subject)

    def effective_compatibility(self, subject: str) -> CompatibilityLevel:
        return self._configs.get(subject) or self._configs.get(None) or DEFAULT_LEVEL

    # -- writing ------------------------------------------------------------------------

    async def register(
        self, subject: str, schema: AvroSchema, check: CompatibilityCheck
    ) -> SubjectVersion:
        """Register ``schema`` under ``subject``, or return the live version already holding it.

        ``check`` gets the live versions and may refuse (409) with its reasons.
        """
        async with self._lock:
            existing = self.find(subject, schema)
            if existing is not None:
                return existing
            live = [(v.version, v.schema) for v in self._subjects.get(subject, {}).values()
                    if not v.deleted]  # fmt: skip
            problems = check(schema, sorted(live, key=lambda pair: pair[0]))
            if problems:
                raise errors.incompatible(subject, problems)
            schema_id = self._ids.get(schema.identity)
            if schema_id is None:
                schema_id = self._next_id
            version = max(self._subjects.get(subject, {}), default=0) + 1
            if version > errors.MAX_VERSION:
                raise errors.invalid_version(version)
            entry = SubjectVersion(subject, version, schema_id, schema)
            await self._write([schema_key(subject, version)], [schema_value(entry)],
                              reserve_id=schema_id)  # fmt: skip
            self._apply_version(entry)
            log.info("registered %s version %d as schema id %d", subject, version, schema_id)
            return entry

    async def delete_subject(self, subject: str, permanent: bool) -> list[int]:
        """Soft delete every live version, or hard delete a soft-deleted subject."""
        async with self._lock:
            versions = self._subjects.get(subject)
            if not versions:
                raise errors.subject_not_found(subject)
            live = [v for _, v in sorted(versions.items()) if not v.deleted]
            if permanent:
                if live:
                    raise errors.subject_not_soft_deleted(subject)
                numbers = sorted(versions)
                await self._write_tombstones([schema_key(subject, n) for n in numbers])
                del self._subjects[subject]
                log.info("permanently deleted subject %s", subject)
                return numbers
            if not live:
                raise errors.subject_soft_deleted(subject)
            marked = [SubjectVersion(v.subject, v.version, v.schema_id, v.schema, True)
                      for v in live]  # fmt: skip
            keys = [schema_key(subject, v.version) for v in marked] + [delete_subject_key(subject)]
            values: list[bytes | None] = [schema_value(v) for v in marked]
            values.append(_json_bytes({"subject": subject, "version": live[-1].version}))
            await self._write(keys, values)
            for entry in marked:
                self._apply_version(entry)
            log.info("soft deleted subject %s", subject)
            return [v.version for v in live]

    async def delete_version(self, subject: str, version: int | None, permanent: bool) -> int:
        """Soft delete a live version, or hard delete a soft-deleted one (None: the latest)."""
        async with self._lock:
            if not permanent and version is not None and self.soft_deleted(subject, version):
                raise errors.version_soft_deleted(subject, version)
            entry = self.version(subject, version, include_deleted=permanent)
            if permanent:
                if not entry.deleted:
                    raise errors.version_not_soft_deleted(subject, entry.version)
                await self._write_tombstones([schema_key(subject, entry.version)])
                self._remove_version(subject, entry.version)
                return entry.version
            marked = SubjectVersion(subject, entry.version, entry.schema_id, entry.schema, True)
            await self._write([schema_key(subject, entry.version)], [schema_value(marked)])
            self._apply_version(marked)
            return entry.version

    def soft_deleted(self, subject: str, version: int) -> bool:
        entry = self._subjects.get(subject, {}).get(version)
        return entry is not None and entry.deleted

    async def set_compatibility(self, subject: str | None, level: CompatibilityLevel) -> None:
        async with self._lock:
            value = _json_bytes({"compatibilityLevel": level.value})
            await self._write([config_key(subject)], [value])
            self._configs[subject] = level

    async def delete_compatibility(self, subject: str | None) -> CompatibilityLevel | None:
        """Unset a level; returns the one that was set."""
        async with self._lock:
            previous = self._configs.get(subject)
            if previous is not None:
                await self._write([config_key(subject)], [None])
                del self._configs[subject]
            return previous

    async def _write_tombstones(self, keys: list[bytes]) -> None:
        """Tombstone SCHEMA ``keys``, with the ``SCHEMA_ID`` record in the same batch: the
        values they remove may be the last to show the highest id handed out."""
        max_id = self._next_id - 1
        values: list[bytes | None] = [None] * len(keys)
        await self._write([*keys, SCHEMA_ID_KEY], [*values, schema_id_value(max_id)])
        self._recorded_max_id = max(self._recorded_max_id, max_id)

    async def _write(
        self, keys: list[bytes], values: list[bytes | None], reserve_id: int | None = None
    ) -> None:
        """Append one batch and wait until it is on disk and readable (50001 if that fails)."""
        if reserve_id is not None:
            # Taken even if the write fails: the record may still reach the disk, and an id
            # must never be handed out for two different schemas.
            self._next_id = max(self._next_id, reserve_id + 1)
        try:
            partition = self._topic_partition()
            batch = build_record_batch(values, keys=keys, timestamp=int(time.time() * 1000))
            await self._writer.write(partition.log, batch, on_disk=True)
        except (KafkaError, OSError, ValueError) as exc:
            log.error("cannot write %s: %s", TOPIC, exc)
            raise errors.store_error(f"cannot write {TOPIC}: {exc}") from exc

    # -- replay -------------------------------------------------------------------------

    def _replay(self, partition: Partition) -> None:
        """Rebuild the registry from ``_schemas``. A damaged batch (see ``replay_records``) or
        a record that is not the registry's is skipped with one warning; the rest is applied."""
        count = 0
        for record in replay_records(partition.log):
            value = None if record.value is None else bytes(record.value)
            key = None if record.key is None else bytes(record.key)
            count += self._apply_record(key, value, record.offset)
        if count:
            log.info(
                "schema registry restored %d subjects and %d schema ids from %d records",
                len(self._subjects), len(self._schemas), count,
            )  # fmt: skip

    def _apply_record(self, raw_key: bytes | None, raw_value: bytes | None, offset: int) -> int:
        """Apply one record of ``_schemas``; 1 if it was the registry's, else 0."""
        # Anything can be in _schemas (a Kafka client could produce to it); a record that is
        # not one of the registry's own is skipped rather than allowed to stop the broker.
        try:
            if raw_key is None:
                raise ValueError("it has no key")
            key = json.loads(raw_key)
            value = None if raw_value is None else json.loads(raw_value)
            keytype = key["keytype"]
            if keytype == "SCHEMA":
                self._replay_schema(key, value)
            elif keytype == "CONFIG":
                subject = key["subject"]
                if value is None:
                    self._configs.pop(subject, None)
                else:
                    self._configs[subject] = CompatibilityLevel(value["compatibilityLevel"])
            elif keytype == "SCHEMA_ID":
                if value is not None:  # kayak never tombstones it; the maximum counts anyway
                    max_id = int(value["maxId"])
                    self._recorded_max_id = max(self._recorded_max_id, max_id)
                    self._next_id = max(self._next_id, max_id + 1)
            elif keytype == "DELETE_SUBJECT" and value is not None:
                for entry in self._subjects.get(key["subject"], {}).values():
                    if entry.version <= int(value["version"]):
                        entry.deleted = True
            elif keytype not in _IGNORED_KEYTYPES:
                raise ValueError(f"unknown keytype {keytype!r}")
        except _NOT_THE_REGISTRYS as exc:
            log.warning("%s-0 offset %d: skipping a record that is not the registry's: %s",
                        TOPIC, offset, exc)  # fmt: skip
            return 0
        return 1

    def _replay_schema(self, key: dict[str, Any], value: dict[str, Any] | None) -> None:
        subject, version = str(key["subject"]), int(key["version"])
        if value is None:
            self._remove_version(subject, version)
            return
        schema_id = int(value["id"])
        known = self._schemas.get(schema_id)
        schema = parse_avro(str(value["schema"]))
        if known is not None and known.identity != schema.identity:
            raise ValueError(f"schema id {schema_id} is already another schema")
        self._next_id = max(self._next_id, schema_id + 1)
        deleted = bool(value.get("deleted", False))
        self._apply_version(SubjectVersion(subject, version, schema_id, known or schema, deleted))

    def _apply_version(self, entry: SubjectVersion) -> None:
        self._subjects.setdefault(entry.subject, {})[entry.version] = entry
        self._schemas.setdefault(entry.schema_id, entry.schema)
        self._ids.setdefault(entry.schema.identity, entry.schema_id)

    def _remove_version(self, subject: str, version: int) -> None:
        versions = self._subjects.get(subject)
        if versions is None:
            return
        versions.pop(version, None)
        if not versions:
            del self._subjects[subject]
