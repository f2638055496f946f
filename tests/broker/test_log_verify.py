"""``kayak log verify`` / ``kayak log dump`` on data directories a real broker wrote.

A broker process gets a few MB from confluent-kafka (varied batch sizes, a batch over 1 MiB,
a compressed idempotent producer) into a topic rolled at 1 MiB segments, and is stopped
cleanly. The command must find the directory clean and count exactly what was acknowledged;
then copies are damaged one way each, and it must fail naming the damaged file. The library
is checked directly too: a property test tears segments of random batches at random points
and reads them in small chunks.
"""

from __future__ import annotations

import os
import random
import re
import shutil
import subprocess
import sys
import tempfile
import zlib
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import pytest
from confluent_kafka import KafkaError, Producer
from confluent_kafka.admin import AdminClient, NewTopic
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from kayak.broker.log.index import OFFSET_ENTRY, TIME_ENTRY
from kayak.broker.log.segment import segment_name
from kayak.broker.log.verify import ProblemKind, verify_data_dir, verify_segment
from kayak.protocol.records import Codec, build_record_batch, scan_batches
from tests.broker.conftest import BrokerProcess

TOPIC = "log-verify-topic"  # dashes: the partition is what follows the last one
OTHER = "other"
PARTITIONS = 3
MAX_MESSAGE_BYTES = 4 * 1024 * 1024
# partition -> bursts of (messages, value size): flushed one burst at a time so batch sizes
# vary from a few hundred bytes to the single 1.5 MB message's batch (over 1 MiB).
BURSTS = {
    0: [(300, 100), (40, 30_000), (1, 1_500_000), (2000, 200), (5, 300_000), (50, 7)],
    1: [(100, 1000), (3, 200_000)],
    2: [(50, 10)],
}
RUN_TIMEOUT_S = 120


@dataclass(frozen=True)
class Produced:
    """A stopped broker's data directory and what it acknowledged per partition."""

    data_dir: Path
    acked: dict[str, Counter[int]]


