"""Which shape each captured table has at each point of the stream: pgoutput's Relation
messages turned into :class:`~kayak.cdc.change.TableSchema` values, schema changes included.

A Relation message names a table's columns with their types, in ``attnum`` order, but not
their ``attnum``, default or nullability: those come from the catalog, which describes the
table *now*, possibly after later DDL. Each new shape is compared with the one in force before
it (the shape at the same point of the stream, so a peek that decodes old transactions again
gets their old shapes back):

- a column of the same name is the same column (unless the catalog, when it agrees with the
  message, says its ``attnum`` changed: a column dropped and re-added, or names swapped —
  refused);
- a new name is a RENAME if its ``attnum`` is that of a column that is gone, an ADD if its
  ``attnum`` is new; the ``attnum`` is the catalog's when the catalog still lists exactly the
  message's columns. When it does not (the table changed again since) and some column is also
  gone, a rename cannot be told from DROP + ADD: :class:`SchemaChangeError`, never a guess;
- an added column carries the value rows that predate it hold (``attmissingval``, what
  ``ADD COLUMN … DEFAULT`` with a non-volatile default gives them); an added column with a
  default but no such value (a volatile default such as ``now()``/``nextval``, which
  rewrites the table with values the stream never carries, or a table rewritten since) is
  refused: the target could not give its existing rows the same values;
- a gone column is simply absent from the new shape (the target keeps it, nullable);
- a changed type is the message's own (type OID and modifier).
"""

from __future__ import annotations

import bisect
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import psycopg

from kayak.cdc.change import Column, TableSchema, UserType
from kayak.cdc.errors import SchemaChangeError
from kayak.cdc.postgres import catalog, pgoutput
from kayak.cdc.postgres.types import column_type

__all__ = ["RelationTracker", "TrackedRelation"]

log = logging.getLogger(__name__)

_HISTORY = 32  # shapes remembered per table (a peek re-decodes from the slot's position)

Signature = tuple[tuple[str, int, int], ...]


@dataclass(frozen=True)
class TrackedRelation:
    """How to read one relation's tuples at some point of the stream."""

    oid: int
    table: TableSchema
    type_oids: tuple[int, ...]
    attnums: tuple[int | None, ...]  # None: not known (the catalog had moved on)
    signature: Signature


