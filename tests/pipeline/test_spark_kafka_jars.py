"""Where Spark's Kafka connector jars come from (``kayak.pipeline.spark_kafka``), without a
JVM: directories of empty files named as Maven names them. The session side (``local_spark``
putting them on ``spark.jars``, ``format("kafka")`` then working) is in
tests/jvm/test_spark_kafka.py."""

from __future__ import annotations

import logging
from pathlib import Path

import pyspark
import pytest

from kayak.pipeline import spark_kafka
from kayak.pipeline.spark_kafka import (
    JARS_ENV,
    connector_jars_or_reason,
    connector_version,
    find_connector_dir,
    kafka_connector_jars,
)

CONNECTOR = f"spark-sql-kafka-0-10_2.13-{pyspark.__version__}.jar"
OWN = [CONNECTOR, "kafka-clients-3.9.2.jar", "commons-pool2-2.13.1.jar"]
# Maven copies these too; pyspark ships its own copies (other versions), which Spark uses.
SHIPPED = ["scala-library-2.13.15.jar", "slf4j-api-1.7.36.jar", "hadoop-client-api-3.5.0.jar"]


def jar_dir(path: Path, names: list[str]) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    for name in names:
        (path / name).touch()
    return path


def test_the_connector_and_its_own_dependencies_without_what_pyspark_ships(
    tmp_path: Path,
) -> None:
    directory = jar_dir(tmp_path / "jars", OWN + SHIPPED)
    assert kafka_connector_jars(directory) == sorted(directory / name for name in OWN)


def test_none_without_the_connector(tmp_path: Path) -> None:
    assert kafka_connector_jars(jar_dir(tmp_path / "empty", [])) is None
    assert kafka_connector_jars(jar_dir(tmp_path / "no-connector", OWN[1:])) is None


def test_a_connector_for_another_spark_is_left_out_with_a_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    directory = jar_dir(tmp_path / "old", ["spark-sql-kafka-0-10_2.13-3.5.1.jar", *OWN[1:]])
    with caplog.at_level(logging.WARNING, logger=spark_kafka.__name__):
        assert kafka_connector_jars(directory) is None
    assert "for Spark 3.5.1" in caplog.text and pyspark.__version__ in caplog.text


def test_the_environment_names_the_directory_first(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    chosen = jar_dir(tmp_path / "chosen", OWN)
    lib = jar_dir(tmp_path / "lib" / "spark-kafka", OWN)
    monkeypatch.setenv("KAYAK_JVM_LIB", str(lib.parent))
    monkeypatch.setenv(JARS_ENV, str(chosen))
    assert kafka_connector_jars() == sorted(chosen / name for name in OWN)
    monkeypatch.delenv(JARS_ENV)
    assert kafka_connector_jars() == sorted(lib / name for name in OWN)


def test_a_directory_named_in_the_environment_is_the_only_one_looked_in(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """So that pointing it at an empty directory turns the connector off (the pipeline then
    reads with kayak's data source), whatever ``make jvm`` fetched."""
    lib = jar_dir(tmp_path / "lib" / "spark-kafka", OWN)
    monkeypatch.setenv("KAYAK_JVM_LIB", str(lib.parent))
    monkeypatch.setenv(JARS_ENV, str(jar_dir(tmp_path / "empty", [])))
    assert find_connector_dir() is None and kafka_connector_jars() is None
    found = connector_jars_or_reason()
    assert isinstance(found, str) and str(tmp_path / "empty") in found and "make jvm" in found


def test_versions_are_read_from_maven_names() -> None:
    assert connector_version([Path("a/spark-sql-kafka-0-10_2.13-4.2.0.jar")]) == "4.2.0"
    assert connector_version([Path("spark-sql-kafka-0-10_2.13-4.1.0-preview1.jar")]) == (
        "4.1.0-preview1"
    )
    assert connector_version([Path("kafka-clients-3.9.2.jar")]) is None
