"""Publication and replication-slot management, and the durable "snapshot done" record.

:func:`enable` prepares a database for capture: it checks the server (``wal_level``,
replication privilege, UTF-8), every table (exists, primary key, REPLICA IDENTITY DEFAULT or
FULL, SELECT privilege), then creates the publication or adds missing tables to it. It does
not create the replication slot: :class:`~kayak.cdc.postgres.source.PostgresSource` creates
it together with the initial snapshot, because the snapshot must be the one the slot
exports. :func:`disable` drops the slot and the publication.

Replication slots are cluster-wide while publications live in one database, so the default
slot is named after the database (:func:`default_slot_name`) and the default publication is
``kayak`` in each. A database captured by an older kayak has its slot under the old default
``kayak``: :func:`resolve_slot_name` keeps using that one (see there).

Whether a slot's initial snapshot reached the log is recorded in the publication's comment
(``COMMENT ON PUBLICATION``, a JSON object ``{"kayak_snapshot_done": {slot: lsn}}``): it lives
and dies with the database, needs no local state directory, and a slot created anew (after a
crash mid-snapshot, or by :func:`disable`/:func:`enable`) has no entry, so its snapshot is
taken again.
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
from collections.abc import Sequence
from typing import Any

import psycopg
from psycopg import sql

from kayak.cdc.envelope import check_field_names
from kayak.cdc.errors import SourceSetupError
from kayak.cdc.postgres import catalog

__all__ = [
    "DEFAULT_PUBLICATION",
    "DEFAULT_SLOT",
    "clear_snapshot_done",
    "default_slot_name",
    "disable",
    "drop_slot",
    "enable",
    "mark_snapshot_done",
    "resolve_slot",
    "resolve_slot_name",
    "slot_info",
    "snapshot_done_lsn",
    "validate_name",
]

log = logging.getLogger(__name__)

_NAME = re.compile(r"[a-z0-9_]{1,63}")
_NOT_IN_NAME = re.compile(r"[^a-z0-9_]")
_MAX_NAME = 63
_COMMENT_KEY = "kayak_snapshot_done"

DEFAULT_PUBLICATION = "kayak"
# The default slot before slots were named per database; see resolve_slot_name.
_LEGACY_SLOT = "kayak"
# disable()'s "the slot resolve_slot_name picks": not a valid slot name, so never a real one.
DEFAULT_SLOT = "<this database's default>"


def validate_name(kind: str, name: str) -> str:
    """Slot names must be lower-case letters, digits and underscores; so must publications
    here, which keeps both safe in replication commands."""
    if not _NAME.fullmatch(name):
        raise SourceSetupError(
            f"{kind} name {name!r} must be 1-63 lower-case letters, digits or underscores"
        )
    return name


def default_slot_name(dbname: str) -> str:
    """``kayak_<database>``, within the slot-name rules (``[a-z0-9_]``, at most 63 bytes).

    Replication slots are shared by the whole cluster, so two captured databases of one
    server need two names. When the database name had to be changed to fit (other characters,
    too long), a digest of the real name is appended, so that ``Orders`` and ``orders`` or two
    long names with one prefix still get different slots.
    """
    cleaned = _NOT_IN_NAME.sub("_", dbname.lower())
    name = f"kayak_{cleaned}"
    if cleaned == dbname and len(name) <= _MAX_NAME:
        return name
    digest = hashlib.sha256(dbname.encode()).hexdigest()[:8]
    return f"{name[: _MAX_NAME - len(digest) - 1]}_{digest}"


def resolve_slot_name(conn: psycopg.Connection[Any], requested: str | None) -> str:
    """The slot to use: ``requested`` if given, else this database's default slot.

    A pipeline started before slots were named per database made a slot ``kayak``: when that
    slot exists for *this* database and the new default does not, it is kept (and its
    position with it), so an upgrade neither loses changes nor takes the snapshot again.
    """
    if requested is not None:
        return validate_name("slot", requested)
    dbname = conn.info.dbname
    name = default_slot_name(dbname)
    if slot_info(conn, name) is not None:
        return name
    legacy = conn.execute(
        "SELECT 1 FROM pg_replication_slots WHERE slot_name = %s AND database = %s "
        "AND plugin = 'pgoutput'",
        (_LEGACY_SLOT, dbname),
    ).fetchone()
    if legacy is not None:
        log.info("using the replication slot %s an earlier kayak made for database %s "
                 "(new default: %s, one per database)", _LEGACY_SLOT, dbname, name)  # fmt: skip
        return _LEGACY_SLOT
    return name


def connect(dsn: str, **kwargs: Any) -> psycopg.Connection[Any]:
    """Open an autocommit connection, turning connection failures into a clear error."""
    try:
        return psycopg.connect(dsn, autocommit=True, **kwargs)
    except psycopg.Error as e:
        raise SourceSetupError(
            f"cannot connect to PostgreSQL at {catalog.redact_dsn(dsn)}: {e}".strip()
        ) from e


def enable(
    dsn: str,
    tables: Sequence[str],
    *,
    publication: str = DEFAULT_PUBLICATION,
    slot: str | None = None,
) -> bool:
    """Check the database and tables can be captured and create (or extend) the publication;
    True if this call created it.

    ``tables`` are ``"table"`` (schema ``public``) or ``"schema.table"``. Idempotent: an
    existing publication gets any missing tables added. Raises
    :class:`~kayak.cdc.errors.SourceSetupError` saying what to fix.
    """
    validate_name("publication", publication)
    if slot is not None:
        validate_name("slot", slot)
    if not tables:
        raise SourceSetupError("no tables to capture")
    names = [catalog.parse_table_name(t) for t in tables]
    with connect(dsn) as conn:
        catalog.check_replication_ready(conn)
        for schema, name in names:
            try:
                check_field_names(catalog.load_table(conn, schema, name).schema)
            except ValueError as e:  # refused before the publication exists
                raise SourceSetupError(str(e)) from None
        exists = conn.execute(
            "SELECT 1 FROM pg_publication WHERE pubname = %s", (publication,)
        ).fetchone()
        idents = sql.SQL(", ").join(sql.Identifier(s, n) for s, n in names)
        try:
            if exists is None:
                conn.execute(
                    sql.SQL("CREATE PUBLICATION {} FOR TABLE {} "
                            "WITH (publish = 'insert, update, delete, truncate')").format(
                        sql.Identifier(publication), idents)
                )
                log.info("created publication %s for %s", publication, ", ".join(tables))
            else:
                published = catalog.tables_in_publication(conn, publication)
                missing = [(s, n) for s, n in names if (s, n) not in published]
                if missing:
                    conn.execute(
                        sql.SQL("ALTER PUBLICATION {} ADD TABLE {}").format(
                            sql.Identifier(publication),
                            sql.SQL(", ").join(sql.Identifier(s, n) for s, n in missing))
                    )
                    log.info("added %s to publication %s", missing, publication)
        except psycopg.errors.InsufficientPrivilege as e:
            raise SourceSetupError(
                f"cannot create publication {publication!r}: {e} (the role needs CREATE on "
                "the database and must own the tables)"
            ) from e
        catalog.check_publication(conn, publication, names)
    return exists is None


def slot_exists(dsn: str, slot: str) -> bool:
    """Whether the replication slot ``slot`` exists."""
    with connect(dsn) as conn:
        return slot_info(conn, slot) is not None


def resolve_slot(dsn: str, requested: str | None) -> str:
    """:func:`resolve_slot_name` on a connection of its own."""
    with connect(dsn) as conn:
        return resolve_slot_name(conn, requested)


def disable(
    dsn: str, *, publication: str | None = DEFAULT_PUBLICATION, slot: str | None = DEFAULT_SLOT
) -> str | None:
    """Drop the replication slot (releasing its WAL) and the publication, if they exist
    (None: leave that one alone; :data:`DEFAULT_SLOT`: the one :func:`resolve_slot_name`
    picks). Returns the slot's name."""
    with connect(dsn) as conn:
        if slot is not None:
            slot = resolve_slot_name(conn, None if slot == DEFAULT_SLOT else slot)
            drop_slot(conn, slot)
        if publication is not None:
            validate_name("publication", publication)
            conn.execute(
                sql.SQL("DROP PUBLICATION IF EXISTS {}").format(sql.Identifier(publication))
            )
    return slot


