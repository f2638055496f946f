"""The JVM peers' setup: the jars `make jvm` fetched match the project; Apache Kafka starts."""

from __future__ import annotations

import re
from pathlib import Path

from confluent_kafka import Consumer, Producer

from tests.fixtures.jvm import ApacheKafka, KafkaTools, jars

REPO = Path(__file__).resolve().parents[2]


def test_spark_connector_matches_pyspark() -> None:
    """Spark's Kafka connector only loads into the Spark version it was built for."""
    import pyspark

    connector = [p.name for p in jars("spark-kafka") if p.name.startswith("spark-sql-kafka")]
    assert connector == [f"spark-sql-kafka-0-10_2.13-{pyspark.__version__}.jar"]
    pom = (REPO / "tools" / "jvm" / "pom.xml").read_text()
    assert re.search(rf"<spark.version>{re.escape(pyspark.__version__)}</spark.version>", pom)


def test_apache_kafka_round_trip(apache_kafka: ApacheKafka, kafka_tools: KafkaTools) -> None:
    kafka_tools.run(
        "kafka-topics", "--bootstrap-server", apache_kafka.bootstrap_servers,
        "--create", "--topic", "fixture-check", "--partitions", "2",
    )  # fmt: skip
    producer = Producer({"bootstrap.servers": apache_kafka.bootstrap_servers})
    for i in range(100):
        producer.produce("fixture-check", key=str(i % 2), value=f"v{i}")
    assert producer.flush(30) == 0
    consumer = Consumer(
        {
            "bootstrap.servers": apache_kafka.bootstrap_servers,
            "group.id": "fixture-check",
            "auto.offset.reset": "earliest",
        }
    )
    consumer.subscribe(["fixture-check"])
    seen: set[bytes] = set()
    try:
        for _ in range(300):
            message = consumer.poll(0.2)
            if message is not None and message.error() is None:
                seen.add(message.value())
            if len(seen) == 100:
                break
    finally:
        consumer.close()
    assert seen == {f"v{i}".encode() for i in range(100)}
