"""Shared pieces of the third-party interop tests (``test_interop_*.py``); holds no tests.

- :func:`create_topic`: make a topic through kayak's own wire client, so a scenario does not
  depend on the admin API of the client under test.
- :func:`run_isolated`: run a scenario in a fresh child process, so a client that crashes
  (librdkafka aborts or segfaults on some protocol bugs) fails the test instead of killing
  pytest. The child's exception, with its traceback, is raised again in the parent.
- :class:`EmbeddedBrokerProcess`: a broker subprocess built from ``kayak.broker.Broker`` with
  settings the CLI does not expose (the retention check interval).
"""

from __future__ import annotations

import multiprocessing
import os
import re
import signal
import subprocess
import sys
import time
import traceback
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kayak.protocol.messages import CreateTopicsRequest
from kayak.protocol.messages.create_topics_request import CreatableTopic, CreatableTopicConfig
from kayak.protocol.messages.fetch_request import FetchPartition, FetchRequest, FetchTopic
from kayak.protocol.records import iter_batches
from tests.broker.wire import WireClient

CODECS = ("none", "gzip", "snappy", "lz4", "zstd")

# Low group timeouts, as far as each client lets them go.
SESSION_TIMEOUT_MS, HEARTBEAT_MS = 6000, 1000


def unique(prefix: str) -> str:
    """A topic or group name no other test uses."""
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def create_topic(
    bootstrap: str, name: str, partitions: int = 1, configs: dict[str, str] | None = None
) -> None:
    wire = WireClient(bootstrap)
    try:
        topic = CreatableTopic(
            name,
            partitions,
            1,
            configs=[CreatableTopicConfig(k, v) for k, v in (configs or {}).items()],
        )
        response: Any = wire.request(CreateTopicsRequest(topics=[topic], timeout_ms=5000), 5)
    finally:
        wire.close()
    result = response.topics[0]
    assert result.error_code == 0, f"create {name}: {result.error_code} {result.error_message}"


@dataclass(frozen=True)
class StoredBatch:
    partition: int
    codec: str  # "none", "gzip", "snappy", "lz4", "zstd"
    producer_id: int
    base_sequence: int
    base_offset: int
    record_count: int


def stored_batches(bootstrap: str, topic: str, partitions: int) -> list[StoredBatch]:
    """The record batches the broker holds for ``topic``, read with a raw Fetch.

    So a client that silently fell back to no compression, or never turned idempotence on,
    or a broker that rewrote batches, shows up.
    """
    wire = WireClient(bootstrap)
    try:
        request = FetchRequest(
            max_wait_ms=0,
            min_bytes=0,
            max_bytes=64 << 20,
            topics=[
                FetchTopic(
                    topic=topic,
                    partitions=[
                        FetchPartition(partition=p, fetch_offset=0, partition_max_bytes=16 << 20)
                        for p in range(partitions)
                    ],
                )
            ],
        )
        response: Any = wire.request(request, 11)
    finally:
        wire.close()
    batches: list[StoredBatch] = []
    for topic_response in response.responses:
        for data in topic_response.partitions:
            assert data.error_code == 0, f"fetch {topic}-{data.partition_index}: {data.error_code}"
            for batch in iter_batches(bytes(data.records or b"")):
                batches.append(
                    StoredBatch(
                        data.partition_index,
                        batch.compression.name.lower(),
                        batch.producer_id,
                        batch.base_sequence,
                        batch.base_offset,
                        batch.record_count,
                    )
                )
    return batches


def restart_broker(broker: Any) -> None:
    """SIGTERM the ``broker_process`` fixture's broker (a clean stop) and start it again.

    ``BrokerProcess.start`` looks for "listening on" anywhere in its log, which it appends to,
    so on a restart it finds the previous run's line and returns before the new process
    listens (a conftest.py bug, reported). Wait here for the new run's line as well.
    """
    before = broker.log_text().count("listening on")
    assert broker.stop() == 0, "the broker did not exit cleanly on SIGTERM"
    broker.restart()
    wait_until(
        lambda: broker.log_text().count("listening on") > before, 30, "the restarted broker"
    )


def wait_until(
    predicate: Callable[[], bool], timeout: float, what: str, interval: float = 0.05
) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(interval)


Triple = tuple[bytes | None, bytes | None, list[tuple[str, bytes | None]]]


def records_for(tag: str, count: int, keyed: bool, null_headers: bool = True) -> list[Triple]:
    """``count`` (key, value, headers) triples: headers include a repeated and (for clients
    that can send one) a null one; keyed sets include a tombstone and an empty value."""
    out: list[Triple] = []
    for i in range(count):
        key = b"key-%d" % (i % 7) if keyed else None
        text = b"%s-%s-%04d-" % (tag.encode(), b"k" if keyed else b"u", i)
        value: bytes | None = text + b"x" * ((i * 37) % 400)
        if keyed and i == 1:
            value = None
        elif keyed and i == 2:
            value = b""
        headers: list[tuple[str, bytes | None]] = [
            ("h", b"%d" % i),
            ("h", b"again"),
            ("tag", tag.encode()),
        ]
        if null_headers and i % 5 == 0:
            headers.append(("null", None))
        out.append((key, value, headers))
    return out


def mixed_records(tag: str, count: int, null_headers: bool = True) -> list[Triple]:
    """Keyed and unkeyed records, interleaved: ``count`` of each."""
    keyed = records_for(tag, count, True, null_headers)
    unkeyed = records_for(tag, count, False, null_headers)
    return [r for pair in zip(keyed, unkeyed, strict=True) for r in pair]