def slot_info(conn: psycopg.Connection[Any], slot: str) -> tuple[str, int, int | None] | None:
    """``(database, confirmed_flush_lsn, active_pid)`` of a logical slot, None if absent."""
    row = conn.execute(
        "SELECT database, plugin, (confirmed_flush_lsn - '0/0')::bigint, active_pid "
        "FROM pg_replication_slots WHERE slot_name = %s",
        (slot,),
    ).fetchone()
    if row is None:
        return None
    database, plugin, confirmed, active_pid = row
    if plugin != "pgoutput":
        raise SourceSetupError(
            f"replication slot {slot!r} exists with plugin {plugin!r}, not pgoutput"
        )
    return database, int(confirmed), active_pid


def drop_slot(conn: psycopg.Connection[Any], slot: str) -> None:
    """Drop a slot if it exists; an active slot (another reader) is an error."""
    row = conn.execute(
        "SELECT active_pid FROM pg_replication_slots WHERE slot_name = %s", (slot,)
    ).fetchone()
    if row is None:
        return
    if row[0] is not None:
        raise SourceSetupError(f"replication slot {slot!r} is in use by backend {row[0]}")
    conn.execute("SELECT pg_drop_replication_slot(%s)", (slot,))
    log.info("dropped replication slot %s", slot)


