"""A sans-I/O parser of PostgreSQL's ``pgoutput`` logical replication messages.

Written from the "Logical Replication Message Formats" chapter of the PostgreSQL
documentation, protocol version 1 (what ``proto_version '1'`` asks for): one message is the
``data`` of one row of ``pg_logical_slot_peek_binary_changes`` (or one XLogData payload of
``START_REPLICATION``). Integers are big-endian, strings NUL-terminated, LSNs ``Int64`` and
timestamps microseconds since 2000-01-01 UTC.

Tuple data carries every column as ``'n'`` (NULL), ``'u'`` (an unchanged TOASTed value the
server did not send: see :data:`UNCHANGED_TOAST`), ``'t'`` (the type's text output) or ``'b'``
(binary, only with the ``binary`` option). Values stay text here; turning them into Python
values is :mod:`kayak.cdc.postgres.types`' job.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Final

from kayak.cdc.errors import ChangeDecodeError

__all__ = [
    "PG_EPOCH_US",
    "UNCHANGED_TOAST",
    "Begin",
    "Commit",
    "Delete",
    "Insert",
    "Message",
    "Origin",
    "PgOutputMessage",
    "Relation",
    "RelationColumn",
    "Truncate",
    "TupleValue",
    "TypeInfo",
    "Update",
    "parse_message",
]

# Microseconds between the Unix epoch and PostgreSQL's (2000-01-01 00:00:00 UTC).
PG_EPOCH_US: Final = 946_684_800 * 1_000_000


class _UnchangedToast:
    """Marker for a TOASTed column value the server left out because the update kept it."""

    _instance: _UnchangedToast | None = None

    def __new__(cls) -> _UnchangedToast:
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "UNCHANGED_TOAST"


UNCHANGED_TOAST: Final = _UnchangedToast()

# One column of a tuple: None for NULL, text ('t'), raw bytes ('b') or UNCHANGED_TOAST ('u').
TupleValue = str | bytes | _UnchangedToast | None


@dataclass(frozen=True)
class Begin:
    """Start of a transaction; ``final_lsn`` is where its commit record starts."""

    final_lsn: int
    commit_ts_us: int  # microseconds since the Unix epoch
    xid: int


@dataclass(frozen=True)
class Commit:
    """End of a transaction: ``commit_lsn`` starts its commit record, ``end_lsn`` follows it."""

    flags: int
    commit_lsn: int
    end_lsn: int
    commit_ts_us: int  # microseconds since the Unix epoch


@dataclass(frozen=True)
class Origin:
    """The transaction was replicated from another node (by logical replication)."""

    origin_lsn: int
    name: str


@dataclass(frozen=True)
class RelationColumn:
    """One column of a :class:`Relation`; ``is_key`` marks replica identity columns."""

    is_key: bool
    name: str
    type_oid: int
    type_modifier: int


@dataclass(frozen=True)
class Relation:
    """A table's shape, sent before its first change in a session and after any change of it.

    ``replica_identity`` is ``pg_class.relreplident``: ``'d'`` default (primary key),
    ``'n'`` nothing, ``'f'`` full, ``'i'`` index.
    """

    oid: int
    namespace: str
    name: str
    replica_identity: str
    columns: tuple[RelationColumn, ...]


@dataclass(frozen=True)
class TypeInfo:
    """A non-built-in type used by a following Relation (the ``'Y'`` message)."""

    oid: int
    namespace: str
    name: str


@dataclass(frozen=True)
class Insert:
    relation_oid: int
    new: tuple[TupleValue, ...]


@dataclass(frozen=True)
class Update:
    """``old`` is the replica identity (``old_kind`` ``'K'``) or the whole old row (``'O'``,
    REPLICA IDENTITY FULL), or None when the identity did not change."""

    relation_oid: int
    old_kind: str | None
    old: tuple[TupleValue, ...] | None
    new: tuple[TupleValue, ...]


@dataclass(frozen=True)
class Delete:
    """``old_kind`` ``'K'``: only identity columns are non-NULL; ``'O'``: the whole row."""

    relation_oid: int
    old_kind: str
    old: tuple[TupleValue, ...]


@dataclass(frozen=True)
class Truncate:
    cascade: bool
    restart_identity: bool
    relation_oids: tuple[int, ...]


@dataclass(frozen=True)
class Message:
    """A ``pg_logical_emit_message`` message (only sent with the ``messages`` option)."""

    transactional: bool
    lsn: int
    prefix: str
    content: bytes


PgOutputMessage = (
    Begin | Commit | Origin | Relation | TypeInfo | Insert | Update | Delete | Truncate | Message
)


class _Reader:
    """Cursor over one message's bytes; every read checks the bounds."""

    __slots__ = ("data", "offset")

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.offset = 0

    def _take(self, n: int) -> bytes:
        end = self.offset + n
        if n < 0 or end > len(self.data):
            raise ChangeDecodeError(
                f"pgoutput message truncated: need {n} bytes at offset {self.offset}, "
                f"message is {len(self.data)} bytes"
            )
        chunk = self.data[self.offset : end]
        self.offset = end
        return chunk

    def byte(self) -> str:
        return chr(self._take(1)[0])

    def int8(self) -> int:
        value: int = self._take(1)[0]
        return value

    def int16(self) -> int:
        value: int = struct.unpack(">h", self._take(2))[0]
        return value

    def int32(self) -> int:
        value: int = struct.unpack(">i", self._take(4))[0]
        return value

    def uint32(self) -> int:
        value: int = struct.unpack(">I", self._take(4))[0]
        return value

    def int64(self) -> int:
        value: int = struct.unpack(">q", self._take(8))[0]
        return value

    def lsn(self) -> int:
        value: int = struct.unpack(">Q", self._take(8))[0]
        return value

    def timestamp_us(self) -> int:
        return self.int64() + PG_EPOCH_US

    def string(self) -> str:
        end = self.data.find(b"\0", self.offset)
        if end < 0:
            raise ChangeDecodeError(f"pgoutput string at offset {self.offset} not terminated")
        raw = self.data[self.offset : end]
        self.offset = end + 1
        try:
            return raw.decode()
        except UnicodeDecodeError as e:
            raise ChangeDecodeError(f"pgoutput string is not UTF-8: {raw!r}") from e

    def tuple_data(self) -> tuple[TupleValue, ...]:
        count = self.int16()
        if count < 0:
            raise ChangeDecodeError(f"pgoutput tuple with {count} columns")
        values: list[TupleValue] = []
        for _ in range(count):
            kind = self.byte()
            if kind == "n":
                values.append(None)
            elif kind == "u":
                values.append(UNCHANGED_TOAST)
            elif kind in ("t", "b"):
                raw = self._take(self.int32())
                if kind == "b":
                    values.append(raw)
                    continue
                try:
                    values.append(raw.decode())
                except UnicodeDecodeError as e:
                    raise ChangeDecodeError("pgoutput text value is not UTF-8") from e
            else:
                raise ChangeDecodeError(f"pgoutput tuple column of unknown kind {kind!r}")
        return tuple(values)

    def done(self, what: str) -> None:
        if self.offset != len(self.data):
            raise ChangeDecodeError(
                f"pgoutput {what} message has {len(self.data) - self.offset} trailing bytes"
            )


