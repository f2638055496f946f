"""Debezium-style change events: topic names, Avro key/value schemas and event values.

An event's key is the row's primary key (so all changes of a row land on one partition, in
order); its value is Debezium's envelope::

    {"before": {...} | null, "after": {...} | null,
     "source": {"version", "connector", "name", "ts_ms", "snapshot", "db", "schema", "table",
                "txId", "lsn", "change_id", "pos"},
     "op": "c" | "u" | "d" | "r", "ts_ms": <time the event was made>}

``source.pos`` is kayak's addition: the source position as sortable text
(:func:`kayak.cdc.change.format_position`), which targets use to apply changes idempotently.
Each column's Avro field carries ``"kayak.type"`` (the column type), ``"kayak.source_type"``
(the database's declared type) and ``"kayak.nullable"``, so a consumer can rebuild the
:class:`TableSchema` from the registered schema alone (:func:`table_schema_from_avro`). A
column with a default for the rows that predate it carries ``"kayak.default"`` (its value as
JSON; bytes as ``\\x`` + hex), and a renamed column its earlier names as Avro ``"aliases"``
(so the new schema also reads events written under the old name).

A column of a PostgreSQL user-defined type carries ``"kayak.user_type"``: ``{"kind": "enum",
"schema", "name", "labels": [...]}``, ``{"kind": "domain", …, "base": "numeric(10,2)"}`` or
``{"kind": "composite", …, "fields": [[name, type], ...]}`` (plus ``"dimensions": 1`` for an
array of it); its values are their text form. A column of kind ``any`` (a SQLite column that
keeps each value's own storage class) is the Avro union of ``long``, ``double``, ``string``
and ``bytes``, so each value keeps its type.

A TRUNCATE is Debezium's ``"op": "t"`` event: no key, ``before`` and ``after`` null.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from kayak import __version__
from kayak.cdc.change import USER_TYPE_KINDS, Change, Column, ColumnType, TableSchema, UserType

__all__ = [
    "event_value",
    "key_schema",
    "table_schema_from_avro",
    "topic_name",
    "value_schema",
]

# Each value of an ANY column in its own branch (fastavro picks the branch by Python type).
_ANY_BRANCHES: list[str] = ["long", "double", "string", "bytes"]

_AVRO_TYPES: dict[ColumnType, str | list[str]] = {
    ColumnType.BOOLEAN: "boolean",
    ColumnType.INT: "int",
    ColumnType.LONG: "long",
    ColumnType.DOUBLE: "double",
    ColumnType.DECIMAL: "string",
    ColumnType.STRING: "string",
    ColumnType.BYTES: "bytes",
    ColumnType.ANY: _ANY_BRANCHES,
}

_NOT_NAME = re.compile(r"[^A-Za-z0-9_]")


def _avro_name(part: str) -> str:
    """``part`` as an Avro name component (letters, digits, ``_``; not starting with a digit)."""
    name = _NOT_NAME.sub("_", part) or "_"
    return "_" + name if name[0].isdigit() else name


def topic_name(prefix: str, table: TableSchema) -> str:
    """The change topic of a table: ``PREFIX.SCHEMA.TABLE`` (Debezium's naming)."""
    return f"{prefix}.{table.schema}.{table.name}"


def _namespace(prefix: str, table: TableSchema) -> str:
    return ".".join(_avro_name(p) for p in (prefix, table.schema, table.name))


def _field(column: Column, *, in_key: bool) -> dict[str, Any]:
    avro_type = _AVRO_TYPES[column.type]
    field: dict[str, Any] = {"name": column.name}
    # Row images may be partial (a PostgreSQL delete under REPLICA IDENTITY DEFAULT carries
    # only the key), so every non-key field may be null in Avro; the column's own
    # nullability travels as "kayak.nullable".
    if in_key:
        field["type"] = list(avro_type) if isinstance(avro_type, list) else avro_type
    else:
        field["type"] = ["null", *avro_type] if isinstance(avro_type, list) else [
            "null", avro_type]
        field["default"] = None
    field["kayak.type"] = column.type.value
    field["kayak.source_type"] = column.source_type
    field["kayak.nullable"] = column.nullable
    if column.default is not None:
        if column.type is ColumnType.ANY and isinstance(column.default, bytes):
            # Any kind of value may be the default: bytes must not read back as text.
            field["kayak.default"] = {"bytes": column.default.hex()}
        else:
            field["kayak.default"] = _default_to_json(column.default)
    if column.renamed_from:
        field["aliases"] = list(column.renamed_from)
    if column.user_type is not None:
        field["kayak.user_type"] = _user_type_to_json(column.user_type)
    return field


def _user_type_to_json(user_type: UserType) -> dict[str, Any]:
    described: dict[str, Any] = {
        "kind": user_type.kind, "schema": user_type.schema, "name": user_type.name}
    if user_type.kind == "enum":
        described["labels"] = list(user_type.labels)
    elif user_type.kind == "domain":
        described["base"] = user_type.base
    else:
        described["fields"] = [[name, kind] for name, kind in user_type.fields]
    if user_type.dimensions:
        described["dimensions"] = user_type.dimensions
    return described


_MAX_NAME = 63  # PostgreSQL's NAMEDATALEN - 1 (bytes)


def _user_type_from_json(value: Any, column: str) -> UserType | None:
    """A ``kayak.user_type`` back as a :class:`UserType`; ValueError (naming the column) if it
    is not one: registered schemas are untrusted input. Only the shape is checked here;
    targets validate the types they render (:mod:`kayak.pipeline.targets.types`)."""
    if value is None:
        return None

    def bad(why: str) -> ValueError:
        return ValueError(f"column {column!r}: kayak.user_type {why}")

    def name(text: Any, what: str) -> str:
        if not isinstance(text, str) or not text or len(text.encode()) > _MAX_NAME \
                or "\0" in text:
            raise bad(f"{what} is not a name of 1-{_MAX_NAME} bytes")
        return text

    if not isinstance(value, dict) or value.get("kind") not in USER_TYPE_KINDS:
        raise bad(f"is not a description of one of {', '.join(USER_TYPE_KINDS)}")
    kind = value["kind"]
    dimensions = value.get("dimensions", 0)
    if dimensions not in (0, 1) or isinstance(dimensions, bool):
        raise bad("dimensions is not 0 or 1")
    labels: tuple[str, ...] = ()
    fields: tuple[tuple[str, str], ...] = ()
    base = ""
    if kind == "enum":
        raw = value.get("labels")
        if not isinstance(raw, list):
            raise bad("labels are not a list")
        labels = tuple(name(label, "a label") for label in raw)
        if len(set(labels)) != len(labels):
            raise bad("labels repeat")
    elif kind == "domain":
        raw_base = value.get("base")
        if not isinstance(raw_base, str) or not raw_base:
            raise bad("base is not a type name")
        base = raw_base
    else:
        raw = value.get("fields")
        if not isinstance(raw, list) or not raw or not all(
                isinstance(f, list) and len(f) == 2 and isinstance(f[1], str) for f in raw):
            raise bad("fields are not a list of [name, type]")
        fields = tuple((name(f, "a field"), t) for f, t in raw)
    return UserType(kind, name(value.get("schema"), "schema"), name(value.get("name"), "name"),
                    labels=labels, base=base, fields=fields, dimensions=dimensions)


def _default_to_json(value: Any) -> Any:
    if isinstance(value, bytes):
        return "\\x" + value.hex()
    return value


def _default_from_json(kind: ColumnType, value: Any, name: str) -> Any:
    """A ``kayak.default`` back in the column type's representation; ValueError (naming the
    column) if it is not one: registered schemas are untrusted input."""
    if value is None:
        return None
    ok = {
        ColumnType.BOOLEAN: isinstance(value, bool),
        ColumnType.INT: isinstance(value, int) and not isinstance(value, bool),
        ColumnType.LONG: isinstance(value, int) and not isinstance(value, bool),
        ColumnType.DOUBLE: isinstance(value, int | float) and not isinstance(value, bool),
        ColumnType.DECIMAL: isinstance(value, str),
        ColumnType.STRING: isinstance(value, str),
        ColumnType.BYTES: isinstance(value, str) and value.startswith("\\x"),
        ColumnType.ANY: (isinstance(value, int | float | str) and not isinstance(value, bool))
        or (isinstance(value, dict) and list(value) == ["bytes"]
            and isinstance(value["bytes"], str)),
    }[kind]
    if not ok:
        raise ValueError(f"column {name!r}: default {value!r:.40} is not a {kind.value}")
    try:
        if kind is ColumnType.BYTES:
            return bytes.fromhex(value[2:])
        if kind is ColumnType.ANY and isinstance(value, dict):
            return bytes.fromhex(value["bytes"])
    except ValueError:
        raise ValueError(f"column {name!r}: default {value!r:.40} is not hex bytes") from None
    if kind is ColumnType.DOUBLE:
        return float(value)
    return value


def check_field_names(table: TableSchema) -> None:
    """Refuse a table whose column names cannot be Avro field names (``cdc enable`` calls this
    first, so such a table is refused before anything is installed)."""
    for column in table.columns:
        if _NOT_NAME.search(column.name) or column.name[:1].isdigit():
            raise ValueError(
                f"column {column.name!r} of {table.qualified_name} is not a valid Avro field "
                "name (letters, digits and _ only, not starting with a digit)"
            )


def key_schema(prefix: str, table: TableSchema) -> dict[str, Any]:
    """The Avro schema of a table's event keys: its primary-key columns."""
    check_field_names(table)
    return {
        "type": "record",
        "name": "Key",
        "namespace": _namespace(prefix, table),
        "fields": [_field(table.column(k), in_key=True) for k in table.key],
        "kayak.key": list(table.key),
    }


def value_schema(prefix: str, table: TableSchema, connector: str) -> dict[str, Any]:
    """The Avro schema of a table's event values: Debezium's envelope around its rows."""
    check_field_names(table)
    row = {
        "type": "record",
        "name": "Value",
        "fields": [_field(c, in_key=False) for c in table.columns],
    }
    nullable_long: list[Any] = ["null", "long"]
    source = {
        "type": "record",
        "name": "Source",
        "fields": [
            {"name": "version", "type": "string"},
            {"name": "connector", "type": "string"},
            {"name": "name", "type": "string"},
            {"name": "ts_ms", "type": "long"},
            {"name": "snapshot", "type": "string", "default": "false"},
            {"name": "db", "type": "string"},
            {"name": "schema", "type": "string"},
            {"name": "table", "type": "string"},
            {"name": "txId", "type": nullable_long, "default": None},
            {"name": "lsn", "type": nullable_long, "default": None},
            {"name": "change_id", "type": nullable_long, "default": None},
            {"name": "pos", "type": "string"},
        ],
    }
    return {
        "type": "record",
        "name": "Envelope",
        "namespace": _namespace(prefix, table),
        "connector": connector,
        "kayak.schema": table.schema,
        "kayak.table": table.name,
        "kayak.key": list(table.key),
        "fields": [
            {"name": "before", "type": ["null", row], "default": None},
            {"name": "after", "type": ["null", "Value"], "default": None},
            {"name": "source", "type": source},
            {"name": "op", "type": "string"},
            {"name": "ts_ms", "type": ["null", "long"], "default": None},
        ],
    }


def event_value(
    change: Change, *, op: str, before: Any, after: Any, prefix: str, connector: str, db: str,
    now_ms: int,
) -> dict[str, Any]:  # fmt: skip
    """The envelope of one event (``op``/``before``/``after`` may differ from the change's own
    when a primary-key change is split into a delete and a create). ``before``/``after`` are
    row images, or fastavro's ``(record name, image)`` union notation."""
    return {
        "before": before,
        "after": after,
        "source": {
            "version": __version__,
            "connector": connector,
            "name": prefix,
            "ts_ms": change.ts_ms,
            "snapshot": change.snapshot,
            "db": db,
            "schema": change.table.schema,
            "table": change.table.name,
            "txId": change.tx_id,
            "lsn": change.lsn,
            "change_id": change.change_id,
            "pos": change.position,
        },
        "op": op,
        "ts_ms": now_ms,
    }


def table_schema_from_avro(schema: Mapping[str, Any]) -> TableSchema:
    """The table an envelope schema (as registered by kayak) describes."""
    if schema.get("name") != "Envelope" and not str(schema.get("name", "")).endswith(
        ".Envelope"
    ):
        raise ValueError(f"not a kayak change-event schema: {schema.get('name')!r}")
    fields = {f["name"]: f for f in schema["fields"]}
    row_type = next(t for t in fields["before"]["type"] if isinstance(t, dict))
    columns = []
    for f in row_type["fields"]:
        avro_type = f["type"]
        nullable = bool(f.get("kayak.nullable", isinstance(avro_type, list)))
        kind = ColumnType(f.get("kayak.type", _plain_type(avro_type)))
        aliases = f.get("aliases", [])
        if not isinstance(aliases, list) or not all(isinstance(a, str) for a in aliases):
            raise ValueError(f"column {f['name']!r}: aliases are not a list of names")
        columns.append(
            Column(
                name=f["name"],
                type=kind,
                nullable=nullable,
                source_type=f.get("kayak.source_type", ""),
                default=_default_from_json(kind, f.get("kayak.default"), f["name"]),
                renamed_from=tuple(aliases),
                user_type=_user_type_from_json(f.get("kayak.user_type"), f["name"]),
            )
        )
    source_fields = {f["name"] for f in fields["source"]["type"]["fields"]}
    if "pos" not in source_fields:
        raise ValueError("change-event schema has no source.pos: not made by kayak")
    return TableSchema(
        str(schema["kayak.schema"]),
        str(schema["kayak.table"]),
        tuple(columns),
        tuple(schema["kayak.key"]),
    )


def _plain_type(avro_type: Any) -> str:
    if isinstance(avro_type, list):
        branches = [t for t in avro_type if t != "null"]
        if len(branches) > 1:
            return ColumnType.ANY.value
        avro_type = branches[0]
    return {"boolean": "boolean", "int": "int", "long": "long", "double": "double",
            "string": "string", "bytes": "bytes"}.get(str(avro_type), "string")  # fmt: skip