def _comment(conn: psycopg.Connection[Any], publication: str) -> dict[str, Any]:
    row = conn.execute(
        "SELECT obj_description(oid, 'pg_publication') FROM pg_publication WHERE pubname = %s",
        (publication,),
    ).fetchone()
    if row is None or not row[0]:
        return {}
    try:
        parsed = json.loads(row[0])
    except ValueError:
        return {}  # someone else's comment: ours replaces it
    return parsed if isinstance(parsed, dict) else {}


def _set_done(conn: psycopg.Connection[Any], publication: str, done: dict[str, str]) -> None:
    comment = _comment(conn, publication)
    comment[_COMMENT_KEY] = done
    conn.execute(
        sql.SQL("COMMENT ON PUBLICATION {} IS {}").format(
            sql.Identifier(publication), sql.Literal(json.dumps(comment, sort_keys=True)))
    )


def snapshot_done_lsn(conn: psycopg.Connection[Any], publication: str, slot: str) -> str | None:
    """The consistent point recorded when the slot's snapshot was acknowledged, or None."""
    done = _comment(conn, publication).get(_COMMENT_KEY, {})
    value = done.get(slot) if isinstance(done, dict) else None
    return value if isinstance(value, str) else None


def mark_snapshot_done(
    conn: psycopg.Connection[Any], publication: str, slot: str, consistent_lsn: str
) -> None:
    """Record that the slot's snapshot is on the log: a restart streams instead of redoing it."""
    done = _comment(conn, publication).get(_COMMENT_KEY, {})
    done = done if isinstance(done, dict) else {}
    done[slot] = consistent_lsn
    _set_done(conn, publication, done)


def clear_snapshot_done(conn: psycopg.Connection[Any], publication: str, slot: str) -> None:
    """Forget the slot's snapshot (before creating the slot anew)."""
    done = _comment(conn, publication).get(_COMMENT_KEY, {})
    if isinstance(done, dict) and slot in done:
        del done[slot]
        _set_done(conn, publication, done)
