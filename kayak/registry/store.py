"""The registry's state and the records of ``_schemas`` it is made of, whoever keeps them.

The topic *is* the registry: state changes only by applying its records, in log order, with
:meth:`RegistryStore.apply_record`, both when the topic is replayed at start and after each
change is written. Subclasses say how records are written and read back: through the
broker's own log (:mod:`kayak.broker.registry.store`) or through a Kafka client on any
cluster (:mod:`kayak.registry.cluster`). Keys and values are JSON shaped like Confluent's::

    {"keytype":"SCHEMA","subject":"s","version":1,"magic":1}
        -> {"subject":"s","version":1,"id":7,"schema":"...","deleted":false}   (null: hard delete)
    {"keytype":"CONFIG","subject":null,"magic":0} -> {"compatibilityLevel":"FULL"}  (null: unset)
    {"keytype":"DELETE_SUBJECT","subject":"s","magic":0} -> {"subject":"s","version":3}
    {"keytype":"SCHEMA_ID","magic":0} -> {"maxId":7}   (kayak's own: never tombstoned)

Schema ids are global: the same schema (by identity form) keeps its id under every subject,
and a new schema gets one more than the highest id ever handed out, so ids only grow and
never change meaning, across restarts and hard deletes.

The topic is compacted, so replay sees only each key's latest record. An id lives in the
SCHEMA values that carry it; the last of them can only go when its key is tombstoned (a hard
delete), and once the cleaner has removed the tombstone too, nothing would show that the id
was ever used. So every hard delete writes, in the same batch as its tombstones, the
``SCHEMA_ID`` record: the highest id handed out so far. Its one key is never tombstoned,
compaction keeps its latest (and highest) value, and replay takes the maximum of it and
every id it sees. A topic written before that record existed (or by Confluent's registry)
replays as before; at start, if the highest id it shows is carried by no SCHEMA value left
and by no ``SCHEMA_ID`` record, the store writes one (:meth:`RegistryStore.secure_ids`).

Several writers (registries sharing one cluster) may each decide a change on a state that
another's record, landing first, has just made stale. Applying is therefore a check as well:
a SCHEMA record giving an id that already means another schema, or a subject version that
already holds another schema, is rejected, identically by every registry replaying the log;
the writer sees its change did not take, and decides again on the newer state (after writing
its key once more, so that compaction cannot leave the rejected record standing alone). A
tombstone for a live version is rejected too: versions are soft deleted before they are hard
deleted, so such a tombstone was decided before the version was written. Writes of one
store are serialised by one lock: a change is decided on the state the previous change left.
"""

from __future__ import annotations

import asyncio
import json
import logging
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from kayak.registry import errors
from kayak.registry.compatibility import DEFAULT_LEVEL, CompatibilityLevel
from kayak.registry.schema import AvroSchema, parse_avro

log = logging.getLogger(__name__)

TOPIC = "_schemas"
# Confluent's registry writes these too; they change nothing kayak keeps.
_IGNORED_KEYTYPES = frozenset({"NOOP", "MODE", "CLEAR_SUBJECT", "CONTEXT"})
# What applying a record that is not the registry's can raise: JSON that is not JSON, too
# deep, or not shaped like a key or value of ours.
_NOT_THE_REGISTRYS = (
    ValueError, KeyError, TypeError, AttributeError, RecursionError, errors.RegistryError
)  # fmt: skip
# How often a registration decided on a state another registry's write made stale is decided
# again before the client gets a 50001.
_ATTEMPTS = 10

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