def _parse_relation(r: _Reader) -> Relation:
    oid = r.uint32()
    namespace = r.string() or "pg_catalog"  # the protocol sends "" for pg_catalog
    name = r.string()
    replica_identity = r.byte()
    count = r.int16()
    if count < 0:
        raise ChangeDecodeError(f"pgoutput relation with {count} columns")
    columns = []
    for _ in range(count):
        flags = r.int8()
        column_name = r.string()
        type_oid = r.uint32()
        type_modifier = r.int32()
        columns.append(RelationColumn(bool(flags & 1), column_name, type_oid, type_modifier))
    return Relation(oid, namespace, name, replica_identity, tuple(columns))


def _parse_update(r: _Reader) -> Update:
    relation_oid = r.uint32()
    kind = r.byte()
    old_kind: str | None = None
    old: tuple[TupleValue, ...] | None = None
    if kind in ("K", "O"):
        old_kind, old = kind, r.tuple_data()
        kind = r.byte()
    if kind != "N":
        raise ChangeDecodeError(f"pgoutput update: expected new tuple 'N', got {kind!r}")
    return Update(relation_oid, old_kind, old, r.tuple_data())


def _parse_delete(r: _Reader) -> Delete:
    relation_oid = r.uint32()
    kind = r.byte()
    if kind not in ("K", "O"):
        raise ChangeDecodeError(f"pgoutput delete: expected old tuple 'K' or 'O', got {kind!r}")
    return Delete(relation_oid, kind, r.tuple_data())


def _parse_truncate(r: _Reader) -> Truncate:
    count = r.int32()
    if count < 0:
        raise ChangeDecodeError(f"pgoutput truncate of {count} relations")
    options = r.int8()
    oids = tuple(r.uint32() for _ in range(count))
    return Truncate(bool(options & 1), bool(options & 2), oids)


def _parse_message(r: _Reader) -> Message:
    flags = r.int8()
    lsn = r.lsn()
    prefix = r.string()
    content = r._take(r.int32())
    return Message(bool(flags & 1), lsn, prefix, content)


def parse_message(data: bytes | bytearray | memoryview) -> PgOutputMessage:
    """Parse one pgoutput message (protocol version 1).

    Raises :class:`~kayak.cdc.errors.ChangeDecodeError` for an empty, truncated, overlong or
    unknown message.
    """
    r = _Reader(bytes(data))
    if not r.data:
        raise ChangeDecodeError("empty pgoutput message")
    tag = r.byte()
    message: PgOutputMessage
    if tag == "B":
        message = Begin(final_lsn=r.lsn(), commit_ts_us=r.timestamp_us(), xid=r.uint32())
    elif tag == "C":
        message = Commit(flags=r.int8(), commit_lsn=r.lsn(), end_lsn=r.lsn(),
                         commit_ts_us=r.timestamp_us())
    elif tag == "O":
        message = Origin(origin_lsn=r.lsn(), name=r.string())
    elif tag == "R":
        message = _parse_relation(r)
    elif tag == "Y":
        message = TypeInfo(oid=r.uint32(), namespace=r.string() or "pg_catalog", name=r.string())
    elif tag == "I":
        relation_oid = r.uint32()
        if (kind := r.byte()) != "N":
            raise ChangeDecodeError(f"pgoutput insert: expected new tuple 'N', got {kind!r}")
        message = Insert(relation_oid, r.tuple_data())
    elif tag == "U":
        message = _parse_update(r)
    elif tag == "D":
        message = _parse_delete(r)
    elif tag == "T":
        message = _parse_truncate(r)
    elif tag == "M":
        message = _parse_message(r)
    else:
        raise ChangeDecodeError(f"unknown pgoutput message type {tag!r}")
    r.done(type(message).__name__)
    return message
