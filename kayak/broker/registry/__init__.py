"""The Confluent-compatible schema registry the broker serves over HTTP (AVRO schemas).

``schema``: validation and identity; ``compatibility``: Avro schema resolution and the
compatibility levels; ``store``: durable state in the ``_schemas`` topic; ``api``: the REST
routes; ``service``: all of it as one broker extension, served by :mod:`kayak.broker.web`
(aiohttp) with the broker's TLS, users and roles.
"""

from __future__ import annotations

from kayak.broker.registry.service import SchemaRegistry

__all__ = ["SchemaRegistry"]
