"""kayak as a PySpark data source: Kafka topics in and out of Spark, in pure Python.

::

    import kayak.spark
    kayak.spark.register(spark)

    df = (spark.read.format("kayak")
          .option("kafka.bootstrap.servers", "localhost:9092")
          .option("subscribe", "orders")
          .load())                      # key, value, topic, partition, offset, timestamp, ...

The options, the rows and the streaming offsets are those of Spark's own Kafka source
(``kafka.bootstrap.servers``; one of ``subscribe``, ``subscribePattern``, ``assign``;
``startingOffsets``, ``endingOffsets``, ``startingTimestamp``,
``startingOffsetsByTimestamp``, ``maxOffsetsPerTrigger``, ``failOnDataLoss``,
``includeHeaders``, ``minPartitions``, ``kafka.*`` client properties), so a job written
for ``format("kafka")`` runs with ``format("kayak")`` where the Kafka jar is not available.
Executors read with kayak's consumer and hand Spark Arrow record batches; writers produce
with kayak's producer. Nothing here depends on kayak's broker: any Kafka cluster works.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kayak.spark.options import KayakSparkError, ReadOptions, WriteOptions
from kayak.spark.source import KayakDataSource, kafka_schema

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = [
    "KayakDataSource",
    "KayakSparkError",
    "ReadOptions",
    "WriteOptions",
    "kafka_schema",
    "register",
]


def register(spark: SparkSession) -> None:
    """Register the data source with ``spark`` under the short name ``kayak``; from then on
    ``save()`` in Spark's default mode appends, as with Spark's Kafka sink."""
    from kayak.spark.writer import accept_default_save_mode

    spark.dataSource.register(KayakDataSource)
    accept_default_save_mode()
