"""Turning pgoutput's row messages into :class:`~kayak.cdc.change.Change` values.

The streaming path of :class:`~kayak.cdc.postgres.source.PostgresSource`: an Insert, Update,
Delete or Truncate of a captured table becomes a change at its position, with the row images
the table's REPLICA IDENTITY gives and the columns an update left out as unchanged TOAST
filled in (see the "REPLICA IDENTITY" and "Unchanged TOAST values" sections of
:mod:`kayak.cdc.postgres.source`). Which transactions to decode, and when, stays there.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

import psycopg

from kayak.cdc.change import Change, Op, Row, TableSchema, format_position
from kayak.cdc.errors import CaptureError
from kayak.cdc.postgres import pgoutput
from kayak.cdc.postgres.lsn import format_lsn
from kayak.cdc.postgres.pgoutput import UNCHANGED_TOAST, TupleValue
from kayak.cdc.postgres.relations import RelationTracker, TrackedRelation
from kayak.cdc.postgres.toast import ToastCache, fetch_current
from kayak.cdc.postgres.types import decode_value

__all__ = ["ChangeDecoder", "cache_key", "decode_row"]

log = logging.getLogger(__name__)


def decode_row(table: TableSchema, values: Sequence[Any]) -> Row:
    """A snapshot row (text values, in column order) decoded by column type."""
    return {
        column.name: None if value is None else decode_value(column.type, value)
        for column, value in zip(table.columns, values, strict=True)
    }


def cache_key(table: TableSchema, row: Row) -> tuple[str, tuple[Any, ...]]:
    """Where the unchanged-TOAST cache keeps ``row``'s large values: table and key."""
    return table.qualified_name, tuple(row[k] for k in table.key)


class ChangeDecoder:
    """Changes from the row messages of captured tables. ``conn`` reads a row's current
    values when neither the old row nor ``toast`` holds an unchanged TOAST value."""

    def __init__(
        self, conn: psycopg.Connection[Any], relations: RelationTracker, toast: ToastCache
    ) -> None:
        self._conn = conn
        self._relations = relations
        self._toast = toast

    def truncates(
        self, message: pgoutput.Truncate, begin: pgoutput.Begin, lsn: int, seq: int
    ) -> list[Change]:
        """One ``Op.TRUNCATE`` change per captured table the message truncates."""
        changes: list[Change] = []
        for oid in message.relation_oids:
            relation = self._relations.get(oid)
            if relation is None:
                continue
            self._toast.forget_table(relation.table.qualified_name)
            log.info("TRUNCATE of %s at %s", relation.table.qualified_name, format_lsn(lsn))
            changes.append(Change(
                op=Op.TRUNCATE, table=relation.table, before=None, after=None,
                position=format_position(begin.final_lsn, lsn, seq + len(changes)),
                ts_ms=begin.commit_ts_us // 1000, snapshot="false", tx_id=begin.xid, lsn=lsn,
            ))  # fmt: skip
        return changes

    def _decode_tuple(
        self, table: TableSchema, values: Sequence[TupleValue]
    ) -> tuple[Row, list[str]]:
        """A tuple's row, and the columns it left out as unchanged TOAST values."""
        if len(values) != len(table.columns):
            raise CaptureError(
                f"{table.qualified_name}: tuple has {len(values)} columns, relation "
                f"{len(table.columns)}"
            )
        row: Row = {}
        unchanged: list[str] = []
        for column, value in zip(table.columns, values, strict=True):
            if value is UNCHANGED_TOAST:
                unchanged.append(column.name)
                row[column.name] = None
            elif isinstance(value, str):
                row[column.name] = decode_value(column.type, value)
            elif value is None:
                row[column.name] = None
            else:
                raise CaptureError("pgoutput sent a binary value; the binary option is not used")
        return row, unchanged

    def to_change(
        self,
        message: pgoutput.Insert | pgoutput.Update | pgoutput.Delete,
        begin: pgoutput.Begin,
        lsn: int,
        seq: int,
    ) -> Change | None:
        """The change a row message makes (None: a table this source does not capture)."""
        relation = self._relations.get(message.relation_oid)
        if relation is None:
            return None  # a published table this source does not capture
        table = relation.table
        before: Row | None = None
        after: Row | None = None
        extra: dict[str, Any] = {}
        if isinstance(message, pgoutput.Insert):
            op = Op.CREATE
            after, _ = self._decode_tuple(table, message.new)
        elif isinstance(message, pgoutput.Update):
            op = Op.UPDATE
            if message.old is not None:
                old, _ = self._decode_tuple(table, message.old)
                before = old if message.old_kind == "O" else table.key_of(old)
            after, unchanged = self._decode_tuple(table, message.new)
            if unchanged:
                missing = self._fill_unchanged(relation, after, unchanged, before, message)
                if missing:
                    extra["unavailable_columns"] = missing
        else:
            op = Op.DELETE
            old, _ = self._decode_tuple(table, message.old)
            before = old if message.old_kind == "O" else table.key_of(old)
        self._track_toast(table, before, after)
        return Change(
            op=op,
            table=table,
            before=before,
            after=after,
            position=format_position(begin.final_lsn, lsn, seq),
            ts_ms=begin.commit_ts_us // 1000,
            snapshot="false",
            tx_id=begin.xid,
            lsn=lsn,
            extra=extra,
        )

    def _track_toast(self, table: TableSchema, before: Row | None, after: Row | None) -> None:
        if before is not None and (after is None or table.key_of(before) != table.key_of(after)):
            self._toast.forget(cache_key(table, before))
        if after is not None:
            self._toast.remember(cache_key(table, after), after)

    def _fill_unchanged(
        self,
        relation: TrackedRelation,
        after: Row,
        unchanged: list[str],
        before: Row | None,
        message: pgoutput.Update,
    ) -> list[str]:
        """Put values into the columns an update left out; the names still missing."""
        table = relation.table
        missing: list[str] = []
        # Under DEFAULT an update that changed the key sends the old key: the cache and the
        # table know the row by that key only if it did not change.
        old_key = cache_key(table, before if before is not None else after)
        cached = self._toast.get(old_key) or {}
        for name in unchanged:
            if message.old_kind == "O" and before is not None and before.get(name) is not None:
                after[name] = before[name]
            elif name in cached:
                after[name] = cached[name]
            else:
                missing.append(name)
        if not missing:
            return []
        fetched = self._fetch_current(relation, after, missing)
        if fetched is None:
            log.warning(
                "%s: row %s is gone; unchanged TOAST columns %s unavailable",
                table.qualified_name,
                table.key_of(after),
                missing,
            )
            return missing
        after.update(fetched)
        return []

    def _fetch_current(self, relation: TrackedRelation, after: Row, names: list[str]) -> Row | None:
        """The row's current values of ``names``, looked up by the after image's key."""
        return fetch_current(self._conn, relation.table, relation.type_oids, after, names)
