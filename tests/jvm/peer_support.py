"""What the JVM-peer tests of Kafka Streams and Kafka Connect share: a JVM started in the
background whose log is kept, reading a whole topic with kayak's client, and waiting."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from kayak.client import TopicPartition
from kayak.client.sync import Consumer
from tests.fixtures.jvm import connect_plugin_path, java_command, write_properties

T = TypeVar("T")


@dataclass
class Background:
    """A JVM (or any command) running in its own session, its output in ``log``."""

    command: Sequence[str]
    log: Path
    process: subprocess.Popen[bytes] | None = None

    def start(self) -> Background:
        with open(self.log, "ab") as out:
            self.process = subprocess.Popen(
                list(self.command), stdout=out, stderr=subprocess.STDOUT, start_new_session=True
            )
        return self

    def output(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def wait_for(self, text: str, timeout: float = 120.0, after: int = 0) -> None:
        """Wait until ``text`` appears in the log (past character ``after``)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if text in self.output()[after:]:
                return
            if not self.alive():
                raise AssertionError(f"{self.command[-1]!r} exited:\n{self.output()[-4000:]}")
            time.sleep(0.2)
        raise AssertionError(f"no {text!r} within {timeout} s:\n{self.output()[-4000:]}")

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 60.0) -> int | None:
        """Signal the whole session and wait; SIGKILL if it does not end in ``timeout``."""
        if self.process is None:
            return None
        process, self.process = self.process, None
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, sig)
        try:
            return process.wait(timeout)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            return process.wait(timeout)


def read_topic(
    bootstrap: str, topic: str, timeout: float = 10.0
) -> list[tuple[bytes | None, bytes | None]]:
    """Every record of ``topic`` now in the log, as (key, value) in partition/offset order."""
    with Consumer(bootstrap_servers=bootstrap, enable_auto_commit=False) as consumer:
        partitions = consumer.partitions_for_topic(topic) or set()
        tps = [TopicPartition(topic, p) for p in sorted(partitions)]
        consumer.assign(tps)
        consumer.seek_to_beginning(*tps)
        ends = consumer.end_offsets(tps)
        records: dict[TopicPartition, list[tuple[bytes | None, bytes | None]]] = {
            tp: [] for tp in tps
        }
        deadline = time.monotonic() + timeout
        while any(consumer.position(tp) < ends[tp] for tp in tps):
            if time.monotonic() > deadline:
                raise AssertionError(f"could not read {topic} to its end in {timeout} s")
            for tp, batch in consumer.poll(timeout_ms=500).items():
                records[tp].extend((r.key, r.value) for r in batch)
        return [kv for tp in tps for kv in records[tp]]


def wait_until(probe: Callable[[], T], done: Callable[[T], bool], timeout: float, what: str) -> T:
    """Call ``probe`` until ``done(result)``; the last result, or an error saying ``what``."""
    deadline = time.monotonic() + timeout
    while True:
        result = probe()
        if done(result):
            return result
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not reached in {timeout} s; last: {result!r:.3000}")
        time.sleep(0.5)


# -- Kafka Connect --------------------------------------------------------------------------

STANDALONE = "org.apache.kafka.connect.cli.ConnectStandalone"
DISTRIBUTED = "org.apache.kafka.connect.cli.ConnectDistributed"
POSTGRES_CONNECTOR = "io.debezium.connector.postgresql.PostgresConnector"


def debezium_postgres_config(
    dsn: str, *, name: str, prefix: str, tables: Sequence[str], slot: str
) -> dict[str, str]:
    """Debezium's PostgreSQL connector on the database of ``dsn`` (trust auth, pgoutput)."""
    url = urllib.parse.urlsplit(dsn)
    return {
        "name": name,
        "connector.class": POSTGRES_CONNECTOR,
        "tasks.max": "1",
        "plugin.name": "pgoutput",
        "database.hostname": url.hostname or "127.0.0.1",
        "database.port": str(url.port or 5432),
        "database.user": url.username or "postgres",
        "database.password": "",
        "database.dbname": url.path.lstrip("/"),
        "topic.prefix": prefix,
        "table.include.list": ",".join(tables),
        "slot.name": slot,
        "publication.name": f"{slot}_pub",
        "publication.autocreate.mode": "filtered",
        # Changes should reach the topics promptly in a test.
        "poll.interval.ms": "100",
    }


