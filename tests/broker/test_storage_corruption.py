"""Damaged files on start: the broker always starts, repairs what a crash can leave, and
never serves anything but the records it stored, at their offsets.

- Real broker processes (stopped cleanly or with kill -9), files damaged between runs: lost
  or broken indexes are rebuilt; a gap in a partition's offsets takes that partition offline
  (KAFKA_STORAGE_ERROR) with an error naming it; a flipped byte in an older segment reaches
  a sequential consumer as an error, never as a silent jump or another batch's bytes; and
  a damaged partition never keeps the others from loading.
- Properties of :class:`~kayak.broker.log.PartitionLog` itself (hypothesis): a torn or
  garbled active segment keeps exactly its longest valid prefix; a lost or broken index of
  an older segment is rebuilt.
"""

from __future__ import annotations

import os
import random
import signal
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

import pytest
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka import KafkaError as ClientError
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from kayak.broker.log import LogConfig, PartitionLog
from kayak.errors import ErrorCode, KafkaError, OffsetOutOfRangeError
from kayak.protocol.records import (
    BATCH_HEADER_SIZE,
    BatchHeader,
    build_record_batch,
    iter_batches,
    scan_batches,
)
from tests.broker.conftest import BrokerProcess
from tests.broker.interop_helpers import create_topic
from tests.broker.storage_faults_support import (
    STORAGE_ERROR,
    fetch,
    one_batch,
    produce,
    read_records,
)
from tests.broker.wire import WireClient

SEGMENT_BYTES = 1 << 20
TOPIC_BYTES = 3_500_000  # four segments of ~1 MiB: three sealed, one active
# What a broker may answer for a fetch that reaches a damaged batch.
DAMAGE_ERRORS = {int(ErrorCode.CORRUPT_MESSAGE), STORAGE_ERROR}
STOPS = [
    pytest.param(signal.SIGTERM, id="clean-stop"),
    pytest.param(signal.SIGKILL, id="kill-9"),
]


# -- writing, stopping, damaging, starting again -------------------------------------------


def record_value(topic: str, offset: int, size: int) -> bytes:
    head = b"%s-%07d-" % (topic.encode(), offset)
    return head + b"z" * max(size - len(head), 0)


def fill_topic(wire: WireClient, topic: str, total: int, seed: int) -> list[bytes]:
    """Batches of 1-8 records of 200 B-9 kB until ``total`` bytes; the values by offset."""
    rng = random.Random(seed)
    values: list[bytes] = []
    written = 0
    while written < total:
        first = len(values)
        batch = [
            record_value(topic, first + i, rng.randint(200, 9000)) for i in range(rng.randint(1, 8))
        ]
        result = produce(wire, topic, build_record_batch(batch))
        assert (result.error_code, result.base_offset) == (0, first), result
        values += batch
        written += sum(map(len, batch))
    return values


def segment_files(data_dir: Path, topic: str, suffix: str = ".log") -> list[Path]:
    return sorted((data_dir / f"{topic}-0").glob(f"*{suffix}"))


def older_segment(data_dir: Path, topic: str, suffix: str = ".log") -> Path:
    """The second of the partition's segments: sealed, with records before and after it."""
    files = segment_files(data_dir, topic, suffix)
    assert len(files) >= 3, f"{topic} has only {len(files)} segments"
    return files[1]


@dataclass
class Scenario:
    broker: BrokerProcess
    values: dict[str, list[bytes]]  # per topic, the stored values by offset
    log_mark: int  # where the restarted broker's log lines begin

    def new_log(self) -> str:
        return self.broker.log_text()[self.log_mark :]


