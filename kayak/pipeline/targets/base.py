"""The interface every target implements, and the helpers the targets share.

Applying is idempotent and never goes backwards: every target keeps, beside the replicated
tables, one table ``kayak_apply_positions`` with the source position last applied to each key
(deleted keys included, so a replayed older insert cannot bring a deleted row back). A change
is applied only if its position is greater than the stored one, in the same transaction that
writes the row, so a replayed micro-batch changes nothing.

A TRUNCATE at position P is kept as the table's *floor* (the row with the empty key in
``kayak_apply_positions``): it deletes every row whose last applied change is at or before P
and no change at or before P is applied afterwards, while rows changed after P stay. That
holds whatever order the truncate and the table's other changes are applied in (they may sit
in different partitions and tasks), and a replayed truncate changes nothing.

Schema versions: see :mod:`~kayak.pipeline.targets.evolve` (``kayak_table_versions`` holds
each table's current shape position and the renames made).

A target is chosen by URL in :mod:`~kayak.pipeline.targets.factory` (``open_target``), which
imports the concrete targets; this module imports none of them.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from kayak.cdc.change import Row, TableSchema
from kayak.pipeline.targets.evolve import Rename

__all__ = [
    "FLOOR_KEY",
    "POSITIONS_TABLE",
    "VERSIONS_TABLE",
    "AppliedChange",
    "BatchApplyError",
    "TableChanges",
    "Target",
    "Truncate",
    "change_key_text",
    "key_from_text",
    "key_text",
    "renames_from_json",
    "renames_to_json",
]

POSITIONS_TABLE = "kayak_apply_positions"
VERSIONS_TABLE = "kayak_table_versions"
# The key of a table's truncate floor in POSITIONS_TABLE (key texts are JSON arrays).
FLOOR_KEY = ""


@dataclass(frozen=True)
class AppliedChange:
    """The latest change of one key in a micro-batch: ``op`` ``d`` deletes the row; any other
    op upserts ``after``. ``ts_ms`` is the source commit time (for latency)."""

    op: str
    key: Row
    after: Row | None
    position: str
    ts_ms: int
    key_text: str = ""  # the key's canonical text when already known (see change_key_text)


# A TRUNCATE to apply: the table and its source position.
Truncate = tuple[TableSchema, str]
# One table's changes to apply (the latest per key).
TableChanges = tuple[TableSchema, Sequence[AppliedChange]]


class BatchApplyError(Exception):
    """A batch's transaction failed at one table (its cause is the database's error, which
    decides whether a retry may help): ``table``, and the changes or the TRUNCATE position
    being applied there."""

    def __init__(
        self, table: TableSchema, changes: Sequence[AppliedChange] = (),
        truncate_position: str | None = None,
    ) -> None:  # fmt: skip
        super().__init__(f"applying to {table.qualified_name} failed")
        self.table = table
        self.changes = changes
        self.truncate_position = truncate_position


def _json_default(value: Any) -> Any:
    if isinstance(value, bytes | bytearray | memoryview):
        return {"$b": bytes(value).hex()}
    raise TypeError(f"cannot encode {type(value).__name__} in a key")


# One encoder for every key: json.dumps with options builds a new encoder per call.
_KEY_ENCODER = json.JSONEncoder(default=_json_default, separators=(",", ":"), ensure_ascii=False)


def key_text(table: TableSchema, key: Row) -> str:
    """A key as canonical text: the key columns' values in key order, as JSON."""
    values = [key[k] for k in table.key]
    if all(type(v) is int for v in values):  # the usual key: the same text, 10x faster
        return f"[{','.join(map(str, values))}]"
    return _KEY_ENCODER.encode(values)


def change_key_text(table: TableSchema, change: AppliedChange) -> str:
    """:func:`key_text` of a change's key (the decoder's, when it gave one)."""
    return change.key_text or key_text(table, change.key)


class Target(Protocol):
    """A database replicated tables are written to."""

    def ensure_table(
        self, table: TableSchema, connector: str, position: str = ""
    ) -> dict[str, str] | None:
        """Create the table if missing (with the source's declared types when ``connector``,
        the source's kind, is this target's kind), or evolve it to this schema
        (:mod:`~kayak.pipeline.targets.evolve`); fail clearly if it cannot hold the rows.
        ``position`` is a source position of a change written with this schema: a schema
        older than the table's current shape changes nothing, and the answer maps its column
        names to the target's (None: written as they are). Declared types are parsed and
        re-rendered from a fixed table, never pasted (:mod:`~kayak.pipeline.targets.types`);
        a type refused there raises
        :class:`~kayak.pipeline.targets.types.TargetSchemaError` before any DDL runs."""
        ...

    def truncate(self, table: TableSchema, position: str) -> bool:
        """Apply a TRUNCATE at ``position`` (see the module doc); False if it was applied
        before."""
        ...

    def apply(self, table: TableSchema, changes: Sequence[AppliedChange]) -> int:
        """Apply changes (one per key) in one transaction, skipping any not newer than what
        was applied before; the number applied."""
        ...

    def apply_batch(
        self, truncates: Sequence[Truncate], tables: Sequence[TableChanges]
    ) -> tuple[list[bool], list[int]]:
        """``truncates`` in order, then each table's changes, all in one transaction, so a
        reader of the target sees all of them or none (the tables of ``tables`` made sure of
        beforehand); whether each truncate was applied, and each table's count applied. A
        failure rolls everything back and raises :class:`BatchApplyError`."""
        ...

    def read_rows(self, table: TableSchema) -> list[Row]:
        """Every row of the replicated table in key order, values in the representation of
        their column types (for verification)."""
        ...

    def close(self) -> None: ...


def chunks(items: Sequence[Any], size: int) -> list[Sequence[Any]]:
    return [items[i : i + size] for i in range(0, len(items), size)]


def newer(
    changes: Sequence[AppliedChange], table: TableSchema, applied: dict[str, str],
    floor: str = "",
) -> list[tuple[str, AppliedChange]]:  # fmt: skip
    """The changes whose position is greater than the one applied to their key and than
    the table's last truncate (``floor``)."""
    out = []
    for change in changes:
        text = change_key_text(table, change)
        if change.position > max(applied.get(text, ""), floor):
            out.append((text, change))
    return out


def _untag(obj: dict[str, Any]) -> Any:
    if len(obj) == 1 and "$b" in obj:
        return bytes.fromhex(obj["$b"])
    return obj


def key_from_text(text: str) -> list[Any]:
    """A key's values back from :func:`key_text`."""
    values: list[Any] = json.loads(text, object_hook=_untag)
    return values


def renames_to_json(renames: Sequence[Rename]) -> str:
    return json.dumps([[r.old, r.new, r.position] for r in renames])


def renames_from_json(text: str | None) -> list[Rename]:
    return [Rename(*entry) for entry in json.loads(text or "[]")]


def statement_rows(
    table: TableSchema, todo: Sequence[tuple[str, AppliedChange]]
) -> tuple[list[tuple[Any, ...]], list[tuple[Any, ...]]]:
    """Parameters for the target's statements: key values of the rows to delete, and full
    rows (in column order) to upsert."""
    deletes = [tuple(c.key[k] for k in table.key) for _, c in todo if c.op == "d"]
    upserts = [
        tuple(c.after.get(col.name) for col in table.columns)
        for _, c in todo
        if c.op != "d" and c.after is not None
    ]
    return deletes, upserts
