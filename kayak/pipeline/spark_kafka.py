"""Spark's own Kafka source and sink (``format("kafka")``): where its jars are, for ``spark.jars``.

Spark's Kafka integration (``spark-sql-kafka-0-10_2.13`` and its runtime dependencies) is
not part of pyspark. ``make jvm`` fetches it with Maven into ``.jvm/spark-kafka/``
(``tools/jvm/spark-kafka/pom.xml``); :func:`kafka_connector_jars` finds that directory and
:func:`kayak.pipeline.session.local_spark` hands the jars to Spark by path as ``spark.jars``
(no Ivy, no network at start-up). kayak needs none of this: without the jars
``format("kafka")`` is simply not there, and kayak's own ``format("kayak")`` still is.

Where the jars are looked for, first found wins:

1. ``KAYAK_SPARK_KAFKA_JARS``: a directory of jars;
2. ``KAYAK_JVM_LIB/spark-kafka`` (the JVM peers' directory, ``.jvm`` by default);
3. ``.jvm/spark-kafka`` in the source tree kayak runs from.

Jars pyspark already ships (Scala's library, Hadoop's client, slf4j, lz4, snappy, ...; Maven
copies them as the connector's dependencies, at other versions) are left out: Spark's own
copies are the ones its classes were built against, and local executors would otherwise copy
some 60 MB of duplicates into every session's work directory.
"""

from __future__ import annotations

import logging
import os
import re
from pathlib import Path

__all__ = [
    "CONNECTOR_ARTIFACT",
    "JARS_ENV",
    "connector_version",
    "find_connector_dir",
    "kafka_connector_jars",
]

log = logging.getLogger(__name__)

JARS_ENV = "KAYAK_SPARK_KAFKA_JARS"
CONNECTOR_ARTIFACT = "spark-sql-kafka-0-10_2.13"

# ``name-1.2.3.jar``, ``name-0-10_2.13-4.2.0.jar``, ``name-1.0.0-M1.jar``: the version is the
# first ``-<digits>.<digits>...`` that runs to the end.
_VERSIONED_JAR = re.compile(
    r"^(?P<artifact>.+?)-(?P<version>\d+\.\d+[^-_]*(?:-[A-Za-z][\w.]*)?)\.jar$"
)


def find_connector_dir() -> Path | None:
    """The first directory (see the module doc) that holds Spark's Kafka connector jar."""
    candidates: list[Path] = []
    if explicit := os.environ.get(JARS_ENV):
        candidates.append(Path(explicit))
    if jvm_lib := os.environ.get("KAYAK_JVM_LIB"):
        candidates.append(Path(jvm_lib) / "spark-kafka")
    candidates.append(Path(__file__).resolve().parents[2] / ".jvm" / "spark-kafka")
    for directory in candidates:
        if any(directory.glob(f"{CONNECTOR_ARTIFACT}-*.jar")):
            return directory
    return None


def connector_version(jars: list[Path]) -> str | None:
    """The Spark version Spark's Kafka connector among ``jars`` was built for."""
    for jar in jars:
        match = _VERSIONED_JAR.match(jar.name)
        if match and match["artifact"] == CONNECTOR_ARTIFACT:
            return match["version"]
    return None


def kafka_connector_jars(directory: Path | None = None) -> list[Path] | None:
    """The jars ``spark.jars`` needs for ``format("kafka")``, or None when there are none.

    ``directory``: where the jars are (default: :func:`find_connector_dir`). A connector
    built for another Spark version than the running pyspark's fails in obscure ways inside
    the JVM; it is left out with a warning (None), and ``make jvm`` fetches the right one.
    """
    directory = directory if directory is not None else find_connector_dir()
    if directory is None:
        return None
    jars = sorted(directory.glob("*.jar"))
    version = connector_version(jars)
    if version is None:
        return None
    spark_version = _pyspark_version()
    if version != spark_version:
        log.warning(
            "Spark's Kafka connector in %s is for Spark %s, pyspark is %s: not using it "
            "(run `make jvm`)", directory, version, spark_version,
        )  # fmt: skip
        return None
    shipped = _pyspark_artifacts()
    return [jar for jar in jars if _artifact(jar.name) not in shipped]


def _artifact(jar_name: str) -> str:
    match = _VERSIONED_JAR.match(jar_name)
    return match["artifact"] if match else jar_name


def _pyspark_version() -> str:
    import pyspark

    return str(pyspark.__version__)


def _pyspark_artifacts() -> set[str]:
    """The artifacts of the jars pyspark ships (its ``jars/`` directory)."""
    import pyspark

    return {_artifact(jar.name) for jar in (Path(pyspark.__file__).parent / "jars").glob("*.jar")}