def worker_properties(bootstrap: str, rest_port: int, **extra: object) -> dict[str, object]:
    """What every worker here shares: kayak's broker, JsonConverter, Debezium's plugin."""
    return {
        "bootstrap.servers": bootstrap,
        "key.converter": "org.apache.kafka.connect.json.JsonConverter",
        "value.converter": "org.apache.kafka.connect.json.JsonConverter",
        "key.converter.schemas.enable": "true",
        "value.converter.schemas.enable": "true",
        "offset.flush.interval.ms": 500,
        "plugin.path": connect_plugin_path(),
        "plugin.discovery": "service_load",
        "listeners": f"http://127.0.0.1:{rest_port}",
        **extra,
    }


@dataclass
class ConnectWorker:
    """One Kafka Connect worker (standalone or distributed) and its REST API."""

    directory: Path
    main_class: str
    properties: dict[str, object]
    connector_files: tuple[Path, ...] = ()
    jvm: Background | None = None

    @property
    def rest(self) -> str:
        return str(self.properties["listeners"])

    def start(self, timeout: float = 180.0) -> ConnectWorker:
        config = write_properties(self.directory / "worker.properties", self.properties)
        command = java_command(self.main_class, [str(config), *map(str, self.connector_files)])
        self.jvm = Background(command, self.directory / "connect.log").start()
        wait_until(self._rest_up, bool, timeout, f"Connect's REST API at {self.rest}")
        return self

    def stop(self) -> None:
        if self.jvm is not None:
            self.jvm.stop()

    def _rest_up(self) -> bool:
        assert self.jvm is not None
        if not self.jvm.alive():
            raise AssertionError(f"Connect exited:\n{self.jvm.output()[-4000:]}")
        try:
            self.call("GET", "/connectors")
        except OSError:
            return False
        return True

    def call(self, method: str, path: str, body: object = None) -> Any:
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(
            self.rest + path, data=data, method=method,
            headers={"Content-Type": "application/json", "Accept": "application/json"},
        )  # fmt: skip
        with urllib.request.urlopen(request, timeout=30) as response:
            text = response.read().decode()
        return json.loads(text) if text else None

    def wait_running(self, name: str, timeout: float = 180.0) -> dict[str, Any]:
        """Wait until the connector and all its tasks are RUNNING; fail on FAILED."""

        def status() -> dict[str, Any]:
            try:
                found: dict[str, Any] = self.call("GET", f"/connectors/{name}/status")
            except urllib.error.HTTPError as e:
                if e.code == 404:
                    return {}
                raise
            states = [found["connector"]["state"], *(t["state"] for t in found["tasks"])]
            if "FAILED" in states:
                raise AssertionError(f"connector {name} failed: {json.dumps(found)[:4000]}")
            return found

        def running(found: dict[str, Any]) -> bool:
            return (
                bool(found)
                and found["connector"]["state"] == "RUNNING"
                and bool(found["tasks"])
                and all(t["state"] == "RUNNING" for t in found["tasks"])
            )

        try:
            return wait_until(status, running, timeout, f"connector {name} running")
        except AssertionError as e:
            log = self.jvm.output()[-4000:] if self.jvm else ""
            raise AssertionError(f"{e}\nConnect log:\n{log}") from None


def change_events(bootstrap: str, topic: str) -> list[dict[str, Any] | None]:
    """Debezium's JSON change events of ``topic`` (their payloads; None for a tombstone)."""
    events: list[dict[str, Any] | None] = []
    for _, value in read_topic(bootstrap, topic):
        if value is None:
            events.append(None)
            continue
        decoded = json.loads(value)
        events.append(decoded["payload"] if "schema" in decoded else decoded)
    return events
