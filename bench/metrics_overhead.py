"""What the Prometheus metrics cost: produce throughput with metrics on vs off, same run.

Two kayak brokers run side by side, identical but for ``Broker(metrics=...)``: one counts and
times every request (what ``/metrics`` serves), the other does not. Each is this script in
``--serve on|off`` mode (``python -m kayak broker`` has no switch for it), on uvloop, a fresh
data directory each, with ``--flush never`` by default (``--flush group`` to fsync): without
fsync waits the broker's CPU, which is what the metrics add to, sets the pace.

Within a run the two take turns, ``--slices`` times per point, in short slices (the order
alternating), so that the load of a shared machine drifting during the run hits both alike;
a run's rate per broker is the median of its slices.

Points:

* ``batched``: confluent-kafka producing ``--messages`` 100 B values per slice, acks=all,
  linger.ms=5 (few, large requests: the common case);
* ``small requests``: ``--producers`` asyncio producers over 4 pipelined connections, each
  sending one 100 B record per acks=all Produce request and awaiting the answer, for
  ``--seconds`` per slice (many tiny requests: the worst case for a per-request cost).

Also the broker CPU per message (batched) or request, from /proc.

The cost of answering ``/metrics`` is measured apart (broker CPU per scrape, after the
points): it is paid once per scrape interval, not per request.

Prints messages (requests)/s per broker with medians of ``--runs`` runs, and on / off as the
median of the within-run ratios (throughput cost: 1 - that ratio), and the same for broker CPU
per message or request (CPU cost: on / off - 1), the steadier figure on a shared machine.
Target: <= 3 %.

Run: ``python bench/metrics_overhead.py`` (3 runs, about a minute), ``--quick`` for a smoke
test, ``--markdown`` for README.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

import confluent_kafka
from machine_limits import cpu_seconds, machine_notes
from peers import REPO, BrokerProcess, scratch_dir
from protocol_clients import PipelinedClient, create_topic, high_watermark, run_async
from result_tables import Table, add_plot_option, median, paired_ratio, plot_table, spread

from kayak.protocol.messages.produce_request import (
    PartitionProduceData,
    ProduceRequest,
    TopicProduceData,
)
from kayak.protocol.messages.produce_response import ProduceResponse
from kayak.protocol.records import build_record_batch

VALUE_SIZE = 100
BATCHED, SMALL = "batched", "small requests"
POINTS = (BATCHED, SMALL)
ON, OFF = "metrics on", "metrics off"
CONNECTIONS = 4
_START_TIMEOUT = 60.0

Slice = tuple[float, float, int]  # rate per second, broker CPU seconds, messages or requests


@dataclass(frozen=True)
class Settings:
    messages: int
    producers: int
    seconds: float
    slices: int
    runs: int
    flush: str
    data_root: Path


@dataclass
class Samples:
    """Rates (messages or requests per second) and broker CPU µs per request, per run."""

    rates: dict[tuple[str, str], list[float]] = field(default_factory=dict)
    cpu_us: dict[tuple[str, str], list[float]] = field(default_factory=dict)
    scrape_ms: list[float] = field(default_factory=list)

    def add(self, broker: str, point: str, rate: float, cpu_us: float) -> None:
        self.rates.setdefault((broker, point), []).append(rate)
        self.cpu_us.setdefault((broker, point), []).append(cpu_us)

    def of(self, broker: str, point: str) -> list[float]:
        return self.rates.get((broker, point), [])


# -- the brokers ---------------------------------------------------------------------------


def serve(metrics: bool, flush: str, data_dir: Path, registry_port_file: Path) -> None:
    """``--serve``: one broker on a free port until SIGTERM (the child process)."""
    import gc
    import signal

    from kayak.broker import Broker
    from kayak.broker.log import FlushMode

    logging.basicConfig(level=logging.INFO, format="%(message)s")

    async def main() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        loop.add_signal_handler(signal.SIGTERM, stop.set)
        broker = Broker(
            data_dir, port=0, schema_registry_port=0, metrics=metrics, flush=FlushMode(flush)
        )
        async with broker:
            registry_port_file.write_text(broker.schema_registry_url or "")
            gc.freeze()  # as `kayak broker` does
            await stop.wait()

    run_async(main())


def start(name: str, metrics: bool, settings: Settings) -> tuple[BrokerProcess, str]:
    """A ``--serve`` child; the broker and its web server's URL."""
    directory = scratch_dir(settings.data_root, "kayak-metrics-bench-")
    log_path, url_file = directory / "broker.log", directory / "url"
    args = [sys.executable, __file__, "--serve", "on" if metrics else "off",
            "--serve-dir", str(directory), "--flush", settings.flush]  # fmt: skip
    with open(log_path, "wb") as log:
        process = subprocess.Popen(args, stdout=log, stderr=log, cwd=REPO)
    deadline = time.monotonic() + _START_TIMEOUT
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"broker exited: {log_path.read_text()[-2000:]}")
        text = log_path.read_text()
        if "listening on" in text and url_file.exists() and url_file.read_text():
            port = int(text.split("listening on ", 1)[1].split(",", 1)[0].rsplit(":", 1)[1])
            return BrokerProcess(name, process, port, log_path, directory), url_file.read_text()
        time.sleep(0.05)
    process.kill()
    raise RuntimeError(f"broker did not start: {log_path.read_text()[-2000:]}")


