"""Record batch encode/decode throughput: kayak vs kafka-python vs aiokafka.

Records per second for batches of 1,000 uncompressed records with 10 B, 100 B and 1,000 B
values, each library on its own natural fast path:

* encode: kayak's bulk ``build_record_batch`` (and, for reference, its one-at-a-time
  ``RecordBatchBuilder``); the peers' ``DefaultRecordBatchBuilder.append`` x 1,000 + ``build``.
* decode: parse the batch and read every record's key and value (``for r in batch``), from
  the same bytes for every library; plus kayak's values-only ``RecordBatch.values()``.

Each figure is the median of 5 runs; the libraries take turns inside each run so that a noisy
neighbour slows them all alike. Run: ``python bench/record_batch.py [--quick]``.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import aiokafka.record.default_records as aiokafka_records
import kafka.record.default_records as kafka_python_records
from result_tables import Table, add_plot_option, plot_table

from kayak.protocol.records import RecordBatch, RecordBatchBuilder, build_record_batch

RECORDS_PER_BATCH = 1000
VALUE_SIZES = (10, 100, 1000)
TIMESTAMP = 1_700_000_000_000
RUNS = 5

Op = Callable[[], object]


def peer_encoder(module: object, values: list[bytes]) -> Op:
    builder_type = module.DefaultRecordBatchBuilder  # type: ignore[attr-defined]

    def encode() -> bytes:
        builder = builder_type(
            magic=2,
            compression_type=0,
            is_transactional=False,
            producer_id=-1,
            producer_epoch=-1,
            base_sequence=-1,
            batch_size=1 << 30,
        )
        append = builder.append
        for offset, value in enumerate(values):
            append(offset, timestamp=TIMESTAMP, key=None, value=value, headers=[])
        return bytes(builder.build())

    return encode


def peer_decoder(module: object, data: bytes) -> Op:
    batch_type = module.DefaultRecordBatch  # type: ignore[attr-defined]

    def decode() -> int:
        n = 0
        for record in batch_type(data):
            record.key  # noqa: B018 - reading the field is the work measured
            record.value  # noqa: B018
            n += 1
        return n

    return decode


def kayak_bulk_encoder(values: list[bytes]) -> Op:
    return lambda: build_record_batch(values, timestamp=TIMESTAMP)


def kayak_builder_encoder(values: list[bytes]) -> Op:
    def encode() -> bytes:
        builder = RecordBatchBuilder()
        append = builder.append
        for value in values:
            append(value, timestamp=TIMESTAMP)
        return builder.build()

    return encode


def kayak_decoder(data: bytes) -> Op:
    def decode() -> int:
        n = 0
        for record in RecordBatch(data):
            record.key  # noqa: B018
            record.value  # noqa: B018
            n += 1
        return n

    return decode


def kayak_values_decoder(data: bytes) -> Op:
    return lambda: len(RecordBatch(data).values())


def seconds_per_op(op: Op, loops: int) -> float:
    start = time.perf_counter()
    for _ in range(loops):
        op()
    return (time.perf_counter() - start) / loops


def calibrate(op: Op, target_seconds: float) -> int:
    """Loops that make one run take about ``target_seconds``."""
    once = max(seconds_per_op(op, 3), 1e-6)
    return max(3, int(target_seconds / once))


def measure(ops: dict[str, Op], target_seconds: float) -> dict[str, float]:
    """Median records/second of each op over RUNS runs, ops interleaved within each run."""
    loops = {name: calibrate(op, target_seconds) for name, op in ops.items()}
    samples: dict[str, list[float]] = {name: [] for name in ops}
    for _ in range(RUNS):
        for name, op in ops.items():
            samples[name].append(RECORDS_PER_BATCH / seconds_per_op(op, loops[name]))
    return {name: statistics.median(rates) for name, rates in samples.items()}


def check_agreement(values: list[bytes], data: bytes) -> None:
    """Every library must decode kayak's batch to the same values before we time anything."""
    expected = values
    assert RecordBatch(data).values() == expected
    assert [r.value for r in RecordBatch(data)] == expected
    for module in (kafka_python_records, aiokafka_records):
        assert [r.value for r in module.DefaultRecordBatch(data)] == expected
    peer_batch = peer_encoder(kafka_python_records, values)()
    assert [r.value for r in RecordBatch(peer_batch)] == expected


def aiokafka_implementation() -> str:
    module = aiokafka_records.DefaultRecordBatchBuilder.__module__
    return "C extension" if "_crecords" in module else "pure Python"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="short runs, for a smoke test")
    add_plot_option(parser)
    args = parser.parse_args()
    target = 0.02 if args.quick else 0.25

    print(f"Python {sys.version.split()[0]}; aiokafka record code: {aiokafka_implementation()}")
    print(
        f"{RECORDS_PER_BATCH} records per batch, no compression, median of {RUNS} runs, "
        "records/second\n"
    )
    header = (
        f"{'value':>6} {'op':<22} {'kayak':>12} {'kafka-python':>13} {'aiokafka':>12} "
        f"{'x kafka-py':>10} {'x aiokafka':>10}"
    )
    print(header)
    print("-" * len(header))
    table = Table(["value", "operation", "kayak", "kafka-python", "aiokafka", "x kafka-python",
                   "x aiokafka"])  # fmt: skip
    for size in VALUE_SIZES:
        values = [bytes([i % 251]) * size for i in range(RECORDS_PER_BATCH)]
        data = build_record_batch(values, timestamp=TIMESTAMP)
        check_agreement(values, data)
        encode = measure(
            {
                "kayak": kayak_bulk_encoder(values),
                "kayak-builder": kayak_builder_encoder(values),
                "kafka-python": peer_encoder(kafka_python_records, values),
                "aiokafka": peer_encoder(aiokafka_records, values),
            },
            target,
        )
        decode = measure(
            {
                "kayak": kayak_decoder(data),
                "kayak-values": kayak_values_decoder(data),
                "kafka-python": peer_decoder(kafka_python_records, data),
                "aiokafka": peer_decoder(aiokafka_records, data),
            },
            target,
        )
        rows = [
            ("encode (bulk)", encode["kayak"], encode),
            ("encode (builder)", encode["kayak-builder"], encode),
            ("decode (key+value)", decode["kayak"], decode),
            ("decode (values())", decode["kayak-values"], decode),
        ]
        for label, mine, peers in rows:
            print(
                f"{size:>5}B {label:<22} {mine:>12,.0f} {peers['kafka-python']:>13,.0f} "
                f"{peers['aiokafka']:>12,.0f} {mine / peers['kafka-python']:>9.2f}x "
                f"{mine / peers['aiokafka']:>9.2f}x"
            )
            rates = (mine, peers["kafka-python"], peers["aiokafka"])
            millions = (f"{rate / 1e6:.{1 if rate >= 1e7 else 2}f}M" for rate in rates)
            table.add(f"{size:,} B", label, *millions,
                      *(f"{mine / peer:.2f}x" for peer in rates[1:]))  # fmt: skip
    plot_table(args.plot, "record_batch", table)


if __name__ == "__main__":
    main()
