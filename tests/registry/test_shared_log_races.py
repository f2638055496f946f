"""Registries sharing one ``_schemas`` log: a change decided on a stale state never stands.

The stores here keep the log in a list both share, so the race (two registries deciding on
the same state, one writing first) happens at a chosen moment instead of by luck; the real
cluster-backed store is exercised the same way in ``test_cluster_registry.py``.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable

from kayak.registry.schema import AvroSchema, parse_avro
from kayak.registry.store import RegistryStore

Log = list[tuple[bytes, bytes | None]]


class SharedLogStore(RegistryStore):
    """A store on a log (a list) other stores append to as well."""

    def __init__(self, log: Log) -> None:
        super().__init__()
        self.log = log
        self.applied = 0
        self.stale_once = False  # the next refresh reads nothing: another's write is unseen
        self.commits = 0
        # Run before this store's commit number n (from 1): another registry writing then.
        self.before_commit: dict[int, Callable[[], Awaitable[object]]] = {}

    def _read_to_end(self) -> None:
        while self.applied < len(self.log):
            key, value = self.log[self.applied]
            self.apply_record(key, value, self.applied)
            self.applied += 1

    async def _refresh(self) -> None:
        if self.stale_once:
            self.stale_once = False
            return
        self._read_to_end()

    async def _commit(self, keys: list[bytes], values: list[bytes | None]) -> None:
        self.commits += 1
        meanwhile = self.before_commit.pop(self.commits, None)
        if meanwhile is not None:
            await meanwhile()
        self.log.extend(zip(keys, values, strict=True))
        self._read_to_end()


def record(name: str) -> AvroSchema:
    return parse_avro(json.dumps({"type": "record", "name": name, "fields": []}))


def no_check(_schema: AvroSchema, _live: list[tuple[int, AvroSchema]]) -> list[str]:
    return []


def replayed(log: Log) -> SharedLogStore:
    store = SharedLogStore(log)
    store._read_to_end()
    return store


def compacted(log: Log) -> Log:
    """What the log cleaner leaves: each key's latest record (tombstones too, for a while)."""
    latest = {key: index for index, (key, _) in enumerate(log)}
    return [entry for index, entry in enumerate(log) if latest[entry[0]] == index]


def test_a_registration_decided_on_a_stale_state_is_decided_again() -> None:
    log: Log = []
    first, second = SharedLogStore(log), SharedLogStore(log)

    async def race() -> tuple[int, int, int, int]:
        a = await first.register("orders", record("A"), no_check)
        second.stale_once = True  # decides as if "orders" were still empty
        b = await second.register("orders", record("B"), no_check)
        c = await second.register("other", record("C"), no_check)
        first.stale_once = True  # "other" version 1 and ids 2 and 3 are taken unseen
        d = await first.register("other", record("D"), no_check)
        return a.schema_id, b.schema_id, c.schema_id, d.schema_id

    ids = asyncio.run(race())
    assert len(set(ids)) == 4, f"one id handed out for two schemas: {ids}"
    for name, store in [("first", first), ("second", second), ("replayed", replayed(log)),
                        ("compacted", replayed(compacted(log)))]:  # fmt: skip
        store._read_to_end()  # what the other wrote last
        by_id = {i: store.schema(i).text for i in ids}
        assert by_id == {
            ids[0]: record("A").text, ids[1]: record("B").text,
            ids[2]: record("C").text, ids[3]: record("D").text,
        }, name  # fmt: skip
        assert [v.schema.text for v in store.versions("orders")] == [
            record("A").text, record("B").text,
        ]  # fmt: skip


def test_a_rejected_record_cannot_resurface_when_the_winner_is_hard_deleted() -> None:
    log: Log = []
    first, second = SharedLogStore(log), SharedLogStore(log)

    async def scenario() -> tuple[int, int]:
        a = await first.register("s1", record("A"), no_check)
        second.stale_once = True
        await second.register("s2", record("B"), no_check)  # its first try reused A's id
        await first.delete_subject("s1", permanent=False)
        await first.delete_subject("s1", permanent=True)
        b = second.find("s2", record("B"))
        assert b is not None
        return a.schema_id, b.schema_id

    a_id, b_id = asyncio.run(scenario())
    assert a_id != b_id
    after = replayed(compacted(log))
    assert after.find("s2", record("B")) is not None
    assert [v.schema_id for v in after.versions("s2")] == [b_id]
    assert after.usages(a_id) == [], "the rejected record took the hard-deleted schema's id"


def test_a_repair_never_removes_a_version_another_registry_just_wrote() -> None:
    log: Log = []
    first, second, third = SharedLogStore(log), SharedLogStore(log), SharedLogStore(log)

    async def scenario() -> tuple[int, int, int]:
        x = await third.register("other", record("X"), no_check)
        first.stale_once = True  # takes X's id for Y: rejected, "shared" version 1 stays free
        # Between the rejection and the repair of its key, the second registry writes there.
        first.before_commit[2] = lambda: second.register("shared", record("Z"), no_check)
        y = await first.register("shared", record("Y"), no_check)
        z = second.find("shared", record("Z"))
        assert z is not None
        return x.schema_id, y.schema_id, z.schema_id

    x_id, y_id, z_id = asyncio.run(scenario())
    assert len({x_id, y_id, z_id}) == 3
    for store in (first, second, replayed(log), replayed(compacted(log))):
        store._read_to_end()
        assert [(v.version, v.schema_id) for v in store.versions("shared")] == [
            (1, z_id), (2, y_id),
        ], "the version another registry answered for was removed"  # fmt: skip
