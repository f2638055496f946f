"""The change model every capture source produces and every consumer of change events reads.

A source (SQLite triggers, PostgreSQL logical decoding) turns row changes into
:class:`Change` values; the publisher turns them into Debezium-style events on the log; the
replication job applies them to a target. Nothing here knows about a database driver or the
network.

Values in ``before``/``after`` use one Python representation per :class:`ColumnType`, so a
value read from any source round-trips exactly through Avro into any target:

==============  ===========  =============================================================
ColumnType      Python       carries
==============  ===========  =============================================================
BOOLEAN         bool
INT             int          32-bit integers (smallint, integer)
LONG            int          64-bit integers (bigint, SQLite INTEGER)
DOUBLE          float        real, double precision, SQLite REAL
DECIMAL         str          exact decimal text (numeric); never a float, so nothing rounds
STRING          str          text, varchar, char, uuid, json(b), date/time types as the
                             database's own text form, and any type kayak does not know
BYTES           bytes        bytea, SQLite BLOB
ANY             int, float,  SQLite columns whose affinity keeps each value's own storage
                str, bytes   class (no declared type; NUMERIC affinity such as DATETIME):
                             each value keeps its type (``typeof()``)
==============  ===========  =============================================================

``Column.source_type`` keeps the database's declared type (``numeric(10,2)``,
``timestamptz``) so a target of the same kind can create the table with the same types.
``Column.default`` is the value rows that predate the column hold (a column added with
``ADD COLUMN … DEFAULT``), so a target adding the column gives its existing rows the same;
``Column.renamed_from`` lists the column's earlier names, oldest first, so a target renames
the column instead of adding an empty one. ``Column.user_type`` describes a PostgreSQL
column's user-defined type (enum, domain, composite: :class:`UserType`), whose values travel as
their text form (``STRING``), so a PostgreSQL target can create the same type.

A ``TRUNCATE`` is one :class:`Change` with ``Op.TRUNCATE`` and neither image: every row of
the table whose last change is older than it is gone, every later change stays.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "Change",
    "Column",
    "ColumnType",
    "Op",
    "Row",
    "TableSchema",
    "UserType",
    "format_position",
    "snapshot_floor",
]

Row = dict[str, Any]


class ColumnType(enum.Enum):
    """How a column's values are represented between source and target (see module doc)."""

    BOOLEAN = "boolean"
    INT = "int"
    LONG = "long"
    DOUBLE = "double"
    DECIMAL = "decimal"
    STRING = "string"
    BYTES = "bytes"
    ANY = "any"  # each value keeps its own type: int, float, str or bytes


class Op(enum.Enum):
    """Debezium's operation codes."""

    CREATE = "c"
    UPDATE = "u"
    DELETE = "d"
    READ = "r"  # a row of the initial snapshot
    TRUNCATE = "t"  # every row of the table, at this position


USER_TYPE_KINDS = ("enum", "domain", "composite")


@dataclass(frozen=True)
class UserType:
    """A PostgreSQL user-defined type as a target needs it to create the same type.

    ``kind`` is ``enum`` (``labels`` in sort order), ``domain`` (``base``: its base type as
    ``format_type`` prints it; its constraints are not described) or ``composite``
    (``fields``: attribute names and types as ``format_type`` prints them). ``dimensions``
    is 1 for a column holding an array of the type. Values of such columns are their text
    form (``ColumnType.STRING``).
    """

    kind: str
    schema: str
    name: str
    labels: tuple[str, ...] = ()
    base: str = ""
    fields: tuple[tuple[str, str], ...] = ()
    dimensions: int = 0

    @property
    def qualified_name(self) -> str:
        return f"{self.schema}.{self.name}"


@dataclass(frozen=True)
class Column:
    """One column of a captured table."""

    name: str
    type: ColumnType
    nullable: bool = True
    source_type: str = ""
    # The value of rows that predate the column (None: NULL); in ``type``'s representation.
    default: Any = None
    renamed_from: tuple[str, ...] = ()  # earlier names, oldest first
    user_type: UserType | None = None  # a PostgreSQL enum, domain or composite


