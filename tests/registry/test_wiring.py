"""How the registry is switched on: off by default when embedded, shard 0 only when sharded."""

from __future__ import annotations

import asyncio
from pathlib import Path

from kayak.broker import Broker
from kayak.serde import SchemaRegistryClient
from tests.broker.conftest import BrokerProcess
from tests.registry.conftest import call, record_schema, registry_url


def test_embedded_broker_serves_a_registry_only_when_asked(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with Broker(tmp_path / "plain", port=0) as plain:
            assert plain.schema_registry_url is None
            assert plain.context is not None and plain.context.catalog.get("_schemas") is None
        async with Broker(tmp_path / "with", port=0, schema_registry_port=0) as broker:
            url = broker.schema_registry_url
            assert url is not None and url.startswith("http://127.0.0.1:")
            assert broker.context is not None
            catalog = broker.context.catalog
            assert catalog.get("_schemas") is None  # created by the first change, not at start
            client = SchemaRegistryClient(url)
            assert await asyncio.to_thread(client.subjects) == []
            schema_id = await asyncio.to_thread(client.register, "s", '"string"')
            assert catalog.get("_schemas") is not None
            assert await asyncio.to_thread(client.subjects) == ["s"]
        assert broker.schema_registry_url is None  # stopped with the broker
        async with Broker(tmp_path / "with", port=0, schema_registry_port=0) as again:
            assert again.schema_registry_url is not None
            client = SchemaRegistryClient(again.schema_registry_url)
            assert (await asyncio.to_thread(client.latest_version, "s")).schema_id == schema_id

    asyncio.run(scenario())


def test_sharded_broker_serves_one_registry_from_shard_0(tmp_path: Path) -> None:
    broker = BrokerProcess(tmp_path / "data", extra_args=["--shards", "2"], web=True).start()
    try:
        # Both shards log to the same file; wait until both are up, then count.
        for _ in range(200):
            if broker.log_text().count("listening on") >= 2:
                break
            asyncio.run(asyncio.sleep(0.05))
        assert broker.log_text().count("schema registry on") == 1
        url = registry_url(broker)
        schema = record_schema("Sharded", ("x", "int"))
        assert call(url, "POST", "/subjects/s/versions", {"schema": schema}).document == {"id": 1}
    finally:
        broker.stop()
