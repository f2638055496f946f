"""The changes the catalog makes to ``topics.json``, as edits of its topic entries.

Each edit runs inside :meth:`~kayak.broker.catalog_store.CatalogStore.commit`, under the
cross-process lock, on the latest document: it checks what only the document can tell
(does the topic exist *now*), replaces entries (never mutates one: the event loop may be
reading the previous document), asks for directory work through the :class:`FilePlan`, and
returns what its caller gets back. A :class:`~kayak.errors.KafkaError` it raises fails that
edit alone.
"""

from __future__ import annotations

import uuid

from kayak.broker.catalog_store import Edit, Entry, FilePlan
from kayak.errors import InvalidPartitionsError, TopicExistsError, UnknownTopicOrPartitionError

MAX_PARTITIONS = 10_000


def create(
    name: str,
    overrides: dict[str, str],
    owners: list[int],
    internal: bool,
    validate_only: bool,
    node_id: int,
) -> Edit:
    """Add the topic (its entry is the result); directories for the partitions ``node_id``
    owns are created with the same directory fsync as the document."""

    def edit(topics: dict[str, Entry], plan: FilePlan) -> object:
        if name in topics:
            raise TopicExistsError(f"topic {name!r} already exists")
        entry: Entry = {
            "id": str(uuid.uuid4()),
            "configs": overrides,
            "owners": owners,
            "epochs": [0] * len(owners),
            "internal": internal,
            "handoffs": {},
        }
        if not validate_only:
            topics[name] = entry
            owned = [i for i, owner in enumerate(owners) if owner == node_id]
            plan.create.extend(plan.partition_dirs(name, owned))
        return entry

    return edit


def delete(name: str, topic_id: str, node_id: int) -> Edit:
    """Remove the topic (if it is still the one with ``topic_id``); the directories of the
    partitions ``node_id`` owns are renamed for deletion before the document is written."""

    def edit(topics: dict[str, Entry], plan: FilePlan) -> object:
        entry = topics.get(name)
        if entry is None or entry["id"] != topic_id:
            raise UnknownTopicOrPartitionError(f"topic {name!r} does not exist")
        del topics[name]
        owned = [i for i, owner in enumerate(entry["owners"]) if owner == node_id]
        plan.doomed.extend(plan.partition_dirs(name, owned))
        return None

    return edit


def grow(name: str, total: int, validate_only: bool, shard_count: int, node_id: int) -> Edit:
    """Grow the topic to ``total`` partitions (never shrink, as in Kafka), round-robin."""

    def edit(topics: dict[str, Entry], plan: FilePlan) -> object:
        entry = _existing(topics, name)
        count = len(entry["owners"])
        if not count < total <= MAX_PARTITIONS:
            raise InvalidPartitionsError(
                f"topic {name!r} has {count} partitions; {total} is not more"
            )
        if validate_only:
            return None
        added = [i % shard_count for i in range(count, total)]
        epochs = list(entry.get("epochs", [0] * count))
        topics[name] = {**entry, "owners": [*entry["owners"], *added],
                        "epochs": epochs + [0] * len(added)}  # fmt: skip
        owned = [count + i for i, owner in enumerate(added) if owner == node_id]
        plan.create.extend(plan.partition_dirs(name, owned))
        return None

    return edit


def reconfigure(name: str, overrides: dict[str, str], validate_only: bool) -> Edit:
    """Replace the topic's config overrides (AlterConfigs semantics: not merged)."""
    configs = dict(overrides)

    def edit(topics: dict[str, Entry], plan: FilePlan) -> object:
        entry = _existing(topics, name)
        if not validate_only:
            topics[name] = {**entry, "configs": configs}
        return None

    return edit


def request_handoff(name: str, index: int, target: int) -> Edit:
    """Ask the owner of ``name-index`` to hand it to shard ``target``."""

    def edit(topics: dict[str, Entry], plan: FilePlan) -> object:
        entry = topics.get(name)
        if entry is None or not 0 <= index < len(entry["owners"]):
            raise UnknownTopicOrPartitionError(f"{name}-{index} does not exist")
        if entry.get("internal"):
            raise InvalidPartitionsError(f"{name} is internal; its partitions do not move")
        if entry["owners"][index] != target:
            handoffs = {**entry.get("handoffs", {}), str(index): target}
            topics[name] = {**entry, "handoffs": handoffs}
        return None

    return edit


def complete_handoff(name: str, index: int, target: int) -> Edit:
    """Give ``name-index`` to ``target`` (a new leader epoch), if still asked for."""

    def edit(topics: dict[str, Entry], plan: FilePlan) -> object:
        entry = topics.get(name)
        handoffs = dict(entry.get("handoffs", {})) if entry is not None else {}
        if entry is None or handoffs.get(str(index)) != target:
            return None
        del handoffs[str(index)]
        owners, epochs = list(entry["owners"]), list(entry["epochs"])
        owners[index] = target
        epochs[index] += 1
        topics[name] = {**entry, "owners": owners, "epochs": epochs, "handoffs": handoffs}
        return None

    return edit


def _existing(topics: dict[str, Entry], name: str) -> Entry:
    entry = topics.get(name)
    if entry is None:
        raise UnknownTopicOrPartitionError(f"topic {name!r} does not exist")
    return entry