@dataclass(frozen=True)
class TableSchema:
    """A captured table: its columns in order and its primary key.

    ``schema`` is the database schema (``public`` in PostgreSQL, ``main`` in SQLite);
    ``key`` names the primary-key columns in key order and is never empty: a table without a
    primary key cannot be captured (per-key order and idempotent apply both need one).
    """

    schema: str
    name: str
    columns: tuple[Column, ...]
    key: tuple[str, ...]

    def __post_init__(self) -> None:
        if not self.key:
            raise ValueError(f"table {self.schema}.{self.name} has no primary key")
        names = {c.name for c in self.columns}
        missing = [k for k in self.key if k not in names]
        if missing:
            raise ValueError(f"table {self.schema}.{self.name}: key columns {missing} unknown")

    @property
    def qualified_name(self) -> str:
        return f"{self.schema}.{self.name}"

    def column(self, name: str) -> Column:
        for c in self.columns:
            if c.name == name:
                return c
        raise KeyError(name)

    def key_of(self, row: Row) -> Row:
        """The primary-key part of a row image, in key order."""
        return {k: row[k] for k in self.key}


def format_position(*parts: int) -> str:
    """A source position as text that sorts the way the positions do.

    Each part is written as 16 hex digits, joined by ``/``: SQLite uses one part (the
    change id), PostgreSQL three (commit LSN, change LSN, sequence within the snapshot or
    transaction). Targets compare positions as plain strings, so replays never go backwards
    whatever the source.
    """
    if not parts or any(p < 0 or p >= 1 << 64 for p in parts):
        raise ValueError(f"position parts must be unsigned 64-bit integers: {parts}")
    return "/".join(f"{p:016x}" for p in parts)


def snapshot_floor(position: str) -> str:
    """The position just below the snapshot a snapshot row at ``position`` belongs to, for
    sources whose snapshot rows all share their first part (PostgreSQL: the snapshot's
    consistent point; every change committed before it is in the snapshot). Applied as a
    TRUNCATE when a table's snapshot ends, it removes the target rows that snapshot did not
    see and keeps every row it saw or that changed after it."""
    first, *rest = (int(part, 16) for part in position.split("/"))
    if first == 0:
        raise ValueError(f"no position lies below snapshot position {position}")
    return format_position(first - 1, *((1 << 64) - 1 for _ in rest))


@dataclass(frozen=True)
class Change:
    """One row change, as a source captured it.

    ``position`` orders changes of the same key (see :func:`format_position`); changes of one
    source come out of it in position order. ``ts_ms`` is the source commit time in
    milliseconds since the epoch (the start of end-to-end latency). ``snapshot`` is
    ``"true"``/``"last"`` for rows of the initial snapshot (``"last"`` on the final one) and
    ``"false"`` otherwise. ``lsn``/``change_id``/``tx_id`` fill Debezium's ``source`` block
    where the source has them.
    """

    op: Op
    table: TableSchema
    before: Row | None
    after: Row | None
    position: str
    ts_ms: int
    snapshot: str = "false"
    tx_id: int | None = None
    lsn: int | None = None
    change_id: int | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.op in (Op.CREATE, Op.READ) and self.after is None:
            raise ValueError(f"{self.op.name} change without an after image")
        if self.op is Op.DELETE and self.before is None:
            raise ValueError("DELETE change without a before image (at least the key)")
        if self.op is Op.UPDATE and self.after is None:
            raise ValueError("UPDATE change without an after image")
        if self.op is Op.TRUNCATE and (self.before is not None or self.after is not None):
            raise ValueError("TRUNCATE change with a row image")

    @property
    def key(self) -> Row:
        """The primary key this change is about (the after image's, or the before's); a
        TRUNCATE is about no key (ValueError)."""
        image = self.after if self.after is not None else self.before
        if image is None:
            raise ValueError("a TRUNCATE change has no key")
        return self.table.key_of(image)
