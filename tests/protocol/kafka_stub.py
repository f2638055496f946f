"""A tiny in-test Kafka broker built on ``ServerConnection``: answers ApiVersions and Metadata.

It exists to prove that real clients (librdkafka, kafka-python, aiokafka) can talk to kayak's
server-side protocol code. It owns no storage: one broker (itself), one topic ``t`` with two
partitions led by node 0. Every request's API key and version is recorded so tests can check
which versions each client chose from what was advertised.
"""

from __future__ import annotations

import contextlib
import socket
import threading
import uuid
from dataclasses import dataclass, field
from types import TracebackType

from kayak.errors import KayakError
from kayak.protocol.connection import ServerConnection
from kayak.protocol.events import RequestReceived, UnsupportedRequest
from kayak.protocol.message import Message
from kayak.protocol.messages import ApiKey
from kayak.protocol.messages.api_versions_response import ApiVersion, ApiVersionsResponse
from kayak.protocol.messages.metadata_request import MetadataRequest
from kayak.protocol.messages.metadata_response import (
    MetadataResponse,
    MetadataResponseBroker,
    MetadataResponsePartition,
    MetadataResponseTopic,
)

UNSUPPORTED_VERSION = 35
UNKNOWN_TOPIC_OR_PARTITION = 3

TOPIC = "t"
TOPIC_ID = uuid.UUID("6b6179616b2d746f7069632d69642121")
PARTITIONS = 2
CLUSTER_ID = "kayak-stub-cluster"
NODE_ID = 0

# A subset of what Kafka 2.8+ advertises: enough for bootstrap and metadata, consistent with a
# real release (kafka-python infers the broker version from these ranges).
ADVERTISED: dict[int, tuple[int, int]] = {
    ApiKey.PRODUCE: (0, 9),
    ApiKey.FETCH: (0, 12),
    ApiKey.LIST_OFFSETS: (0, 6),
    ApiKey.METADATA: (0, 12),
    ApiKey.API_VERSIONS: (0, 3),
}


@dataclass(frozen=True)
class Seen:
    """One request the stub received."""

    api_key: int
    api_version: int
    client_id: str | None
    supported: bool


@dataclass
class StubBroker:
    """Threaded TCP server; use as a context manager. ``port`` is known after ``start``."""

    advertised: dict[int, tuple[int, int]] = field(default_factory=lambda: dict(ADVERTISED))
    host: str = "127.0.0.1"
    port: int = 0
    seen: list[Seen] = field(default_factory=list)
    errors: list[BaseException] = field(default_factory=list)
    _sock: socket.socket | None = None
    _threads: list[threading.Thread] = field(default_factory=list)
    _conns: list[socket.socket] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _stopping: threading.Event = field(default_factory=threading.Event)

    @property
    def bootstrap(self) -> str:
        return f"{self.host}:{self.port}"

    def versions_used(self, api_key: int) -> list[int]:
        """Versions of ``api_key`` requests received, in arrival order."""
        with self._lock:
            return [s.api_version for s in self.seen if s.api_key == api_key]

    def start(self) -> StubBroker:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((self.host, 0))
        sock.listen()
        sock.settimeout(0.2)
        self._sock = sock
        self.port = sock.getsockname()[1]
        self._spawn(self._accept_loop)
        return self

    def stop(self) -> None:
        self._stopping.set()
        with self._lock:
            conns = list(self._conns)
        for conn in conns:
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)
        for t in self._threads:
            t.join(timeout=5)
        if self._sock is not None:
            self._sock.close()

    def __enter__(self) -> StubBroker:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    # -- plumbing ------------------------------------------------------------------------

    def _spawn(self, target: object, *args: object) -> None:
        t = threading.Thread(target=target, args=args, daemon=True)  # type: ignore[arg-type]
        self._threads.append(t)
        t.start()

    def _accept_loop(self) -> None:
        assert self._sock is not None
        while not self._stopping.is_set():
            try:
                conn, _ = self._sock.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            with self._lock:
                self._conns.append(conn)
            self._spawn(self._serve, conn)

    def _serve(self, conn: socket.socket) -> None:
        server = ServerConnection()
        with conn:
            while not self._stopping.is_set():
                try:
                    data = conn.recv(65536)
                except OSError:
                    return
                if not data:
                    return
                server.receive_data(data)
                try:
                    while (event := server.next_event()) is not None:
                        reply = self._answer(server, event)
                        if reply is None:
                            return  # nothing sensible to say: drop the connection
                        conn.sendall(reply)
                except KayakError as exc:
                    with self._lock:
                        self.errors.append(exc)
                    return
                except OSError:
                    return

    # -- request handling ----------------------------------------------------------------

    def _record(self, event: RequestReceived | UnsupportedRequest) -> None:
        if isinstance(event, RequestReceived):
            seen = Seen(event.api_key, event.api_version, event.header.client_id, True)
        else:
            seen = Seen(event.api_key, event.api_version, None, False)
        with self._lock:
            self.seen.append(seen)

    def _answer(
        self, server: ServerConnection, event: RequestReceived | UnsupportedRequest
    ) -> bytes | None:
        self._record(event)
        key, version, corr = event.api_key, event.api_version, event.correlation_id
        lo, hi = self.advertised.get(key, (0, -1))
        if key == ApiKey.API_VERSIONS and not lo <= version <= hi:
            # KIP-511: answer at v0 with our range so the client retries at a version we know.
            return server.send_response(corr, key, 0, self.api_versions(UNSUPPORTED_VERSION))
        if isinstance(event, UnsupportedRequest) or not lo <= version <= hi:
            return None
        response: Message
        if key == ApiKey.API_VERSIONS:
            response = self.api_versions(0)
        elif key == ApiKey.METADATA:
            assert isinstance(event.request, MetadataRequest)
            response = self.metadata(event.request, version)
        else:
            return None
        return server.send_response(corr, key, version, response)

    def api_versions(self, error_code: int) -> ApiVersionsResponse:
        keys = [
            ApiVersion(api_key=k, min_version=lo, max_version=hi)
            for k, (lo, hi) in sorted(self.advertised.items())
        ]
        return ApiVersionsResponse(error_code=error_code, api_keys=keys)

    def metadata(self, request: MetadataRequest, version: int) -> MetadataResponse:
        wanted = request.topics
        if version == 0 and wanted == []:
            wanted = None  # v0 has no null: an empty list means every topic
        topics: list[MetadataResponseTopic] = []
        if wanted is None:
            topics.append(self._topic())
        else:
            for t in wanted:
                if t.name == TOPIC or (t.name is None and t.topic_id == TOPIC_ID):
                    topics.append(self._topic())
                else:
                    topics.append(
                        MetadataResponseTopic(
                            error_code=UNKNOWN_TOPIC_OR_PARTITION, name=t.name, topic_id=t.topic_id
                        )
                    )
        broker = MetadataResponseBroker(node_id=NODE_ID, host=self.host, port=self.port)
        return MetadataResponse(
            brokers=[broker],
            cluster_id=CLUSTER_ID,
            controller_id=NODE_ID,
            topics=topics,
        )

    @staticmethod
    def _topic() -> MetadataResponseTopic:
        partitions = [
            MetadataResponsePartition(
                partition_index=i,
                leader_id=NODE_ID,
                leader_epoch=0,
                replica_nodes=[NODE_ID],
                isr_nodes=[NODE_ID],
            )
            for i in range(PARTITIONS)
        ]
        return MetadataResponseTopic(name=TOPIC, topic_id=TOPIC_ID, partitions=partitions)
