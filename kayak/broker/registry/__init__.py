"""The Confluent-compatible schema registry the broker serves over HTTP (AVRO schemas).

``schema``: validation and identity; ``compatibility``: Avro schema resolution and the
compatibility levels; ``store``: durable state in the ``_schemas`` topic; ``http``: a small
HTTP/1.1 server; ``api``: the REST routes; ``service``: all of it as one broker extension.
"""

from __future__ import annotations

from kayak.broker.registry.service import SchemaRegistry

__all__ = ["SchemaRegistry"]
