"""``KayakDataSource``: the data source Spark knows as ``kayak``."""

from __future__ import annotations

from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    DataSourceStreamWriter,
    DataSourceWriter,
)
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from kayak.spark.options import KayakSparkError, parse_read_options, parse_write_options

__all__ = ["KayakDataSource", "kafka_schema"]

_READ_MARKERS = ("subscribe", "subscribepattern", "assign")


def kafka_schema(include_headers: bool = False) -> StructType:
    """The rows the source reads, as Spark's Kafka source has them."""
    fields = [
        StructField("key", BinaryType()),
        StructField("value", BinaryType()),
        StructField("topic", StringType()),
        StructField("partition", IntegerType()),
        StructField("offset", LongType()),
        StructField("timestamp", TimestampType()),
        StructField("timestampType", IntegerType()),
    ]
    if include_headers:
        header = StructType([StructField("key", StringType()), StructField("value", BinaryType())])
        fields.append(StructField("headers", ArrayType(header)))
    return StructType(fields)


class KayakDataSource(DataSource):
    """Kafka topics as a Spark source and sink, through kayak's pure-Python client.

    Options are those of Spark's Kafka source (``kafka.bootstrap.servers``, ``subscribe`` /
    ``subscribePattern`` / ``assign``, ``startingOffsets``, ...); see ``kayak.spark``.
    """

    @classmethod
    def name(cls) -> str:
        return "kayak"

    def schema(self) -> StructType:
        """Spark's Kafka schema (with ``headers`` if includeHeaders=true). Checks the read
        options now, so a bad one fails ``load()``."""
        keys = {str(k).lower() for k in self.options}
        if "topic" in keys and not keys.intersection(_READ_MARKERS):
            return kafka_schema(False)  # a writer's options: nothing to read
        read = parse_read_options(self.options, streaming=None, check_client=False)
        return kafka_schema(read.include_headers)

    # Readers and writers import kayak's client, which Spark's load() does not need.

    def reader(self, schema: StructType) -> DataSourceReader:
        from kayak.spark.reader import KayakBatchReader

        return KayakBatchReader(parse_read_options(self.options, streaming=False))

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        from kayak.spark.reader import KayakStreamReader

        return KayakStreamReader(parse_read_options(self.options, streaming=True))

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        from kayak.spark.writer import KayakWriter, check_write_schema

        if overwrite:
            # Spark's Kafka sink refuses Overwrite too: records cannot be taken back.
            raise KayakSparkError(
                'format("kayak") writes append records to topics: save mode "overwrite" is '
                'not supported (use "append")'
            )
        options = parse_write_options(self.options)
        check_write_schema(schema, options)
        return KayakWriter(options)

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        from kayak.spark.writer import KayakStreamWriter, check_write_schema

        options = parse_write_options(self.options)
        check_write_schema(schema, options)
        return KayakStreamWriter(options)
