"""Recovery and ``kayak log verify`` judge the same bytes the same way (one ``BatchWalk``).

A property test writes a segment of random batches, damages it (a tear, garbage over any
range, a batch copied over the next: an offset overlap) and asks both: recovery's scan
("stop at damage") keeps exactly the prefix before the first thing verify ("report and go
on") reports in the ``.log`` file, and a file verify finds clean is one recovery keeps whole.
"""

from __future__ import annotations

import os
import random
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kayak.broker.log.batch_walk import BatchWalk, FaultKind, WalkMode
from kayak.broker.log.recovery import SegmentScan
from kayak.broker.log.segment import segment_name
from kayak.broker.log.verify import ProblemKind, verify_segment
from kayak.protocol.records import build_record_batch, scan_batches
from kayak.protocol.records.scanner import BatchHeader

BASE = 1000
LOG_KINDS = {ProblemKind.CORRUPT, ProblemKind.TORN, ProblemKind.OFFSETS}


def write_segment(directory: Path, sizes: list[int], seed: int) -> tuple[Path, list[BatchHeader]]:
    """A segment file of batches with ``sizes`` records each, offsets from BASE on."""
    rng = random.Random(seed)
    data = bytearray()
    offset = BASE
    for count in sizes:
        values = [rng.randbytes(rng.randint(0, 300)) for _ in range(count)]
        batch = bytearray(build_record_batch(values))
        batch[0:8] = offset.to_bytes(8, "big")  # the base offset is outside the CRC
        data += batch
        offset += count
    path = directory / f"{segment_name(BASE)}.log"
    path.write_bytes(bytes(data))
    return path, list(scan_batches(bytes(data)))


def recovery_of(path: Path) -> SegmentScan:
    fd = os.open(path, os.O_RDONLY)
    try:
        return SegmentScan.run(fd, path.stat().st_size, BASE, lambda _: None, chunk_size=4096)
    finally:
        os.close(fd)


def damage(path: Path, headers: list[BatchHeader], how: str, where: float, seed: int) -> None:
    size = path.stat().st_size
    rng = random.Random(seed)
    start = min(int(where * size), size - 1)
    data = bytearray(path.read_bytes())
    if how == "tear":
        del data[start:]
    elif how == "garble":
        length = rng.randint(1, 64)
        for i in range(start, min(start + length, size)):
            data[i] ^= rng.randint(1, 255)
    elif how == "overlap" and len(headers) >= 2:
        # The second batch's offsets made to repeat the first's: a sound batch, wrong offsets.
        second = headers[1]
        data[second.position : second.position + 8] = BASE.to_bytes(8, "big")
    path.write_bytes(bytes(data))


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    sizes=st.lists(st.integers(1, 40), min_size=1, max_size=12),
    how=st.sampled_from(["tear", "garble", "overlap", "none"]),
    where=st.floats(0, 1),
    seed=st.integers(0, 2**16),
    chunk_size=st.integers(1, 5000),
)
def test_recovery_stops_exactly_where_verify_reports_the_first_fault(
    sizes: list[int], how: str, where: float, seed: int, chunk_size: int
) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path, headers = write_segment(Path(tmp), sizes, seed)
        damage(path, headers, how, where, seed)
        scan = recovery_of(path)
        report = verify_segment(path, chunk_size=chunk_size)
        faults = [p for p in report.problems if p.path == path and p.kind in LOG_KINDS]
        if scan.problem is None:
            assert faults == [], f"recovery keeps the whole file; verify reports {faults}"
            assert scan.valid_end == path.stat().st_size
        else:
            assert faults, f"recovery stops at {scan.valid_end} ({scan.problem}); verify: clean"
            first = min(faults, key=lambda p: p.position or 0)
            assert first.position == scan.valid_end, (first, scan)
            # Everything recovery keeps, verify read as sound batches, and nothing more.
            assert report.valid_bytes >= scan.valid_end


@pytest.mark.parametrize("chunk_size", [1, 100, 1 << 20])
def test_report_mode_goes_on_past_a_bad_crc_and_stop_mode_does_not(
    tmp_path: Path, chunk_size: int
) -> None:
    path, headers = write_segment(tmp_path, [3, 4, 5], seed=1)
    data = bytearray(path.read_bytes())
    data[headers[1].end - 1] ^= 0xFF  # the second batch's last byte: its CRC fails
    path.write_bytes(bytes(data))
    fd = os.open(path, os.O_RDONLY)
    try:
        size = len(data)
        stop = BatchWalk(fd, size, WalkMode.STOP, BASE, chunk_size=chunk_size)
        assert [b.header.base_offset for b in stop] == [BASE]
        assert stop.stop is not None and stop.stop.kind is FaultKind.CORRUPT
        assert stop.stop.position == headers[1].position and stop.damage_inside
        report = BatchWalk(fd, size, WalkMode.REPORT, BASE, chunk_size=chunk_size)
        walked = [(b.header.base_offset, b.fault is None) for b in report]
        assert walked == [(BASE, True), (BASE + 3, False), (BASE + 7, True)]
        assert report.complete and [f.position for f in report.faults] == [headers[1].position]
    finally:
        os.close(fd)
