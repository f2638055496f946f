"""Read-only consistency check of a broker data directory: the library behind ``kayak log``.

What Kafka's ``kafka-dump-log`` does for Kafka, for kayak's layout (``DATA_DIR/topics.json``
and one ``TOPIC-PARTITION/`` directory of segments per partition). Every ``.log`` file is read
in chunks, batch by batch, with the header scanner of :mod:`kayak.protocol.records.scanner`,
and checked for what the broker relies on:

- every batch is well framed and passes its CRC, and the file ends exactly where a batch does;
- offsets are continuous inside each segment and from one segment to the next, starting at
  the segment's base offset (its file name);
- ``.index`` and ``.timeindex`` entries are increasing and point where they claim to;
- the ``log-start-offset`` checkpoint falls inside the log.

Nothing here opens a file for writing (verification must never "repair" evidence; the broker's
``Segment`` opens its files read-write, so it is deliberately not used), and nothing prints:
callers get a :class:`VerifyReport` of :class:`Problem` values.

The modules follow the data, each importing only those before it:

- :mod:`~kayak.broker.log.verify.problems`: :class:`Problem`, :class:`ProblemKind`,
  :class:`DataDirError`, and how problems are ordered and capped.
- :mod:`~kayak.broker.log.verify.reader`: :class:`SegmentReader`, one ``.log`` file's batches
  with their framing, structure and CRC checked.
- :mod:`~kayak.broker.log.verify.segment`: :func:`verify_segment`, offsets within a segment
  and its ``.index`` and ``.timeindex``.
- :mod:`~kayak.broker.log.verify.partition`: :func:`verify_partition`, segments in order,
  checkpoints and the producer snapshot.
- :mod:`~kayak.broker.log.verify.data_dir`: :func:`verify_data_dir` and :class:`VerifyPlan`,
  the partitions ``topics.json`` and the disk name.
"""

from __future__ import annotations

from kayak.broker.log.verify.data_dir import (
    META_FILE,
    PartitionLocation,
    VerifyPlan,
    VerifyReport,
    verify_data_dir,
)
from kayak.broker.log.verify.partition import (
    MAX_INDEX_PROBLEMS,
    PartitionReport,
    segment_paths,
    verify_partition,
)
from kayak.broker.log.verify.problems import DataDirError, Problem, ProblemKind
from kayak.broker.log.verify.reader import (
    DEFAULT_CHUNK_SIZE,
    ProgressCallback,
    ScannedBatch,
    SegmentReader,
    crc_matches,
)
from kayak.broker.log.verify.segment import (
    LeaderEpochCheck,
    SegmentReport,
    read_index_entries,
    verify_segment,
)

__all__ = [
    "DEFAULT_CHUNK_SIZE",
    "MAX_INDEX_PROBLEMS",
    "META_FILE",
    "DataDirError",
    "LeaderEpochCheck",
    "PartitionLocation",
    "PartitionReport",
    "Problem",
    "ProblemKind",
    "ProgressCallback",
    "ScannedBatch",
    "SegmentReader",
    "SegmentReport",
    "VerifyPlan",
    "VerifyReport",
    "crc_matches",
    "read_index_entries",
    "segment_paths",
    "verify_data_dir",
    "verify_partition",
    "verify_segment",
]
