"""The capturers of the capture benchmark (bench/cdc_capture.py): ``kayak cdc run``, and
Debezium's PostgreSQL connector in Kafka Connect standalone (the broker they write into,
with its schema registry, is peers.py's). Each is a child process whose pid the benchmark
reads CPU from.

Kafka Connect runs with the JVM options of Kafka's ``connect-standalone.sh`` (heap
``-Xms256M -Xmx2G``, and ``kafka-run-class.sh``'s G1 and JIT options), not the test fixtures'
start-up-friendly ones (client compiler only, serial collector), which would handicap it.
Debezium's settings are its defaults but for ``poll.interval.ms=100`` (the tests' value: the
connector waits less for the last changes, which can only favour Debezium here) and
JsonConverter: no Avro converter is among the jars ``make jvm`` fetches (Confluent's is not
on Maven Central), so Debezium writes JSON while kayak writes Avro through its registry.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from kafka_peer import BROKER_JVM_OPTIONS, KAFKA_HEAP
from peers import REPO, free_port

from tests.fixtures.jvm import java_command, write_properties
from tests.jvm.peer_support import (
    STANDALONE,
    Background,
    debezium_postgres_config,
    wait_until,
    worker_properties,
)

# connect-standalone.sh: KAFKA_HEAP_OPTS="-Xms256M -Xmx2G"; the rest as kafka-run-class.sh.
CONNECT_JVM_OPTIONS = (
    "-Xms256m",
    "-Xmx2g",
    *(o for o in BROKER_JVM_OPTIONS if o not in KAFKA_HEAP),
)
# The capture's database connections say who they are, so their backends can be told apart.
CAPTURE_APPLICATION = "bench_capture"


def with_application(dsn: str) -> str:
    """``dsn`` with the capture's libpq application name."""
    return f"{dsn}{'&' if '?' in dsn else '?'}application_name={CAPTURE_APPLICATION}"


def enable_kayak_capture(dsn: str, slot: str) -> None:
    """``kayak cdc enable``: the publication kayak's capture reads (outside the timing)."""
    done = subprocess.run(
        [sys.executable, "-m", "kayak", "cdc", "enable", dsn, "orders", "--slot", slot],
        capture_output=True, text=True, cwd=REPO, timeout=120, check=False,
    )  # fmt: skip
    if done.returncode != 0:
        raise RuntimeError(f"kayak cdc enable failed: {done.stderr[-2000:]}")


def start_kayak_capture(
    directory: Path, dsn: str, bootstrap: str, registry_url: str, slot: str | None,
    value_format: str, *extra: str,
) -> Background:  # fmt: skip
    """``kayak cdc run`` of ``orders`` into topic ``kayak.public.orders`` (``kayak.main.orders``
    from SQLite: ``slot`` None, no connection to name), in the background; ``extra``: more
    options of ``kayak cdc run`` (``-X`` producer properties)."""
    source, slot_options = (dsn, ()) if slot is None else (with_application(dsn), ("--slot", slot))
    command = [
        sys.executable, "-m", "kayak", "cdc", "run", source, "orders",
        "-b", bootstrap, "--registry-url", registry_url, *slot_options,
        "--prefix", "kayak", "--format", value_format, "--status-interval", "5", *extra,
    ]  # fmt: skip
    capture = Background(command, directory / "kayak-cdc.log").start()
    capture.wait_for("capturing orders", timeout=120)
    return capture


def start_debezium(directory: Path, dsn: str, bootstrap: str, slot: str) -> Background:
    """Connect standalone running Debezium's PostgreSQL connector on ``orders`` into topic
    ``debezium.public.orders``; returns once Connect's REST API lists the connector."""
    connector = debezium_postgres_config(
        dsn, name="bench-debezium", prefix="debezium", tables=["public.orders"], slot=slot
    )
    properties = worker_properties(
        bootstrap, free_port(),
        **{"offset.storage.file.filename": directory / "offsets.dat",
           # Connect's default is 60 s; offsets are committed during the run, as in service.
           "offset.flush.interval.ms": 10_000},
    )  # fmt: skip
    worker = write_properties(directory / "worker.properties", properties)
    connector_file = write_properties(directory / "debezium.properties", connector)
    command = java_command(
        STANDALONE, [str(worker), str(connector_file)], jvm_options=CONNECT_JVM_OPTIONS
    )
    jvm = Background(command, directory / "connect.log").start()
    rest = str(properties["listeners"])

    def connector_running() -> bool:
        import json
        import urllib.request

        if not jvm.alive():
            raise RuntimeError(f"Connect exited:\n{jvm.output()[-4000:]}")
        try:
            with urllib.request.urlopen(
                f"{rest}/connectors/bench-debezium/status", timeout=10
            ) as r:
                status = json.loads(r.read())
        except OSError:
            return False
        states = [status["connector"]["state"], *(t["state"] for t in status["tasks"])]
        if "FAILED" in states:
            raise RuntimeError(f"Debezium failed: {json.dumps(status)[:3000]}")
        return bool(status["tasks"]) and set(states) == {"RUNNING"}

    try:
        wait_until(connector_running, bool, 300, "Debezium's connector running")
    except BaseException:
        jvm.stop()
        raise
    return jvm
