"""Topics only the broker itself writes: no client may produce to, delete, grow or create them.

``__consumer_offsets`` holds committed offsets, ``_schemas`` the schema registry and
``__transaction_state`` the transaction coordinator's decisions; the broker replays them at
start, so a foreign record there could keep it from starting. The
broker appends to them through the catalog, never through the Produce handler, so refusing
every client request that would change them costs the broker nothing.

The names are spelled out here (and checked against their owners by the tests) so that this
module stays free of the offsets and registry code.
"""

from __future__ import annotations

CONSUMER_OFFSETS = "__consumer_offsets"
SCHEMAS = "_schemas"
TRANSACTION_STATE = "__transaction_state"

INTERNAL_TOPICS = frozenset({CONSUMER_OFFSETS, SCHEMAS, TRANSACTION_STATE})


def is_internal_topic(name: str | None) -> bool:
    """Whether ``name`` is a topic no client may write, delete, grow or create."""
    return name in INTERNAL_TOPICS
