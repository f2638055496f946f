"""Serialization for record values: a schema registry client and Confluent-framed Avro.

Independent of kayak's broker: it works with any Confluent-compatible registry.
"""

from __future__ import annotations

from kayak.serde.avro import AvroDeserializer, AvroSerializer
from kayak.serde.registry import RegisteredSchema, SchemaRegistryClient

__all__ = ["AvroDeserializer", "AvroSerializer", "RegisteredSchema", "SchemaRegistryClient"]