def check_round_trip(
    sent: list[tuple[int, int, Triple]], consumed: dict[int, list[tuple[int, Triple]]]
) -> None:
    """``sent``: (partition, offset, record) in send order, as the client reported them;
    ``consumed``: per partition, (offset, record) in consumption order. Everything must come
    back exactly, in order, on the partition and at the offset the producer was told."""
    expected: dict[int, list[tuple[int, Triple]]] = {}
    for partition, offset, record in sent:
        expected.setdefault(partition, []).append((offset, record))
    assert sorted(consumed) == sorted(expected), "records came back on other partitions"
    for partition, records in expected.items():
        got = consumed[partition]
        offsets = [offset for offset, _ in records]
        assert offsets == list(range(len(records))), f"partition {partition} offsets {offsets}"
        assert len(got) == len(records), f"partition {partition}: {len(got)} != {len(records)}"
        for (offset, record), (got_offset, got_record) in zip(records, got, strict=True):
            assert (got_offset, got_record) == (offset, record), (
                f"partition {partition}: expected {offset} {record!r}, "
                f"consumed {got_offset} {got_record!r}"
            )
    keyed_partitions: dict[bytes, set[int]] = {}
    for partition, _, (key, _, _) in sent:
        if key is not None:
            keyed_partitions.setdefault(key, set()).add(partition)
    assert keyed_partitions, "no keyed records"
    assert all(len(p) == 1 for p in keyed_partitions.values()), keyed_partitions


# -- isolation in a child process ---------------------------------------------------------


class ChildCrashed(AssertionError):
    """The child process died without reporting (a signal such as SIGSEGV or SIGABRT)."""


def _child(conn: Any, fn: Callable[..., Any], args: tuple[Any, ...]) -> None:
    try:
        result = fn(*args)
    except BaseException as exc:  # noqa: BLE001 - everything goes back to the parent
        conn.send(("error", f"{type(exc).__name__}: {exc}", traceback.format_exc()))
    else:
        conn.send(("ok", result, ""))
    conn.close()


def run_isolated(fn: Callable[..., Any], *args: Any, timeout: float = 60.0) -> Any:
    """``fn(*args)`` in a spawned child process; its return value (must pickle).

    An exception in the child fails the caller with the child's traceback; a child killed by a
    signal fails with the signal's name, so a client crash is a test failure.
    """
    ctx = multiprocessing.get_context("spawn")
    parent_end, child_end = ctx.Pipe(duplex=False)
    process = ctx.Process(target=_child, args=(child_end, fn, args), daemon=True)
    process.start()
    child_end.close()
    try:
        if not parent_end.poll(timeout):
            process.join(0.5)
            if process.exitcode is None:
                process.kill()
                process.join(5)
                raise AssertionError(f"{fn.__name__} did not finish within {timeout}s")
            raise _crashed(fn, process.exitcode)
        try:
            status, value, trace = parent_end.recv()
        except EOFError:
            process.join(5)
            raise _crashed(fn, process.exitcode) from None
    finally:
        parent_end.close()
    process.join(10)
    if process.exitcode is None:
        process.kill()
    if status == "error":
        raise AssertionError(f"{fn.__name__} failed in its child process: {value}\n{trace}")
    return value


def _crashed(fn: Callable[..., Any], code: int | None) -> ChildCrashed:
    if code is not None and code < 0:
        how = f"killed by {signal.Signals(-code).name}"
    else:
        how = f"exited with code {code} without a result"
    return ChildCrashed(f"{fn.__name__}: the client process {how}")


# -- a broker with settings the CLI does not expose ---------------------------------------

_LISTENING = re.compile(r"listening on ([\d.]+):(\d+)")

_EMBEDDED = """
import asyncio, logging, signal, sys
from kayak.broker import Broker

logging.basicConfig(level=logging.INFO, stream=sys.stderr)

async def main():
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGTERM, stop.set)
    async with Broker(sys.argv[1], port=0, **eval(sys.argv[2])):
        await stop.wait()

asyncio.run(main())
"""


@dataclass
class EmbeddedBrokerProcess:
    """``kayak.broker.Broker(data_dir, port=0, **settings)`` in a subprocess."""

    data_dir: Path
    settings: dict[str, Any] = field(default_factory=dict)
    port: int = 0
    process: subprocess.Popen[bytes] | None = None
    log_path: Path | None = None

    @property
    def bootstrap_servers(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self, timeout: float = 30.0) -> EmbeddedBrokerProcess:
        self.log_path = self.data_dir.parent / f"{self.data_dir.name}-embedded.log"
        settings = {"group_initial_rebalance_delay_ms": 0, **self.settings}
        with open(self.log_path, "ab") as log:
            self.process = subprocess.Popen(
                [sys.executable, "-c", _EMBEDDED, str(self.data_dir), repr(settings)],
                stdout=log,
                stderr=log,
            )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"broker exited: {self.log_text()[-2000:]}")
            found = _LISTENING.findall(self.log_text())
            if found:
                self.port = int(found[-1][1])
                return self
            time.sleep(0.05)
        raise RuntimeError(f"broker did not start: {self.log_text()[-2000:]}")

    def stop(self) -> int:
        assert self.process is not None
        if self.process.poll() is None:
            os.kill(self.process.pid, signal.SIGTERM)
        code = self.process.wait(30)
        self.process = None
        return code

    def log_text(self) -> str:
        return self.log_path.read_text() if self.log_path else ""
