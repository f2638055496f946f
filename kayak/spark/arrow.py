"""Records of one partition → one Arrow record batch, column by column.

This is the reader's hot path. Each column is built in one C-level pass over the decoded
records (``map`` with an ``attrgetter`` into a list that Arrow converts in C), and the columns every
row of a partition shares (topic, partition) are repeated by Arrow without touching rows.
Timestamps arrive in milliseconds; Spark's ``timestamp`` is microseconds in UTC.
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import accumulate
from operator import attrgetter
from typing import Any

import pyarrow as pa

__all__ = ["kafka_arrow_schema", "records_to_batch"]

_key = attrgetter("key")
_value = attrgetter("value")
_offset = attrgetter("offset")
_timestamp = attrgetter("timestamp")
_timestamp_type = attrgetter("timestamp_type")
_headers = attrgetter("headers")

_TIMESTAMP_MS = pa.timestamp("ms", tz="UTC")
_TIMESTAMP = pa.timestamp("us", tz="UTC")
_HEADER = pa.struct([pa.field("key", pa.string()), pa.field("value", pa.binary())])


def kafka_arrow_schema(include_headers: bool) -> pa.Schema:
    """The Arrow form of the source's Spark schema (what Spark's Arrow conversion expects)."""
    fields = [
        pa.field("key", pa.binary()),
        pa.field("value", pa.binary()),
        pa.field("topic", pa.string()),
        pa.field("partition", pa.int32()),
        pa.field("offset", pa.int64()),
        pa.field("timestamp", _TIMESTAMP),
        pa.field("timestampType", pa.int32()),
    ]
    if include_headers:
        fields.append(pa.field("headers", pa.list_(pa.field("element", _HEADER))))
    return pa.schema(fields)


def _headers_column(records: Sequence[Any], list_type: pa.DataType) -> pa.Array:
    per_record = list(map(_headers, records))
    offsets = list(accumulate(map(len, per_record), initial=0))
    keys = [key for headers in per_record for key, _ in headers]
    values = [value for headers in per_record for _, value in headers]
    items = pa.StructArray.from_arrays(
        [pa.array(keys, pa.string()), pa.array(values, pa.binary())], fields=list(_HEADER)
    )
    return pa.ListArray.from_arrays(pa.array(offsets, pa.int32()), items, type=list_type)


def _timestamp_types(records: Sequence[Any], count: int) -> pa.Array:
    # The timestamp type lives on a record's class (one per partition and type, see
    # kayak.client.consumer.records): one class means one type for the whole batch, and
    # collecting classes is cheaper than reading an attribute of every record.
    classes = set(map(type, records))
    if len(classes) == 1:
        return pa.repeat(pa.scalar(int(records[0].timestamp_type), pa.int32()), count)
    return pa.array(list(map(_timestamp_type, records)), pa.int32())


def records_to_batch(
    records: Sequence[Any], topic: str, partition: int, schema: pa.Schema
) -> pa.RecordBatch:
    """One Arrow record batch for ``records`` (``ConsumerRecord``-like objects of one
    partition) in ``schema`` (:func:`kafka_arrow_schema`; headers if it has them)."""
    count = len(records)
    columns = [
        pa.array(list(map(_key, records)), pa.binary()),
        pa.array(list(map(_value, records)), pa.binary()),
        pa.repeat(pa.scalar(topic, pa.string()), count),
        pa.repeat(pa.scalar(partition, pa.int32()), count),
        pa.array(list(map(_offset, records)), pa.int64()),
        # Kafka's milliseconds, as Spark's microseconds (one vectorised cast).
        pa.array(list(map(_timestamp, records)), _TIMESTAMP_MS).cast(_TIMESTAMP),
        _timestamp_types(records, count),
    ]
    if len(schema) > len(columns):
        columns.append(_headers_column(records, schema.field("headers").type))
    return pa.RecordBatch.from_arrays(columns, schema=schema)
