"""Spark's own Kafka source and sink (``format("kafka")``): where its jars are, for ``spark.jars``.

Spark's Kafka integration (``spark-sql-kafka-0-10_2.13`` and its runtime dependencies) is
not part of pyspark. ``make jvm`` fetches it with Maven into ``.jvm/spark-kafka/``
(``tools/jvm/spark-kafka/pom.xml``); :func:`kafka_connector_jars` finds that directory and
:func:`kayak.pipeline.session.local_spark` hands the jars to Spark by path as ``spark.jars``
(no Ivy, no network at start-up). kayak needs none of this: without the jars
``format("kafka")`` is simply not there, and kayak's own ``format("kayak")`` still is.

Where the jars are looked for, first found wins:

1. ``KAYAK_SPARK_KAFKA_JARS``: a directory of jars; when set, the only place looked in (so
   pointing it at an empty directory turns the connector off);
2. ``KAYAK_JVM_LIB/spark-kafka`` (the JVM peers' directory, ``.jvm`` by default);
3. ``.jvm/spark-kafka`` in the source tree kayak runs from.

:func:`choose_reader` picks the pipeline's reader from that: Spark's Kafka source when the
jars are there, else kayak's own data source with one warning line; :func:`java_client_options`
turns kayak's client properties (which accept librdkafka's names too) into ones the Java
consumer inside Spark's Kafka source understands.

Jars pyspark already ships (Scala's library, Hadoop's client, slf4j, lz4, snappy, ...; Maven
copies them as the connector's dependencies, at other versions) are left out: Spark's own
copies are the ones its classes were built against, and local executors would otherwise copy
some 60 MB of duplicates into every session's work directory.
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from kayak.errors import KayakError

__all__ = [
    "CONNECTOR_ARTIFACT",
    "JARS_ENV",
    "KAFKA_SOURCE_DEFAULTS",
    "READERS",
    "choose_reader",
    "connector_jars_or_reason",
    "connector_version",
    "find_connector_dir",
    "java_client_options",
    "kafka_connector_jars",
    "kafka_source_options",
    "reader_for_session",
    "session_reads_kafka",
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
    else:
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
    found = connector_jars_or_reason(directory)
    if isinstance(found, str):
        if directory is not None or find_connector_dir() is not None:
            log.warning("%s", found)  # a connector is there but unusable: say why
        return None
    return found


def connector_jars_or_reason(directory: Path | None = None) -> list[Path] | str:
    """:func:`kafka_connector_jars` without logging: the jars, or one line saying why none."""
    directory = directory if directory is not None else find_connector_dir()
    if directory is None:
        where = os.environ.get(JARS_ENV) or ".jvm/spark-kafka"
        return f"Spark's Kafka connector ({CONNECTOR_ARTIFACT}) is not in {where} (run `make jvm`)"
    jars = sorted(directory.glob("*.jar"))
    version = connector_version(jars)
    if version is None:
        return f"Spark's Kafka connector ({CONNECTOR_ARTIFACT}) is not in {directory}"
    spark_version = _pyspark_version()
    if version != spark_version:
        return (f"Spark's Kafka connector in {directory} is for Spark {version}, pyspark is "
                f"{spark_version}: not using it (run `make jvm`)")  # fmt: skip
    shipped = _pyspark_artifacts()
    return [jar for jar in jars if _artifact(jar.name) not in shipped]


# The pipeline's readers of the change topics: Spark's Kafka source, kayak's data source.
READERS = ("kafka", "kayak")


def choose_reader(requested: str | None) -> str:
    """The reader a pipeline uses: ``requested`` when given ("kafka" needs the connector's
    jars: KayakError, one line, without them); by default "kafka" when the jars are found,
    else "kayak" with one warning line saying why."""
    if requested not in (None, *READERS):
        raise KayakError(f"unknown reader {requested!r}: use one of {', '.join(READERS)}")
    if requested == "kayak":
        return "kayak"
    found = connector_jars_or_reason()
    if not isinstance(found, str):
        return "kafka"
    if requested == "kafka":
        raise KayakError(f"--reader kafka: {found}; or use --reader kayak")
    log.warning("%s: reading the change topics with kayak's data source (--reader kayak)", found)
    return "kayak"


def reader_for_session(requested: str | None, spark: Any) -> str:
    """:func:`choose_reader`, and "kafka" only if ``spark`` has Spark's Kafka source (a
    session started without its jars has not: the same error, or warning and "kayak")."""
    reader = choose_reader(requested)
    if reader != "kafka" or session_reads_kafka(spark):
        return reader
    why = "the Spark session was started without Spark's Kafka connector (spark.jars)"
    if requested == "kafka":
        raise KayakError(f"--reader kafka: {why}; or use --reader kayak")
    log.warning("%s: reading the change topics with kayak's data source (--reader kayak)", why)
    return "kayak"


def session_reads_kafka(spark: Any) -> bool:
    """Whether ``spark`` finds ``format("kafka")``: Spark's own lookup of a data source by
    name, asked in the driver's JVM (from spark.jars, or a Spark that ships the connector)."""
    from py4j.protocol import Py4JJavaError  # type: ignore[import-untyped]

    jvm = spark.sparkContext._jvm
    try:
        jvm.org.apache.spark.sql.execution.datasources.DataSource.lookupDataSource(
            "kafka", spark._jsparkSession.sessionState().conf()
        )
    except Py4JJavaError:
        return False
    return True