class RelationTracker:
    """The shapes of the captured tables; :meth:`on_relation` for each Relation message,
    :meth:`get` for the shape in force."""

    def __init__(
        self, conn: psycopg.Connection[Any], tables: Mapping[tuple[str, str], catalog.CatalogTable]
    ) -> None:  # fmt: skip
        self._conn = conn
        self._captured = set(tables)
        self._current: dict[int, TrackedRelation] = {}
        # Per table: (LSN at which a shape was first seen, shape), ascending; the shape read
        # from the catalog at start is in force from LSN 0.
        self._history: dict[int, list[tuple[int, TrackedRelation]]] = {}
        for t in tables.values():
            columns = catalog.catalog_columns(conn, t.oid)
            signature = tuple((c.name, c.type_oid, c.type_modifier) for c in columns)
            start = TrackedRelation(t.oid, t.schema, t.type_oids, t.attnums, signature)
            self._current[t.oid] = start
            self._history[t.oid] = [(0, start)]

    def get(self, oid: int) -> TrackedRelation | None:
        """The shape in force for a relation (None: not captured)."""
        return self._current.get(oid)

    def tables(self) -> list[TableSchema]:
        return [r.table for r in self._current.values()]

    def on_relation(self, message: pgoutput.Relation, lsn: int) -> None:
        """A Relation message at ``lsn``: make its shape the one in force. Raises
        :class:`SchemaChangeError` for a change that cannot be carried (see module doc)."""
        history = self._history.get(message.oid)
        if history is None:
            return  # published, but not captured by this source
        signature = tuple((c.name, c.type_oid, c.type_modifier) for c in message.columns)
        at = bisect.bisect_right([entry_lsn for entry_lsn, _ in history], lsn) - 1
        in_force = history[max(at, 0)][1]
        if in_force.signature == signature:
            self._current[message.oid] = in_force
            return
        for entry_lsn, shape in history:
            if entry_lsn == lsn and shape.signature == signature:
                self._current[message.oid] = shape  # the same message decoded again
                return
        shape = self._derive(message, in_force, signature, lsn)
        history.insert(at + 1, (lsn, shape))
        del history[: max(0, len(history) - _HISTORY)]
        self._current[message.oid] = shape

    # -- deriving a new shape ---------------------------------------------------------------

    def _derive(
        self, message: pgoutput.Relation, before: TrackedRelation, signature: Signature, lsn: int
    ) -> TrackedRelation:  # fmt: skip
        now = catalog.catalog_columns(self._conn, message.oid)
        names = [c.name for c in message.columns]
        agrees = [c.name for c in now] == names
        old = {c.name: (c, a) for c, a in zip(before.table.columns, before.attnums, strict=True)}
        by_attnum = {a: c for c, a in old.values() if a is not None}
        gone = [n for n in old if n not in names]
        where = f"{message.namespace}.{message.name}"
        at = f"at source LSN {lsn >> 32:X}/{lsn & 0xFFFFFFFF:X}"
        catalog_by_attnum = {c.attnum: c for c in now}
        catalog_by_name = {c.name: c for c in now}

        source_types = catalog.format_types(
            self._conn, [(c.type_oid, c.type_modifier) for c in message.columns])
        user_types = []
        for rc in message.columns:
            try:
                user_types.append(catalog.describe_user_type(self._conn, rc.type_oid))
            except catalog.UnsupportedTypeError as e:
                raise SchemaChangeError(f"table {where} column {rc.name!r}: its type is not "
                                        f"carried ({e}); capture stopped {at}") from None
        columns: list[Column] = []
        attnums: list[int | None] = []
        for rc, source_type, user_type in zip(
            message.columns, source_types, user_types, strict=True
        ):
            attnum = catalog_by_name[rc.name].attnum if agrees else None
            kind = column_type(rc.type_oid)
            previous = old.get(rc.name)
            if previous is not None:
                prev_column, prev_attnum = previous
                if attnum is not None and prev_attnum is not None and attnum != prev_attnum:
                    raise SchemaChangeError(
                        f"table {where} column {rc.name!r}: a different column has this name "
                        f"now (DROP + ADD COLUMN of the same name, or names swapped by RENAME "
                        f"COLUMN); not carried, capture stopped {at}")
                attnum = prev_attnum if attnum is None else attnum
                details = catalog_by_attnum.get(attnum) if attnum is not None else None
                columns.append(Column(
                    rc.name, kind, nullable=details is None or not details.not_null,
                    source_type=source_type, default=prev_column.default,
                    renamed_from=prev_column.renamed_from, user_type=user_type))
            elif attnum is not None and attnum in by_attnum:
                renamed = by_attnum[attnum]
                details = catalog_by_attnum[attnum]
                log.info("%s: column %s renamed to %s", where, renamed.name, rc.name)
                columns.append(Column(
                    rc.name, kind, nullable=not details.not_null, source_type=source_type,
                    default=renamed.default,
                    renamed_from=(*renamed.renamed_from, renamed.name), user_type=user_type))
            else:
                if attnum is None and gone:
                    raise SchemaChangeError(
                        f"table {where}: column {rc.name!r} appeared and "
                        f"{', '.join(repr(g) for g in gone)} disappeared, and the table has "
                        f"changed again since, so RENAME COLUMN cannot be told from DROP + ADD "
                        f"COLUMN; not carried, capture stopped {at}")
                details = (catalog_by_attnum.get(attnum) if attnum is not None
                           else catalog_by_name.get(rc.name))  # fmt: skip
                columns.append(
                    self._added(where, at, rc.name, kind, source_type, details, user_type))
            attnums.append(attnum)

        key = catalog.primary_key(self._conn, message.oid)
        if not key or any(k not in names for k in key):
            # The key as of now does not fit this older shape: keep the one we had.
            key = before.table.key if all(k in names for k in before.table.key) else ()
        if not key:
            raise SchemaChangeError(
                f"table {where}: the primary key columns {list(before.table.key)} are gone; "
                f"not carried, capture stopped {at}")
        table = TableSchema(message.namespace, message.name, tuple(columns), key)
        if table == before.table:
            table = before.table
        else:
            log.info("schema of %s changed %s: %s", where, at,
                     ", ".join(f"{c.name} {c.source_type}" for c in columns))  # fmt: skip
        return TrackedRelation(
            message.oid, table,
            tuple(catalog.wire_type_oid(self._conn, c.type_oid) for c in message.columns),
            tuple(attnums), signature)

    @staticmethod
    def _added(
        where: str, at: str, name: str, kind: Any, source_type: str,
        details: catalog.CatalogColumn | None, user_type: UserType | None = None,
    ) -> Column:  # fmt: skip
        """A column the previous shape did not have: ADD COLUMN."""
        if details is None:
            return Column(name, kind, nullable=True, source_type=source_type,
                          user_type=user_type)
        if details.has_missing and details.missing is None:
            raise SchemaChangeError(
                f"table {where} column {name!r}: ADD COLUMN with a DEFAULT of array type is "
                f"not carried (existing rows' value not read); capture stopped {at}")
        if details.has_default and not details.has_missing:
            raise SchemaChangeError(
                f"table {where} column {name!r}: ADD COLUMN with a volatile DEFAULT (or a "
                "table rewritten since) gave existing rows values the change stream does not "
                f"carry; not carried, capture stopped {at}. Add the column without a default, "
                "SET DEFAULT, then UPDATE the existing rows instead")
        return Column(name, kind, nullable=not details.not_null, source_type=source_type,
                      default=catalog.missing_value(details), user_type=user_type)

