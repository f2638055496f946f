"""Kafka record batches: magic 2 read and write, magic 0/1 read, compression, header scanning.

Reading a Fetch response's records::

    for batch in iter_batches(records):          # stops quietly at a trailing partial batch
        for record in batch:                     # Record(offset, timestamp, key, value, headers)
            ...

Writing::

    build_record_batch([b"v1", b"v2"], keys=[b"k1", None], codec=Codec.LZ4)

Validating and placing a produced batch on the broker::

    for header in scan_batches(buf):
        validate_batch(header, buf)
    next_offset = assign_offsets(bytearray_buf, log_end_offset)
"""

from __future__ import annotations

from kayak.protocol.records.batch import RecordBatch, parse_control_record
from kayak.protocol.records.builder import (
    RecordBatchBuilder,
    build_control_batch,
    build_record_batch,
    set_base_offset,
    set_partition_leader_epoch,
)
from kayak.protocol.records.compression import (
    DEFAULT_MAX_DECOMPRESSED_SIZE,
    Codec,
    compress,
    decompress,
)
from kayak.protocol.records.legacy import LegacyBatch
from kayak.protocol.records.reader import (
    AnyBatch,
    BatchIterator,
    iter_batches,
    iter_records,
    parse_batches,
)
from kayak.protocol.records.record import (
    BATCH_HEADER_SIZE,
    ControlRecord,
    ControlRecordType,
    Header,
    Headers,
    Record,
    TimestampType,
)
from kayak.protocol.records.scanner import (
    BatchHeader,
    BatchScan,
    assign_offsets,
    complete_batches,
    read_batch_header,
    scan_batches,
    validate_batch,
)

__all__ = [
    "BATCH_HEADER_SIZE",
    "DEFAULT_MAX_DECOMPRESSED_SIZE",
    "AnyBatch",
    "BatchHeader",
    "BatchIterator",
    "BatchScan",
    "Codec",
    "ControlRecord",
    "ControlRecordType",
    "Header",
    "Headers",
    "LegacyBatch",
    "Record",
    "RecordBatch",
    "RecordBatchBuilder",
    "TimestampType",
    "assign_offsets",
    "build_control_batch",
    "build_record_batch",
    "complete_batches",
    "compress",
    "decompress",
    "iter_batches",
    "iter_records",
    "parse_batches",
    "parse_control_record",
    "read_batch_header",
    "scan_batches",
    "set_base_offset",
    "set_partition_leader_epoch",
    "validate_batch",
]
