"""One partition's part of a Fetch response, decoded only as the application reads it.

The fetcher hands each partition's records over with nothing but their batch headers read
(:func:`~kayak.protocol.records.scan_batches`); this module turns them into records when the
application asks: a batch at a time, skipping what it must not see —

* records before the fetch offset (a fetch that starts inside a batch gets the whole batch),
* control batches (transaction markers), and with ``read_committed`` the batches of aborted
  transactions, found from the response's aborted-transactions list as Kafka's Java client
  does,

and moving the partition's ``position`` past everything handed out or skipped. CRCs are
checked (``check.crcs``) as each batch is decoded.
"""

from __future__ import annotations

import bisect
import operator
from collections.abc import Sequence

from kayak.client.consumer.records import ConsumerRecord, record_class
from kayak.client.consumer.subscription import PartitionState
from kayak.protocol.messages.fetch_response import AbortedTransaction
from kayak.protocol.records import (
    BatchHeader,
    ControlRecordType,
    LegacyBatch,
    Record,
    RecordBatch,
)
from kayak.protocol.records.record import MAGIC_V2, TIMESTAMP_TYPE_BIT

__all__ = ["AbortedTransactions", "CompletedFetch"]

Buffer = bytes | bytearray | memoryview
_offset_of = operator.attrgetter("offset")


class AbortedTransactions:
    """Which batches of a read_committed fetch belong to aborted transactions.

    The broker lists each aborted transaction that overlaps the response as (producer id,
    first offset). Walking the batches in order, a producer's transaction counts as aborted
    from its first offset until that producer's ABORT marker (a control batch).
    """

    __slots__ = ("_next", "_pending", "_producers")

    def __init__(self, aborted: Sequence[AbortedTransaction] | None) -> None:
        self._pending = sorted(aborted or (), key=operator.attrgetter("first_offset"))
        self._next = 0
        self._producers: set[int] = set()

    def skips(self, header: BatchHeader, control_type: ControlRecordType | None) -> bool:
        """Whether to drop this data batch; also tracks markers (``control_type`` for control
        batches, which are always dropped by the caller)."""
        if header.producer_id < 0:
            return False
        pending, index = self._pending, self._next
        while index < len(pending) and pending[index].first_offset <= header.last_offset:
            self._producers.add(pending[index].producer_id)
            index += 1
        self._next = index
        if control_type is ControlRecordType.ABORT:
            self._producers.discard(header.producer_id)
            return True
        return header.is_transactional and header.producer_id in self._producers