def scrape_cost(broker: BrokerProcess, url: str, scrapes: int = 20) -> tuple[float, int]:
    """Broker CPU milliseconds per ``/metrics`` answer, and its size in bytes."""
    size = 0
    cpu = cpu_seconds(broker.pid)
    for _ in range(scrapes):
        with urllib.request.urlopen(f"{url}/metrics", timeout=10) as response:
            body = response.read()
            if b"kayak_requests_total" not in body:
                raise RuntimeError("/metrics answered without the request counters")
            size = len(body)
    return (cpu_seconds(broker.pid) - cpu) / scrapes * 1e3, size


def hook_cost_us(repeats: int = 100_000) -> float:
    """Microseconds of the work the metrics add to one Produce request, timed in this process:
    what ``BrokerConnection`` does per request when the metrics are on (three clock reads of
    its own, the timing list, error codes, five histogram observations)."""
    import timeit

    from kayak.broker.metrics import RequestMetrics
    from kayak.protocol.messages.produce_response import (
        PartitionProduceResponse,
        TopicProduceResponse,
    )

    metrics = RequestMetrics()
    response = ProduceResponse(responses=[TopicProduceResponse("t", [PartitionProduceResponse()])])
    clock = time.monotonic
    unsent: list[tuple[int, list[float]]] = []

    def one_request() -> None:
        timing = [0.0, 0.0, 0.0, 0.0]  # received: the clock read the connection does anyway
        timing[1] = clock()
        timing[2] = clock()
        metrics.count_errors(0, response)
        unsent.append((0, timing))
        sent = clock()
        for api_key, (received, started, done, dequeued) in unsent:
            metrics.finished(api_key, received, started, done, dequeued, sent)
        unsent.clear()

    # CPU time, as the broker CPU it is compared with: a shared machine descheduling this
    # process must not count.
    best = min(timeit.repeat(one_request, timer=time.process_time, number=repeats, repeat=5))
    return best / repeats * 1e6


# -- the points ----------------------------------------------------------------------------


