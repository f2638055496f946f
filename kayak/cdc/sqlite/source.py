"""Reading a SQLite database's CDC log tables as :class:`~kayak.cdc.change.Change` values."""

from __future__ import annotations

import json
import json.scanner
import logging
import sqlite3
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

from kayak.cdc.change import Change, Column, ColumnType, Op, Row, TableSchema
from kayak.cdc.errors import CaptureError
from kayak.cdc.sqlite.schema import coerce_value, quote_identifier, read_table_schema
from kayak.cdc.sqlite.triggers import install_triggers, log_table_name

__all__ = ["SqliteSource"]

log = logging.getLogger(__name__)

_OPS = {"c": Op.CREATE, "u": Op.UPDATE, "d": Op.DELETE, "r": Op.READ}


def _untag(value: Any) -> Any:
    """Undo the trigger's tagging of BLOB and REAL values (see ``triggers``)."""
    if isinstance(value, dict):
        if "$b" in value:
            return bytes.fromhex(value["$b"])
        if "$r" in value:
            return float(value["$r"])
    return value


# The types of a decoded JSON value that ``coerce_value`` hands back unchanged, per column
# type: a value of one of them needs no conversion (None never does).
_KEPT_AS_IS: dict[ColumnType, tuple[type, ...]] = {
    ColumnType.ANY: (int, float, str),
    ColumnType.LONG: (int,),
    ColumnType.INT: (int,),
    ColumnType.DOUBLE: (float,),
    ColumnType.STRING: (str,),
    ColumnType.DECIMAL: (str,),
}
# Row shapes (value types) remembered per table; a table seldom has more than a few.
_MAX_SHAPES = 256

Converter = Callable[[Any], Any]


# json.loads without its wrapper (a regex for whitespace, a check for trailing text): the
# scanner alone, for an image that is exactly one JSON value, as the triggers write them
# (anything else goes to json.loads, whose result or error counts).
_scan_json: Callable[[str, int], tuple[Any, int]] = json.scanner.make_scanner(
    json.JSONDecoder()  # type: ignore[arg-type]  # typeshed wants its own stub type here
)


def _real_text(text: str) -> str:
    """A logged REAL's text as ``coerce_value`` writes a float into a text column."""
    return repr(float(text))


class _ImageDecoder:
    """Turns the JSON images of one table shape into rows, fast for the usual image: one
    logged by the current triggers (the table's column names, in order).

    Which columns of such an image need converting depends only on the Python types of its
    values (a REAL or BLOB is tagged as an object, an INTEGER is an int...), so the columns to
    convert are worked out once per combination of types and reused: the per-value work is
    then one conversion per tagged value, each by ``coerce_value`` as before."""

    def __init__(
        self, schema: TableSchema, other_shape: Callable[[TableSchema, dict[str, Any], bool], Row]
    ) -> None:  # fmt: skip
        self.schema = schema
        # Rows of images logged in an earlier shape of the table (see SqliteSource._image).
        self._other_shape = other_shape
        self.names = tuple(c.name for c in schema.columns)
        self._converters: list[tuple[str, Converter]] = [
            (c.name, self._converter(c)) for c in schema.columns
        ]
        self._kept = [(type(None), *_KEPT_AS_IS.get(c.type, ())) for c in schema.columns]
        self._plans: dict[tuple[type, ...], list[tuple[str, Converter]]] = {}

    def _converter(self, column: Column) -> Converter:
        """``coerce_value(…, _untag(value))``, with the usual tagged values (a BLOB in a
        BLOB column, a REAL in a REAL, NUMERIC or TEXT one) converted straight to what
        that gives."""
        table, kind = self.schema.name, column.type
        blob = bytes.fromhex if kind in (ColumnType.BYTES, ColumnType.ANY) else None
        real: Converter | None = None
        if kind in (ColumnType.DOUBLE, ColumnType.ANY):
            real = float
        elif kind in (ColumnType.STRING, ColumnType.DECIMAL):
            real = _real_text

        def convert(value: Any) -> Any:
            if type(value) is dict:
                if "$b" in value:
                    if blob is not None:
                        return blob(value["$b"])
                elif "$r" in value and real is not None:
                    return real(value["$r"])
            return coerce_value(table, column, _untag(value))

        return convert

    def row(self, text: str, change_id: int, current: bool = False) -> Row:
        """The row of one logged image (``current``: an after image)."""
        try:
            raw, end = _scan_json(text, 0)
        except StopIteration:
            end = -1
        if end != len(text):
            raw = self._load_slowly(text, change_id)
        if type(raw) is not dict:
            raise CaptureError(
                f"change {change_id} of {self.schema.name}: unreadable image in the log: "
                f"not a JSON object: {text:.60}"
            )
        if tuple(raw) != self.names:
            return self._other_shape(self.schema, raw, current)
        shape = tuple(map(type, raw.values()))
        plan = self._plans.get(shape)
        if plan is None:
            plan = [
                named
                for named, kind, kept in zip(self._converters, shape, self._kept, strict=True)
                if kind not in kept
            ]
            if len(self._plans) < _MAX_SHAPES:
                self._plans[shape] = plan
        for name, convert in plan:
            raw[name] = convert(raw[name])
        return raw

    def _load_slowly(self, text: str, change_id: int) -> Any:
        """``json.loads``: for text with whitespace around its value, or not JSON at all."""
        try:
            return json.loads(text)
        except ValueError as e:
            raise CaptureError(
                f"change {change_id} of {self.schema.name}: unreadable image in the log: {e}"
            ) from None


