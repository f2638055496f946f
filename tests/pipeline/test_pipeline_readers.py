"""The pipeline's two readers of the change topics: Spark's Kafka source (``--reader kafka``,
the default when ``make jvm`` fetched its jars) and kayak's data source (``--reader kayak``).

Both run the same pipeline on the shared session: a query stopped in the middle of a stream
of changes and started again from its checkpoint, by the other reader (the checkpoint's
offsets are the same JSON for both), with a record no decoder takes on the way; the target
must end equal to the source. Choosing the reader needs no JVM: without the jars the default
falls back to kayak's with one line, and an explicit ``--reader kafka`` is a one-line error.
kayak's client properties reach Spark's Java consumer as Java spells them (a SASL login to
kayak's broker through Spark's reader).
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from kayak.client.admin import NewTopic
from kayak.client.sync import Admin, Producer
from kayak.errors import KayakError
from kayak.pipeline import spark_kafka
from kayak.pipeline.job import ReplicationJob
from kayak.pipeline.runner import Pipeline
from kayak.pipeline.source_setup import prepare_source
from kayak.pipeline.spark_kafka import (
    JARS_ENV,
    choose_reader,
    java_client_options,
    reader_for_session,
    session_reads_kafka,
)
from tests.pipeline.conftest import CdcBroker
from tests.pipeline.test_pipeline_sqlite import assert_replicated, mutate, spec_for
from tests.security.test_sasl_broker import SASL, add_users, client_config, sasl_settings
from tests.security.threaded_broker import ThreadedBroker


@pytest.fixture
def no_jars(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """KAYAK_SPARK_KAFKA_JARS set to an empty directory: the connector is missing."""
    empty = tmp_path / "no-jars"
    empty.mkdir()
    monkeypatch.setenv(JARS_ENV, str(empty))
    return empty


@pytest.mark.parametrize(("first", "then"), [("kafka", "kayak"), ("kayak", "kafka")])
def test_both_readers_replicate_through_a_stopped_query(
    spark: Any, items_db: str, cdc_broker: CdcBroker, tmp_path: Path, first: str, then: str
) -> None:
    spec = spec_for(tmp_path, items_db, cdc_broker, prefix=first, reader=first)
    prepare_source(spec)
    with Pipeline(spec, spark) as pipeline:
        job = pipeline.job
        assert job is not None and job.settings.reader == first
        with Producer({"bootstrap.servers": cdc_broker.bootstrap_servers}) as producer:
            producer.send(f"{first}.main.items", b"not avro", key=b"k").result()
        mutate(items_db, 1000, 100)
        pipeline.catch_up()
        assert assert_replicated(pipeline) == 3 + 100 - 20
        assert job.stats.dead_lettered == 1
        # Stop the query while changes stream in; the other reader resumes from the same
        # checkpoint: nothing missed, nothing read twice.
        mutate(items_db, 5000, 300)
        deadline = time.monotonic() + 60
        while job.stats.applied == 0 and time.monotonic() < deadline:
            time.sleep(0.05)
        job.stop()
        restarted = ReplicationJob(spark, job.settings)
        restarted.settings.reader = then
        pipeline.job = restarted
        restarted.start()
        pipeline.catch_up()
        assert assert_replicated(pipeline) == 3 + 400 - 80
        assert restarted.stats.dead_lettered == 0  # the bad record was behind the checkpoint
        # It resumed where the first stopped (at most the unfinished batch again), not from
        # the start of the topic.
        assert pipeline.capture is not None
        first_run = job.stats.changes
        assert 0 < restarted.stats.changes <= pipeline.capture.stats.events - first_run + 300


def test_the_default_is_sparks_kafka_source_when_its_jars_are_there(
    spark: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(JARS_ENV, raising=False)
    assert spark_kafka.kafka_connector_jars() is not None, "run `make jvm`"
    assert choose_reader(None) == "kafka"
    assert session_reads_kafka(spark)
    assert reader_for_session(None, spark) == "kafka"
    assert reader_for_session("kayak", spark) == "kayak"


def test_without_the_jars_the_default_falls_back_to_kayak_in_one_line(
    no_jars: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.INFO):
        assert choose_reader(None) == "kayak"
    (record,) = caplog.records
    message = record.getMessage()
    assert record.levelno == logging.WARNING and "\n" not in message
    assert str(no_jars) in message and "kayak's data source" in message, message
    caplog.clear()
    assert choose_reader("kayak") == "kayak" and not caplog.records


def test_an_explicit_kafka_reader_without_the_jars_is_an_error(no_jars: Path) -> None:
    with pytest.raises(KayakError, match=r"^--reader kafka: .*not in .*no-jars.*--reader kayak"):
        choose_reader("kafka")


@pytest.mark.parametrize("command", [["pipeline", "run"], ["demo"]])
def test_the_cli_says_so_in_one_line_and_exits_non_zero(
    no_jars: Path, tmp_path: Path, command: list[str]
) -> None:
    args = [sys.executable, "-m", "kayak", *command, "--reader", "kafka"]
    if command[0] == "pipeline":
        args += ["--source", f"sqlite:{tmp_path / 's.db'}", "--table", "t", "--target",
                 f"sqlite:{tmp_path / 't.db'}", "--work-dir", str(tmp_path / "w")]  # fmt: skip
    done = subprocess.run(args, capture_output=True, text=True, timeout=120,
                          env={**os.environ, JARS_ENV: str(no_jars)})  # fmt: skip
    assert done.returncode == 1, done.stdout + done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: --reader kafka: "), done.stderr
    assert "make jvm" in lines[0] and not (tmp_path / "s.db").exists()


def test_kayak_client_properties_as_the_java_consumer_takes_them() -> None:
    java = java_client_options({
        "isolation.level": "read_committed", "security.protocol": "SASL_SSL",
        "sasl.username": "alice", "sasl.password": 'p"w\\d', "ssl.ca.location": "/ca.pem",
        "ssl.endpoint.identification.algorithm": "none", "fetch.wait.max.ms": "50",
        "statistics.interval.ms": "1000", "fetch.pipeline.depth": "2",
    })  # fmt: skip
    assert java == {
        "isolation.level": "read_committed",
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": "PLAIN",  # kayak's default; Java's would be GSSAPI
        "sasl.jaas.config": "org.apache.kafka.common.security.plain.PlainLoginModule required "
        'username="alice" password="p\\"w\\\\d";',
        "ssl.truststore.location": "/ca.pem",
        "ssl.truststore.type": "PEM",
        "ssl.endpoint.identification.algorithm": "",
        "fetch.max.wait.ms": "50",
    }
    scram = java_client_options({
        "security.protocol": "SASL_PLAINTEXT", "sasl.mechanisms": "SCRAM-SHA-512",
        "sasl.username": "u", "sasl.password": "p",
    })  # fmt: skip
    assert scram["sasl.mechanism"] == "SCRAM-SHA-512"
    assert scram["sasl.jaas.config"].startswith("org.apache.kafka.common.security.scram.")
    # Java's own names pass as they are, a jaas config given is kept.
    given = {"security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-256",
             "sasl.jaas.config": "x required;", "ssl.truststore.location": "/t.jks",
             "ssl.keystore.type": "PEM", "ssl.keystore.location": "/client.pem"}  # fmt: skip
    assert java_client_options(given) == given
    # librdkafka's two files for a client certificate: Java has no spelling for them.
    with pytest.raises(KayakError, match=r"ssl\.keystore\.location=FILE"):
        java_client_options({"ssl.certificate.location": "/c.pem", "ssl.key.location": "/k"})


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "PLAIN"])
def test_sparks_reader_logs_in_with_kayaks_property_names(
    spark: Any, tmp_path: Path, mechanism: str
) -> None:
    """librdkafka's ``sasl.username``/``sasl.password`` (what ``-X`` gives kayak's client),
    turned into Java's ``sasl.jaas.config``, log Spark's Java consumer in to kayak's broker."""
    add_users(tmp_path / "data")
    with ThreadedBroker(tmp_path / "data", **sasl_settings()) as broker:
        bootstrap = broker.bootstrap_servers_for(SASL)
        kayak_config = {"bootstrap.servers": bootstrap, **client_config(mechanism)}
        with Admin(kayak_config) as admin:
            admin.create_topics([NewTopic("logged-in", 1, 1)])
        with Producer(kayak_config) as producer:
            producer.send("logged-in", b"hello", key=b"k").result()
        given = client_config(mechanism)
        if mechanism == "PLAIN":
            del given["sasl.mechanism"]  # kayak's default, not Java's
        reader = spark.read.format("kafka").option("kafka.bootstrap.servers", bootstrap)
        for name, value in java_client_options(given).items():
            reader = reader.option(f"kafka.{name}", value)
        rows = reader.option("subscribe", "logged-in").load().select("value").collect()
    assert [bytes(row.value) for row in rows] == [b"hello"]