class CompletedFetch:
    """The records of one partition from one Fetch response, decoded lazily.

    ``end_offset`` is where the partition's next fetch started: once everything here is
    consumed, ``position`` is there.
    """

    __slots__ = (
        "_aborted",
        "_batch_header",
        "_check_crcs",
        "_data",
        "_headers",
        "_index",
        "_items",
        "_items_are_records",
        "_next_batch",
        "end_offset",
        "epoch",
        "fetch_offset",
        "size",
        "state",
    )

    def __init__(
        self,
        state: PartitionState,
        records: Buffer,
        headers: list[BatchHeader],
        fetch_offset: int,
        end_offset: int,
        *,
        size: int,
        check_crcs: bool = True,
        aborted: AbortedTransactions | None = None,
    ) -> None:
        self.state = state
        self.epoch = state.epoch
        self._data: Buffer = records
        self._headers = headers
        self.fetch_offset = fetch_offset
        self.end_offset = end_offset
        self.size = size
        self._check_crcs = check_crcs
        self._aborted = aborted
        self._next_batch = 0
        self._batch_header: BatchHeader | None = None
        # The current batch's records (or values), and the index of the next one to hand out.
        self._items: list[Record] | list[bytes | None] = []
        self._items_are_records = True
        self._index = 0

    def __repr__(self) -> str:
        return (
            f"<CompletedFetch {self.state.tp} {self.fetch_offset}..{self.end_offset} "
            f"batch {self._next_batch}/{len(self._headers)}>"
        )

    @property
    def is_current(self) -> bool:
        """False once a seek, reset or unassignment made this data void."""
        return self.state.epoch == self.epoch

    @property
    def has_more_in_batch(self) -> bool:
        """Records of the current batch are left (so not ``exhausted``)."""
        return self._index < len(self._items)

    @property
    def exhausted(self) -> bool:
        return self._index >= len(self._items) and self._next_batch >= len(self._headers)

    # -- handing records out ---------------------------------------------------------------

    def take(self, limit: int) -> list[ConsumerRecord]:
        """Up to ``limit`` records, in offset order, advancing the partition's position."""
        out: list[ConsumerRecord] = []
        while len(out) < limit:
            if self._index >= len(self._items) or not self._items_are_records:
                if not self._load_batch(as_records=True):
                    break
                continue
            records: list[ConsumerRecord] = self._items  # type: ignore[assignment]
            start = self._index
            stop = min(len(records), start + limit - len(out))
            out += records[start:stop] if start or stop < len(records) else records
            self._index = stop
            self._advance_position(records[stop - 1].offset + 1)
        return out

    def take_within_batch(self) -> ConsumerRecord | None:
        """The next record if it is not its batch's last (so no batch is decoded and the
        fetch is not used up by taking it): ``take_one``'s usual case. Else None."""
        index, items = self._index, self._items
        if index + 1 < len(items) and self._items_are_records:
            record: ConsumerRecord = items[index]  # type: ignore[assignment]
            self._index = index + 1
            self.state.position = record.offset + 1
            return record
        return None

    def take_one(self) -> ConsumerRecord | None:
        """The next record, or None if none is left."""
        within = self.take_within_batch()
        if within is not None:
            return within
        while self._index >= len(self._items) or not self._items_are_records:
            if not self._load_batch(as_records=True):
                return None
        record: ConsumerRecord = self._items[self._index]  # type: ignore[assignment]
        self._index += 1
        self._advance_position(record.offset + 1)
        return record

    def peek(self, limit: int) -> list[ConsumerRecord]:
        """Up to ``limit`` of the current batch's records still to hand out, not taken."""
        if not self._items_are_records:
            return []
        records: list[ConsumerRecord] = self._items  # type: ignore[assignment]
        return records[self._index : self._index + limit]

    def take_values(self, limit: int) -> list[bytes | None]:
        """Up to ``limit`` values (keys, headers and timestamps never decoded) and how many."""
        out: list[bytes | None] = []
        while len(out) < limit:
            if self._index >= len(self._items):
                if not self._load_batch(as_records=False):
                    break
                continue
            items = self._items
            start = self._index
            stop = min(len(items), start + limit - len(out))
            if self._items_are_records:
                records: list[Record] = items  # type: ignore[assignment]
                out += [record.value for record in records[start:stop]]
                last_offset = records[stop - 1].offset
            else:
                values: list[bytes | None] = items  # type: ignore[assignment]
                out += values[start:stop] if start or stop < len(values) else values
                header = self._batch_header
                assert header is not None
                last_offset = header.base_offset + stop - 1  # a contiguous batch
            self._index = stop
            self._advance_position(last_offset + 1)
        return out

    def _advance_position(self, next_offset: int) -> None:
        state = self.state
        if self._index >= len(self._items):
            header = self._batch_header
            assert header is not None
            next_offset = max(next_offset, header.next_offset)
            if self._next_batch >= len(self._headers):
                next_offset = max(next_offset, self.end_offset)
        state.position = next_offset

    # -- decoding a batch at a time ---------------------------------------------------------

    def _load_batch(self, *, as_records: bool) -> bool:
        """Decode the next batch worth handing out into ``_items``; False at the end.

        A batch half handed out as values is decoded again as records if records are asked
        for (mixing ``getmany`` and ``getmany_values`` on one partition).
        """
        if self._index < len(self._items):  # mid-batch: switch representation
            header = self._batch_header
            assert header is not None
            self._items = self._decode_records(header)
            self._items_are_records = True
            return True
        headers = self._headers
        while self._next_batch < len(headers):
            header = headers[self._next_batch]
            self._next_batch += 1
            if self._skips(header):
                self.state.position = max(self.state.position or 0, header.next_offset)
                continue
            self._batch_header = header
            values_fit = (
                not as_records
                and header.magic == MAGIC_V2
                and header.record_count == header.last_offset_delta + 1
            )
            if values_fit:
                self._items = self._v2_batch(header).values()
                self._items_are_records = False
            else:
                self._items = self._decode_records(header)
                self._items_are_records = True
            self._index = self._first_index(header)
            if self._index < len(self._items):
                counters = self.state.counters  # statistics: once per batch handed out
                counters.rx_records += len(self._items) - self._index
                counters.rx_bytes += header.size
                return True
            self.state.position = max(self.state.position or 0, header.next_offset)
        self._items, self._index = [], 0
        if self.state.position is not None and self.state.position < self.end_offset:
            self.state.position = self.end_offset
        return False

    def _first_index(self, header: BatchHeader) -> int:
        """Index of the first record at or after the fetch offset (0 but for the first batch)."""
        if header.base_offset >= self.fetch_offset:
            return 0
        if not self._items_are_records:
            return self.fetch_offset - header.base_offset  # contiguous offsets
        records: list[Record] = self._items  # type: ignore[assignment]
        return bisect.bisect_left(records, self.fetch_offset, key=_offset_of)

    def _skips(self, header: BatchHeader) -> bool:
        control_type: ControlRecordType | None = None
        if header.is_control:
            if self._aborted is None:
                return True
            control_type = self._v2_batch(header).control_type
        if self._aborted is not None and self._aborted.skips(header, control_type):
            return True
        return control_type is not None

    def _buffer(self) -> Buffer:
        """The records as ``bytes`` (copied once, from a view of the network frame), for the
        legacy (magic 0/1) reader."""
        data = self._data
        if type(data) is not bytes:
            data = self._data = bytes(data)
        return data

    def _v2_batch(self, header: BatchHeader) -> RecordBatch:
        # The records as they arrived (a view of the response frame): uncompressed batches
        # are decoded in place by the C decoder, or copied a batch at a time for Python.
        batch = RecordBatch(self._data, header.position)
        if self._check_crcs:
            batch.validate_crc()
        return batch

    def _decode_records(self, header: BatchHeader) -> list[Record]:
        tp = self.state.tp
        if header.magic == MAGIC_V2:
            timestamp_type = (header.attributes & TIMESTAMP_TYPE_BIT) >> 3
            cls = record_class(tp.topic, tp.partition, timestamp_type)
            # The decoder makes the records instances of the partition's class directly.
            return self._v2_batch(header).record_list(cls)
        legacy = LegacyBatch(self._buffer(), header.position)
        if self._check_crcs:
            legacy.validate_crc()
        records = list(legacy.records())
        cls = record_class(tp.topic, tp.partition, int(legacy.timestamp_type))
        for record in records:
            record.__class__ = cls
        return records
