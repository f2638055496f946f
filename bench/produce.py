"""Producer throughput: kayak's producer against confluent-kafka, the Java client, aiokafka and
kafka-python, on kayak's broker and on Apache Kafka in the same run.

The seastar client's table, redone for Python clients: each client sends ``--messages`` values
of 10 B, 100 B and 1,000 B to a one-partition topic in groups of 1,000 and waits for each
group to be acknowledged before the next (``flush``, or awaiting the group's futures), so
every row is "messages/s with 1,000 messages in flight at most". Clients:

* ``kayak send``: ``await producer.send(...)`` per message, then ``await producer.flush()``;
* ``kayak produce``: ``producer.produce(..., on_delivery=callback)`` per message (a plain call:
  no future, no coroutine; the callback gets each record's offset, as confluent-kafka's delivery
  callbacks do), then ``await producer.flush()``;
* ``kayak send_batch``: ``await (await producer.send_batch(topic, group))``;
* ``confluent-kafka``: ``produce()`` per message, then ``flush()`` (librdkafka 2.x);
* ``confluent-kafka (callback)``: ``produce(..., on_delivery=callback)`` per message and
  ``poll(0)`` after each 1,000, then ``flush()``: the like-for-like peer of ``kayak produce``
  (a delivery report per record), whose ratio to it is printed under the table;
* ``Java producer``: Kafka 4.3's ``KafkaProducer.send(record, callback)`` per message (a
  delivery report per record, as confluent-kafka's callbacks give them), then ``flush()``
  (bench/java/ProducerBench.java, compiled on first use);
* ``aiokafka``: ``await producer.send(...)`` per message, then ``await producer.flush()``;
* ``kafka-python``: ``send()`` per message, then ``flush()``.

Tuned alike: acks=1, no compression (``--compression`` to change it for all), batches up to
1,000,000 bytes (``batch.size``; librdkafka's ``batch.num.messages`` 10,000 so a whole group
fits a batch), ``max.request.size`` 1,048,576, no idempotence (acks=1 rules it out). Each
client gets the ``linger.ms`` it does best with here (tried: 0 and 5): 5 for kayak,
confluent-kafka, Java and kafka-python, whose flush sends at once whatever the linger
(librdkafka with linger 0 sends many small batches while the group is being produced, ~40%
slower), and 0 for aiokafka, whose flush waits out the linger. Smaller batch sizes (16 KiB,
64 KiB) were no faster for any client. asyncio clients run on uvloop; the Java client on the
JVM options of Kafka's own perf scripts. ``BENCH_LINGER_<CLIENT>`` and ``BENCH_BATCH_<CLIENT>``
environment variables override the settings for tuning runs.

Every measurement runs in a fresh child process (its own interpreter or JVM, no state left
over from another client) that connects, sends one group to warm up (the Java client up to 20
groups, ``BENCH_WARM_UP_GROUPS_JAVA``, so that its JIT has compiled the send path), then waits
to be timed on ``--messages`` messages (``measured_clients.run_measured``); the topic's high
watermark is checked afterwards. The CPU time of the client process (all its threads) and of
the broker process over the timed part are read from /proc, and shown per message beside
every rate.

Brokers (``--brokers``, default ``kayak,kafka``; ``tansu`` too if installed): kayak's
(subprocess, ``--flush never``, Kafka's default: page cache, no fsync per batch, so the
clients are what is measured), Apache Kafka 4.3 (bench/kafka_peer.py: Kafka's defaults, its
scripts' JVM options), and Tansu (in-memory storage). Each run starts them afresh and warms
them up alike (``kafka_peer.warm_up``); every client takes its turn on the same brokers in the
same run, in an order rotated from run to run. Reports medians of ``--runs`` runs (default 3)
with the min-max spread, and each client's msg/s over confluent-kafka's and the Java client's,
paired within each run so that noise hitting a whole run (the machine is shared) cancels out.

``--profile`` splits the CPU time of kayak's per-message ``send`` and ``produce`` into the
loop and the flush, shows cProfile's top functions, and times the parts any asyncio producer
pays per message (a coroutine call, a future, a clock read, a result).

Run: ``python bench/produce.py`` (about 10 minutes), ``--quick`` for a smoke test,
``--markdown`` for the README, ``--plot docs/bench/client_produce.svg`` for its chart.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from kafka_peer import WARM_UP_MESSAGES, parse_brokers, start_broker, warm_up
from measured_clients import run_measured
from peers import BrokerProcess, start_kayak
from produce_clients import BATCH, GROUP, LINGER_MS, MAX_REQUEST, child_main
from produce_profile import profile_send
from protocol_clients import create_topic, high_watermark
from result_tables import (
    Table,
    add_plot_option,
    human,
    median,
    paired_ratio,
    plot_table,
    spread,
    times,
)

sys.path.insert(0, str(Path(__file__).resolve().parent / "java"))
from jvm_clients import PRODUCER, java_client_command

SIZES = (10, 100, 1000)
CLIENTS = (
    "kayak-send", "kayak-produce", "kayak-send_batch", "confluent-kafka",
    "confluent-kafka-callback", "java", "aiokafka", "kafka-python",
)  # fmt: skip
LABELS = {
    "kayak-send": "kayak send",
    "kayak-produce": "kayak produce",
    "kayak-send_batch": "kayak send_batch",
    "confluent-kafka": "confluent-kafka",
    "confluent-kafka-callback": "confluent-kafka (callback)",
    "java": "Java producer",
    "aiokafka": "aiokafka",
    "kafka-python": "kafka-python",
}
JAVA_WARM_UP_GROUPS = int(os.environ.get("BENCH_WARM_UP_GROUPS_JAVA", 20))
CHILD_TIMEOUT = 600.0


@dataclass(frozen=True)
class Result:
    seconds: float
    messages: int
    warmup: int  # messages sent before the clock started (checked in the topic too)
    client_cpu: float  # seconds, the client process over the timed part
    broker_cpu: float  # seconds, the broker process over the same part

    @property
    def rate(self) -> float:
        return self.messages / self.seconds


# -- the parent: brokers, runs, table ------------------------------------------------------------


@contextlib.contextmanager
def stopping(*brokers: BrokerProcess) -> Iterator[None]:
    """Stop every broker on the way out, whatever happened."""
    try:
        yield
    finally:
        for broker in brokers:
            broker.stop()


@contextlib.contextmanager
def started_brokers(
    names: list[str], root: Path, warm_messages: int
) -> Iterator[list[tuple[str, BrokerProcess]]]:
    """Fresh brokers by name (kayak's with ``--flush never``), each warmed up alike with
    ``warm_messages`` messages (none if 0); all stopped on the way out."""
    started: list[tuple[str, BrokerProcess]] = []
    try:
        for name in names:
            broker = start_broker(name, root, kayak_flush="never", warm=False)
            started.append((name, broker))
            if warm_messages:
                warm_up(broker, warm_messages)
        yield started
    finally:
        for _, broker in started:
            broker.stop()


def client_command(
    client: str, bootstrap: str, topic: str, messages: int, size: int, compression: str
) -> list[str]:
    """How one measurement's child process is started: this script, or the Java client."""
    if client == "java":
        warm_groups = min(JAVA_WARM_UP_GROUPS, max(1, messages // GROUP))
        return java_client_command(
            PRODUCER,
            [bootstrap, topic, messages, size, LINGER_MS["java"], BATCH["java"], MAX_REQUEST,
             compression, warm_groups],
        )  # fmt: skip
    return [
        sys.executable, __file__, "--child", client, "--bootstrap", bootstrap, "--topic", topic,
        "--messages", str(messages), "--size", str(size), "--compression", compression,
    ]  # fmt: skip


def measure(
    client: str,
    broker: BrokerProcess,
    topic: str,
    messages: int,
    size: int,
    compression: str,
) -> Result:
    command = client_command(client, broker.bootstrap, topic, messages, size, compression)
    try:
        done = run_measured(command, broker.pid, CHILD_TIMEOUT)
    except RuntimeError as exc:
        raise RuntimeError(f"{client} failed: {exc}") from exc
    data = done.result
    return Result(
        data["seconds"], data["messages"], data["warmup"], done.client_cpu, done.broker_cpu
    )


def messages_for(size: int, base: int) -> int:
    # Fewer 1,000 B messages: the same run time order for every size.
    return base if size < 1000 else max(GROUP, base // 4)


Results = dict[tuple[str, str, int], list[Result]]


def run_once(
    brokers: list[tuple[str, BrokerProcess]],
    clients: list[str],
    sizes: list[int],
    base_messages: int,
    compression: str,
    results: Results,
    run: int,
) -> None:
    # Rotate the order each run, so that no client always goes first (on a fresh broker).
    order = clients[run % len(clients) :] + clients[: run % len(clients)]
    for broker_name, broker in brokers:
        for size in sizes:
            for client in order:
                topic = f"bench-{client}-{size}-{run}".replace("_", "-")
                create_topic(broker.bootstrap, topic)
                messages = messages_for(size, base_messages)
                result = measure(client, broker, topic, messages, size, compression)
                stored = high_watermark(broker.bootstrap, topic)
                if stored != result.messages + result.warmup:
                    raise RuntimeError(
                        f"{client} on {broker_name}: {stored} stored, "
                        f"{result.messages + result.warmup} sent"
                    )
                results.setdefault((broker_name, client, size), []).append(result)
                print(
                    f"  run {run + 1} {broker_name:12} {size:5} B {LABELS[client]:17} "
                    f"{human(result.rate):>10} msg/s",
                    file=sys.stderr,
                )


def report(
    results: Results,
    broker_names: list[str],
    clients: list[str],
    sizes: list[int],
) -> Table:
    """One table: every broker, size and client; CPU per message of the client and of the
    broker beside each rate; paired ratios to confluent-kafka and to the Java client."""
    table = Table(["broker", "size", "client", "msg/s (median)", "min-max", "MB/s",
                   "client CPU µs/msg", "broker CPU µs/msg", "vs confluent-kafka",
                   "vs Java"])  # fmt: skip
    for broker_name in broker_names:
        for size in sizes:
            for client in clients:
                samples = results.get((broker_name, client, size), [])
                if not samples:
                    continue
                rates = [r.rate for r in samples]
                rate = median(rates)
                table.add(
                    broker_name,
                    f"{size:,} B",
                    LABELS[client],
                    rate,
                    spread(rates),
                    rate * size / 1e6,
                    median([r.client_cpu / r.messages * 1e6 for r in samples]),
                    median([r.broker_cpu / r.messages * 1e6 for r in samples]),
                    _versus(results, broker_name, client, "confluent-kafka", size),
                    _versus(results, broker_name, client, "java", size),
                )
    return table


def _versus(results: Results, broker_name: str, mine: str, theirs: str, size: int) -> str:
    """Median over runs of mine/theirs msg/s in the same run ("-" for theirs itself)."""
    if mine == theirs:
        return "-"
    ours = [r.rate for r in results.get((broker_name, mine, size), [])]
    other = [r.rate for r in results.get((broker_name, theirs, size), [])]
    return times(paired_ratio(ours, other))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--messages", type=int, default=200_000, help="per 10 B/100 B point")
    parser.add_argument("--sizes", default=",".join(map(str, SIZES)), help="value sizes, bytes")
    parser.add_argument("--brokers", default="kayak,kafka", help="of kayak, kafka, tansu")
    parser.add_argument("--clients", default=",".join(CLIENTS))
    parser.add_argument("--compression", default="none")
    parser.add_argument(
        "--warm-up", type=int, default=WARM_UP_MESSAGES, help="messages to warm each broker with"
    )
    parser.add_argument("--quick", action="store_true", help="one short run: a smoke test")
    parser.add_argument("--markdown", action="store_true")
    add_plot_option(parser)
    parser.add_argument("--profile", action="store_true", help="cProfile kayak's send, produce")
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
        args.runs, args.messages, args.warm_up = 1, 10_000, min(args.warm_up, 10_000)
    clients = [c for c in args.clients.split(",") if c]
    unknown = set(clients) - set(CLIENTS)
    if unknown:
        raise SystemExit(f"unknown client(s) {sorted(unknown)}: of {', '.join(CLIENTS)}")
    sizes = [int(size) for size in args.sizes.split(",") if size]
    if args.profile:
        broker = start_kayak(args.data_root, "never")
        with stopping(broker):
            profile_send(broker.bootstrap, min(args.messages, 100_000), 10)
        return
    names = list(parse_brokers(args.brokers))
    results: Results = {}
    for run in range(args.runs):
        with started_brokers(names, args.data_root, args.warm_up) as brokers:
            run_once(brokers, clients, sizes, args.messages, args.compression, results, run)
    print(
        f"Producer throughput, {args.runs} run(s), groups of {GROUP} acknowledged before the "
        f"next, acks=1, compression={args.compression}, medians; CPU from /proc:"
    )
    table = report(results, names, clients, sizes)
    print(table.markdown() if args.markdown else table.text())
    print_callback_ratios(results, names, clients, sizes)
    plot_table(args.plot, "client_produce", table)


def print_callback_ratios(
    results: Results, broker_names: list[str], clients: list[str], sizes: list[int]
) -> None:
    """kayak ``produce`` (a callback per record) over confluent-kafka with a callback per
    record: the like-for-like ratio, paired within each run."""
    if not {"kayak-produce", "confluent-kafka-callback"} <= set(clients):
        return
    for broker_name in broker_names:
        for size in sizes:
            ratio = _versus(results, broker_name, "kayak-produce", "confluent-kafka-callback", size)
            print(f"kayak produce / confluent-kafka (callback), {broker_name}, {size:,} B: {ratio}")


if __name__ == "__main__":
    main()