def run_with_damage(
    tmp_path: Path,
    stop: int,
    damage: Mapping[str, Callable[[Path, str], None]],
    brokers: list[BrokerProcess],
) -> Scenario:
    """Fill one topic per damage plus ``healthy``, stop with ``stop``, damage, start again."""
    broker = BrokerProcess(tmp_path / "data")
    brokers.append(broker)
    broker.start()
    wire = WireClient(broker.bootstrap_servers)
    values: dict[str, list[bytes]] = {}
    for seed, topic in enumerate([*damage, "healthy"]):
        create_topic(broker.bootstrap_servers, topic, configs={"segment.bytes": str(SEGMENT_BYTES)})
        values[topic] = fill_topic(wire, topic, TOPIC_BYTES if topic in damage else 200_000, seed)
    wire.close()
    assert broker.stop(stop) == (0 if stop == signal.SIGTERM else -stop)
    for topic, spoil in damage.items():
        spoil(broker.data_dir, topic)
    mark = len(broker.log_text())
    broker.start()  # the broker always starts
    return Scenario(broker, values, mark)


def check_healthy(scenario: Scenario) -> None:
    """The undamaged partition loaded, serves everything, and takes appends."""
    wire = WireClient(scenario.broker.bootstrap_servers)
    try:
        stored = read_records(wire, "healthy")
        assert [v for _, v in stored] == scenario.values["healthy"]
        result = produce(wire, "healthy", one_batch(b"after-restart"))
        assert (result.error_code, result.base_offset) == (0, len(stored)), result
    finally:
        wire.close()


@pytest.fixture
def brokers() -> Iterator[list[BrokerProcess]]:
    """Brokers a test started; killed if the test left them running."""
    started: list[BrokerProcess] = []
    yield started
    for broker in started:
        if broker.process is not None:
            broker.stop(signal.SIGKILL)


# -- 6a. indexes ----------------------------------------------------------------------------


