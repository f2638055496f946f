"""``alter_configs(incremental=False)`` (AlterConfigs: read every override, send them all back)
made back to back: each replacement must keep the alterations made just before it.

Apache Kafka acknowledges an alteration once its controller has it, and its broker applies
it a moment later: a describe right after may still show the old overrides, and a
replacement built on that read would drop the alteration just made.
"""

from __future__ import annotations

import asyncio
import time
import uuid

import pytest

from kayak.client.admin import Admin, NewTopic
from tests.client.conftest import RunningBroker

pytestmark = pytest.mark.timeout(120)

# Each set by its own replacing alteration, one right after the other: the first value in
# a first round, the second in a second.
CHANGES = [
    ("retention.ms", "7000", "8000"),
    ("segment.bytes", "2097152", "3145728"),
    ("cleanup.policy", "compact", "compact,delete"),
    ("max.message.bytes", "200000", "300000"),
    ("retention.bytes", "123456789", "223456789"),
    ("segment.ms", "3600000", "7200000"),
    ("min.cleanable.dirty.ratio", "0.3", "0.4"),
    ("delete.retention.ms", "4000", "5000"),
]
FIRST = {name: first for name, first, _ in CHANGES}
SECOND: dict[str, str | None] = {name: second for name, _, second in CHANGES}
FINAL = {**SECOND, "cleanup.policy": None, "retention.ms": "9000"}


async def _settled(admin: Admin, topic: str, wanted: dict[str, str | None]
                   ) -> dict[str, str | None]:  # fmt: skip
    """The overrides of ``wanted``'s keys (None: not overridden) once they equal ``wanted``,
    or as they are after 15 s: Apache Kafka shows an alteration a moment after its answer."""
    deadline = time.monotonic() + 15
    while True:
        entries = await admin.describe_configs(topic, list(wanted))
        shown = {k: entries[k].value if k in entries and entries[k].is_override else None
                 for k in wanted}  # fmt: skip
        if shown == wanted or time.monotonic() > deadline:
            return shown
        await asyncio.sleep(0.05)


def test_back_to_back_replacing_alterations_keep_each_other(
    kafka_cluster: RunningBroker,
) -> None:
    # Two topics: a read goes stale only now and then, and each topic is a new chance.
    topics = [f"replace-{uuid.uuid4().hex[:6]}" for _ in range(2)]

    async def scenario() -> list[dict[str, str | None]]:
        config = {"request_timeout_ms": 10000, "default_api_timeout_ms": 30000}
        shown: list[dict[str, str | None]] = []
        async with Admin(bootstrap_servers=kafka_cluster.bootstrap_servers, **config) as admin:
            await admin.create_topics([NewTopic(topic, 1, 1) for topic in topics])
            for topic in topics:
                for wanted in (FIRST, SECOND):  # new overrides, then each changed
                    for name, value in wanted.items():
                        await admin.alter_configs(topic, {name: value}, incremental=False)
                    shown.append(await _settled(admin, topic, wanted))
                # A deletion, then at once another replacement: the deletion must hold too.
                await admin.alter_configs(topic, {"cleanup.policy": None}, incremental=False)
                await admin.alter_configs(topic, {"retention.ms": "9000"}, incremental=False)
                shown.append(await _settled(admin, topic, FINAL))
        return shown

    assert asyncio.run(scenario()) == [FIRST, SECOND, FINAL] * len(topics)