# librdkafka's names kayak's client accepts, as the Java client spells them.
_JAVA_NAMES = {
    "socket.timeout.ms": "request.timeout.ms",
    "fetch.wait.max.ms": "fetch.max.wait.ms",
    "fetch.message.max.bytes": "max.partition.fetch.bytes",
    "sasl.mechanisms": "sasl.mechanism",
}
# kayak-only properties with no Java equivalent (callbacks, kayak's fetch pipelining,
# statistics), or spelt differently below (the PEM files, SASL user and password).
_NOT_FOR_JAVA = {
    "fetch.pipeline.depth", "prefetch.max.bytes", "statistics.interval.ms", "stats_cb",
    "oauth_cb", "sasl.oauthbearer.config", "sasl.username", "sasl.password",
    "ssl.ca.location", "ssl.certificate.location", "ssl.key.location",
}  # fmt: skip
# What kayak sets on Spark's Kafka source unless -X says otherwise. The driver asks for each
# micro-batch's end offsets with an Admin client, and Spark makes a new one only after a call
# fails; when a partition's leader dies, the Admin's ListOffsets can hang until its API
# timeout (Kafka's default: 60 s) although the new leader is ready within seconds. Short
# timeouts let Spark's own retry (fetchOffset.numRetries) go to the new leader instead.
# (The Java clients refuse an API timeout below the request timeout, so a longer
# request.timeout.ms from -X lifts it: -X default.api.timeout.ms itself is refused by the
# capture's producer, which gets the same -X.)
KAFKA_SOURCE_DEFAULTS = {"request.timeout.ms": "5000", "default.api.timeout.ms": "10000"}
_LOGIN_MODULES = {
    "PLAIN": "org.apache.kafka.common.security.plain.PlainLoginModule",
    "SCRAM-SHA-256": "org.apache.kafka.common.security.scram.ScramLoginModule",
    "SCRAM-SHA-512": "org.apache.kafka.common.security.scram.ScramLoginModule",
}


def kafka_source_options(options: Mapping[str, str]) -> dict[str, str]:
    """``options`` over :data:`KAFKA_SOURCE_DEFAULTS`; an API timeout of kayak's below a
    request timeout of the user's rises to it (the Java clients refuse it otherwise)."""
    merged = {**KAFKA_SOURCE_DEFAULTS, **options}
    if "default.api.timeout.ms" not in options and "request.timeout.ms" in options:
        request_ms = int(options["request.timeout.ms"])
        merged["default.api.timeout.ms"] = str(max(request_ms, 10_000))
    return merged


def java_client_options(options: Mapping[str, str]) -> dict[str, str]:
    """kayak's client properties (``-X``) as the Java consumer in Spark's Kafka source takes
    them. kayak also accepts librdkafka's names and defaults differently in two places; the
    Java client would ignore the former (a warning, then no TLS trust or no login) and
    misread the latter. Kafka's own names pass unchanged. A client certificate in
    librdkafka's two files has no Java spelling without the key's text: KayakError."""
    java = {_JAVA_NAMES.get(name, name): value for name, value in options.items()
            if name not in _NOT_FOR_JAVA}  # fmt: skip
    if (ca := options.get("ssl.ca.location")) and "ssl.truststore.location" not in java:
        java.update({"ssl.truststore.location": ca, "ssl.truststore.type": "PEM"})
    if {"ssl.certificate.location", "ssl.key.location"} & options.keys() and (
        "ssl.keystore.location" not in java
    ):
        # Java reads a PEM client certificate and its key from one file, not two; passing
        # their text instead would put the key into Spark's plan and logs.
        raise KayakError(
            "Spark's Kafka reader takes the client certificate as Java does: -X "
            "ssl.keystore.type=PEM -X ssl.keystore.location=FILE (the key and certificate "
            "chain in one PEM file), or use --reader kayak"
        )
    if java.get("ssl.endpoint.identification.algorithm", "").lower() == "none":
        java["ssl.endpoint.identification.algorithm"] = ""  # Java's "off"
    if java.get("security.protocol", "").upper().startswith("SASL"):
        # kayak's default mechanism is PLAIN; Java's is GSSAPI (Kerberos).
        java.setdefault("sasl.mechanism", "PLAIN")
        user = options.get("sasl.username")
        module = _LOGIN_MODULES.get(java["sasl.mechanism"].upper())
        if user is not None and module and "sasl.jaas.config" not in java:
            password = options.get("sasl.password", "")
            java["sasl.jaas.config"] = (f'{module} required username="{_jaas_quoted(user)}" '
                                        f'password="{_jaas_quoted(password)}";')  # fmt: skip
    return java


def _jaas_quoted(text: str) -> str:
    """``text`` inside a JAAS double-quoted value (Java reads it with backslash escapes)."""
    return text.replace("\\", "\\\\").replace('"', '\\"')


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
