"""A tiny single-broker Kafka stand-in that records what real clients produce.

It speaks just enough of the protocol, hand-encoded with ``kayak.protocol.primitives``, for
``confluent_kafka`` (librdkafka) and ``kafka-python`` to produce and consume: ApiVersions
(v0-v3), Metadata (v1-v8), FindCoordinator (v0-v2), InitProducerId (v0-v1), Produce (v3-v8)
and Fetch (v4-v11). Every
Produce request's ``records`` bytes are kept, untouched, in ``produced``; Fetch serves whatever
a test put in ``log``. All listening is on 127.0.0.1, and every wait is bounded.
"""

from __future__ import annotations

import contextlib
import socket
import struct
import threading
import time
from dataclasses import dataclass, field
from types import TracebackType

from kayak.protocol.primitives import (
    INT16,
    INT32,
    INT64,
    read_array_length,
    read_compact_string,
    read_nullable_bytes,
    read_nullable_string,
    read_string,
    skip_tagged_fields,
    write_nullable_bytes,
    write_nullable_string,
    write_string,
    write_unsigned_varint,
)
from kayak.protocol.records import scan_batches

PRODUCE, FETCH, METADATA, FIND_COORDINATOR, API_VERSIONS, INIT_PRODUCER_ID = 0, 1, 3, 10, 18, 22
# librdkafka only compresses with lz4 when the broker has FindCoordinator (its sign of a
# broker >= 0.9), so that is here too, answering "this broker" for every key.
SUPPORTED = {
    FIND_COORDINATOR: (0, 2),
    PRODUCE: (3, 8),
    FETCH: (4, 11),
    METADATA: (1, 8),
    API_VERSIONS: (0, 3),
    INIT_PRODUCER_ID: (0, 1),
}
NODE_ID = 0
PRODUCER_ID = 4242
UNSUPPORTED_VERSION = 35


@dataclass
class Request:
    api_key: int
    version: int
    correlation_id: int
    body: memoryview
    pos: int


