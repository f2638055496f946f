"""Run a small Spark job whose JVM archives the classes it loads (class data sharing).

``make spark-archive`` runs ``python tools/jvm/spark_class_archive.py ARCHIVE``; the tests
(``tests/conftest.py``) start every Spark driver with :data:`JVM_OPTIONS` and
``-XX:SharedArchiveFile`` on that archive, and the JVM maps it only when the options it was
written with match, hence one definition here.

The job touches what kayak's pipeline uses in the driver JVM: Spark SQL, a streaming query
with ``foreachBatch``, and Arrow batches to and from Python workers.
"""

from __future__ import annotations

import os
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import DataFrame

# Short-lived Spark JVMs spend less CPU on the C1 compiler alone and a serial collector.
JVM_OPTIONS = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"
QUIET_CDS = "-Xlog:cds*=off"  # CDS's own log lines (an archive written, a mismatch) go to stdout


def _same(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    yield from batches


def main(archive: Path) -> None:
    """Run the job in a JVM that writes its classes to ``archive`` as it exits."""
    from pyspark.sql import SparkSession

    os.environ["SPARK_SUBMIT_OPTS"] = (
        f"{JVM_OPTIONS} {QUIET_CDS} -XX:ArchiveClassesAtExit={archive.resolve()}"
    )
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)  # workers with this venv's pyarrow
    spark = (
        SparkSession.builder.master("local[2]")
        .appName("kayak-spark-class-archive")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .getOrCreate()
    )
    try:
        rows = spark.range(1000).selectExpr("id", "cast(id as string) AS text", "id % 7 AS k")
        rows.mapInArrow(_same, rows.schema).groupBy("k").count().collect()
        seen: list[int] = []

        def keep(batch: DataFrame, batch_id: int) -> None:
            seen.append(batch.count())

        with tempfile.TemporaryDirectory() as checkpoint:
            query = (
                spark.readStream.format("rate").option("rowsPerSecond", 100).load()
                .writeStream.foreachBatch(keep)
                .option("checkpointLocation", checkpoint)
                .trigger(processingTime="200 milliseconds")
                .start()
            )  # fmt: skip
            while len(seen) < 2:
                query.awaitTermination(0.2)
            query.stop()
    finally:
        gateway = spark.sparkContext._gateway
        spark.stop()
        # The JVM writes the archive as it exits, which it does once its stdin closes; make
        # moves the archive into place after this process ends, so wait for the JVM here.
        jvm = gateway.proc
        jvm.stdin.close()
        jvm.wait(timeout=300)


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: python tools/jvm/spark_class_archive.py ARCHIVE")
    main(Path(sys.argv[1]))
