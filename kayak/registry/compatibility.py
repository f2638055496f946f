"""Avro schema compatibility, from the Avro specification's schema-resolution rules.

``incompatibilities(reader, writer)`` lists every way data written with ``writer`` could fail
to be read with ``reader`` (empty: always readable). The rules, for each pair of types:

* the same primitive type matches; the writer may also be promoted: int to long, float or
  double; long to float or double; float to double; string to bytes and bytes to string;
* records match by unqualified name (or a reader alias); each reader field is read from the
  writer field of the same name (or a reader field alias), and a reader field the writer
  lacks needs a default; writer fields the reader lacks are skipped;
* enums match by name; every writer symbol must be a reader symbol unless the reader has a
  default symbol;
* fixed types match by name and size; arrays by items; maps by values;
* a writer union is readable if each of its branches is; a reader union reads a non-union
  writer if some branch reads it.

Named types may be recursive: a pair of named types already being compared is assumed to
match, which ends the recursion (a real mismatch is reported where it occurs).

The levels compare a new schema with earlier ones: BACKWARD (the new schema reads data the
earlier wrote), FORWARD (earlier schemas read data the new one writes), FULL (both), each
against the latest version or, TRANSITIVE, against all of them.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from typing import Any

from kayak.registry.schema import PRIMITIVES, AvroSchema

# writer type -> reader types that can read it
PROMOTIONS: dict[str, frozenset[str]] = {
    "int": frozenset({"long", "float", "double"}),
    "long": frozenset({"float", "double"}),
    "float": frozenset({"double"}),
    "string": frozenset({"bytes"}),
    "bytes": frozenset({"string"}),
}


class CompatibilityLevel(enum.Enum):
    """Confluent's compatibility levels."""

    NONE = "NONE"
    BACKWARD = "BACKWARD"
    BACKWARD_TRANSITIVE = "BACKWARD_TRANSITIVE"
    FORWARD = "FORWARD"
    FORWARD_TRANSITIVE = "FORWARD_TRANSITIVE"
    FULL = "FULL"
    FULL_TRANSITIVE = "FULL_TRANSITIVE"

    @property
    def transitive(self) -> bool:
        return self.value.endswith("_TRANSITIVE")

    @property
    def backward(self) -> bool:
        return self.value.startswith(("BACKWARD", "FULL"))

    @property
    def forward(self) -> bool:
        return self.value.startswith(("FORWARD", "FULL"))


DEFAULT_LEVEL = CompatibilityLevel.BACKWARD


def check_level(
    level: CompatibilityLevel,
    new: AvroSchema,
    earlier: Sequence[tuple[int, AvroSchema]],
    *,
    transitive: bool | None = None,
) -> list[str]:
    """Why ``new`` breaks ``level`` against ``earlier`` ((version, schema), oldest first).

    ``transitive`` overrides the level's own choice between all versions and the latest.
    """
    if level is CompatibilityLevel.NONE or not earlier:
        return []
    every = level.transitive if transitive is None else transitive
    targets = list(earlier) if every else [earlier[-1]]
    messages: list[str] = []
    for version, old in reversed(targets):
        if level.backward:
            for problem in incompatibilities(new, old):
                messages.append(f"new schema cannot read version {version}: {problem}")
        if level.forward:
            for problem in incompatibilities(old, new):
                messages.append(f"version {version} cannot read the new schema: {problem}")
    return messages


def incompatibilities(reader: AvroSchema, writer: AvroSchema) -> list[str]:
    """Every reason data written with ``writer`` cannot be read with ``reader``."""
    return _Resolver(reader.named, writer.named).check(reader.parsed, writer.parsed, "")


def _type_name(schema: Any) -> str:
    if isinstance(schema, list):
        return "union"
    if isinstance(schema, dict):
        return str(schema.get("type"))
    return str(schema)


def _short(name: str) -> str:
    return name.rsplit(".", 1)[-1]


class _Resolver:
    def __init__(self, reader_named: dict[str, Any], writer_named: dict[str, Any]) -> None:
        self._reader_named = reader_named
        self._writer_named = writer_named
        self._assumed: set[tuple[str, str]] = set()

    @staticmethod
    def _resolve(schema: Any, named: dict[str, Any]) -> Any:
        if isinstance(schema, str) and schema not in PRIMITIVES:
            return named.get(schema, schema)
        if isinstance(schema, dict) and schema.get("type") in PRIMITIVES:
            return schema["type"]  # logical types read like their underlying type
        return schema

    def check(self, reader: Any, writer: Any, path: str) -> list[str]:
        reader = self._resolve(reader, self._reader_named)
        writer = self._resolve(writer, self._writer_named)
        reader_type, writer_type = _type_name(reader), _type_name(writer)
        where = path or "/"
        if writer_type == "union":
            problems: list[str] = []
            for branch in writer:
                problems += self.check(reader, branch, path)
            return problems
        if reader_type == "union":
            for branch in reader:
                # A branch that fails must not leave its record pairs assumed compatible.
                assumed = set(self._assumed)
                if not self.check(branch, writer, path):
                    return []
                self._assumed = assumed
            return [f"at {where}: the reader's union has no branch for writer type {writer_type}"]
        if reader_type != writer_type:
            if reader_type in PROMOTIONS.get(writer_type, frozenset()):
                return []
            return [f"at {where}: reader type {reader_type} cannot read writer type {writer_type}"]
        if reader_type in PRIMITIVES:
            return []
        if reader_type == "array":
            return self.check(reader["items"], writer["items"], f"{path}/items")
        if reader_type == "map":
            return self.check(reader["values"], writer["values"], f"{path}/values")
        problem = self._name_mismatch(reader, writer, where)
        if problem:
            return [problem]
        if reader_type == "fixed":
            if reader["size"] != writer["size"]:
                return [
                    f"at {where}: fixed {reader['name']} has size {reader['size']} in the "
                    f"reader and {writer['size']} in the writer"
                ]
            return []
        if reader_type == "enum":
            missing = [s for s in writer["symbols"] if s not in reader["symbols"]]
            if missing and "default" not in reader:
                return [
                    f"at {where}: enum {reader['name']} lacks writer symbols {missing} and has "
                    "no default symbol"
                ]
            return []
        if reader_type == "record":
            return self._check_record(reader, writer, path)
        return [f"at {where}: unknown type {reader_type}"]

    @staticmethod
    def _name_mismatch(reader: dict[str, Any], writer: dict[str, Any], where: str) -> str:
        writer_name = _short(writer["name"])
        accepted = {_short(reader["name"])} | {_short(a) for a in reader.get("aliases", ())}
        if writer_name in accepted:
            return ""
        return f"at {where}: reader {reader['type']} {reader['name']} is not named {writer_name}"

    def _check_record(self, reader: dict[str, Any], writer: dict[str, Any], path: str) -> list[str]:
        pair = (reader["name"], writer["name"])
        if pair in self._assumed:
            return []
        self._assumed.add(pair)
        writer_fields = {f["name"]: f for f in writer["fields"]}
        problems: list[str] = []
        for field in reader["fields"]:
            found = writer_fields.get(field["name"])
            for alias in field.get("aliases", ()):
                if found is None:
                    found = writer_fields.get(alias)
            if found is None:
                if "default" not in field:
                    problems.append(
                        f"at {path or '/'}: reader field '{field['name']}' of {reader['name']} "
                        "is missing from the writer and has no default"
                    )
                continue
            problems += self.check(field["type"], found["type"], f"{path}/{field['name']}")
        return problems