@dataclass
class CaptureBroker:
    """Listens on 127.0.0.1 in background threads until the ``with`` block ends."""

    topic: str = "captured"
    produced: list[bytes] = field(default_factory=list)
    log: bytes = b""
    requests: list[tuple[int, int]] = field(default_factory=list)
    _server: socket.socket | None = None
    _threads: list[threading.Thread] = field(default_factory=list)
    _connections: list[socket.socket] = field(default_factory=list)
    _stopping: threading.Event = field(default_factory=threading.Event)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    port: int = 0

    def __enter__(self) -> CaptureBroker:
        server = socket.create_server(("127.0.0.1", 0))
        server.settimeout(0.2)
        self._server = server
        self.port = server.getsockname()[1]
        self._spawn(self._accept_loop)
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._stopping.set()
        if self._server is not None:
            self._server.close()
        with self._lock:
            for conn in self._connections:
                with contextlib.suppress(OSError):
                    conn.shutdown(socket.SHUT_RDWR)
                conn.close()
        for thread in self._threads:
            thread.join(timeout=5)

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def wait_for_records(self, count: int, timeout: float = 20.0) -> None:
        """Block until ``count`` records have been produced (or the timeout passes)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self._lock:
                produced = sum(h.record_count for b in self.produced for h in scan_batches(b))
            if produced >= count:
                return
            time.sleep(0.02)
        raise TimeoutError(f"only {produced} of {count} records arrived")

    # -- plumbing ------------------------------------------------------------------------------

    def _spawn(self, target: object, *args: object) -> None:
        thread = threading.Thread(target=target, args=args, daemon=True)  # type: ignore[arg-type]
        thread.start()
        self._threads.append(thread)

    def _accept_loop(self) -> None:
        assert self._server is not None
        while not self._stopping.is_set():
            try:
                conn, _ = self._server.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            conn.settimeout(30)
            with self._lock:
                self._connections.append(conn)
            self._spawn(self._serve, conn)

    def _serve(self, conn: socket.socket) -> None:
        with contextlib.suppress(OSError, ConnectionError):
            while not self._stopping.is_set():
                size_bytes = _recv_exactly(conn, 4)
                if size_bytes is None:
                    return
                frame = _recv_exactly(conn, INT32.unpack(size_bytes)[0])
                if frame is None:
                    return
                response = self._handle(frame)
                if response is not None:
                    conn.sendall(INT32.pack(len(response)) + response)

    def _handle(self, frame: bytes) -> bytes | None:
        request = _parse_header(frame)
        with self._lock:
            self.requests.append((request.api_key, request.version))
        handler = {
            API_VERSIONS: self._api_versions,
            METADATA: self._metadata,
            PRODUCE: self._produce,
            INIT_PRODUCER_ID: self._init_producer_id,
            FETCH: self._fetch,
            FIND_COORDINATOR: self._find_coordinator,
        }.get(request.api_key)
        if handler is None:
            return None  # unknown API: the client times the request out, which is harmless
        body = handler(request)
        # Response header v1 (with tagged fields) only for flexible versions; ApiVersions
        # always answers with header v0.
        header = INT32.pack(request.correlation_id)
        if request.api_key != API_VERSIONS and _is_flexible(request.api_key, request.version):
            header += b"\x00"
        return header + body

    # -- handlers ------------------------------------------------------------------------------

    def _api_versions(self, request: Request) -> bytes:
        out = bytearray()
        low, high = SUPPORTED[API_VERSIONS]
        if not low <= request.version <= high:
            # Answer in v0 so any client can read the error and retry with a lower version.
            out += INT16.pack(UNSUPPORTED_VERSION)
            out += INT32.pack(1) + INT16.pack(API_VERSIONS) + INT16.pack(low) + INT16.pack(high)
            return bytes(out)
        flexible = request.version >= 3
        out += INT16.pack(0)
        if flexible:
            write_unsigned_varint(out, len(SUPPORTED) + 1)
        else:
            out += INT32.pack(len(SUPPORTED))
        for api_key, (low, high) in SUPPORTED.items():
            out += INT16.pack(api_key) + INT16.pack(low) + INT16.pack(high)
            if flexible:
                out.append(0)
        if request.version >= 1:
            out += INT32.pack(0)
        if flexible:
            out.append(0)
        return bytes(out)

    def _metadata(self, request: Request) -> bytes:
        v = request.version
        buf, pos = request.body, request.pos
        count, pos = read_array_length(buf, pos, compact=False)
        names = []
        for _ in range(max(count, 0)):
            name, pos = read_string(buf, pos)
            names.append(name)
        out = bytearray()
        if v >= 3:
            out += INT32.pack(0)  # throttle
        out += INT32.pack(1)  # brokers
        out += INT32.pack(NODE_ID)
        write_string(out, "127.0.0.1")
        out += INT32.pack(self.port)
        write_nullable_string(out, None)  # rack
        if v >= 2:
            write_nullable_string(out, "capture-cluster")
        out += INT32.pack(NODE_ID)  # controller
        topics = names or [self.topic]
        out += INT32.pack(len(topics))
        for name in topics:
            out += INT16.pack(0)
            write_string(out, name)
            out += b"\x00"  # is_internal
            out += INT32.pack(1)  # partitions
            out += INT16.pack(0) + INT32.pack(0) + INT32.pack(NODE_ID)
            if v >= 7:
                out += INT32.pack(0)  # leader epoch
            out += INT32.pack(1) + INT32.pack(NODE_ID)  # replicas
            out += INT32.pack(1) + INT32.pack(NODE_ID)  # isr
            if v >= 5:
                out += INT32.pack(0)  # offline replicas
            if v >= 8:
                out += INT32.pack(-2147483648)  # topic authorized operations
        if v >= 8:
            out += INT32.pack(-2147483648)  # cluster authorized operations
        return bytes(out)

    def _find_coordinator(self, request: Request) -> bytes:
        out = bytearray()
        if request.version >= 1:
            out += INT32.pack(0)  # throttle
        out += INT16.pack(0)
        if request.version >= 1:
            write_nullable_string(out, None)
        out += INT32.pack(NODE_ID)
        write_string(out, "127.0.0.1")
        out += INT32.pack(self.port)
        return bytes(out)

    def _init_producer_id(self, request: Request) -> bytes:
        return INT32.pack(0) + INT16.pack(0) + INT64.pack(PRODUCER_ID) + INT16.pack(0)

    def _produce(self, request: Request) -> bytes:
        v = request.version
        buf, pos = request.body, request.pos
        _, pos = read_nullable_string(buf, pos)  # transactional id
        pos += 2 + 4  # acks, timeout
        responses = []
        topic_count, pos = read_array_length(buf, pos, compact=False)
        for _ in range(topic_count):
            name, pos = read_string(buf, pos)
            partition_count, pos = read_array_length(buf, pos, compact=False)
            partitions = []
            for _ in range(partition_count):
                (index,), pos = struct.unpack_from(">i", buf, pos), pos + 4
                records, pos = read_nullable_bytes(buf, pos)
                base_offset = self._append(records or b"")
                partitions.append((index, base_offset))
            responses.append((name, partitions))
        out = bytearray(INT32.pack(len(responses)))
        for name, partitions in responses:
            write_string(out, name)
            out += INT32.pack(len(partitions))
            for index, base_offset in partitions:
                out += INT32.pack(index) + INT16.pack(0) + INT64.pack(base_offset)
                out += INT64.pack(-1)  # log append time
                if v >= 5:
                    out += INT64.pack(0)  # log start offset
                if v >= 8:
                    out += INT32.pack(0)  # record errors
                    write_nullable_string(out, None)
        out += INT32.pack(0)  # throttle
        return bytes(out)

    def _append(self, records: bytes) -> int:
        with self._lock:
            base_offset = sum(h.record_count for b in self.produced for h in scan_batches(b))
            self.produced.append(records)
        return base_offset

    def _fetch(self, request: Request) -> bytes:
        v = request.version
        buf, pos = request.body, request.pos
        pos += 4 + 4 + 4  # replica id, max wait, min bytes
        max_wait_ms = INT32.unpack_from(buf, pos - 8)[0]
        pos += 4 + 1  # max bytes, isolation level
        if v >= 7:
            pos += 8  # session id and epoch
        topic_count, pos = read_array_length(buf, pos, compact=False)
        wanted = []
        for _ in range(topic_count):
            name, pos = read_string(buf, pos)
            partition_count, pos = read_array_length(buf, pos, compact=False)
            for _ in range(partition_count):
                index = INT32.unpack_from(buf, pos)[0]
                pos += 4 + (4 if v >= 9 else 0)
                fetch_offset = INT64.unpack_from(buf, pos)[0]
                pos += 8 + (8 if v >= 5 else 0) + 4
                wanted.append((name, index, fetch_offset))
        log_end = sum(h.record_count for h in scan_batches(self.log))
        chunks = []
        for name, index, fetch_offset in wanted:
            chunks.append((name, index, self._log_from(fetch_offset)))
        if all(not records for _, _, records in chunks):
            time.sleep(min(max_wait_ms, 100) / 1000)
        out = bytearray(INT32.pack(0))  # throttle
        if v >= 7:
            out += INT16.pack(0) + INT32.pack(0)  # error, session id
        out += INT32.pack(len(chunks))
        for name, index, records in chunks:
            write_string(out, name)
            out += INT32.pack(1)
            out += INT32.pack(index) + INT16.pack(0)
            out += INT64.pack(log_end) + INT64.pack(log_end)  # high watermark, last stable
            if v >= 5:
                out += INT64.pack(0)  # log start
            out += INT32.pack(-1)  # aborted transactions: null
            if v >= 11:
                out += INT32.pack(-1)  # preferred read replica
            write_nullable_bytes(out, records)
        return bytes(out)

    def _log_from(self, fetch_offset: int) -> bytes:
        for header in scan_batches(self.log):
            if header.last_offset >= fetch_offset:
                return self.log[header.position :]
        return b""


def _is_flexible(api_key: int, version: int) -> bool:
    first_flexible = {
        API_VERSIONS: 3,
        METADATA: 9,
        PRODUCE: 9,
        FETCH: 12,
        INIT_PRODUCER_ID: 2,
        FIND_COORDINATOR: 3,
    }
    return version >= first_flexible.get(api_key, 1 << 15)


def _parse_header(frame: bytes) -> Request:
    buf = memoryview(frame)
    api_key, version, correlation_id = struct.unpack_from(">hhi", buf, 0)
    _, pos = read_nullable_string(buf, 8)  # client id
    if _is_flexible(api_key, version):
        pos = skip_tagged_fields(buf, pos)
    if api_key == API_VERSIONS and version >= 3:
        _, pos = read_compact_string(buf, pos)  # client software name
    return Request(api_key, version, correlation_id, buf, pos)


def _recv_exactly(conn: socket.socket, size: int) -> bytes | None:
    chunks = []
    while size:
        try:
            chunk = conn.recv(min(size, 1 << 20))
        except TimeoutError:
            return None
        if not chunk:
            return None
        chunks.append(chunk)
        size -= len(chunk)
    return b"".join(chunks)