class _Handed:
    """The changes handed out and not acknowledged yet, one entry per table run read
    (``table``, ids above ``after`` up to ``last``), in the order they were handed out."""

    def __init__(self) -> None:
        self._runs: deque[tuple[str, int, int]] = deque()

    def __len__(self) -> int:
        return len(self._runs)

    def add(self, table: str, first: int, last: int) -> None:
        self._runs.append((table, first - 1, last))

    def forget_after(self, count: int) -> None:
        """Forget the runs handed out after the first ``count`` (they will be read again)."""
        while len(self._runs) > count:
            self._runs.pop()

    def take_through(self, table: str, change_id: int) -> dict[str, int] | None:
        """Remove everything handed out up to change ``change_id`` of ``table`` and return the
        last id to trim per table; None if that change is not among those handed out."""
        found = next(
            (i for i, (name, after, last) in enumerate(self._runs)
             if name == table and after < change_id <= last),
            None,
        )  # fmt: skip
        if found is None:
            return None
        trim: dict[str, int] = {}
        for _ in range(found):
            earlier, _after, last = self._runs.popleft()
            trim[earlier] = max(trim.get(earlier, 0), last)
        _table, _after, last = self._runs[0]
        if change_id == last:
            self._runs.popleft()
        else:
            self._runs[0] = (table, change_id, last)
        trim[table] = max(trim.get(table, 0), change_id)
        return trim


def _carry_renames(before: TableSchema, after: TableSchema) -> TableSchema:
    """``after`` with each renamed column's earlier names. SQLite keeps a column's place on
    RENAME COLUMN and adds columns at the end, and refuses DROP COLUMN of a column the
    capture triggers name: a new name in an old place is a rename."""
    columns = list(after.columns)
    for i, (old, new) in enumerate(zip(before.columns, after.columns, strict=False)):
        if old.name == new.name:
            columns[i] = replace(new, renamed_from=old.renamed_from)
        elif old.name not in {c.name for c in after.columns}:
            log.info("table %s: column %s renamed to %s", after.name, old.name, new.name)
            columns[i] = replace(new, renamed_from=(*old.renamed_from, old.name))
    return replace(after, columns=tuple(columns))


