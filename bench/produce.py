"""Producer throughput: kayak's producer against confluent-kafka, aiokafka and kafka-python.

The seastar client's table, redone for Python clients: each client sends ``--messages`` values
of 10 B, 100 B and 1,000 B to a one-partition topic in groups of 1,000 and waits for each
group to be acknowledged before the next (``flush``, or awaiting the group's futures), so
every row is "messages/s with 1,000 messages in flight at most". Clients:

* ``kayak send``: ``await producer.send(...)`` per message, then ``await producer.flush()``;
* ``kayak send_batch``: ``await (await producer.send_batch(topic, group))``;
* ``confluent-kafka``: ``produce()`` per message, then ``flush()`` (librdkafka 2.x);
* ``aiokafka``: ``await producer.send(...)`` per message, then ``await producer.flush()``;
* ``kafka-python``: ``send()`` per message, then ``flush()``.

Tuned alike: acks=1, no compression (``--compression`` to change it for all), batches up to
1,000,000 bytes (``batch.size``; librdkafka's ``batch.num.messages`` 10,000 so a whole group
fits a batch), ``max.request.size`` 1,048,576, no idempotence (acks=1 rules it out). Each
client gets the ``linger.ms`` it does best with here (tried: 0 and 5): 5 for kayak,
confluent-kafka and kafka-python, whose flush sends at once whatever the linger (librdkafka
with linger 0 sends many small batches while the group is being produced, ~40% slower), and
0 for aiokafka, whose flush waits out the linger. Smaller batch sizes (16 KiB, 64 KiB) were
no faster for any client. asyncio clients run on uvloop. ``BENCH_LINGER_<CLIENT>`` and
``BENCH_BATCH_<CLIENT>`` environment variables override the settings for tuning runs.

Every measurement runs in a fresh child process (its own interpreter, no state left over
from another client) that connects, sends one group to warm up, then times ``--messages``
messages; the topic's high watermark is checked afterwards. Brokers: kayak's (subprocess,
``--flush never``, Kafka's default: page cache, no fsync per batch, so the clients are what
is measured) and Tansu (in-memory storage); each run starts them afresh and every client
takes its turn on the same brokers in the same run, in an order rotated from run to run.
Reports medians of ``--runs`` runs (default 3) with the min-max spread, the client's CPU time
per message (all its threads), and the ratios the targets are about (send_batch /
confluent-kafka, send / aiokafka), paired within each run so that noise hitting a whole run
(the machine is shared) cancels out.

``--profile`` splits the CPU time of kayak's per-message ``send`` into the send loop and the
flush, shows cProfile's top functions, and times the parts any asyncio producer pays per
message (a coroutine call, a future, a clock read, a result).

Run: ``python bench/produce.py`` (about 8 minutes), ``--quick`` for a smoke test,
``--markdown`` for the README.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import cProfile
import io
import json
import os
import pstats
import subprocess
import sys
import time
from collections.abc import Callable, Coroutine, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from peers import (
    REPO,
    BrokerProcess,
    Table,
    add_plot_option,
    create_topic,
    high_watermark,
    human,
    median,
    plot_table,
    spread,
    start_kayak,
    start_tansu,
)

SIZES = (10, 100, 1000)
GROUP = 1000
CLIENTS = ("kayak-send", "kayak-send_batch", "confluent-kafka", "aiokafka", "kafka-python")
LABELS = {
    "kayak-send": "kayak send",
    "kayak-send_batch": "kayak send_batch",
    "confluent-kafka": "confluent-kafka",
    "aiokafka": "aiokafka",
    "kafka-python": "kafka-python",
}
BATCH_BYTES = 1_000_000
# Each client's best batch.size and linger.ms for "send a group, then flush" (see the module
# docstring); environment variables override them for tuning runs.
BATCH = {
    "kayak": int(os.environ.get("BENCH_BATCH_KAYAK", BATCH_BYTES)),
    "confluent-kafka": int(os.environ.get("BENCH_BATCH_CONFLUENT", BATCH_BYTES)),
    "aiokafka": int(os.environ.get("BENCH_BATCH_AIOKAFKA", BATCH_BYTES)),
    "kafka-python": int(os.environ.get("BENCH_BATCH_KAFKA_PYTHON", BATCH_BYTES)),
}
LINGER_MS = {
    "kayak": int(os.environ.get("BENCH_LINGER_KAYAK", 5)),
    "confluent-kafka": int(os.environ.get("BENCH_LINGER_CONFLUENT", 5)),
    "aiokafka": int(os.environ.get("BENCH_LINGER_AIOKAFKA", 0)),
    "kafka-python": int(os.environ.get("BENCH_LINGER_KAFKA_PYTHON", 5)),
}
MAX_REQUEST = 1_048_576
CHILD_TIMEOUT = 600.0


@dataclass(frozen=True)
class Result:
    seconds: float
    cpu_seconds: float
    messages: int

    @property
    def rate(self) -> float:
        return self.messages / self.seconds


# -- the clients (run in a child process) ----------------------------------------------------------


def _groups(messages: int, size: int) -> list[list[bytes]]:
    # Distinct objects per message, as an application would have; built before the clock runs.
    count = max(1, messages // GROUP)
    return [[bytes(size) for _ in range(GROUP)] for _ in range(count)]


def _run_async(main: Coroutine[Any, Any, Result]) -> Result:
    import uvloop

    return uvloop.run(main)


def _timed(run_groups: Callable[[], None], messages: int) -> Result:
    cpu, start = time.process_time(), time.perf_counter()
    run_groups()
    return Result(time.perf_counter() - start, time.process_time() - cpu, messages)


def bench_kayak(
    bootstrap: str, topic: str, messages: int, size: int, compression: str, bulk: bool
) -> Result:
    sys.path.insert(0, str(REPO))
    from kayak.client.producer import Producer

    groups = _groups(messages, size)

    async def main() -> Result:
        config = {
            "bootstrap.servers": bootstrap,
            "acks": 1,
            "linger.ms": LINGER_MS["kayak"],
            "batch.size": BATCH["kayak"],
            "max.request.size": MAX_REQUEST,
            "compression.type": compression,
        }
        async with Producer(config) as producer:
            await (await producer.send_batch(topic, groups[0]))  # connect, metadata, warm-up
            cpu, start = time.process_time(), time.perf_counter()
            if bulk:
                for group in groups:
                    await (await producer.send_batch(topic, group))
            else:
                send = producer.send
                for group in groups:
                    for value in group:
                        await send(topic, value)
                    await producer.flush()
            return Result(
                time.perf_counter() - start, time.process_time() - cpu, len(groups) * GROUP
            )

    return _run_async(main())


def bench_confluent(
    bootstrap: str, topic: str, messages: int, size: int, compression: str
) -> Result:
    import confluent_kafka

    groups = _groups(messages, size)
    producer = confluent_kafka.Producer(
        {
            "bootstrap.servers": bootstrap,
            "acks": 1,
            "linger.ms": LINGER_MS["confluent-kafka"],
            "batch.size": BATCH["confluent-kafka"],
            "batch.num.messages": 10_000,
            "message.max.bytes": MAX_REQUEST,
            "compression.type": compression,
            "enable.idempotence": False,
            "queue.buffering.max.messages": 100_000,
        }
    )
    for value in groups[0]:
        producer.produce(topic, value)
    producer.flush(30)

    def run() -> None:
        produce, flush = producer.produce, producer.flush
        for group in groups:
            for value in group:
                produce(topic, value)
            flush(30)

    result = _timed(run, len(groups) * GROUP)
    if len(producer):
        raise RuntimeError(f"confluent-kafka left {len(producer)} messages undelivered")
    return result


def bench_aiokafka(
    bootstrap: str, topic: str, messages: int, size: int, compression: str
) -> Result:
    import aiokafka

    groups = _groups(messages, size)

    async def main() -> Result:
        producer = aiokafka.AIOKafkaProducer(
            bootstrap_servers=bootstrap,
            acks=1,
            linger_ms=LINGER_MS["aiokafka"],
            max_batch_size=BATCH["aiokafka"],
            max_request_size=MAX_REQUEST,
            compression_type=None if compression == "none" else compression,
            enable_idempotence=False,
        )
        await producer.start()
        try:
            for value in groups[0]:
                await producer.send(topic, value)
            await producer.flush()
            cpu, start = time.process_time(), time.perf_counter()
            send = producer.send
            for group in groups:
                for value in group:
                    await send(topic, value)
                await producer.flush()
            return Result(
                time.perf_counter() - start, time.process_time() - cpu, len(groups) * GROUP
            )
        finally:
            await producer.stop()

    return _run_async(main())


def bench_kafka_python(
    bootstrap: str, topic: str, messages: int, size: int, compression: str
) -> Result:
    import kafka

    groups = _groups(messages, size)
    producer = kafka.KafkaProducer(
        bootstrap_servers=bootstrap,
        acks=1,
        linger_ms=LINGER_MS["kafka-python"],
        batch_size=BATCH["kafka-python"],
        max_request_size=MAX_REQUEST,
        compression_type=None if compression == "none" else compression,
    )
    for value in groups[0]:
        producer.send(topic, value)
    producer.flush(30)

    def run() -> None:
        send, flush = producer.send, producer.flush
        for group in groups:
            for value in group:
                send(topic, value)
            flush(30)

    try:
        return _timed(run, len(groups) * GROUP)
    finally:
        producer.close(10)


def child_main(args: argparse.Namespace) -> None:
    client, bootstrap, topic = args.child, args.bootstrap, args.topic
    common = (bootstrap, topic, args.messages, args.size, args.compression)
    if client == "kayak-send":
        result = bench_kayak(*common, bulk=False)
    elif client == "kayak-send_batch":
        result = bench_kayak(*common, bulk=True)
    elif client == "confluent-kafka":
        result = bench_confluent(*common)
    elif client == "aiokafka":
        result = bench_aiokafka(*common)
    elif client == "kafka-python":
        result = bench_kafka_python(*common)
    else:
        raise SystemExit(f"unknown client {client}")
    print(json.dumps({"seconds": result.seconds, "cpu": result.cpu_seconds,
                      "messages": result.messages}))  # fmt: skip


# -- the parent: brokers, runs, table ------------------------------------------------------------


@contextlib.contextmanager
def stopping(*brokers: BrokerProcess) -> Iterator[None]:
    """Stop every broker on the way out, whatever happened."""
    try:
        yield
    finally:
        for broker in brokers:
            broker.stop()


def measure(
    client: str, bootstrap: str, topic: str, messages: int, size: int, compression: str
) -> Result:
    command = [
        sys.executable, __file__, "--child", client, "--bootstrap", bootstrap, "--topic", topic,
        "--messages", str(messages), "--size", str(size), "--compression", compression,
    ]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True, timeout=CHILD_TIMEOUT)
    if done.returncode != 0:
        raise RuntimeError(f"{client} failed: {done.stderr[-3000:]}")
    data = json.loads(done.stdout.strip().splitlines()[-1])
    return Result(data["seconds"], data["cpu"], data["messages"])


def messages_for(size: int, base: int) -> int:
    # Fewer 1,000 B messages: the same run time order for every size.
    return base if size < 1000 else max(GROUP, base // 4)


def run_once(
    brokers: list[tuple[str, str]],
    clients: list[str],
    base_messages: int,
    compression: str,
    results: dict[tuple[str, str, int], list[Result]],
    run: int,
) -> None:
    # Rotate the order each run, so that no client always goes first (on a fresh broker).
    order = clients[run % len(clients) :] + clients[: run % len(clients)]
    for broker_name, bootstrap in brokers:
        for size in SIZES:
            for client in order:
                topic = f"bench-{client}-{size}-{run}".replace("_", "-")
                create_topic(bootstrap, topic)
                messages = messages_for(size, base_messages)
                result = measure(client, bootstrap, topic, messages, size, compression)
                stored = high_watermark(bootstrap, topic)
                if stored != result.messages + GROUP:  # + the warm-up group
                    raise RuntimeError(
                        f"{client} on {broker_name}: {stored} stored, "
                        f"{result.messages + GROUP} sent"
                    )
                results.setdefault((broker_name, client, size), []).append(result)
                print(
                    f"  run {run + 1} {broker_name:6} {size:5} B {LABELS[client]:17} "
                    f"{human(result.rate):>10} msg/s",
                    file=sys.stderr,
                )


def report(
    results: dict[tuple[str, str, int], list[Result]],
    broker_names: list[str],
    clients: list[str],
    markdown: bool,
    plot: Path | None = None,
) -> str:
    out: list[str] = []
    for broker_name in broker_names:
        table = Table(["client", "size", "msg/s (median)", "min-max", "MB/s", "CPU µs/msg"])
        for size in SIZES:
            for client in clients:
                samples = results.get((broker_name, client, size), [])
                if not samples:
                    continue
                rates = [r.rate for r in samples]
                rate = median(rates)
                cpu = median([r.cpu_seconds / r.messages * 1e6 for r in samples])
                table.add(LABELS[client], f"{size} B", rate, spread(rates), rate * size / 1e6, cpu)
        out.append(f"\n{broker_name}:\n")
        out.append(table.markdown() if markdown else table.text())
        if broker_name == broker_names[0]:  # kayak's broker when measured: README's table
            plot_table(plot, "client_produce", table)
        out.append(_ratios(results, broker_name))
    return "\n".join(out)


def _paired(
    results: dict[tuple[str, str, int], list[Result]],
    broker_name: str,
    mine: str,
    theirs: str,
    size: int,
) -> tuple[float, float]:
    """Median over runs of mine/theirs in the same run: msg/s ratio, and their CPU per message
    over mine. Noise that hits a whole run cancels out."""
    a = results.get((broker_name, mine, size), [])
    b = results.get((broker_name, theirs, size), [])
    if not a or len(a) != len(b):
        return float("nan"), float("nan")
    rates = [x.rate / y.rate for x, y in zip(a, b, strict=True)]
    cpus = [
        (y.cpu_seconds / y.messages) / (x.cpu_seconds / x.messages)
        for x, y in zip(a, b, strict=True)
    ]
    return median(rates), median(cpus)


def _ratios(results: dict[tuple[str, str, int], list[Result]], broker_name: str) -> str:
    lines = ["", "  paired ratios (median over runs): msg/s, and CPU per message (theirs/ours)"]
    for size in SIZES:
        bulk, bulk_cpu = _paired(results, broker_name, "kayak-send_batch", "confluent-kafka", size)
        single, single_cpu = _paired(results, broker_name, "kayak-send", "aiokafka", size)
        lines.append(
            f"  {size:5} B: send_batch / confluent-kafka = {bulk:.2f}x ({bulk_cpu:.2f}x CPU), "
            f"send / aiokafka = {single:.2f}x ({single_cpu:.2f}x CPU)"
        )
    return "\n".join(lines)


def profile_send(bootstrap: str, messages: int, size: int) -> None:
    """Where a message's time goes in kayak's per-message send loop.

    Prints the CPU per message of the send loop and of the flush (encode, request, answer,
    futures), measured without a profiler; then cProfile's top functions; then what the parts
    no producer can avoid cost on this machine (a coroutine call, a future, a clock read).
    """
    sys.path.insert(0, str(REPO))
    import uvloop

    from kayak.client.producer import Producer, RecordMetadata

    topic = "bench-profile"
    create_topic(bootstrap, topic)
    groups = _groups(messages, size)

    async def phases(producer: Producer) -> tuple[list[float], list[float]]:
        sending: list[float] = []
        flushing: list[float] = []
        for group in groups:
            start = time.process_time()
            for value in group:
                await producer.send(topic, value)
            middle = time.process_time()
            await producer.flush()
            sending.append((middle - start) / GROUP)
            flushing.append((time.process_time() - middle) / GROUP)
        return sending, flushing

    async def main() -> None:
        config = {"bootstrap.servers": bootstrap, "acks": 1, "batch.size": BATCH_BYTES}
        async with Producer(config) as producer:
            await (await producer.send_batch(topic, groups[0]))
            sending, flushing = await phases(producer)
            print(f"kayak send, {size} B values, groups of {GROUP}, CPU per message (median):")
            print(f"  send() loop: {median(sending) * 1e6:.2f} µs")
            print(f"  flush (encode, request, answer, futures): {median(flushing) * 1e6:.2f} µs")
            profiler = cProfile.Profile()
            profiler.enable()
            await phases(producer)
            profiler.disable()
            text = io.StringIO()
            pstats.Stats(profiler, stream=text).sort_stats("tottime").print_stats(12)
            print("\ncProfile (inflates Python calls), by own time:")
            print(text.getvalue().split("\n\n", 1)[-1].rstrip())
            await _floor(RecordMetadata)

    uvloop.run(main())


async def _floor(record_metadata: type) -> None:
    """The per-message parts every asyncio producer pays, timed alone."""

    async def empty(value: bytes) -> None:
        return None

    loop = asyncio.get_running_loop()
    count = 200_000

    async def coroutine_calls() -> None:
        for _ in range(count):
            await empty(b"")

    def per_call(seconds: float) -> str:
        return f"{seconds / count * 1e6:.2f} µs"

    start = time.process_time()
    await coroutine_calls()
    print("\nunavoidable parts, each:")
    print(f"  await of an async def call: {per_call(time.process_time() - start)}")
    start = time.process_time()
    for _ in range(count):
        loop.create_future()
    print(f"  loop.create_future(): {per_call(time.process_time() - start)}")
    start = time.process_time()
    for _ in range(count):
        time.time_ns() // 1_000_000
    print(f"  a millisecond timestamp: {per_call(time.process_time() - start)}")
    futures = [loop.create_future() for _ in range(count)]
    start = time.process_time()
    for index, future in enumerate(futures):
        future.set_result(record_metadata("t", 0, index, 0))
    print(f"  RecordMetadata + set_result: {per_call(time.process_time() - start)}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--messages", type=int, default=200_000, help="per 10 B/100 B point")
    parser.add_argument("--brokers", default="kayak,tansu")
    parser.add_argument("--clients", default=",".join(CLIENTS))
    parser.add_argument("--compression", default="none")
    parser.add_argument("--quick", action="store_true", help="one short run: a smoke test")
    parser.add_argument("--markdown", action="store_true")
    add_plot_option(parser)
    parser.add_argument("--profile", action="store_true", help="cProfile kayak's send")
    parser.add_argument("--data-root", type=Path, default=Path("/tmp"))
    # Child-process mode (internal).
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--bootstrap", help=argparse.SUPPRESS)
    parser.add_argument("--topic", help=argparse.SUPPRESS)
    parser.add_argument("--size", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child_main(args)
        return
    if args.quick:
        args.runs, args.messages = 1, 10_000
    clients = [c for c in args.clients.split(",") if c]
    wanted = [b for b in args.brokers.split(",") if b]
    if args.profile:
        broker = start_kayak(args.data_root, "never")
        with stopping(broker):
            profile_send(broker.bootstrap, min(args.messages, 100_000), 10)
        return
    results: dict[tuple[str, str, int], list[Result]] = {}
    names: list[str] = []
    for run in range(args.runs):
        started = []
        if "kayak" in wanted:
            started.append(("kayak", start_kayak(args.data_root, "never")))
        if "tansu" in wanted:
            started.append(("Tansu", start_tansu(args.data_root)))
        with stopping(*(b for _, b in started)):
            brokers = [(name, broker.bootstrap) for name, broker in started]
            names = [name for name, _ in brokers]
            run_once(brokers, clients, args.messages, args.compression, results, run)
    print(
        f"Producer throughput, {args.runs} run(s), groups of {GROUP} acknowledged before the "
        f"next, acks=1, compression={args.compression}, medians:"
    )
    print(report(results, names, clients, args.markdown, args.plot))


if __name__ == "__main__":
    main()
