"""What a target table must change to hold a new version of its source table's schema.

The plan is the same for every target; each renders it in its own SQL:

- a column the target lacks is added, with the value rows that predate it hold in the source
  (``Column.default``) as its default, so the target's existing rows get it too (NOT NULL
  only with such a default);
- a column the target lacks under its name but has under an earlier one
  (``Column.renamed_from``) is renamed, never added empty beside the stale one;
- a column whose type changed *in the source* (since the version the target recorded) is
  altered to the new type (the target converts its rows the way the source did); a type the
  target's owner chose for a table kayak did not create is left alone;
- a target column the source no longer has is kept, and made nullable: rows written from now
  on leave it NULL. It is not dropped: that would destroy data a reader of the target may
  still use, and a later version of the source could not bring it back. A column the source
  made nullable is made nullable too.

Schemas may arrive out of order (a micro-batch may end at different points of a topic's
partitions, and a replayed batch meets schemas already handled): a target records, per table,
the source position up to which its shape is current, and the renames it made with their
positions. A schema met with an older position changes nothing; its columns are written under
their current names (:func:`older_mapping`), and columns the target does not have are left
out.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from kayak.cdc.change import Column, TableSchema

__all__ = ["Evolution", "ExistingColumn", "Rename", "older_mapping", "plan"]


@dataclass(frozen=True)
class ExistingColumn:
    """A column of the target table as it is now."""

    name: str
    declared: str  # its type, as the target spells it
    not_null: bool


@dataclass(frozen=True)
class Rename:
    """A rename the target made, at the source position of the schema that asked for it."""

    old: str
    new: str
    position: str


@dataclass
class Evolution:
    """The DDL a target table needs, in the order to run it."""

    renames: list[tuple[str, str]] = field(default_factory=list)
    retypes: list[Column] = field(default_factory=list)
    adds: list[Column] = field(default_factory=list)
    drop_not_null: list[str] = field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(self.renames or self.retypes or self.adds or self.drop_not_null)


def plan(
    table: TableSchema,
    existing: Sequence[ExistingColumn],
    types: dict[str, str],
    same_type: Callable[[str, str], bool],
    previous: dict[str, str] | None = None,
) -> Evolution:
    """The changes that make ``existing`` hold ``table`` (``types``: each column's target
    type; ``previous``: the types recorded for the version before, by column name;
    ``same_type(a, b)`` says whether two spellings are the same type)."""
    have = {c.name: c for c in existing}
    wanted = {c.name for c in table.columns}
    evolution = Evolution()
    renamed_away: set[str] = set()
    for column in table.columns:
        current = have.get(column.name)
        if current is None:
            free = [n for n in column.renamed_from
                    if n in have and n not in wanted and n not in renamed_away]  # fmt: skip
            old = free[-1] if free else None
            if old is None:
                evolution.adds.append(column)
                continue
            evolution.renames.append((old, column.name))
            renamed_away.add(old)
            current = have[old]
        was = (previous or {}).get(current.name)
        if was is not None and not same_type(was, types[column.name]) \
                and not same_type(current.declared, types[column.name]):
            evolution.retypes.append(column)
        if current.not_null and column.nullable and column.name not in table.key:
            evolution.drop_not_null.append(column.name)
    for name, current in have.items():
        if name not in wanted and name not in renamed_away and current.not_null:
            evolution.drop_not_null.append(name)
    return evolution


def older_mapping(
    table: TableSchema, existing: set[str], renames: Sequence[Rename], position: str
) -> dict[str, str]:
    """For a schema older than the target's shape: each of its columns' name in the target
    (renames made after ``position`` followed), columns the target lacks left out."""
    later = sorted((r for r in renames if r.position > position), key=lambda r: r.position)
    mapping = {}
    for column in table.columns:
        name = column.name
        for rename in later:
            if rename.old == name:
                name = rename.new
        if name in existing:
            mapping[column.name] = name
    return mapping


def renamed_table(table: TableSchema, mapping: dict[str, str]) -> TableSchema:
    """``table`` as written to the target: its mapped columns under their target names."""
    columns = tuple(
        dataclasses.replace(c, name=mapping[c.name], renamed_from=())
        for c in table.columns if c.name in mapping
    )  # fmt: skip
    missing = [k for k in table.key if k not in mapping]
    if missing:
        raise ValueError(
            f"table {table.qualified_name}: key columns {missing} are not in the target")
    return TableSchema(table.schema, table.name, columns, tuple(mapping[k] for k in table.key))
