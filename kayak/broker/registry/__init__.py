"""The Confluent-compatible schema registry the broker serves over HTTP (AVRO schemas).

The registry itself (schemas, compatibility, the REST API, the state ``_schemas`` is made of)
is :mod:`kayak.registry`, shared with the standalone ``kayak registry``. Here: ``store``, its
state written through the broker's own log; ``service``, all of it as one broker extension,
served by :mod:`kayak.broker.web` (aiohttp) with the broker's TLS, users and roles.
"""

from __future__ import annotations

from kayak.broker.registry.service import SchemaRegistry

__all__ = ["SchemaRegistry"]
