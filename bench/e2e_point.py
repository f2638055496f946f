"""One point of bench/e2e_latency.py: one broker, one rate, one linger, one consumer. A paced
producer and a consumer in processes of their own (multiprocessing, spawn; bench/e2e_clients.py)
on a fresh topic, the broker's CPU and run-queue wait over the measured window (from /proc),
py-spy on the broker if asked; the results as a :class:`Point`."""

from __future__ import annotations

import array
import multiprocessing
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from multiprocessing.connection import Connection
from multiprocessing.synchronize import Event
from pathlib import Path
from typing import Any

from e2e_clients import Load, consume, percentiles, produce
from e2e_settings import Settings
from peers import BrokerProcess
from protocol_clients import create_topic
from usage import server_cpu_seconds

START_TIMEOUT = 60.0


@dataclass
class Point:
    """One measured point's results."""

    rate: float  # achieved, msg/s over the measured window
    produced: int  # acknowledged
    consumed: int  # distinct, expected sequence numbers
    missing: int
    latencies_ms: dict[str, float]  # p50 ... max
    cores: float  # broker CPU over the measured window
    starved: float  # broker threads runnable but waiting for a CPU, cores-equivalent
    produce_requests: float  # sent over the measured window (nan if unknown)
    produce_answers: float  # responses received over the measured window: the broker's pace
    fetch_requests: float
    measured: int  # messages in the measured window
    late: int
    acked_ms: dict[str, float]  # produce() -> acknowledgement (delivery report)

    @property
    def records_per_request(self) -> float:
        return self.measured / self.produce_requests if self.produce_requests else float("nan")


def measure(
    broker: BrokerProcess,
    name: str,
    topic: str,
    load: Load,
    consumer_kind: str,
    settings: Settings,
    profile_to: Path | None,
) -> Point:
    context = multiprocessing.get_context("spawn")
    create_topic(broker.bootstrap, topic)
    ready, measuring = context.Event(), context.Event()
    expected = context.Value("q", -1)
    deadline = context.Value("q", 0)
    consumer_end, consumer_out = context.Pipe(duplex=False)
    producer_end, producer_out = context.Pipe(duplex=False)
    consumer = context.Process(
        target=consume,
        args=(consumer_kind, broker.bootstrap, topic, load.planned, ready, expected, deadline,
              consumer_out),
        daemon=True,
    )  # fmt: skip
    consumer.start()
    _wait(ready, consumer, "consumer")
    producer = context.Process(
        target=produce,
        args=(broker.bootstrap, topic, load, measuring, producer_out),
        daemon=True,
    )
    producer.start()
    _wait(measuring, producer, "producer", timeout=START_TIMEOUT + load.warmup * 2)
    cpu_start, wall_start = server_cpu_seconds(broker.pid), time.monotonic()
    waited_start = waiting_seconds(broker.pid)
    spy = _start_py_spy(profile_to, broker.pid, load.seconds) if profile_to else None
    sent = _receive(producer_end, producer, "producer", load.warmup + load.seconds + 120)
    elapsed = time.monotonic() - wall_start
    cores = (server_cpu_seconds(broker.pid) - cpu_start) / elapsed
    starved = (waiting_seconds(broker.pid) - waited_start) / elapsed
    acknowledged = sent["sent"] - sent["unflushed"] - sent["error_count"]
    if sent["error_count"] or sent["unflushed"]:
        print(f"    producer: {sent['error_count']} errors {sent['errors']}, "
              f"{sent['unflushed']} unflushed", flush=True)  # fmt: skip
    with expected.get_lock():
        expected.value = acknowledged
    with deadline.get_lock():
        deadline.value = sent["finish"] + int(settings.drain * 1e9)
    got = _receive(consumer_end, consumer, "consumer", settings.drain + 60)
    producer.join(10)
    consumer.join(10)
    if spy is not None:
        spy.wait(60)
    return _point(sent, got, cores, starved)


def waiting_seconds(pid: int) -> float:
    """Time the process's threads have spent runnable but not running (waiting for a CPU),
    from /proc/PID/task/*/schedstat: how much the machine's other load held the broker back."""
    total = 0
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            total += int((task / "schedstat").read_text().split()[1])
        except (OSError, IndexError, ValueError):
            continue  # a thread that just ended
    return total / 1e9


def _wait(event: Event, process: multiprocessing.process.BaseProcess, what: str,
          timeout: float = START_TIMEOUT) -> None:  # fmt: skip
    deadline = time.monotonic() + timeout
    while not event.wait(0.1):
        if not process.is_alive() or time.monotonic() > deadline:
            process.kill()
            raise RuntimeError(f"the {what} did not start (exit code {process.exitcode})")


def _receive(
    end: Connection, process: multiprocessing.process.BaseProcess, what: str, timeout: float
) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while not end.poll(0.1):
        if not process.is_alive() or time.monotonic() > deadline:
            process.kill()
            raise RuntimeError(f"the {what} failed (exit code {process.exitcode})")
    result: dict[str, Any] = end.recv()
    return result


def _start_py_spy(path: Path, pid: int, seconds: float) -> subprocess.Popen[bytes] | None:
    """py-spy over the measured window; the format follows the file's extension."""
    formats = {".svg": "flamegraph", ".txt": "raw", ".json": "speedscope"}
    spy = Path(sys.executable).with_name("py-spy")
    command = [
        str(spy), "record", "--pid", str(pid), "--duration", str(int(seconds)),
        "--rate", "200", "--format", formats.get(path.suffix, "flamegraph"), "-o", str(path),
    ]  # fmt: skip
    print(f"    py-spy on pid {pid} -> {path}", flush=True)
    return subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def _point(sent: dict[str, Any], got: dict[str, Any], cores: float, starved: float) -> Point:
    acknowledged = sent["sent"] - sent["unflushed"] - sent["error_count"]
    seen = got["seen"][: sent["sent"]]
    consumed = seen.count(1)
    latencies = array.array("q")
    latencies.frombytes(got["latencies"])
    t0, t1 = sent["t0"], sent["t1"]
    measured = sent["sent"] - sent["warm"]
    return Point(
        rate=(measured - 1) / ((t1 - t0) / 1e9) if t1 > t0 else float("nan"),
        produced=acknowledged,
        consumed=consumed,
        missing=max(0, acknowledged - consumed),
        latencies_ms=percentiles(latencies, max(0, measured - len(latencies))),
        cores=cores,
        starved=starved,
        produce_requests=_in_window(sent["stats"], t0, t1),
        produce_answers=_in_window(sent["answered"], t0, t1),
        fetch_requests=_in_window(got["stats"], t0, t1),
        measured=measured,
        late=sent["late"],
        acked_ms=sent["acked"],
    )


def _in_window(samples: Sequence[Sequence[int]], t0: int, t1: int) -> float:
    """Requests sent between ``t0`` and ``t1``, from cumulative (time, count) samples: the
    rate between the first and last sample inside the window, times the window."""
    inside = [(t, c) for t, c in samples if t0 <= t <= t1]
    if len(inside) < 2 or inside[-1][0] == inside[0][0]:
        return float("nan")
    (ta, ca), (tb, cb) = inside[0], inside[-1]
    return (cb - ca) / (tb - ta) * (t1 - t0)