def batched(broker: BrokerProcess, topic: str, settings: Settings) -> Slice:
    """confluent-kafka: messages/s, broker CPU seconds, messages."""
    errors: list[str] = []
    producer = confluent_kafka.Producer(
        {
            "bootstrap.servers": broker.bootstrap,
            "acks": "all",
            "linger.ms": 5,
            "batch.num.messages": 10_000,
            "compression.type": "none",
            "queue.buffering.max.messages": 1_000_000,
            "delivery.report.only.error": True,
            "enable.idempotence": False,
            "on_delivery": lambda err, _: err is not None and errors.append(str(err)),
        }
    )
    value = os.urandom(VALUE_SIZE)
    producer.produce(topic, value, partition=0)  # connection and metadata, off the clock
    producer.flush(60)
    before = high_watermark(broker.bootstrap, topic)
    started, cpu = time.perf_counter(), cpu_seconds(broker.pid)
    for _ in range(settings.messages):
        while True:
            try:
                producer.produce(topic, value, partition=0)
                break
            except BufferError:
                producer.poll(0.001)
    remaining = producer.flush(120)
    elapsed = time.perf_counter() - started
    busy = cpu_seconds(broker.pid) - cpu
    if remaining or errors:
        raise RuntimeError(f"{remaining} unflushed, errors: {errors[:3]}")
    if high_watermark(broker.bootstrap, topic) - before != settings.messages:
        raise RuntimeError(f"{topic}: not every message was stored")
    return settings.messages / elapsed, busy, settings.messages


async def small_requests(broker: BrokerProcess, topic: str, settings: Settings) -> Slice:
    """One-record acks=all requests: requests/s, broker CPU seconds, requests."""
    clients = [await PipelinedClient.connect(broker.bootstrap) for _ in range(CONNECTIONS)]
    batch = build_record_batch([os.urandom(VALUE_SIZE)])
    data = TopicProduceData(name=topic, partition_data=[PartitionProduceData(0, batch)])
    request = ProduceRequest(acks=-1, timeout_ms=30_000, topic_data=[data])
    loop = asyncio.get_running_loop()
    warmup = 0.2
    stop_at = loop.time() + warmup + settings.seconds
    done = [0]

    async def producer(client: PipelinedClient) -> None:
        while loop.time() < stop_at:
            response = await client.request(request, 9)
            assert isinstance(response, ProduceResponse)
            if response.responses[0].partition_responses[0].error_code:
                raise RuntimeError("produce failed")
            done[0] += 1

    tasks = [
        loop.create_task(producer(clients[i % CONNECTIONS])) for i in range(settings.producers)
    ]
    await asyncio.sleep(warmup)
    count, started, cpu = done[0], time.perf_counter(), cpu_seconds(broker.pid)
    await asyncio.sleep(settings.seconds)
    count, elapsed = done[0] - count, time.perf_counter() - started
    busy = cpu_seconds(broker.pid) - cpu
    await asyncio.wait_for(asyncio.gather(*tasks), timeout=60)
    for client in clients:
        await client.close()
    return count / elapsed, busy, count


def measure(broker: BrokerProcess, point: str, run: int, settings: Settings) -> Slice:
    topic = f"{point.replace(' ', '-')}-{run}"
    create_topic(broker.bootstrap, topic)  # an existing topic is fine
    if point == BATCHED:
        return batched(broker, topic, settings)
    return run_async(small_requests(broker, topic, settings))


def run_once(run: int, settings: Settings, samples: Samples) -> None:
    print(f"run {run + 1}/{settings.runs}", flush=True)
    on, on_url = start(ON, True, settings)
    try:
        off, _ = start(OFF, False, settings)
    except BaseException:
        on.stop()
        raise
    brokers = {ON: on, OFF: off}
    try:
        for point in POINTS:
            slices: dict[str, list[Slice]] = {ON: [], OFF: []}
            for index in range(settings.slices):
                for name in [ON, OFF] if (run + index) % 2 == 0 else [OFF, ON]:
                    slices[name].append(measure(brokers[name], point, run, settings))
            for name in (ON, OFF):
                rate = median([r for r, _, _ in slices[name]])
                # Summed over the slices: /proc counts CPU in 10 ms ticks.
                busy, count = (sum(x) for x in list(zip(*slices[name], strict=True))[1:])
                cpu_us = busy / count * 1e6
                samples.add(name, point, rate, cpu_us)
                print(f"  {name:<11} {point:<14} {rate:>10,.0f}/s, broker CPU {cpu_us:6.1f} µs "
                      "per message/request", flush=True)  # fmt: skip
        cost, size = scrape_cost(on, on_url)
        samples.scrape_ms.append(cost)
        print(f"  /metrics: {cost:.1f} ms of broker CPU per scrape ({size:,} bytes)", flush=True)
    finally:
        on.stop()
        off.stop()


