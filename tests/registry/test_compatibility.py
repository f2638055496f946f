"""Avro schema compatibility: the resolution rules directly, then every level over HTTP."""

from __future__ import annotations

import json
from typing import Any

import pytest

from kayak.registry.compatibility import (
    CompatibilityLevel,
    check_level,
    incompatibilities,
)
from kayak.registry.schema import AvroSchema, parse_avro
from tests.registry.conftest import call, record_schema


def avro(schema: Any) -> AvroSchema:
    return parse_avro(schema if isinstance(schema, str) else json.dumps(schema))


def enum(*symbols: str, **extra: Any) -> dict[str, Any]:
    return {"type": "enum", "name": "Color", "symbols": list(symbols), **extra}


def linked_list(*extra_fields: dict[str, Any]) -> dict[str, Any]:
    return {
        "type": "record",
        "name": "Node",
        "fields": [
            {"name": "value", "type": "int"},
            {"name": "next", "type": ["null", "Node"], "default": None},
            *extra_fields,
        ],
    }


BASE = record_schema("R", ("a", "int"), ("b", "string"))
# (name, old schema, new schema, new-reads-old (backward), old-reads-new (forward))
EVOLUTIONS: list[tuple[str, Any, Any, bool, bool]] = [
    ("identical", BASE, BASE, True, True),
    ("add field with default", BASE,
     record_schema("R", ("a", "int"), ("b", "string"), ("c", "int", 0)), True, True),
    ("add field without default", BASE,
     record_schema("R", ("a", "int"), ("b", "string"), ("c", "int")), False, True),
    ("remove field", BASE, record_schema("R", ("a", "int")), True, False),
    ("remove field that had a default", record_schema("R", ("a", "int"), ("b", "string", "x")),
     record_schema("R", ("a", "int")), True, True),
    ("promote int to long", BASE, record_schema("R", ("a", "long"), ("b", "string")), True, False),
    ("promote int to double", BASE, record_schema("R", ("a", "double"), ("b", "string")),
     True, False),
    ("promote float to double", "\"float\"", "\"double\"", True, False),
    ("demote long to int", record_schema("R", ("a", "long")), record_schema("R", ("a", "int")),
     False, True),
    ("string and bytes", BASE, record_schema("R", ("a", "int"), ("b", "bytes")), True, True),
    ("change int to string", BASE, record_schema("R", ("a", "string"), ("b", "string")),
     False, False),
    ("widen to a union", BASE, record_schema("R", ("a", "int"), ("b", ["null", "string"])),
     True, False),
    ("union gains a branch", record_schema("R", ("u", ["int", "string"])),
     record_schema("R", ("u", ["int", "string", "boolean"])), True, False),
    ("union to promotable branch", "[\"int\", \"null\"]", "[\"long\", \"null\"]", True, False),
    ("enum symbol added", enum("RED", "GREEN"), enum("RED", "GREEN", "BLUE"), True, False),
    ("enum symbol added, old reader has a default", enum("RED", "GREEN", default="RED"),
     enum("RED", "GREEN", "BLUE"), True, True),
    ("enum renamed", enum("RED"), {**enum("RED"), "name": "Colour"}, False, False),
    ("fixed size changed", {"type": "fixed", "name": "F", "size": 4},
     {"type": "fixed", "name": "F", "size": 8}, False, False),
    ("array items promoted", {"type": "array", "items": "int"},
     {"type": "array", "items": "long"}, True, False),
    ("map values changed", {"type": "map", "values": "int"},
     {"type": "map", "values": "boolean"}, False, False),
    ("array to map", {"type": "array", "items": "int"}, {"type": "map", "values": "int"},
     False, False),
    ("record renamed", BASE, record_schema("S", ("a", "int"), ("b", "string")), False, False),
    ("record renamed with an alias",
     BASE, json.dumps({**json.loads(record_schema("S", ("a", "int"), ("b", "string"))),
                       "aliases": ["R"]}), True, False),
    ("namespace changed", BASE,
     json.dumps({**json.loads(BASE), "namespace": "com.example"}), True, True),
    ("field renamed with an alias", BASE,
     json.dumps({"type": "record", "name": "R", "fields": [
         {"name": "a", "type": "int"}, {"name": "bee", "type": "string", "aliases": ["b"]}]}),
     True, False),
    ("nested record gains a field with default",
     record_schema("Outer", ("inner", json.loads(record_schema("Inner", ("x", "int"))))),
     record_schema("Outer", ("inner", json.loads(
         record_schema("Inner", ("x", "int"), ("y", "string", ""))))), True, True),
    ("nested record field type changes",
     record_schema("Outer", ("inner", json.loads(record_schema("Inner", ("x", "int"))))),
     record_schema("Outer", ("inner", json.loads(record_schema("Inner", ("x", "boolean"))))),
     False, False),
    ("recursive type gains a field with default", linked_list(),
     linked_list({"name": "label", "type": "string", "default": ""}), True, True),
    ("recursive type gains a field without default", linked_list(),
     linked_list({"name": "label", "type": "string"}), False, True),
    ("logical type over the same base type", "\"int\"",
     {"type": "int", "logicalType": "date"}, True, True),
]  # fmt: skip


