"""Which shards make up the cluster and where they listen (``shards.json`` in the data dir).

``kayak broker --shards N`` runs N broker processes on one data directory. Each registers its
node id and address here when it starts; Metadata answers list every registered shard. A
group's coordinator is the shard its id hashes to, as Kafka hashes groups to
``__consumer_offsets`` partitions.
"""

from __future__ import annotations

import json
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kayak.broker.log.files import exclusive_lock, write_atomically

SHARDS_FILE = "shards.json"
LOCK_FILE = "shards.lock"


@dataclass(frozen=True, slots=True)
class ShardAddress:
    """Where a shard is reached: ``host:port`` (its first listener) and, per listener name
    (security protocol), the address it advertises on that listener."""

    node_id: int
    host: str
    port: int
    listeners: tuple[tuple[str, str, int], ...] = ()  # (name, advertised host, port)

    def on(self, listener_name: str | None) -> ShardAddress:
        """This shard's address on the listener ``listener_name`` (itself if it has none)."""
        for name, host, port in self.listeners:
            if name == listener_name:
                return ShardAddress(self.node_id, host, port, self.listeners)
        return self


class ShardRegistry:
    """The shards' addresses, shared through the data directory."""

    def __init__(self, data_dir: Path, shard_count: int) -> None:
        self.path = data_dir / SHARDS_FILE
        self._lock_path = data_dir / LOCK_FILE
        self.shard_count = shard_count
        self._mtime_ns = -1
        self._shards: dict[int, ShardAddress] = {}

    def register(self, address: ShardAddress) -> None:
        """Record where this shard listens (replacing what an earlier run wrote)."""
        with exclusive_lock(self._lock_path):
            self._load(force=True)
            self._shards[address.node_id] = address
            shards = {
                str(a.node_id): [a.host, a.port, {name: [h, p] for name, h, p in a.listeners}]
                for a in self._shards.values()
            }
            write_atomically(self.path, json.dumps({"shards": shards}))

    def _load(self, force: bool = False) -> None:
        try:
            mtime = self.path.stat().st_mtime_ns
        except FileNotFoundError:
            return
        if mtime == self._mtime_ns and not force:
            return
        self._mtime_ns = mtime
        saved = json.loads(self.path.read_text())["shards"]
        self._shards = {
            int(node): _address(int(node), entry)
            for node, entry in saved.items()
            if int(node) < self.shard_count
        }

    def shards(self) -> list[ShardAddress]:
        """Every registered shard, by node id."""
        self._load()
        return sorted(self._shards.values(), key=lambda a: a.node_id)

    def address(self, node_id: int) -> ShardAddress | None:
        self._load()
        return self._shards.get(node_id)

    def coordinator_for(self, group: str) -> int:
        """The shard coordinating ``group`` (and holding its committed offsets)."""
        return zlib.crc32(group.encode()) % self.shard_count


def _address(node_id: int, entry: list[Any]) -> ShardAddress:
    """One saved shard: ``[host, port]`` (before listeners) or ``[host, port, listeners]``."""
    listeners: dict[str, list[Any]] = entry[2] if len(entry) > 2 else {}
    return ShardAddress(
        node_id,
        entry[0],
        int(entry[1]),
        tuple((name, host, int(port)) for name, (host, port) in listeners.items()),
    )