class SqliteSource:
    """A :class:`~kayak.cdc.source.ChangeSource` over tables captured with
    :func:`kayak.cdc.sqlite.enable`.

    Changes of one table come out in change-id order; tables are read in turn. Nothing is
    deleted from a log table until :meth:`acknowledge`; a new source on the same database
    starts again from the oldest change still logged.
    """

    def __init__(self, path: str, tables: Sequence[str], *, poll_interval_s: float = 0.02):
        if not tables:
            raise CaptureError("no tables to capture")
        self.path = path
        self._poll_interval_s = poll_interval_s
        # Made in one thread, used by the capture thread: one user at a time, so sharing is safe.
        self._conn = sqlite3.connect(
            path, isolation_level=None, timeout=30.0, check_same_thread=False
        )
        self._schemas: dict[str, TableSchema] = {}
        self._last_read: dict[str, int] = {}
        self._decoders: dict[str, _ImageDecoder] = {}
        self._handed = _Handed()
        self._schema_version = -1
        for table in tables:
            exists = self._conn.execute(
                "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?",
                (log_table_name(table),),
            ).fetchone()
            if not exists:
                raise CaptureError(
                    f"SQLite table {table!r} is not captured: run `kayak cdc enable {path} "
                    f"{table}` first"
                )
            self._last_read[table] = 0
        self._refresh_schemas()

    def tables(self) -> Sequence[TableSchema]:
        return list(self._schemas.values())

    def _refresh_schemas(self) -> None:
        version = self._conn.execute("PRAGMA schema_version").fetchone()[0]
        if version == self._schema_version:
            return
        for table in self._last_read:
            schema = read_table_schema(self._conn, table)
            known = self._schemas.get(table)
            if known is not None:
                schema = _carry_renames(known, schema)
            if known is not None and known.columns != schema.columns:
                log.info("table %s changed columns; reinstalling its CDC triggers", table)
                self._conn.execute("BEGIN IMMEDIATE")
                try:
                    install_triggers(self._conn, table)
                    self._conn.execute("COMMIT")
                except BaseException:
                    self._conn.execute("ROLLBACK")
                    raise
            self._schemas[table] = schema
            self._decoders[table] = _ImageDecoder(schema, self._image)
        self._schema_version = self._conn.execute("PRAGMA schema_version").fetchone()[0]

    def read(self, max_changes: int, timeout_s: float) -> list[Change]:
        deadline = time.monotonic() + timeout_s
        while True:
            self._refresh_schemas()
            read_up_to, handed_out = dict(self._last_read), len(self._handed)
            changes: list[Change] = []
            share = max(1, max_changes // len(self._last_read))
            for table in self._last_read:
                changes.extend(self._read_table(table, min(share, max_changes - len(changes))))
                if len(changes) >= max_changes:
                    break
            if self._schema_changed():
                # A schema change committed between reading the schemas and reading the log:
                # rows written after it may have been read in the old shape (a column added
                # would be left out). Forget them and read them again in the new shape.
                self._last_read = read_up_to
                self._handed.forget_after(handed_out)
                continue
            if changes or time.monotonic() >= deadline:
                return changes
            time.sleep(self._poll_interval_s)

    def _schema_changed(self) -> bool:
        return bool(self._conn.execute("PRAGMA schema_version").fetchone()[0]
                    != self._schema_version)  # fmt: skip

    def _read_table(self, table: str, limit: int) -> list[Change]:
        if limit <= 0:
            return []
        rows = self._conn.execute(
            f"SELECT change_id, op, before, after, ts_ms FROM "
            f"{quote_identifier(log_table_name(table))} WHERE change_id > ? "
            "ORDER BY change_id LIMIT ?",
            (self._last_read[table], limit),
        ).fetchall()
        if not rows:
            return []
        schema = self._schemas[table]
        row = self._decoders[table].row
        changes = []
        for change_id, op, before, after, ts_ms in rows:
            changes.append(
                Change(
                    op=_OPS[op],
                    table=schema,
                    before=None if before is None else row(before, change_id),
                    after=None if after is None else row(after, change_id, True),
                    # format_position's text for one part (a log's ids are positive 63-bit).
                    position=f"{change_id:016x}",
                    ts_ms=ts_ms,
                    snapshot="true" if op == "r" else "false",
                    change_id=change_id,
                )
            )
        self._handed.add(table, rows[0][0], rows[-1][0])
        self._last_read[table] = rows[-1][0]
        return changes

    def _image(self, schema: TableSchema, raw: dict[str, Any], current: bool) -> Row:
        """An image logged in another shape than the table's current one."""
        # A renamed column is under an earlier name, and an added one absent, in images
        # logged before the triggers were renewed for the new columns.
        row: Row = {}
        absent = []
        for c in schema.columns:
            name = next((n for n in (c.name, *reversed(c.renamed_from)) if n in raw), None)
            if name is None:
                absent.append(c)
            row[c.name] = (
                c.default if name is None else coerce_value(schema.name, c, _untag(raw[name]))
            )
        if absent and current:
            # The value it was written with is not logged: take the row's current one (a
            # later change of the row, which carries its own value, follows in the log; a
            # row deleted since keeps the default until its delete is applied).
            row.update(self._current_values(schema, row, absent))
        return row

    def _current_values(self, schema: TableSchema, row: Row, columns: list[Column]) -> Row:
        where = " AND ".join(f"{quote_identifier(k)} = ?" for k in schema.key)
        found = self._conn.execute(
            f"SELECT {', '.join(quote_identifier(c.name) for c in columns)} FROM "
            f"{quote_identifier(schema.name)} WHERE {where}", [row[k] for k in schema.key],
        ).fetchone()  # fmt: skip
        if found is None:
            return {}
        return {c.name: coerce_value(schema.name, c, v)
                for c, v in zip(columns, found, strict=True)}  # fmt: skip

    def acknowledge(self, last: Change) -> None:
        if last.change_id is None:
            raise ValueError("not a change of this source")
        trim = self._handed.take_through(last.table.name, last.change_id)
        if trim is None:
            raise ValueError(
                f"change {(last.table.name, last.change_id)} was not read or is already "
                "acknowledged"
            )
        for table, change_id in trim.items():
            self._conn.execute(
                f"DELETE FROM {quote_identifier(log_table_name(table))} WHERE change_id <= ?",
                (change_id,),
            )

    def close(self) -> None:
        self._conn.close()