@pytest.mark.parametrize(
    ("old", "new", "backward", "forward"),
    [case[1:] for case in EVOLUTIONS],
    ids=[case[0] for case in EVOLUTIONS],
)
def test_resolution_rules(old: Any, new: Any, backward: bool, forward: bool) -> None:
    old_schema, new_schema = avro(old), avro(new)
    assert (not incompatibilities(new_schema, old_schema)) is backward
    assert (not incompatibilities(old_schema, new_schema)) is forward
    for level in CompatibilityLevel:
        expected = (not level.backward or backward) and (not level.forward or forward)
        assert (not check_level(level, new_schema, [(1, old_schema)])) is expected, level


def test_messages_say_where_and_why() -> None:
    old = avro(record_schema("R", ("a", "int")))
    new = avro(record_schema("R", ("a", "int"), ("c", "int")))
    (message,) = check_level(CompatibilityLevel.BACKWARD, new, [(1, old)])
    assert "version 1" in message and "'c'" in message and "no default" in message


# Three versions where only the transitive level sees the problem (v3 against v1).
TRANSITIVE_CASES = {
    CompatibilityLevel.BACKWARD: [
        record_schema("T", ("a", "int")),
        record_schema("T", ("a", "int"), ("b", "string", "x")),
        record_schema("T", ("a", "int"), ("b", "string")),
    ],
    CompatibilityLevel.FORWARD: [
        record_schema("T", ("a", "int"), ("b", "string")),
        record_schema("T", ("a", "int"), ("b", "string", "x")),
        record_schema("T", ("a", "int")),
    ],
    CompatibilityLevel.FULL: [
        record_schema("T", ("a", "int")),
        record_schema("T", ("a", "int"), ("b", "string", "x")),
        record_schema("T", ("a", "int"), ("b", "string")),
    ],
}


@pytest.mark.parametrize("level", list(TRANSITIVE_CASES), ids=lambda level: level.value)
def test_transitive_levels_check_every_version(level: CompatibilityLevel) -> None:
    v1, v2, v3 = (avro(s) for s in TRANSITIVE_CASES[level])
    transitive = CompatibilityLevel(level.value + "_TRANSITIVE")
    assert check_level(level, v2, [(1, v1)]) == []
    assert check_level(level, v3, [(1, v1), (2, v2)]) == []
    problems = check_level(transitive, v3, [(1, v1), (2, v2)])
    assert problems and all("version 1" in p for p in problems)


@pytest.mark.parametrize("level", list(CompatibilityLevel), ids=lambda level: level.value)
def test_levels_over_http(url: str, subject: str, level: CompatibilityLevel) -> None:
    """Each level set on a subject decides registrations: a compatible and an incompatible
    evolution for each (and the transitive levels catch what only the first version breaks)."""
    put = call(url, "PUT", f"/config/{subject}", {"compatibility": level.value})
    assert put.status == 200
    base = level.value.removesuffix("_TRANSITIVE")
    versions = TRANSITIVE_CASES.get(CompatibilityLevel(base)) if base != "NONE" else None
    if versions is None:  # NONE: anything goes, even an unrelated type
        versions = [record_schema("T", ("a", "int")), '"string"', '"boolean"']
    v1, v2, v3 = versions

    def register(schema: str) -> int:
        return call(url, "POST", f"/subjects/{subject}/versions", {"schema": schema}).status

    assert register(v1) == 200
    assert register(v2) == 200
    assert register(v3) == (409 if level.transitive else 200)
    if level is not CompatibilityLevel.NONE:
        # An evolution this level refuses against the latest version, whatever transitivity.
        breaking = record_schema("T", ("a", "boolean"))
        answer = call(url, "POST", f"/subjects/{subject}/versions", {"schema": breaking})
        assert (answer.status, answer.document["error_code"]) == (409, 409)
        check = call(url, "POST", f"/compatibility/subjects/{subject}/versions/latest",
                     {"schema": breaking})  # fmt: skip
        assert check.document == {"is_compatible": False}
