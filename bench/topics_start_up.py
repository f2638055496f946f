"""bench/topics.py's (e): kayak's start-up time on a data directory holding many partitions
and segments, and the builder of that directory (the broker creates the topics, stops, and
the segment files are written in the layout the broker itself writes)."""

from __future__ import annotations

import re
import shutil
import struct
import subprocess
import sys
import time
import uuid
from pathlib import Path

from kafka_peer import KAYAK
from peers import HOST, REPO, BrokerProcess, scratch_dir
from protocol_clients import run_async
from topics_creation import create_in_one_request
from topics_settings import Samples, Settings

from kayak.protocol.records import build_record_batch

_LISTENING = re.compile(rb"listening on ([\d.]+):(\d+)")


def build_big_data_dir(settings: Settings) -> Path:
    """A stopped kayak data directory holding the partitions and segments asked for."""
    root = scratch_dir(settings.data_root, "kayak-bench-startup-")
    data = root / "data"
    topics = max(1, settings.partitions // 100)
    per_topic = settings.partitions // topics
    per_partition = max(1, settings.segments // (topics * per_topic))
    started = time.perf_counter()
    broker = start_broker_on(data)
    try:
        names = [f"t{i:04d}" for i in range(topics)]
        run_async(create_in_one_request(broker.bootstrap, names, per_topic))
    finally:
        stop_keeping_data(broker)
    for name in names:
        for index in range(per_topic):
            write_segments(data / f"{name}-{index}", per_partition)
    print(f"  built {data}: {topics * per_topic:,} partitions, "
          f"{topics * per_topic * per_partition:,} segments in "
          f"{time.perf_counter() - started:.1f}s", flush=True)  # fmt: skip
    return root


def write_segments(directory: Path, count: int) -> None:
    """``count`` sealed segments of one 100 B record each (offsets 0..count-1), written as
    the broker writes them: ``.log`` (the batch), ``.index`` (relative offset, position) and
    ``.timeindex`` (timestamp, relative offset), big-endian."""
    directory.mkdir(exist_ok=True)
    for stale in directory.iterdir():
        stale.unlink()
    now = int(time.time() * 1000)
    for offset in range(count):
        stem = directory / f"{offset:020d}"
        batch = build_record_batch([bytes(100)], base_offset=offset, timestamp=now + offset)
        stem.with_suffix(".log").write_bytes(batch)
        stem.with_suffix(".index").write_bytes(struct.pack(">ii", 0, 0))
        stem.with_suffix(".timeindex").write_bytes(struct.pack(">qi", now + offset, 0))


def start_broker_on(data: Path) -> BrokerProcess:
    log_path = data.parent / f"broker-{uuid.uuid4().hex[:8]}.log"
    args = [
        sys.executable, "-m", "kayak", "broker", "--data-dir", str(data), "--host", HOST,
        "--port", "0", "--no-schema-registry",
    ]  # fmt: skip
    with open(log_path, "wb") as log:
        process = subprocess.Popen(args, stdout=log, stderr=log, cwd=REPO)
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"kayak exited: {log_path.read_text()[-2000:]}")
        found = _LISTENING.findall(log_path.read_bytes())
        if found:
            return BrokerProcess(KAYAK, process, int(found[-1][1]), log_path)
        time.sleep(0.01)
    process.kill()
    raise RuntimeError("kayak did not start")


def stop_keeping_data(broker: BrokerProcess) -> None:
    broker.data_dir = None  # keep the data: the next start reads it
    broker.stop()


def start_up_seconds(data: Path) -> float:
    start = time.perf_counter()
    broker = start_broker_on(data)
    elapsed = time.perf_counter() - start
    stop_keeping_data(broker)
    return elapsed


def measure_start_up(big: Path, run: int, settings: Settings, samples: Samples) -> None:
    empty = scratch_dir(settings.data_root, "kayak-bench-empty-")
    try:
        baseline = start_up_seconds(empty / "data")  # creates it
        baseline = start_up_seconds(empty / "data")
    finally:
        shutil.rmtree(empty, ignore_errors=True)
    try:
        seconds = start_up_seconds(big / "data")
    except RuntimeError as exc:  # e.g. EMFILE: one descriptor per segment file
        print(f"  {KAYAK:>6}: start-up failed: {str(exc).strip().splitlines()[-1]}", flush=True)
        seconds = float("nan")
    samples.add("startup_empty_s", KAYAK, baseline)
    samples.add("startup_big_s", KAYAK, seconds)
    print(f"  {KAYAK:>6}: start-up with {settings.partitions:,} partitions, "
          f"{settings.segments:,} segments: {seconds:.2f}s (empty data dir: {baseline:.2f}s)",
          flush=True)  # fmt: skip