class RegistryStore(ABC):
    """Subjects, versions, ids and compatibility settings, made of ``_schemas``' records."""

    def __init__(self) -> None:
        self._lock = asyncio.Lock()
        self._subjects: dict[str, dict[int, SubjectVersion]] = {}
        self._schemas: dict[int, AvroSchema] = {}  # every id ever written
        self._ids: dict[str, int] = {}  # identity form -> id
        self._configs: dict[str | None, CompatibilityLevel] = {}  # None: the global level
        self._next_id = 1
        self._recorded_max_id = 0  # the highest SCHEMA_ID record applied

    # -- what subclasses provide ----------------------------------------------------------

    @abstractmethod
    async def _commit(self, keys: list[bytes], values: list[bytes | None]) -> None:
        """Append one batch to ``_schemas`` and return once it (and everything before it)
        has been applied with :meth:`apply_record`; 50001 if that fails."""

    @abstractmethod
    async def _refresh(self) -> None:
        """Apply what others wrote to ``_schemas`` up to its end, before deciding a change."""

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

    def soft_deleted(self, subject: str, version: int) -> bool:
        entry = self._subjects.get(subject, {}).get(version)
        return entry is not None and entry.deleted

    # -- writing ------------------------------------------------------------------------

    async def register(
        self, subject: str, schema: AvroSchema, check: CompatibilityCheck
    ) -> SubjectVersion:
        """Register ``schema`` under ``subject``, or return the live version already holding it.

        ``check`` gets the live versions and may refuse (409) with its reasons. The answer is
        what the log says once the write is applied: if another writer's record took the id
        or the version first, the registration is decided again on the newer state.
        """
        async with self._lock:
            for _ in range(_ATTEMPTS):
                await self._refresh()
                existing = self.find(subject, schema)
                if existing is not None:
                    return existing
                entry = self._decide_registration(subject, schema, check)
                # Taken even if the write fails: the record may still be stored, and an id
                # must never be handed out for two different schemas.
                self._next_id = max(self._next_id, entry.schema_id + 1)
                await self._commit([schema_key(subject, entry.version)], [schema_value(entry)])
                taken = self.find(subject, schema)
                if taken is not None:
                    log.info("registered %s version %d as schema id %d",
                             subject, taken.version, taken.schema_id)  # fmt: skip
                    return taken
                log.warning("registering %s version %d lost to another registry's write; "
                            "deciding again", subject, entry.version)  # fmt: skip
                await self._undo_rejected(entry)
            raise errors.store_error(f"{subject}: other writers kept changing {TOPIC}")

    def _decide_registration(
        self, subject: str, schema: AvroSchema, check: CompatibilityCheck
    ) -> SubjectVersion:
        live = [(v.version, v.schema) for v in self._subjects.get(subject, {}).values()
                if not v.deleted]  # fmt: skip
        problems = check(schema, sorted(live, key=lambda pair: pair[0]))
        if problems:
            raise errors.incompatible(subject, problems)
        schema_id = self._ids.get(schema.identity, self._next_id)
        version = max(self._subjects.get(subject, {}), default=0) + 1
        if version > errors.MAX_VERSION:
            raise errors.invalid_version(version)
        return SubjectVersion(subject, version, schema_id, schema)

    async def _undo_rejected(self, entry: SubjectVersion) -> None:
        """Make sure compaction can never let a rejected record stand: it is rejected only
        while an earlier record precedes it, and compaction keeps just each key's latest. So
        its key is written again with what the state holds there, or tombstoned if nothing;
        a tombstone never removes a live version (see :meth:`_apply_schema`), so if another
        registry has just written one there, that version's value is written once more."""
        key = schema_key(entry.subject, entry.version)
        await self._refresh()
        if self._subjects.get(entry.subject, {}).get(entry.version) is None:
            await self._write_tombstones([key])
        holder = self._subjects.get(entry.subject, {}).get(entry.version)
        if holder is not None:
            await self._commit([key], [schema_value(holder)])

    async def delete_subject(self, subject: str, permanent: bool) -> list[int]:
        """Soft delete every live version, or hard delete a soft-deleted subject."""
        async with self._lock:
            await self._refresh()
            versions = self._subjects.get(subject)
            if not versions:
                raise errors.subject_not_found(subject)
            live = [v for _, v in sorted(versions.items()) if not v.deleted]
            if permanent:
                if live:
                    raise errors.subject_not_soft_deleted(subject)
                numbers = sorted(versions)
                await self._write_tombstones([schema_key(subject, n) for n in numbers])
                log.info("permanently deleted subject %s", subject)
                return numbers
            if not live:
                raise errors.subject_soft_deleted(subject)
            marked = [SubjectVersion(v.subject, v.version, v.schema_id, v.schema, True)
                      for v in live]  # fmt: skip
            keys = [schema_key(subject, v.version) for v in marked] + [delete_subject_key(subject)]
            values: list[bytes | None] = [schema_value(v) for v in marked]
            values.append(_json_bytes({"subject": subject, "version": live[-1].version}))
            await self._commit(keys, values)
            log.info("soft deleted subject %s", subject)
            return [v.version for v in live]

    async def delete_version(self, subject: str, version: int | None, permanent: bool) -> int:
        """Soft delete a live version, or hard delete a soft-deleted one (None: the latest)."""
        async with self._lock:
            await self._refresh()
            if not permanent and version is not None and self.soft_deleted(subject, version):
                raise errors.version_soft_deleted(subject, version)
            entry = self.version(subject, version, include_deleted=permanent)
            if permanent:
                if not entry.deleted:
                    raise errors.version_not_soft_deleted(subject, entry.version)
                await self._write_tombstones([schema_key(subject, entry.version)])
                return entry.version
            marked = SubjectVersion(subject, entry.version, entry.schema_id, entry.schema, True)
            await self._commit([schema_key(subject, entry.version)], [schema_value(marked)])
            return entry.version

    async def set_compatibility(self, subject: str | None, level: CompatibilityLevel) -> None:
        async with self._lock:
            value = _json_bytes({"compatibilityLevel": level.value})
            await self._commit([config_key(subject)], [value])

    async def delete_compatibility(self, subject: str | None) -> CompatibilityLevel | None:
        """Unset a level; returns the one that was set."""
        async with self._lock:
            await self._refresh()
            previous = self._configs.get(subject)
            if previous is not None:
                await self._commit([config_key(subject)], [None])
            return previous

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
                await self._commit([SCHEMA_ID_KEY], [schema_id_value(max_id)])
            except errors.RegistryError as exc:
                log.error("cannot record the highest schema id %d: %s", max_id, exc)
                return
            log.info("recorded the highest schema id %d, which only tombstoned records showed",
                     max_id)  # fmt: skip

    async def _write_tombstones(self, keys: list[bytes]) -> None:
        """Tombstone SCHEMA ``keys``, with the ``SCHEMA_ID`` record in the same batch: the
        values they remove may be the last to show the highest id handed out."""
        values: list[bytes | None] = [None] * len(keys)
        await self._commit([*keys, SCHEMA_ID_KEY], [*values, schema_id_value(self._next_id - 1)])

    # -- applying records ---------------------------------------------------------------

    def apply_record(self, raw_key: bytes | None, raw_value: bytes | None, offset: int) -> int:
        """Apply one record of ``_schemas``; 1 if it was the registry's, else 0."""
        # Anything can be in _schemas (a Kafka client could produce to it); a record that is
        # not one of the registry's own is skipped rather than allowed to stop the registry.
        try:
            if raw_key is None:
                raise ValueError("it has no key")
            key = json.loads(raw_key)
            value = None if raw_value is None else json.loads(raw_value)
            keytype = key["keytype"]
            if keytype == "SCHEMA":
                self._apply_schema(key, value)
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
            elif keytype == "DELETE_SUBJECT":
                if value is not None:
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

    def log_restored(self, count: int) -> None:
        if count:
            log.info(
                "schema registry restored %d subjects and %d schema ids from %d records",
                len(self._subjects), len(self._schemas), count,
            )  # fmt: skip

    def _apply_schema(self, key: dict[str, Any], value: dict[str, Any] | None) -> None:
        subject, version = str(key["subject"]), int(key["version"])
        if value is None:
            held = self._subjects.get(subject, {}).get(version)
            if held is not None and not held.deleted:
                # Every registry soft deletes before it hard deletes: this tombstone was
                # decided before the version was written (see _undo_rejected).
                raise ValueError(f"{subject} version {version} is live: not tombstoned")
            self._remove_version(subject, version)
            return
        schema_id = int(value["id"])
        known = self._schemas.get(schema_id)
        schema = parse_avro(str(value["schema"]))
        if known is not None and known.identity != schema.identity:
            raise ValueError(f"schema id {schema_id} is already another schema")
        held = self._subjects.get(subject, {}).get(version)
        if held is not None and held.schema_id != schema_id:  # ids and schemas are 1:1
            raise ValueError(f"{subject} version {version} is already schema id {held.schema_id}")
        self._next_id = max(self._next_id, schema_id + 1)
        # A soft delete is undone only by a hard delete: a late copy of a live value (another
        # registry's repair, see _undo_rejected) does not bring a deleted version back.
        deleted = bool(value.get("deleted", False)) or (held is not None and held.deleted)
        entry = SubjectVersion(subject, version, schema_id, known or schema, deleted)
        self._subjects.setdefault(subject, {})[version] = entry
        self._schemas.setdefault(schema_id, entry.schema)
        self._ids.setdefault(schema.identity, schema_id)

    def _remove_version(self, subject: str, version: int) -> None:
        versions = self._subjects.get(subject)
        if versions is None:
            return
        versions.pop(version, None)
        if not versions:
            del self._subjects[subject]