def truncate_index(data_dir: Path, topic: str) -> None:
    path = older_segment(data_dir, topic, ".index")
    data = path.read_bytes()
    assert len(data) > 16
    path.write_bytes(data[: len(data) // 2 + 3])  # mid-entry


def delete_index(data_dir: Path, topic: str) -> None:
    older_segment(data_dir, topic, ".index").unlink()


def garble_index(data_dir: Path, topic: str) -> None:
    path = older_segment(data_dir, topic, ".index")
    path.write_bytes(random.Random(11).randbytes(path.stat().st_size))


@pytest.mark.timeout(120)
@pytest.mark.parametrize("stop", STOPS)
def test_lost_or_broken_indexes_are_rebuilt(
    tmp_path: Path, stop: int, brokers: list[BrokerProcess]
) -> None:
    damage = {"idx-truncated": truncate_index, "idx-missing": delete_index}
    damage["idx-garbage"] = garble_index
    scenario = run_with_damage(tmp_path, stop, damage, brokers)
    wire = WireClient(scenario.broker.bootstrap_servers)
    for topic in damage:
        stored = read_records(wire, topic)
        assert [v for _, v in stored] == scenario.values[topic], f"{topic}: records differ"
        # A fetch from the middle of the damaged segment finds its batch through the index.
        middle = len(scenario.values[topic]) * 3 // 8
        data = fetch(wire, topic, middle, max_bytes=1)
        first = next(iter(iter_batches(bytes(data.records or b""))))
        assert first.base_offset <= middle <= first.last_offset, f"{topic}: index lookup"
    wire.close()
    check_healthy(scenario)


# -- 6b. gaps -------------------------------------------------------------------------------


def delete_log(data_dir: Path, topic: str) -> None:
    older_segment(data_dir, topic).unlink()


def truncate_log(data_dir: Path, topic: str) -> None:
    path = older_segment(data_dir, topic)
    os.truncate(path, path.stat().st_size // 2)


@pytest.mark.timeout(120)
@pytest.mark.parametrize("stop", STOPS)
def test_a_gap_in_the_offsets_takes_only_that_partition_offline(
    tmp_path: Path, stop: int, brokers: list[BrokerProcess]
) -> None:
    damage = {"gap-deleted": delete_log, "gap-truncated": truncate_log}
    scenario = run_with_damage(tmp_path, stop, damage, brokers)
    errors = [line for line in scenario.new_log().splitlines() if " ERROR " in line]
    wire = WireClient(scenario.broker.bootstrap_servers)
    for topic, values in ((t, scenario.values[t]) for t in damage):
        assert any(f"{topic}-0" in line for line in errors), (
            f"no error line names {topic}-0: {errors}"
        )
        result = produce(wire, topic, one_batch(b"into-a-gap"))
        assert result.error_code == STORAGE_ERROR, f"{topic}: produce answered {result}"
        for offset in (0, len(values) - 1):
            data = fetch(wire, topic, offset)
            assert data.error_code == STORAGE_ERROR, f"{topic}@{offset}: fetch answered {data}"
    wire.close()
    check_healthy(scenario)


# -- 6c, 6d. flipped bytes ------------------------------------------------------------------


def batches_of(path: Path) -> list[BatchHeader]:
    return list(scan_batches(path.read_bytes()))


def flip(path: Path, position: int, mask: int) -> None:
    with open(path, "r+b") as f:
        f.seek(position)
        byte = f.read(1)[0]
        f.seek(position)
        f.write(bytes([byte ^ mask]))


def middle_batch(data_dir: Path, topic: str) -> BatchHeader:
    headers = batches_of(older_segment(data_dir, topic))
    return headers[len(headers) // 2]


def flip_record_byte(data_dir: Path, topic: str) -> None:
    batch = middle_batch(data_dir, topic)
    records_start = batch.position + BATCH_HEADER_SIZE
    flip(older_segment(data_dir, topic), (records_start + batch.end) // 2, 0x20)


def flip_length_high(data_dir: Path, topic: str) -> None:
    # batchLength is bytes 8-11 of the header: its top byte sends the batch past the file.
    flip(older_segment(data_dir, topic), middle_batch(data_dir, topic).position + 8, 0x10)


def flip_length_low(data_dir: Path, topic: str) -> None:
    # Its low byte makes the batch end a few bytes early or late, inside a neighbour.
    flip(older_segment(data_dir, topic), middle_batch(data_dir, topic).position + 11, 0x04)


def wire_read_until_error(wire: WireClient, topic: str, values: list[bytes]) -> str | None:
    """Read sequentially from 0 with CRC checks; the first error (None: read everything).

    Every record delivered before an error must be the one stored at exactly that offset.
    """
    offset = 0
    while offset < len(values):
        data = fetch(wire, topic, offset)
        if data.error_code != 0:
            assert data.error_code in DAMAGE_ERRORS, f"{topic}@{offset}: error {data.error_code}"
            return f"error {data.error_code} at {offset}"
        try:
            batches = list(iter_batches(bytes(data.records or b""), check_crc=True))
        except KafkaError as exc:
            return f"undecodable at {offset}: {exc}"
        assert batches, f"{topic}@{offset}: nothing below the high watermark {data.high_watermark}"
        for batch in batches:
            for record in batch:
                if record.offset < offset:
                    continue
                assert record.offset == offset, f"{topic}: jumped from {offset} to {record.offset}"
                assert record.value == values[offset], f"{topic}@{offset}: another record's bytes"
                offset += 1
    return None


def confluent_read_events(bootstrap: str, topic: str) -> list[tuple[int, bytes | None] | str]:
    """What confluent-kafka (check.crcs=true) delivers from offset 0: (offset, value) pairs,
    or error texts.

    Stops at the first error, at the end of the partition, or after 20 s.
    """
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"check-{topic}",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
            "check.crcs": True,
            "auto.offset.reset": "error",
        }
    )
    consumer.assign([TopicPartition(topic, 0, 0)])
    events: list[tuple[int, bytes | None] | str] = []
    deadline = time.monotonic() + 20
    try:
        while time.monotonic() < deadline:
            for msg in consumer.consume(500, 0.5):
                error = msg.error()
                if error is None:
                    offset = msg.offset()
                    assert offset is not None
                    events.append((offset, msg.value()))
                    continue
                if error.code() != ClientError._PARTITION_EOF:
                    events.append(f"{error.name()}: {error.str()}")
                return events
    finally:
        consumer.close()
    return events


def check_no_silent_skip(
    events: list[tuple[int, bytes | None] | str], values: list[bytes], topic: str
) -> None:
    """Up to its first error, the consumer got every offset in order with its own value."""
    expected = 0
    for event in events:
        if isinstance(event, str):
            return  # an error: the consumer knows
        offset, value = event
        assert offset == expected, f"{topic}: consumer silently jumped from {expected} to {offset}"
        assert value == values[offset], f"{topic}@{offset}: consumer got another record's bytes"
        expected += 1
    assert expected == len(values), f"{topic}: stopped at {expected} of {len(values)} silently"


@pytest.mark.timeout(150)
@pytest.mark.parametrize("stop", STOPS)
def test_flipped_bytes_in_an_older_segment_reach_the_consumer_as_errors(
    tmp_path: Path, stop: int, brokers: list[BrokerProcess]
) -> None:
    damage = {
        "flip-record": flip_record_byte,
        "flip-length-high": flip_length_high,
        "flip-length-low": flip_length_low,
    }
    scenario = run_with_damage(tmp_path, stop, damage, brokers)
    wire = WireClient(scenario.broker.bootstrap_servers)
    for topic in damage:
        values = scenario.values[topic]
        outcome = wire_read_until_error(wire, topic, values)
        assert outcome is not None, f"{topic}: every record read back despite the flipped byte"
        events = confluent_read_events(scenario.broker.bootstrap_servers, topic)
        check_no_silent_skip(events, values, topic)
        assert events and isinstance(events[-1], str), f"{topic}: confluent-kafka saw no error"
    wire.close()
    check_healthy(scenario)


# -- 7. properties of PartitionLog ----------------------------------------------------------

BIG = 4 << 20
small_sizes = st.integers(1, 4096)
medium_sizes = st.integers(4096, 256 << 10)
huge_sizes = st.integers(BIG + 1, BIG + (1 << 20))


def property_config(segment_bytes: int) -> LogConfig:
    config = LogConfig(segment_bytes=segment_bytes, max_message_bytes=8 << 20)
    config.validate()
    return config


def batch_values(index: int, size: int, count: int) -> list[bytes]:
    head = b"%06d-" % index
    per = max(size // count - len(head) - 3, 0)
    return [head + b"%02d-" % j + b"v" * per for j in range(count)]


def write_batches(plog: PartitionLog, sizes: list[int], counts: list[int]) -> list[list[bytes]]:
    written = []
    for index, (size, count) in enumerate(zip(sizes, counts, strict=True)):
        values = batch_values(index, size, count)
        plog.append(build_record_batch(values, timestamp=1000 + index))
        written.append(values)
    return written


def check_reads(plog: PartitionLog, kept: list[list[bytes]]) -> None:
    """Every offset of every kept batch reads back as its own batch; nothing beyond."""
    offset = 0
    for values in kept:
        first = offset
        for _ in values:
            found = plog.read(offset, 1)
            assert found is not None, f"offset {offset} is gone"
            batch = next(iter(iter_batches(found.read(), check_crc=True)))
            assert batch.base_offset == first, f"offset {offset} read batch {batch.base_offset}"
            assert [r.value for r in batch] == values, f"batch at {first} changed"
            offset += 1
    assert plog.log_end_offset == offset
    assert plog.read(offset, 1) is None
    with pytest.raises(OffsetOutOfRangeError):
        plog.read(offset + 1, 1)


def garble(path: Path, start: int, length: int, seed: int) -> None:
    """Overwrite a range: its first bytes XORed with non-zero masks (so each one really
    changes), the rest with random bytes."""
    rng = random.Random(seed)
    masked = min(length, 256)
    with open(path, "r+b") as f:
        f.seek(start)
        original = f.read(masked)
        f.seek(start)
        f.write(bytes(b ^ rng.randint(1, 255) for b in original))
        f.write(rng.randbytes(length - masked))


@dataclass
class TornLog:
    """A partition directory as a crash left it, its active segment about to be damaged."""

    directory: Path
    config: LogConfig
    written: list[list[bytes]]  # every batch's values, in offset order
    active: Path
    headers: list[BatchHeader]  # the active segment's batches
    first_active: int  # index in ``written`` of the active segment's first batch


def write_torn_log(
    tmp: Path,
    sizes: list[int],
    huge: list[tuple[int, int]],
    segment_bytes: int,
    counts: Callable[[], int],
) -> TornLog:
    sizes = list(sizes)
    for size, at in huge:
        sizes.insert(min(at, len(sizes)), size)
    config = property_config(segment_bytes)
    directory = tmp / "t-0"
    plog = PartitionLog.open(directory, config)
    written = write_batches(plog, sizes, [counts() for _ in sizes])
    # Not closed (a clean stop seals and records the end: no crash could tear it then), only
    # its files let go of; what the active segment holds was never synced.
    for segment in plog.segments:
        segment.close()
    active = segment_files(tmp, "t")[-1]
    headers = batches_of(active)
    return TornLog(directory, config, written, active, headers, len(written) - len(headers))


def check_valid_prefix(torn: TornLog, tear: int) -> None:
    """Reopened after a crash, the log holds exactly the batches that end before ``tear``."""
    kept_in_active = [h for h in torn.headers if h.end <= tear]
    reopened = PartitionLog.open(torn.directory, torn.config, clean_shutdown=False)
    try:
        kept = torn.written[: torn.first_active + len(kept_in_active)]
        end = kept_in_active[-1].end if kept_in_active else 0
        assert torn.active.stat().st_size == end, "the damage was not cut at the last good batch"
        check_reads(reopened, kept)
        reopened.append(build_record_batch([b"after"]))
        check_reads(reopened, [*kept, [b"after"]])
    finally:
        reopened.close()


def detectable(headers: list[BatchHeader], start: int, length: int) -> bool:
    """False if the damage touches only a batch's leader epoch (bytes 12-15): it is neither
    CRC-checked nor implied by the batch before, so nothing can tell it is wrong."""
    hit = next(h for h in headers if h.position <= start < h.end)
    return not (hit.position + 12 <= start and start + length <= hit.position + 16)


PROPERTY_SETTINGS = settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
batch_size_lists = st.lists(st.one_of(small_sizes, medium_sizes), min_size=1, max_size=10)
# At most two batches of more than 4 MiB, at random places among the others.
huge_batches = st.lists(st.tuples(huge_sizes, st.integers(0, 10)), max_size=2)


@pytest.mark.timeout(150)
@PROPERTY_SETTINGS
@given(
    sizes=batch_size_lists,
    huge=huge_batches,
    segment_bytes=st.integers(1 << 20, 16 << 20),
    truncate=st.booleans(),
    data=st.data(),
)
def test_a_torn_tail_is_cut_to_the_longest_valid_prefix(
    sizes: list[int],
    huge: list[tuple[int, int]],
    segment_bytes: int,
    truncate: bool,
    data: st.DataObject,
) -> None:
    """What a crash leaves: the active segment cut short, or ending in garbage."""
    with tempfile.TemporaryDirectory() as tmp:
        torn = write_torn_log(
            Path(tmp), sizes, huge, segment_bytes, lambda: data.draw(st.integers(1, 3))
        )
        size = torn.active.stat().st_size
        if truncate:
            tear = data.draw(st.integers(0, size), label="tear")
            os.truncate(torn.active, tear)
        else:
            tear = data.draw(st.integers(0, size - 1), label="tear")
            assume(detectable(torn.headers, tear, size - tear))
            garble(torn.active, tear, size - tear, seed=tear)
        check_valid_prefix(torn, tear)


@pytest.mark.timeout(150)
@PROPERTY_SETTINGS
@given(
    sizes=batch_size_lists,
    huge=huge_batches,
    segment_bytes=st.integers(1 << 20, 16 << 20),
    data=st.data(),
)
def test_garbage_inside_the_active_segment_keeps_only_the_prefix_before_it(
    sizes: list[int],
    huge: list[tuple[int, int]],
    segment_bytes: int,
    data: st.DataObject,
) -> None:
    """Garbage over a range of the active segment after a crash.

    Damage that runs to the end, or leaves no valid batch right behind the damaged one, is
    what a torn write looks like: the log keeps exactly the batches before it. Damage inside
    one batch whose successor is intact (its offset and length fields untouched) is no torn
    write: nothing is cut and the partition opens offline, naming the file.
    """
    with tempfile.TemporaryDirectory() as tmp:
        torn = write_torn_log(
            Path(tmp), sizes, huge, segment_bytes, lambda: data.draw(st.integers(1, 3))
        )
        size = torn.active.stat().st_size
        tear = data.draw(st.integers(0, size - 1), label="tear")
        length = data.draw(st.integers(1, min(4096, size - tear)), label="length")
        assume(detectable(torn.headers, tear, length))
        garble(torn.active, tear, length, seed=tear)
        if damaged_inside(torn.headers, tear, length):
            reopened = PartitionLog.open(torn.directory, torn.config, clean_shutdown=False)
            try:
                assert reopened.offline is not None and str(torn.active) in reopened.offline
                assert torn.active.stat().st_size == size, "damage in the middle was cut"
            finally:
                reopened.close()
        else:
            check_valid_prefix(torn, tear)


def damaged_inside(headers: list[BatchHeader], start: int, length: int) -> bool:
    """Whether the damage stays inside one batch, sparing its base offset, length and last
    offset delta (bytes 0-11 and 23-26), with an intact batch after it."""
    i, hit = next((i, h) for i, h in enumerate(headers) if h.position <= start < h.end)
    end = start + length

    def touches(first: int, last: int) -> bool:
        return start < hit.position + last and end > hit.position + first

    return (
        i + 1 < len(headers)
        and end <= hit.end
        and not touches(0, 12)
        and not touches(23, 27)
    )


def damage_index(path: Path, how: str, cut: int, seed: int) -> None:
    if how == "delete":
        path.unlink()
    elif how == "truncate":
        os.truncate(path, min(cut, path.stat().st_size))
    else:
        garble(path, 0, path.stat().st_size, seed)


@pytest.mark.timeout(150)
@PROPERTY_SETTINGS
@given(
    sizes=st.lists(st.one_of(small_sizes, medium_sizes), min_size=12, max_size=40),
    segment_bytes=st.integers(1 << 20, 2 << 20),
    index_interval=st.integers(0, 64 << 10),
    how=st.sampled_from(["delete", "truncate", "garbage"]),
    cut=st.integers(0, 4096),
    data=st.data(),
)
def test_a_lost_or_broken_index_of_an_older_segment_is_rebuilt(
    sizes: list[int],
    segment_bytes: int,
    index_interval: int,
    how: str,
    cut: int,
    data: st.DataObject,
) -> None:
    config = LogConfig(
        segment_bytes=segment_bytes, max_message_bytes=8 << 20, index_interval_bytes=index_interval
    )
    config.validate()
    sizes = list(sizes)
    while sum(sizes) <= 2 * segment_bytes:  # at least two segments: one of them older
        sizes.append(128 << 10)
    counts = [(i % 3) + 1 for i in range(len(sizes))]
    with tempfile.TemporaryDirectory() as tmp:
        directory = Path(tmp) / "t-0"
        plog = PartitionLog.open(directory, config)
        written = write_batches(plog, sizes, counts)
        plog.close()
        indexes = segment_files(Path(tmp), "t", ".index")
        assert len(indexes) >= 2
        victim = indexes[data.draw(st.integers(0, len(indexes) - 2), label="segment")]
        damage_index(victim, how, cut, seed=cut)

        reopened = PartitionLog.open(directory, config, clean_shutdown=True)
        try:
            check_reads(reopened, written)
        finally:
            reopened.close()
