"""What a request handler can reach: the broker's shared state and who is asking."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from kayak.broker.catalog import TopicCatalog
from kayak.broker.config import BrokerConfig
from kayak.broker.log import GroupCommit, LogWriter
from kayak.broker.shards import ShardAddress, ShardRegistry
from kayak.protocol.messages.request_header import RequestHeader

if TYPE_CHECKING:
    from kayak.broker.group import GroupCoordinator
    from kayak.broker.log.producer_state import ProducerIdAllocator
    from kayak.broker.security.acls import Authorizer
    from kayak.broker.security.authenticator import SaslAuthenticator
    from kayak.broker.security.credentials import CredentialStore
    from kayak.broker.security.session import ConnectionSession
    from kayak.broker.txn.coordinator import TransactionCoordinator
    from kayak.broker.txn.markers import MarkerWriter


@dataclass(eq=False)
class BrokerContext:
    """State every connection shares."""

    config: BrokerConfig
    catalog: TopicCatalog
    writer: LogWriter  # every append goes through it: durability and fetchers' wake-ups
    cluster_id: str
    host: str = "127.0.0.1"
    port: int = 0
    shards: ShardRegistry | None = None
    coordinator: GroupCoordinator | None = None
    producer_ids: ProducerIdAllocator | None = None
    transactions: TransactionCoordinator | None = None  # for the ids that hash to this shard
    markers: MarkerWriter | None = None  # transaction markers into this shard's partitions
    credentials: CredentialStore | None = None  # SASL/SCRAM users
    authenticator: SaslAuthenticator | None = None  # SASL exchanges, failed-login limits
    authorizer: Authorizer | None = None  # ACLs

    @property
    def node_id(self) -> int:
        return self.config.node_id

    @property
    def commit(self) -> GroupCommit:
        """The writer's group commit (what drains a partition before a handoff)."""
        return self.writer.commit

    def cluster(self) -> list[ShardAddress]:
        """Every shard's address (just this broker's when it runs alone)."""
        me = ShardAddress(self.node_id, self.host, self.port)
        if self.shards is None:
            return [me]
        return self.shards.shards() or [me]

    def address_of(self, node_id: int) -> ShardAddress | None:
        if node_id == self.node_id:
            return ShardAddress(node_id, self.host, self.port)
        return self.shards.address(node_id) if self.shards is not None else None

    def coordinator_for(self, group: str) -> int:
        return self.shards.coordinator_for(group) if self.shards is not None else self.node_id


@dataclass(frozen=True, slots=True)
class RequestContext:
    """One request's view: the broker, the request header, the client's address, and the
    connection's security session (listener, principal)."""

    broker: BrokerContext
    header: RequestHeader
    client_host: str
    session: ConnectionSession | None = None

    @property
    def version(self) -> int:
        return self.header.request_api_version

    @property
    def client_id(self) -> str:
        return self.header.client_id or ""
