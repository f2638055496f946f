"""A :class:`~kayak.cdc.source.ChangeSource` reading PostgreSQL through logical decoding.

The built-in ``pgoutput`` plugin decodes the WAL of the tables in a publication (see
:func:`kayak.cdc.postgres.enable`); changes are read with
``pg_logical_slot_peek_binary_changes`` on an ordinary connection and the slot is moved
with ``pg_replication_slot_advance`` only when the capture loop acknowledges.

Initial snapshot, then streaming without a gap
    The slot is created on a replication connection with ``CREATE_REPLICATION_SLOT ...
    LOGICAL pgoutput EXPORT_SNAPSHOT``, which returns the slot's *consistent point* C and
    the name of a snapshot that sees exactly the transactions whose commit record lies
    before C. A second connection imports that snapshot (``REPEATABLE READ`` + ``SET
    TRANSACTION SNAPSHOT``) while the first stays open, and reads every table: ``Op.READ``
    changes, ``snapshot="true"``, ``"last_in_data_collection"`` on each table's final row (a
    TRUNCATE just below the snapshot for a table with no rows, when the snapshot is taken
    again) and ``"last"`` on the
    snapshot's final change. The slot decodes exactly
    the transactions whose commit record lies at or after C, so every row change is in the
    snapshot or in the stream, never in both and never in neither.

Positions
    ``format_position(commit_lsn, change_lsn, seq)``. A streamed change uses its
    transaction's commit record LSN, the LSN of its own WAL record, and its index within the
    transaction (one multi-insert record carries several rows). A snapshot row uses
    ``(C, 0, n)``. Per-key order holds because a key's changes are ordered by commit:
    the snapshot reflects every commit before C, each streamed transaction commits at or
    after C and later transactions commit later. A transaction that *started* before C
    and committed after it is not in the snapshot and is streamed; some of its change LSNs
    are below C, but the commit LSN comes first in the position, so its changes still sort
    after the snapshot row of the same key (and a streamed change's change LSN is never 0,
    so even a commit exactly at C sorts after ``(C, 0, n)``). Within a transaction, WAL
    order is the order the rows changed.

Snapshot durability
    If capture dies before the last snapshot row is acknowledged, the next start drops the
    slot and takes a new snapshot. Acknowledging the ``"last"`` row (or any streamed change)
    records "snapshot done" in the publication's comment (see :mod:`.slot`), but only a row
    or change of this source's own snapshot or after it: an acknowledgement of what a source
    before a reconnect handed out finishes nothing.

Whole transactions
    :meth:`~PostgresSource.read` returns whole source transactions: a read that reaches
    ``max_changes`` inside a transaction goes on to its last change (snapshot rows belong to
    none and are cut anywhere), so the capture can publish each transaction atomically.

Acknowledgement
    ``acknowledge(last)`` advances the slot to the end LSN of the newest transaction all of
    whose changes are at or before ``last``, never into a transaction with unacknowledged
    changes: a restart peeks again from there and hands out every unacknowledged change
    (at-least-once). ``pg_replication_slot_advance`` is made durable by the server's next
    checkpoint; a crash before it re-delivers, which the target's position guard absorbs.
    Peeking always starts at the slot's confirmed position, so transactions already handed
    out are decoded again (and skipped) until acknowledged: acknowledge often.

Heartbeats
    A slot on a quiet database would pin the WAL other databases write. When nothing is
    handed out unacknowledged and a peek finds nothing new, the slot is advanced (at most
    every ``heartbeat_interval_s``) to ``pg_current_wal_flush_lsn()`` read *before* that
    peek. That is safe: the peek decodes to the flush position at its start, waiting for a
    commit record that straddles it, so any captured transaction committing before the
    advanced-to LSN would have been returned.

REPLICA IDENTITY
    ``FULL``: updates and deletes carry the whole old row, ``Change.before`` is complete.
    ``DEFAULT`` (primary key): deletes carry only the key, so ``Change.before`` holds only
    the key columns; updates carry no old row (``before`` is None) unless the primary key
    changed, when ``before`` holds the old key, so the publisher can emit a delete of the
    old key and a create of the new one. ``NOTHING`` and ``USING INDEX`` are refused.

Unchanged TOAST values
    An update that leaves a large (TOASTed) column alone sends it as "unchanged", not its
    value. The after image still carries the value: from the old row under FULL, else from
    a bounded in-memory cache of the last large values seen per key (exact: it is the value
    at the previous change of that key), else read from the table by key (the current value,
    possibly newer than this change; the later change that set it follows in the stream,
    so the target converges). If the row is gone by then, the column is None and its name
    is listed in ``Change.extra["unavailable_columns"]``.

Schema changes and truncation
    A Relation message whose columns differ makes a new :class:`TableSchema` that the
    following changes carry (:mod:`.relations`: added columns with the value existing rows
    hold, renames told from DROP + ADD by ``attnum``, new types); a change it cannot carry
    stops capture with :class:`~kayak.cdc.errors.SchemaChangeError` *after* handing out every
    whole transaction before it. A TRUNCATE of a captured table is one ``Op.TRUNCATE``
    change per table (Debezium's ``t`` event); the publication must publish ``truncate``
    (``enable`` does).

Session settings (time zone UTC, ISO dates, hex bytea: :data:`.types.SESSION_SETTINGS`)
make values' text the same from the snapshot and the stream.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import time
from collections import deque
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import psycopg
from psycopg import sql

from kayak.cdc.change import Change, Op, TableSchema, format_position, snapshot_floor
from kayak.cdc.errors import CaptureError, SchemaChangeError, SourceSetupError
from kayak.cdc.postgres import catalog, pgoutput, slot
from kayak.cdc.postgres.decoder import ChangeDecoder, cache_key, decode_row
from kayak.cdc.postgres.lsn import format_lsn, parse_lsn
from kayak.cdc.postgres.relations import RelationTracker
from kayak.cdc.postgres.toast import ToastCache, raw_text_cursor
from kayak.cdc.postgres.types import SESSION_SETTINGS

__all__ = ["PostgresSource", "format_lsn", "parse_lsn"]

log = logging.getLogger(__name__)


def _apply_session_settings(conn: psycopg.Connection[Any]) -> None:
    for name, value in SESSION_SETTINGS.items():
        conn.execute("SELECT set_config(%s, %s, false)", (name, value))


@dataclass
class _Transaction:
    """A decoded transaction: where the slot may move once all its changes are acknowledged."""

    commit_lsn: int
    end_lsn: int
    last_position: str | None  # None: no captured change (nothing to wait for)
    rows: int  # peek rows it took, to size the next peek


class PostgresSource:
    """Capture ``tables`` of a PostgreSQL database: snapshot first, then the slot's stream.

    ``dsn`` is a libpq connection string or URI. ``tables`` are ``"table"`` (schema
    ``public``) or ``"schema.table"``, all in ``publication`` (create it with
    :func:`kayak.cdc.postgres.enable`). ``slot_name`` is created on first start (and anew
    when a previous snapshot was not acknowledged); None picks the database's own
    (:func:`~kayak.cdc.postgres.slot.resolve_slot_name`). ``heartbeat_interval_s`` bounds how
    often an idle slot is moved up to the server's WAL. ``snapshot_fetch_rows`` is how
    many rows one snapshot round trip fetches, ``peek_rows`` roughly how many decoded
    messages one peek asks for, ``toast_cache_bytes`` the size of the unchanged-TOAST cache
    and ``poll_interval_s`` the pause between peeks while :meth:`read` waits.

    Not thread-safe: one capture loop drives it. See the module docstring for the design.
    """

    def __init__(
        self,
        dsn: str,
        tables: Sequence[str],
        *,
        slot_name: str | None = None,
        publication: str = slot.DEFAULT_PUBLICATION,
        heartbeat_interval_s: float = 10.0,
        snapshot_fetch_rows: int = 2000,
        peek_rows: int = 5000,
        toast_cache_bytes: int = 64 << 20,
        poll_interval_s: float = 0.2,
    ) -> None:
        if not tables:
            raise SourceSetupError("no tables to capture")
        self._dsn = dsn
        if slot_name is not None:
            slot.validate_name("slot", slot_name)  # before connecting: a bad name is the error
        self._publication = slot.validate_name("publication", publication)
        self._heartbeat_interval_s = heartbeat_interval_s
        self._snapshot_fetch_rows = max(1, snapshot_fetch_rows)
        self._peek_rows = max(1, peek_rows)
        self._poll_interval_s = poll_interval_s
        self._names = [catalog.parse_table_name(t) for t in tables]
        self._toast = ToastCache(toast_cache_bytes)

        self._conn = slot.connect(dsn)
        self._replication_conn: psycopg.Connection[Any] | None = None
        self._snapshot_conn: psycopg.Connection[Any] | None = None
        try:
            _apply_session_settings(self._conn)
            catalog.check_replication_ready(self._conn)
            self._slot = slot.resolve_slot_name(self._conn, slot_name)
            self._tables: dict[tuple[str, str], catalog.CatalogTable] = {
                name: catalog.load_table(self._conn, *name) for name in self._names
            }
            catalog.check_publication(self._conn, self._publication, self._names)
            self._relations = RelationTracker(self._conn, self._tables)
            self._decoder = ChangeDecoder(self._conn, self._relations, self._toast)
            self._pending: deque[Change] = deque()
            # A schema change capture cannot carry: raised once every change before it
            # has been handed out.
            self._schema_error: SchemaChangeError | None = None
            self._transactions: deque[_Transaction] = deque()
            self._last_decoded_commit = 0
            self._last_heartbeat = time.monotonic()
            self._snapshot_rows: Iterator[Change] | None = None
            self._snapshot_lookahead: Change | None = None
            self._snapshot_done = False
            # A snapshot taken again after capture died in one: what the earlier one
            # published may hold rows deleted since (see _snapshot_end).
            self._snapshot_again = False
            self._start()
        except BaseException:
            self.close()
            raise

    # -- setup ------------------------------------------------------------------------------

    def _start(self) -> None:
        info = slot.slot_info(self._conn, self._slot)
        dbname = self._conn.info.dbname
        if info is not None and info[0] != dbname:
            raise SourceSetupError(
                f"replication slot {self._slot!r} belongs to database {info[0]!r}, not "
                f"{dbname!r}; choose another slot_name"
            )
        done_at = slot.snapshot_done_lsn(self._conn, self._publication, self._slot)
        if info is not None and done_at is not None:
            self._confirmed = info[1]
            self._consistent_point = parse_lsn(done_at)
            self._snapshot_done = True
            log.info("streaming from slot %s at %s", self._slot, format_lsn(self._confirmed))
            return
        if info is not None:
            log.warning(
                "slot %s has no acknowledged snapshot; taking the snapshot again", self._slot
            )
            slot.drop_slot(self._conn, self._slot)
            self._snapshot_again = True
        slot.clear_snapshot_done(self._conn, self._publication, self._slot)
        self._begin_snapshot()

    def _begin_snapshot(self) -> None:
        self._replication_conn = slot.connect(self._dsn, replication="database")
        # Replication commands only speak the simple query protocol: use libpq's PQexec.
        command = f"CREATE_REPLICATION_SLOT {self._slot} LOGICAL pgoutput EXPORT_SNAPSHOT"
        result = self._replication_conn.pgconn.exec_(command.encode())
        if result.status != psycopg.pq.ExecStatus.TUPLES_OK:
            message = result.error_message.decode(errors="replace").strip()
            raise SourceSetupError(f"cannot create replication slot {self._slot!r}: {message}")
        fields = {
            (result.fname(i) or b"").decode(): (result.get_value(0, i) or b"").decode()
            for i in range(result.nfields)
        }
        self._consistent_point = parse_lsn(fields["consistent_point"])
        self._confirmed = self._consistent_point
        self._snapshot_ts_ms = int(time.time() * 1000)
        log.info(
            "created slot %s at %s; snapshot %s",
            self._slot,
            fields["consistent_point"],
            fields["snapshot_name"],
        )

        self._snapshot_conn = slot.connect(self._dsn)
        _apply_session_settings(self._snapshot_conn)
        self._snapshot_conn.execute("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
        self._snapshot_conn.execute(
            sql.SQL("SET TRANSACTION SNAPSHOT {}").format(sql.Literal(fields["snapshot_name"]))
        )
        self._snapshot_rows = self._snapshot_changes(self._snapshot_conn)
        self._snapshot_lookahead = next(self._snapshot_rows, None)
        if self._snapshot_lookahead is None:
            self._finish_snapshot()
            # Nothing to acknowledge: an empty snapshot is done as soon as it is taken.
            self._mark_snapshot_done()

    def _snapshot_changes(self, conn: psycopg.Connection[Any]) -> Iterator[Change]:
        seq = 0
        for number, name in enumerate(self._names):
            table = self._tables[name]
            cursor = raw_text_cursor(conn, table.type_oids)
            cursor_name = sql.Identifier(f"kayak_snapshot_{number}")
            columns = sql.SQL(", ").join(sql.Identifier(c.name) for c in table.schema.columns)
            cursor.execute(
                sql.SQL("DECLARE {} NO SCROLL CURSOR FOR SELECT {} FROM {}").format(
                    cursor_name, columns, sql.Identifier(*name)
                )
            )
            fetch = sql.SQL("FETCH FORWARD {} FROM {}").format(
                sql.Literal(self._snapshot_fetch_rows), cursor_name
            )
            held: Change | None = None  # one row behind, to mark the table's last one
            while rows := cursor.execute(fetch).fetchall():
                for values in rows:
                    if held is not None:
                        yield held
                    after = decode_row(table.schema, values)
                    self._toast.remember(cache_key(table.schema, after), after)
                    held = Change(
                        op=Op.READ,
                        table=table.schema,
                        before=None,
                        after=after,
                        position=format_position(self._consistent_point, 0, seq),
                        ts_ms=self._snapshot_ts_ms,
                        snapshot="true",
                        lsn=self._consistent_point,
                    )
                    seq += 1
            cursor.execute(sql.SQL("CLOSE {}").format(cursor_name))
            end = self._snapshot_end(table.schema, held)
            if end is not None:
                yield end

    def _snapshot_end(self, table: TableSchema, last: Change | None) -> Change | None:
        """A table's snapshot ends with its last row marked (Debezium's
        ``last_in_data_collection``): a target then drops rows this snapshot did not see, as
        when capture died in an earlier snapshot and rows were deleted meanwhile. A table
        with no rows in a snapshot taken again ends with a TRUNCATE just below the snapshot,
        for the same reason."""
        if last is not None:
            return dataclasses.replace(last, snapshot="last_in_data_collection")
        if not self._snapshot_again:
            return None
        return Change(
            op=Op.TRUNCATE,
            table=table,
            before=None,
            after=None,
            position=snapshot_floor(format_position(self._consistent_point, 0, 0)),
            ts_ms=self._snapshot_ts_ms,
            snapshot="last_in_data_collection",
            lsn=self._consistent_point,
        )

    def _finish_snapshot(self) -> None:
        self._snapshot_rows = None
        if self._snapshot_conn is not None:
            with contextlib.suppress(psycopg.Error):
                self._snapshot_conn.execute("COMMIT")
            self._snapshot_conn.close()
            self._snapshot_conn = None
        if self._replication_conn is not None:
            self._replication_conn.close()
            self._replication_conn = None

    def _mark_snapshot_done(self) -> None:
        if self._snapshot_done:
            return
        try:
            slot.mark_snapshot_done(
                self._conn, self._publication, self._slot, format_lsn(self._consistent_point)
            )
        except psycopg.Error as e:
            raise CaptureError(
                f"cannot record the snapshot of slot {self._slot!r} as done in the comment "
                f"of publication {self._publication!r}: {e}"
            ) from e
        self._snapshot_done = True

    # -- ChangeSource -----------------------------------------------------------------------

    def tables(self) -> Sequence[TableSchema]:
        """The captured tables with their columns as of the start."""
        return [self._tables[name].schema for name in self._names]

    def read(self, max_changes: int, timeout_s: float) -> list[Change]:
        """Snapshot rows first, then streamed changes, in position order."""
        if max_changes < 1:
            return []
        if self._snapshot_rows is not None:
            return self._read_snapshot(max_changes)
        deadline = time.monotonic() + timeout_s
        while True:
            if self._pending:
                return self._take_pending(max_changes)
            if self._schema_error is not None:
                raise self._schema_error
            self._poll()
            if self._pending:
                continue
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return []
            time.sleep(min(self._poll_interval_s, remaining))

    def _take_pending(self, max_changes: int) -> list[Change]:
        """Up to ``max_changes`` decoded changes, and past that to the end of the last one's
        transaction: a read never cuts a source transaction, so capture can publish each
        whole (``_pending`` holds whole transactions only)."""
        pending = self._pending
        taken = [pending.popleft() for _ in range(min(max_changes, len(pending)))]
        while (
            pending
            and pending[0].tx_id == taken[-1].tx_id
            and (pending[0].position.split("/", 1)[0] == taken[-1].position.split("/", 1)[0])
        ):
            taken.append(pending.popleft())
        return taken

    def acknowledge(self, last: Change) -> None:
        """Move the slot past every transaction whose changes are all at or before ``last``."""
        self._mark_snapshot_done_if_acknowledged(last)
        if last.snapshot != "false":
            return
        advance_to = 0
        while self._transactions:
            tx = self._transactions[0]
            if tx.last_position is not None and tx.last_position > last.position:
                break
            advance_to = tx.end_lsn
            self._transactions.popleft()
        if advance_to > self._confirmed:
            self._advance(advance_to)

    def close(self) -> None:
        """Close the connections; the slot keeps everything unacknowledged."""
        for conn in (self._snapshot_conn, self._replication_conn, self._conn):
            if conn is not None:
                with contextlib.suppress(psycopg.Error):
                    conn.close()
        self._snapshot_conn = self._replication_conn = None
        self._snapshot_rows = None

    def __enter__(self) -> PostgresSource:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- snapshot -----------------------------------------------------------------------------

    def _read_snapshot(self, max_changes: int) -> list[Change]:
        assert self._snapshot_rows is not None
        batch: list[Change] = []
        try:
            while len(batch) < max_changes and self._snapshot_lookahead is not None:
                current = self._snapshot_lookahead
                self._snapshot_lookahead = next(self._snapshot_rows, None)
                if self._snapshot_lookahead is None:
                    current = dataclasses.replace(current, snapshot="last")
                batch.append(current)
        except psycopg.Error as e:
            raise CaptureError(f"reading the initial snapshot failed: {e}") from e
        if self._snapshot_lookahead is None:
            self._finish_snapshot()
        return batch

    def _mark_snapshot_done_if_acknowledged(self, last: Change) -> None:
        if self._snapshot_done or last.snapshot not in ("last", "false"):
            return
        # Only this source's own snapshot end, or a change streamed after it, finishes the
        # snapshot. After a reconnect the broker may still acknowledge what the source before
        # handed out; those changes all lie below this snapshot's consistent point.
        if last.position >= format_position(self._consistent_point, 0, 0):
            self._mark_snapshot_done()

    # -- streaming ------------------------------------------------------------------------------

    def _poll(self) -> None:
        """Peek for transactions not decoded yet; heartbeat when there are none."""
        try:
            row = self._conn.execute(
                "SELECT (pg_current_wal_flush_lsn() - '0/0')::bigint"
            ).fetchone()
            assert row is not None
            flush_lsn = int(row[0])
            found_new = self._peek()
        except psycopg.errors.ObjectInUse as e:
            raise CaptureError(f"replication slot {self._slot!r} is in use: {e}") from e
        except psycopg.errors.UndefinedObject as e:
            raise CaptureError(f"replication slot {self._slot!r} is gone: {e}") from e
        except psycopg.Error as e:
            raise CaptureError(f"reading replication slot {self._slot!r} failed: {e}") from e
        if found_new:
            return
        unacknowledged = any(tx.last_position is not None for tx in self._transactions)
        due = time.monotonic() - self._last_heartbeat >= self._heartbeat_interval_s
        if not unacknowledged and due and flush_lsn > self._confirmed:
            self._transactions.clear()
            self._advance(flush_lsn)
            self._last_heartbeat = time.monotonic()
            log.debug("heartbeat: slot %s advanced to %s", self._slot, format_lsn(flush_lsn))

    def _peek(self) -> bool:
        """Decode from the slot's confirmed position; keep only transactions not seen yet."""
        known_rows = sum(tx.rows for tx in self._transactions)
        limit = known_rows + self._peek_rows
        while True:
            rows = self._conn.execute(
                "SELECT (lsn - '0/0')::bigint, data FROM pg_logical_slot_peek_binary_changes("
                "%s, NULL, %s, 'proto_version', '1', 'publication_names', %s)",
                (self._slot, limit, self._publication),
            ).fetchall()
            found_new = self._decode(rows)
            # The limit is checked only at commits; a full answer of old transactions
            # may hide newer ones behind it.
            if found_new or len(rows) < limit:
                return found_new
            limit *= 2

    def _decode(self, rows: list[tuple[int, bytes]]) -> bool:
        found_new = False
        begin: pgoutput.Begin | None = None
        skip = False
        tx_changes: list[Change] = []
        tx_rows = 0
        for lsn, data in rows:
            message = pgoutput.parse_message(data)
            tx_rows += 1
            if isinstance(message, pgoutput.Begin):
                begin, tx_changes, tx_rows = message, [], 1
                skip = message.final_lsn <= self._last_decoded_commit
            elif isinstance(message, pgoutput.Relation):
                # Always, even in skipped transactions: a session sends a relation's shape
                # once, before its first change, so the latest one seen is the one in force.
                try:
                    self._relations.on_relation(message, lsn)
                except SchemaChangeError as e:
                    # Hand out every whole transaction before the change, then stop. Not
                    # this transaction's earlier changes: published, they would be half a
                    # source transaction (the slot stays before it, so all of it comes again
                    # once the change can be carried).
                    log.error("%s", e)
                    self._schema_error = e
                    return True
            elif isinstance(message, pgoutput.Commit):
                if begin is None:
                    raise CaptureError("pgoutput Commit without Begin")
                if not skip:
                    self._transactions.append(
                        _Transaction(
                            commit_lsn=message.commit_lsn,
                            end_lsn=message.end_lsn,
                            last_position=tx_changes[-1].position if tx_changes else None,
                            rows=tx_rows,
                        )
                    )
                    self._pending.extend(tx_changes)
                    self._last_decoded_commit = message.commit_lsn
                    found_new = True
                begin = None
            elif skip:
                continue
            elif isinstance(message, pgoutput.Insert | pgoutput.Update | pgoutput.Delete):
                if begin is None:
                    raise CaptureError("pgoutput row change outside a transaction")
                change = self._decoder.to_change(message, begin, lsn, len(tx_changes))
                if change is not None:
                    tx_changes.append(change)
            elif isinstance(message, pgoutput.Truncate):
                if begin is None:
                    raise CaptureError("pgoutput truncate outside a transaction")
                tx_changes.extend(self._decoder.truncates(message, begin, lsn, len(tx_changes)))
            # Origin, Type and Message carry nothing a change needs.
        return found_new

    def _advance(self, lsn: int) -> None:
        try:
            row = self._conn.execute(
                "SELECT (end_lsn - '0/0')::bigint FROM pg_replication_slot_advance(%s, %s)",
                (self._slot, format_lsn(lsn)),
            ).fetchone()
        except psycopg.Error as e:
            raise CaptureError(f"advancing replication slot {self._slot!r} failed: {e}") from e
        assert row is not None
        self._confirmed = max(self._confirmed, int(row[0]))
