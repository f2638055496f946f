"""Avro schemas as the registry keeps them: validated by fastavro, with an identity form.

Two registrations are "the same schema" when their identity forms are equal: the JSON with
keys sorted, no whitespace, and ``{"type": "int"}`` written as ``"int"`` (Avro treats them as
the same schema). Docs, defaults and aliases stay in: they change what the schema means to
readers, so schemas differing only there are different schemas, as in Confluent's registry.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

import fastavro

from kayak.registry.errors import invalid_schema

SUPPORTED_TYPES = ("AVRO",)
PRIMITIVES = frozenset({"null", "boolean", "int", "long", "float", "double", "bytes", "string"})
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


@dataclass(frozen=True, slots=True, eq=False)
class AvroSchema:
    """One valid Avro schema: the text served back, its identity, and fastavro's parse."""

    text: str  # the submitted JSON, minified, key order kept
    identity: str
    parsed: Any = field(repr=False)
    named: dict[str, Any] = field(repr=False)  # full name -> definition, for named references


def parse_avro(text: str) -> AvroSchema:
    """Validate ``text`` as an Avro schema; raise the 42201 error naming what is wrong."""
    try:
        document = json.loads(text)
    except (ValueError, RecursionError) as exc:
        raise invalid_schema(f"not JSON: {exc}") from None
    named: dict[str, Any] = {}
    try:
        _check_structure(document)
        parsed = fastavro.parse_schema(document, named, _write_hint=False)
    except Exception as exc:  # fastavro raises many types for bad schemas
        raise invalid_schema(f"{type(exc).__name__}: {exc}") from None
    try:
        identity = json.dumps(_identity_form(document), sort_keys=True, separators=(",", ":"))
        minified = json.dumps(document, separators=(",", ":"), ensure_ascii=False)
    except RecursionError:
        raise invalid_schema("nested too deeply") from None
    return AvroSchema(minified, identity, parsed, named)


def _identity_form(node: Any) -> Any:
    if isinstance(node, dict):
        if set(node) == {"type"} and node["type"] in PRIMITIVES:
            return node["type"]
        return {key: _identity_form(value) for key, value in node.items()}
    if isinstance(node, list):
        return [_identity_form(item) for item in node]
    return node


def _check_structure(node: Any) -> None:
    """What the Avro spec requires and fastavro lets through: record fields present and
    uniquely named, legal names, unions without nested unions or repeated types."""
    if isinstance(node, list):
        seen: set[str] = set()
        for branch in node:
            if isinstance(branch, list):
                raise ValueError("a union may not directly contain another union")
            kind = branch if isinstance(branch, str) else None
            if isinstance(branch, dict):
                kind = branch.get("name") or branch.get("type")
            if isinstance(kind, str):
                if kind in seen:
                    raise ValueError(f"the union contains {kind} twice")
                seen.add(kind)
            _check_structure(branch)
        return
    if not isinstance(node, dict):
        return
    kind = node.get("type")
    if kind in ("record", "error", "enum", "fixed"):
        name = node.get("name")
        if not isinstance(name, str) or not all(_NAME.fullmatch(p) for p in name.split(".")):
            raise ValueError(f"{name!r} is not a legal Avro name")
    if kind in ("record", "error"):
        fields = node.get("fields")
        if not isinstance(fields, list):
            raise ValueError(f"record {node.get('name')!r} needs a list of fields")
        names: set[str] = set()
        for field in fields:
            name = field.get("name") if isinstance(field, dict) else None
            if not isinstance(name, str) or not _NAME.fullmatch(name):
                raise ValueError(f"{name!r} is not a legal field name")
            if name in names:
                raise ValueError(f"record {node['name']!r} has two fields named {name!r}")
            names.add(name)
            _check_structure(field.get("type"))
    elif kind == "array":
        _check_structure(node.get("items"))
    elif kind == "map":
        _check_structure(node.get("values"))
    elif isinstance(kind, (dict, list)):
        _check_structure(kind)
