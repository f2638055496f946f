"""What TLS costs: produce and fetch throughput over PLAINTEXT and SSL on the same broker.

One kayak broker process listens on ``PLAINTEXT://127.0.0.1:0`` and ``SSL://127.0.0.1:0``
(a certificate made for the run, TLS 1.2+, no client certificates; ``--flush never`` by
default so that the disk does not hide the cost of encryption). In each run, and taking
turns between the two listeners (a fresh topic each time):

* confluent-kafka produce: ``--size`` MiB of ``--value-size`` records, ``acks=1``,
  ``linger.ms`` 5, ``batch.size`` 1 MB, timed from the first ``produce`` to ``flush``;
* confluent-kafka fetch: the whole topic from offset 0 with 8 MiB fetches
  (``consume(10000)``, ``len()`` of each message), as bench/broker_consume.py tunes it;
* kayak's client fetch: ``Consumer.getmany_values`` over the same topic (``security.protocol``
  SSL with the run's CA when on the SSL listener); skipped with a note if the client cannot.

Rates are value bytes over wall time; "broker CPU" is the broker process's CPU seconds per
GiB moved (user + system), which is where the encryption shows. The SSL / PLAINTEXT column
is the median of per-run ratios. A plaintext fetch is served with ``sendfile``; a TLS fetch
is read into user space and encrypted by OpenSSL, because kernel TLS (which would keep
``sendfile``) needs the kernel's ``tls`` module and Python's ``ssl.OP_ENABLE_KTLS``: the last
row says whether this machine has them (kayak's ``ktls_available()`` probe).

Run: ``python bench/broker_tls.py`` (256 MiB, 3 runs), ``--quick`` (32 MiB, 1 run),
``--markdown`` for the README; ``--size``, ``--runs``, ``--value-size``, ``--flush``.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import confluent_kafka
from machine_limits import cpu_seconds, machine_notes
from peers import REPO, BrokerProcess, MiB, scratch_dir
from protocol_clients import run_async
from result_tables import Table, add_plot_option, median, paired_ratio, plot_table, times

from kayak.broker.security.tls import ktls_available
from tests.fixtures.certs import TlsFiles, make_tls_files

PROTOCOLS = ("PLAINTEXT", "SSL")
_LISTENER = re.compile(r"listener (\w+) on [\d.]+:(\d+)")
FETCH_BYTES = 8 * MiB
POLL_RECORDS = 10_000


@dataclass(frozen=True)
class Settings:
    size: int  # bytes of values per topic
    value_size: int
    runs: int
    flush: str
    timeout: float
    data_root: Path

    @property
    def records(self) -> int:
        return max(self.size // self.value_size, 1)


@dataclass
class Samples:
    """MiB/s and broker CPU seconds per GiB, per (measure, protocol), one sample per run."""

    rates: dict[tuple[str, str], list[float]] = field(default_factory=dict)
    cpu: dict[tuple[str, str], list[float]] = field(default_factory=dict)
    notes: dict[str, str] = field(default_factory=dict)

    def add(self, measure: str, protocol: str, rate: float, cpu_per_gib: float) -> None:
        self.rates.setdefault((measure, protocol), []).append(rate)
        self.cpu.setdefault((measure, protocol), []).append(cpu_per_gib)


# -- the broker ------------------------------------------------------------------------------


@dataclass
class TlsBroker:
    process: BrokerProcess
    ports: dict[str, int]

    def bootstrap(self, protocol: str) -> str:
        return f"127.0.0.1:{self.ports[protocol]}"


def start_broker(root: Path, files: TlsFiles, flush: str) -> TlsBroker:
    """``kayak broker`` with a PLAINTEXT and an SSL listener, on free ports."""
    data_dir = scratch_dir(root, "kayak-bench-tls-")
    log_path = data_dir / "broker.log"
    args = [
        sys.executable, "-m", "kayak", "-v", "broker",
        "--data-dir", str(data_dir / "data"),
        "--listeners", "PLAINTEXT://127.0.0.1:0,SSL://127.0.0.1:0",
        "--ssl-certificate-location", str(files.server_cert),
        "--ssl-key-location", str(files.server_key),
        "--allow-everyone-if-no-acl-found",
        "--flush", flush,
        "--no-schema-registry",
    ]  # fmt: skip
    with open(log_path, "wb") as log:
        process = subprocess.Popen(args, stdout=log, stderr=log, cwd=REPO)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"kayak broker exited: {log_path.read_text()[-2000:]}")
        ports = {name: int(port) for name, port in _LISTENER.findall(log_path.read_text())}
        if set(PROTOCOLS) <= set(ports):
            running = BrokerProcess("kayak", process, ports["PLAINTEXT"], log_path, data_dir)
            return TlsBroker(running, ports)
        time.sleep(0.05)
    process.kill()
    raise RuntimeError(f"kayak broker did not start: {log_path.read_text()[-2000:]}")


def client_config(protocol: str, files: TlsFiles) -> dict[str, Any]:
    if protocol == "SSL":
        return {"security.protocol": "SSL", "ssl.ca.location": str(files.ca)}
    return {}


# -- measures --------------------------------------------------------------------------------


def confluent_produce(bootstrap: str, topic: str, config: dict[str, Any], s: Settings) -> float:
    producer = confluent_kafka.Producer(
        {
            "bootstrap.servers": bootstrap,
            "acks": 1,
            "linger.ms": 5,
            "batch.size": 1_000_000,
            "message.max.bytes": 2_000_000,
            "queue.buffering.max.kbytes": 1024 * 1024,
            **config,
        }
    )
    value = b"x" * s.value_size
    producer.produce(topic, value)  # connect and learn the topic before timing
    producer.flush(30)
    started = time.perf_counter()
    for _ in range(s.records - 1):
        while True:
            try:
                producer.produce(topic, value)
                break
            except BufferError:
                producer.poll(0.01)
    if producer.flush(s.timeout):
        raise RuntimeError("confluent-kafka did not deliver every record")
    return (s.records - 1) * s.value_size / (time.perf_counter() - started)


def confluent_fetch(bootstrap: str, topic: str, config: dict[str, Any], s: Settings) -> float:
    consumer = confluent_kafka.Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"bench-{uuid.uuid4()}",
            "enable.auto.commit": False,
            "fetch.max.bytes": FETCH_BYTES,
            "max.partition.fetch.bytes": FETCH_BYTES,
            "receive.message.max.bytes": FETCH_BYTES + MiB,
            "queued.max.messages.kbytes": 1024 * 1024,
            "queued.min.messages": 1_000_000,
            "fetch.wait.max.ms": 10,
            **config,
        }
    )
    try:
        consumer.assign([confluent_kafka.TopicPartition(topic, 0, 0)])
        received = total = 0
        started = time.perf_counter()
        deadline = started + s.timeout
        while received < s.records and time.perf_counter() < deadline:
            wanted = min(POLL_RECORDS, s.records - received)
            for message in consumer.consume(num_messages=wanted, timeout=1.0):
                if message.error():
                    raise RuntimeError(f"consume failed: {message.error()}")
                received += 1
                total += len(message)
        elapsed = time.perf_counter() - started
    finally:
        consumer.close()
    if received != s.records:
        raise RuntimeError(f"confluent-kafka read {received} of {s.records} records")
    return total / elapsed


def kayak_fetch(bootstrap: str, topic: str, config: dict[str, Any], s: Settings) -> float:
    from kayak.client.consumer import Consumer, TopicPartition

    async def main() -> float:
        tp = TopicPartition(topic, 0)
        settings = {"bootstrap.servers": bootstrap, "max.partition.fetch.bytes": FETCH_BYTES}
        async with Consumer({**settings, **config}) as consumer:
            consumer.assign([tp])
            consumer.seek(tp, 0)
            count = total = 0
            started = time.perf_counter()
            while count < s.records:
                if time.perf_counter() - started > s.timeout:
                    raise RuntimeError(f"kayak read {count} of {s.records} records")
                batches = await consumer.getmany_values(max_records=POLL_RECORDS, timeout_ms=1000)
                for values in batches.values():
                    total += sum(len(v or b"") for v in values)
                    count += len(values)
            return total / (time.perf_counter() - started)

    return run_async(main())


MEASURES = {
    "produce, confluent-kafka": "produce",
    "fetch, confluent-kafka": "fetch-confluent",
    "fetch, kayak client": "fetch-kayak",
}


def one_run(broker: TlsBroker, files: TlsFiles, s: Settings, order: tuple[str, ...]) -> Samples:
    samples = Samples()
    pid = broker.process.pid
    for protocol in order:
        bootstrap, config = broker.bootstrap(protocol), client_config(protocol, files)
        topic = f"tls-{protocol.lower()}-{uuid.uuid4().hex[:8]}"
        for measure, fn in (
            ("produce, confluent-kafka", confluent_produce),
            ("fetch, confluent-kafka", confluent_fetch),
            ("fetch, kayak client", kayak_fetch),
        ):
            cpu = cpu_seconds(pid)
            try:
                rate = fn(bootstrap, topic, config, s)
            except Exception as exc:  # a client that cannot do TLS yet: a note, not a crash
                samples.notes[measure] = f"{type(exc).__name__}: {exc}"
                continue
            moved = s.size / (1024 * MiB)
            samples.add(measure, protocol, rate / MiB, (cpu_seconds(pid) - cpu) / moved)
            print(f"  {measure} over {protocol}: {rate / MiB:,.0f} MiB/s", flush=True)
    return samples


def measure(s: Settings) -> Samples:
    certs = scratch_dir(s.data_root, "kayak-bench-certs-")
    files = make_tls_files(certs)
    broker = start_broker(s.data_root, files, s.flush)
    merged = Samples()
    try:
        for run in range(s.runs):
            print(f"run {run + 1}/{s.runs}", flush=True)
            order = PROTOCOLS if run % 2 == 0 else tuple(reversed(PROTOCOLS))
            result = one_run(broker, files, s, order)
            for key, rates in result.rates.items():
                merged.rates.setdefault(key, []).extend(rates)
                merged.cpu.setdefault(key, []).extend(result.cpu[key])
            merged.notes.update(result.notes)
    finally:
        broker.process.stop()
    return merged


def report(samples: Samples, s: Settings, markdown: bool, plot: Path | None = None) -> str:
    table = Table(
        [
            "measure",
            "PLAINTEXT MiB/s",
            "SSL MiB/s",
            "SSL / PLAINTEXT",
            "broker CPU s/GiB PLAINTEXT",
            "broker CPU s/GiB SSL",
        ]
    )
    for measure in MEASURES:
        plain = samples.rates.get((measure, "PLAINTEXT"), [])
        tls = samples.rates.get((measure, "SSL"), [])
        if not plain and not tls:
            table.add(measure, "-", "-", "-", "-", "-")
            continue
        table.add(
            measure,
            median(plain),
            median(tls),
            times(paired_ratio(tls, plain)),
            median(samples.cpu.get((measure, "PLAINTEXT"), [])),
            median(samples.cpu.get((measure, "SSL"), [])),
        )
    plot_table(plot, "broker_tls", table)
    available, reason = ktls_available()
    verdict = "available" if available else "unavailable on this kernel"
    table.add("kTLS", verdict, "-", "-", "-", "-")
    lines = [
        f"PLAINTEXT vs SSL on one kayak broker (--flush {s.flush}), {s.size / MiB:,.0f} MiB of "
        f"{s.value_size} B values per topic, median of {s.runs} run(s)",
        machine_notes(s.data_root),
        "",
        table.markdown() if markdown else table.text(),
    ]
    lines.append(f"kTLS: {verdict} ({reason})")
    for measure, note in samples.notes.items():
        lines.append(f"{measure}: skipped where it failed ({note})")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="32 MiB, one run: a smoke test")
    parser.add_argument("--size", type=float, default=256, help="MiB of values per topic")
    parser.add_argument("--runs", type=int, default=3, help="runs to take the median of")
    parser.add_argument("--value-size", type=int, default=1000, help="bytes per record value")
    parser.add_argument("--flush", default="never", choices=("group", "always", "never"))
    parser.add_argument("--timeout", type=float, default=300, help="seconds per measure, at most")
    parser.add_argument("--data-root", type=Path, default=Path("/tmp"), help="where logs go")
    parser.add_argument("--markdown", action="store_true", help="print the table as Markdown")
    add_plot_option(parser)
    args = parser.parse_args()
    size, runs = (32.0, 1) if args.quick else (args.size, args.runs)
    settings = Settings(
        size=int(size * MiB),
        value_size=args.value_size,
        runs=runs,
        flush=args.flush,
        timeout=args.timeout,
        data_root=args.data_root,
    )
    samples = measure(settings)
    print()
    print(report(samples, settings, args.markdown, args.plot))
    if not samples.rates:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