# -- report --------------------------------------------------------------------------------


def results_table(samples: Samples) -> Table:
    table = Table(["point", "metrics off /s", "metrics on /s", "on / off", "throughput cost",
                   "broker CPU µs off / on", "CPU cost"])  # fmt: skip
    for point in POINTS:
        on, off = samples.of(ON, point), samples.of(OFF, point)
        ratio = paired_ratio(on, off)
        cpu_on, cpu_off = samples.cpu_us.get((ON, point), []), samples.cpu_us.get((OFF, point), [])
        cpu_ratio = paired_ratio(cpu_on, cpu_off)
        table.add(point, median(off), median(on), f"{ratio:.3f}", f"{1 - ratio:+.1%}",
                  f"{median(cpu_off):.1f} / {median(cpu_on):.1f}",
                  f"{cpu_ratio - 1:+.1%}")  # fmt: skip
    return table


def report(settings: Settings, samples: Samples, markdown: bool) -> None:
    print()
    print(
        f"{VALUE_SIZE} B values, acks=all, --flush {settings.flush}; batched: confluent-kafka "
        f"{confluent_kafka.version()}, {settings.messages:,} messages, linger.ms=5; small "
        f"requests: {settings.producers} producers over {CONNECTIONS} connections, one record "
        f"per request, {settings.seconds:g} s; {settings.slices} slices per point and broker; "
        f"median of {settings.runs} runs"
    )
    print(machine_notes(settings.data_root))
    print()
    table = results_table(samples)
    print(table.markdown() if markdown else table.text())
    print()
    ranges = [
        f"{name} {point}: {spread(samples.of(name, point))}"
        for name in (OFF, ON)
        for point in POINTS
    ]
    print("run-to-run range (/s): " + "; ".join(ranges))
    scrape = median(samples.scrape_ms)
    print(f"/metrics: {scrape:.1f} ms of broker CPU per scrape (median); scraped every 15 s, "
          f"{scrape / 15_000:.3%} of a core")  # fmt: skip


def parse_args(argv: list[str]) -> tuple[Settings, bool, argparse.Namespace]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a few seconds: a smoke test")
    parser.add_argument("--messages", type=int, default=50_000, help="batched, per slice")
    parser.add_argument("--producers", type=int, default=64, help="small-requests point")
    parser.add_argument("--seconds", type=float, default=0.5, help="small requests, per slice")
    parser.add_argument("--slices", type=int, default=6, help="per point, broker and run")
    parser.add_argument("--runs", type=int, default=3, help="runs to take the median of")
    parser.add_argument("--flush", choices=("group", "never"), default="never")
    parser.add_argument("--data-root", type=Path, default=Path("/tmp"), help="where logs go")
    parser.add_argument("--markdown", action="store_true", help="print the table as Markdown")
    add_plot_option(parser)
    parser.add_argument("--serve", choices=("on", "off"), help=argparse.SUPPRESS)
    parser.add_argument("--serve-dir", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.quick:
        args.messages, args.seconds, args.slices, args.runs = 20_000, 0.5, 2, 1
    settings = Settings(
        args.messages, args.producers, args.seconds, args.slices, args.runs, args.flush,
        args.data_root,
    )  # fmt: skip
    return settings, args.markdown, args


def main(argv: list[str]) -> None:
    settings, markdown, args = parse_args(argv)
    if args.serve is not None:
        serve(args.serve == "on", args.flush, args.serve_dir / "data", args.serve_dir / "url")
        return
    samples = Samples()
    for run in range(settings.runs):
        run_once(run, settings, samples)
    report(settings, samples, markdown)
    plot_table(args.plot, "metrics_overhead", results_table(samples))
    hooks = hook_cost_us()
    floor = median(samples.cpu_us.get((OFF, SMALL), []))
    print(f"metrics work per request, timed in-process: {hooks:.2f} µs = {hooks / floor:.1%} of "
          f"the metrics-off broker's CPU per small request ({floor:.0f} µs)")  # fmt: skip


if __name__ == "__main__":
    main(sys.argv[1:])