def _create_topics(bootstrap: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    config = {"segment.bytes": "1048576", "max.message.bytes": str(MAX_MESSAGE_BYTES)}
    futures = admin.create_topics(
        [NewTopic(TOPIC, PARTITIONS, 1, config=config), NewTopic(OTHER, 1, 1)]
    )
    for future in futures.values():
        future.result(30)


def _produce(bootstrap: str) -> dict[str, Counter[int]]:
    acked: dict[str, Counter[int]] = {TOPIC: Counter(), OTHER: Counter()}
    failed: list[str] = []

    def delivered(err: KafkaError | None, msg: object) -> None:
        if err is not None:
            failed.append(str(err))
        else:
            acked[msg.topic()][msg.partition()] += 1  # type: ignore[attr-defined]

    common = {
        "bootstrap.servers": bootstrap,
        "acks": "all",
        "linger.ms": 5,
        "message.max.bytes": 2 * MAX_MESSAGE_BYTES,
    }
    # 64 KiB batches (the 1.5 MB message still goes, alone in its batch).
    plain = Producer({**common, "batch.size": 65536})
    # Compressed and idempotent: batches with a codec and producer id/epoch/sequence.
    packed = Producer({**common, "compression.type": "lz4", "enable.idempotence": True})
    rng = random.Random(7)
    for partition, bursts in BURSTS.items():
        for count, size in bursts:
            for _ in range(count):
                plain.produce(
                    TOPIC,
                    value=rng.randbytes(size),
                    key=b"k%d" % rng.randrange(9),
                    partition=partition,
                    on_delivery=delivered,
                )
                plain.poll(0)
            plain.flush(60)
    for i in range(20):  # one-record batches
        plain.produce(TOPIC, value=b"single %d" % i, partition=2, on_delivery=delivered)
        plain.flush(60)
    for i in range(800):
        value = (b"compressible %d " % i) * 20
        packed.produce(TOPIC, value=value, partition=i % PARTITIONS, on_delivery=delivered)
        packed.produce(OTHER, value=b"other %d" % i, partition=0, on_delivery=delivered)
        packed.poll(0)
    packed.flush(60)
    assert plain.flush(60) == 0 and packed.flush(60) == 0
    assert not failed, failed[:3]
    return acked


@pytest.fixture(scope="module")
def produced(tmp_path_factory: pytest.TempPathFactory) -> Produced:
    data_dir = tmp_path_factory.mktemp("log-verify") / "data"
    broker = BrokerProcess(data_dir).start()
    try:
        _create_topics(broker.bootstrap_servers)
        acked = _produce(broker.bootstrap_servers)
    finally:
        code = broker.stop()
    assert code == 0, broker.log_text()[-2000:]
    return Produced(data_dir, acked)


@pytest.fixture
def damaged(produced: Produced, tmp_path: Path) -> Path:
    """A copy of the produced data directory, to break."""
    return Path(shutil.copytree(produced.data_dir, tmp_path / "copy"))


def kayak_log(*args: str | Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "COLUMNS": "250"}
    return subprocess.run(
        [sys.executable, "-m", "kayak", "log", *map(str, args)],
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT_S,
        env=env,
    )


def table(stdout: str) -> dict[tuple[str, int], dict[str, str]]:
    """The verify table's rows by (topic, partition), each as column name -> cell."""
    lines = [line for line in stdout.splitlines() if line.startswith(("┃", "│"))]
    cells = [
        [c.strip() for c in line.strip("┃│").split("┃" if "┃" in line else "│")] for line in lines
    ]
    header, rows = cells[0], cells[1:]
    by_name = [dict(zip(header, row, strict=True)) for row in rows]
    return {(row["topic"], int(row["partition"])): row for row in by_name}


def segments(partition_dir: Path) -> list[Path]:
    return sorted(partition_dir.glob("*.log"))


def batch_starts(path: Path) -> list[tuple[int, int, int]]:
    """(position, base offset, size) of each batch in a segment file."""
    return [(h.position, h.base_offset, h.size) for h in scan_batches(path.read_bytes())]


# -- a clean directory --------------------------------------------------------------------


def test_clean_directory_verifies_with_acknowledged_counts(produced: Produced) -> None:
    result = kayak_log("verify", produced.data_dir)
    assert result.returncode == 0, result.stdout + result.stderr
    rows = table(result.stdout)
    for topic, counts in produced.acked.items():
        for partition, count in counts.items():
            row = rows[topic, partition]
            assert row["records"] == str(count), row
            assert row["log end offset"] == str(count), row
            assert row["first offset"] == "0"
            assert row["status"] == "ok"
    assert int(rows[TOPIC, 0]["segments"]) >= 4  # rolled at 1 MiB: several segments
    sizes = [b[2] for log in segments(produced.data_dir / f"{TOPIC}-0") for b in batch_starts(log)]
    assert max(sizes) > 1 << 20 and min(sizes) < 1024
    assert "no problems" in result.stdout.splitlines()[-1]
    # Chunks far smaller than most batches: every boundary falls inside one somewhere.
    small = kayak_log("verify", "--chunk-size", "997", produced.data_dir)
    assert small.returncode == 0, small.stdout
    assert table(small.stdout) == rows


def test_topic_filter_and_no_crc(produced: Produced) -> None:
    result = kayak_log("verify", "--topic", OTHER, "--no-crc", produced.data_dir)
    assert result.returncode == 0, result.stdout + result.stderr
    assert list(table(result.stdout)) == [(OTHER, 0)]
    assert "CRCs not checked" in result.stdout.splitlines()[-1]


def test_usage_errors_are_one_line_with_exit_2(produced: Produced, tmp_path: Path) -> None:
    for args in (
        [tmp_path / "missing"],
        [tmp_path],  # exists, but no topics.json or meta.properties
        ["--topic", "no-such-topic", produced.data_dir],
    ):
        result = kayak_log("verify", *args)
        assert result.returncode == 2, result
        assert len(result.stderr.strip().splitlines()) == 1, result.stderr
        assert "Traceback" not in result.stderr
    assert "not a kayak data directory" in kayak_log("verify", tmp_path).stderr


# -- damaged copies -----------------------------------------------------------------------


def problem_lines(stdout: str) -> list[str]:
    return [line.strip() for line in stdout.splitlines() if line.startswith("  ")]


def test_flipped_byte_in_an_older_segment(damaged: Path) -> None:
    older = next(s for s in segments(damaged / f"{TOPIC}-0")[:-1] if len(batch_starts(s)) >= 3)
    position, base_offset, size = max(batch_starts(older)[1:-1], key=lambda b: b[2])
    data = bytearray(older.read_bytes())
    data[position + size // 2] ^= 0x40  # inside the records, covered by the CRC
    older.write_bytes(data)

    result = kayak_log("verify", damaged)
    assert result.returncode == 1, result.stdout
    (line,) = problem_lines(result.stdout)
    assert f"{older}, position {position}, offset {base_offset}: corrupt:" in line
    assert "CRC" in line
    assert table(result.stdout)[TOPIC, 0]["status"] == "1 problem"
    # The framing is intact, so the structural check passes.
    assert kayak_log("verify", "--no-crc", damaged).returncode == 0


def test_truncated_tail(damaged: Path) -> None:
    active = segments(damaged / f"{TOPIC}-1")[-1]
    position, base_offset, _ = batch_starts(active)[-1]
    os.truncate(active, active.stat().st_size - 5)

    result = kayak_log("verify", damaged)
    assert result.returncode == 1, result.stdout
    (line,) = problem_lines(result.stdout)
    assert f"{active}, position {position}, offset {base_offset}: torn:" in line


def test_deleted_older_segment_is_a_gap(damaged: Path) -> None:
    logs = segments(damaged / f"{TOPIC}-0")
    deleted, after = logs[1], logs[2]
    deleted.unlink()

    result = kayak_log("verify", damaged)
    assert result.returncode == 1, result.stdout
    (line,) = problem_lines(result.stdout)
    assert line.startswith(f"{after}, position 0, offset {int(deleted.stem)}: offsets: gap")
    assert f"expected {deleted.name}" in line


def test_corrupted_index_entry(damaged: Path) -> None:
    index = segments(damaged / f"{TOPIC}-0")[0].with_suffix(".index")
    entries = bytearray(index.read_bytes())
    assert len(entries) >= 3 * OFFSET_ENTRY.size
    relative, position = OFFSET_ENTRY.unpack_from(entries, 2 * OFFSET_ENTRY.size)
    OFFSET_ENTRY.pack_into(entries, 2 * OFFSET_ENTRY.size, relative, position + 1)
    index.write_bytes(entries)

    result = kayak_log("verify", damaged)
    assert result.returncode == 1, result.stdout
    (line,) = problem_lines(result.stdout)
    assert f"{index}, position {2 * OFFSET_ENTRY.size}, offset {relative}: index:" in line
    assert f"log position {position + 1}" in line


def test_garbage_appended(damaged: Path) -> None:
    active = segments(damaged / f"{TOPIC}-2")[-1]
    end = active.stat().st_size
    with open(active, "ab") as f:
        f.write(random.Random(3).randbytes(300))

    result = kayak_log("verify", damaged)
    assert result.returncode == 1, result.stdout
    (line,) = problem_lines(result.stdout)
    assert line.startswith(f"{active}, position {end}, offset ")


def test_dump_real_segment(produced: Produced) -> None:
    segment = segments(produced.data_dir / f"{TOPIC}-0")[0]
    batches = batch_starts(segment)
    result = kayak_log("dump", "--records", segment)
    assert result.returncode == 0, result.stdout + result.stderr
    lines = result.stdout.splitlines()
    batch_lines = [line for line in lines if line.startswith("position: ")]
    assert [int(line.split()[1]) for line in batch_lines] == [b[0] for b in batches]
    records = [line for line in lines if line.startswith("| offset: ")]
    last_offset = int(batch_lines[-1].split("lastOffset: ")[1].split()[0])
    assert [int(line.split()[2]) for line in records] == list(range(last_offset + 1))


# -- the library on synthetic segments ----------------------------------------------------


def _legacy_v1_message(offset: int, key: bytes, value: bytes, timestamp: int) -> bytes:
    """One uncompressed magic 1 message (kayak never writes these; old logs may hold them)."""
    body = bytes([1, 0]) + timestamp.to_bytes(8, "big")
    body += len(key).to_bytes(4, "big") + key + len(value).to_bytes(4, "big") + value
    crc = zlib.crc32(body)
    size = 4 + len(body)
    return offset.to_bytes(8, "big") + size.to_bytes(4, "big") + crc.to_bytes(4, "big") + body


def known_segment(directory: Path, base: int = 100) -> tuple[Path, list[int]]:
    """A segment of four batches (plain, gzip, idempotent, legacy) and its batch positions."""
    batches = [
        build_record_batch(
            [b"v0", b"v1", None],
            keys=[b"k0", None, b"k2"],
            base_offset=base,
            timestamp=1000,
            partition_leader_epoch=0,
        ),
        build_record_batch(
            [b"long" * 50], keys=[b"big"], base_offset=base + 3, timestamp=2000, codec=Codec.GZIP
        ),
        build_record_batch(
            [b"a", b"b"],
            base_offset=base + 4,
            timestamp=3000,
            producer_id=7,
            producer_epoch=1,
            base_sequence=5,
        ),
        _legacy_v1_message(base + 6, b"old", b"legacy", 4000),
    ]
    positions = [sum(map(len, batches[:i])) for i in range(len(batches))]
    path = directory / f"{segment_name(base)}.log"
    path.write_bytes(b"".join(batches))
    # Kafka's index entries name the last offset of the batch they point at.
    path.with_suffix(".index").write_bytes(
        OFFSET_ENTRY.pack(2, 0) + OFFSET_ENTRY.pack(5, positions[2])
    )
    path.with_suffix(".timeindex").write_bytes(TIME_ENTRY.pack(1000, 2) + TIME_ENTRY.pack(3000, 5))
    return path, positions


def test_dump_known_segment(tmp_path: Path) -> None:
    path, positions = known_segment(tmp_path)
    result = kayak_log("dump", "--records", "--width", "20", path)
    assert result.returncode == 0, result.stdout + result.stderr
    lines = result.stdout.splitlines()
    batch_lines = [line for line in lines if line.startswith("position: ")]
    assert [int(line.split()[1]) for line in batch_lines] == positions
    assert "baseOffset: 100 lastOffset: 102 count: 3" in batch_lines[0]
    assert "codec: gzip" in batch_lines[1] and "(valid)" in batch_lines[1]
    assert "producerId: 7 producerEpoch: 1 baseSequence: 5" in batch_lines[2]
    assert "magic: 1" in batch_lines[3] and "baseOffset: 106" in batch_lines[3]
    records = [line for line in lines if line.startswith("| ")]
    assert records[0] == "| offset: 100 timestamp: 1000 key: b'k0' value: b'v0'"
    assert records[2] == "| offset: 102 timestamp: 1000 key: b'k2' value: null"
    assert records[3].startswith("| offset: 103 timestamp: 2000 key: b'big' value: b'longlong")
    assert records[3].endswith("… (200 bytes)")
    assert records[6] == "| offset: 106 timestamp: 4000 key: b'old' value: b'legacy'"
    size = path.stat().st_size
    assert lines[-1] == f"4 batches, 7 records, {size} bytes, offsets 100..106: no problems"

    index = kayak_log("dump", "--index", path)
    assert index.returncode == 0, index.stdout
    assert f"offset: 105 position: {positions[2]}" in index.stdout.splitlines()
    assert "timestamp: 3000 offset: 105" in index.stdout.splitlines()

    data = bytearray(path.read_bytes())
    data[positions[2] + 65] ^= 1
    path.write_bytes(data)
    broken = kayak_log("dump", path)
    assert broken.returncode == 1
    assert "(INVALID)" in broken.stdout
    assert f"{path}, position {positions[2]}, offset 104: corrupt:" in broken.stdout


def test_legacy_and_v2_offsets_continue(tmp_path: Path) -> None:
    path, _ = known_segment(tmp_path)
    report = verify_segment(path, chunk_size=7)
    assert report.problems == []
    assert (report.batches, report.records, report.next_offset) == (4, 7, 107)


def test_flipped_byte_is_reported_and_scanning_goes_on(tmp_path: Path) -> None:
    path, positions = known_segment(tmp_path)
    data = bytearray(path.read_bytes())
    data[positions[1] + 70] ^= 0x10
    path.write_bytes(data)
    report = verify_segment(path, chunk_size=50)
    assert [(p.kind, p.position, p.offset) for p in report.problems] == [
        (ProblemKind.CORRUPT, positions[1], 103)
    ]
    assert report.batches == 4  # the damaged batch's length still frames it


def test_data_dir_report_from_library(produced: Produced) -> None:
    report = verify_data_dir(produced.data_dir, topic=TOPIC, chunk_size=64 * 1024)
    assert report.ok, [str(p) for p in report.all_problems]
    assert {p.partition: p.records for p in report.partitions} == dict(produced.acked[TOPIC])


_SIZES = st.one_of(st.integers(1, 300), st.integers(300, 100_000), st.integers(1 << 20, 3 << 20))


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    sizes=st.lists(_SIZES, min_size=1, max_size=4),
    counts=st.lists(st.integers(1, 5), min_size=4, max_size=4),
    base=st.integers(0, 10**12),
    chunk_size=st.one_of(st.integers(1, 200), st.integers(200, 70_000)),
    tear=st.floats(0, 1),
    at_boundary=st.booleans(),
    check_crc=st.booleans(),
)
def test_torn_segment_reports_the_torn_position(
    sizes: list[int],
    counts: list[int],
    base: int,
    chunk_size: int,
    tear: float,
    at_boundary: bool,
    check_crc: bool,
) -> None:
    event("a batch over 1 MiB" if max(sizes) > 1 << 20 else "no batch over 1 MiB")
    event(f"chunk {'<' if chunk_size < min(sizes) else '>='} smallest batch")
    batches, offset = [], base
    for size, count in zip(sizes, counts, strict=False):
        values = [bytes([i % 251]) * (size // count) for i in range(count)]
        batches.append((offset, count, build_record_batch(values, base_offset=offset)))
        offset += count
    data = b"".join(batch for _, _, batch in batches)
    starts = [sum(len(b) for _, _, b in batches[:i]) for i in range(len(batches) + 1)]
    # Half the cuts fall between batches (a clean file), half anywhere (mostly a tear).
    cut = starts[round(tear * len(batches))] if at_boundary else round(tear * len(data))
    whole = sum(1 for end in starts[1:] if end <= cut)

    with tempfile.TemporaryDirectory() as directory:
        path = Path(directory) / f"{segment_name(base)}.log"
        path.write_bytes(data[:cut])
        report = verify_segment(path, check_crc=check_crc, chunk_size=chunk_size)

    assert report.batches == whole
    assert report.records == sum(count for _, count, _ in batches[:whole])
    if cut in starts:
        assert report.problems == [] and report.complete
    else:
        torn_offset = batches[whole][0]
        assert [(p.kind, p.position, p.offset) for p in report.problems] == [
            (ProblemKind.TORN, starts[whole], torn_offset)
        ]
        assert re.search(r"torn tail|stray bytes", report.problems[0].message)
