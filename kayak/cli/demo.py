"""``kayak demo``: the main job on the embedded defaults.

Until the asyncio client and the CDC pipeline land, the demo runs what exists end to end:
the embedded broker on a temporary data directory, spoken to over a real socket through the
sans-I/O protocol layer. It produces record batches in every codec with acks=all (group
commit, fsync before ack), fetches everything back through the zero-copy read path, checks
every record, and reports rates.
"""

from __future__ import annotations

import asyncio
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import click
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from kayak.errors import KayakError, raise_for_code
from kayak.protocol import ClientConnection, Message
from kayak.protocol.messages import CreateTopicsRequest, FetchRequest, ProduceRequest
from kayak.protocol.messages.create_topics_request import CreatableTopic
from kayak.protocol.messages.fetch_request import FetchPartition, FetchTopic
from kayak.protocol.messages.produce_request import PartitionProduceData, TopicProduceData
from kayak.protocol.records import Codec, build_record_batch, parse_batches

PRODUCE_VERSION, FETCH_VERSION, CREATE_TOPICS_VERSION = 9, 12, 5


class DemoConnection:
    """Just enough of a client for the demo: one socket, one request at a time."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._reader, self._writer = reader, writer
        self._protocol = ClientConnection(client_id="kayak-demo")

    @classmethod
    async def open(cls, host: str, port: int) -> DemoConnection:
        return cls(*await asyncio.open_connection(host, port))

    async def request(self, message: Message, version: int) -> Message:
        _, frame = self._protocol.send_request(message, version)
        self._writer.write(frame)
        while (event := self._protocol.next_event()) is None:
            data = await self._reader.read(1 << 20)
            if not data:
                raise ConnectionError("the broker closed the connection")
            self._protocol.receive_data(data)
        return event.response

    async def close(self) -> None:
        self._writer.close()
        await self._writer.wait_closed()


@dataclass
class CodecResult:
    codec: Codec
    records: int
    stored_bytes: int
    produce_seconds: float
    fetch_seconds: float


async def run_demo(data_dir: Path, records: int, batch_size: int, console: Console) -> int:
    from kayak.broker import Broker

    async with Broker(data_dir, port=0, group_initial_rebalance_delay_ms=0) as broker:
        console.print(f"embedded broker on [bold]{broker.bootstrap_servers}[/], data in {data_dir}")
        conn = await DemoConnection.open("127.0.0.1", broker.port)
        results = []
        with _progress(console) as progress:
            for codec in Codec:
                results.append(await _round_trip(conn, codec, records, batch_size, progress))
        await conn.close()
    _report(console, results)
    total = sum(r.records for r in results)
    console.print(f"verified: {total} records, produced == fetched")
    return total


def _progress(console: Console) -> Progress:
    return Progress(
        TextColumn("{task.description:<22}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=console,
    )


async def _round_trip(
    conn: DemoConnection, codec: Codec, records: int, batch_size: int, progress: Progress
) -> CodecResult:
    topic = f"demo-{codec.name.lower()}"
    created = await conn.request(
        CreateTopicsRequest(
            topics=[CreatableTopic(name=topic, num_partitions=1, replication_factor=1)]
        ),
        CREATE_TOPICS_VERSION,
    )
    raise_for_code(created.topics[0].error_code)  # type: ignore[attr-defined]
    task = progress.add_task(f"produce {codec.name.lower()}", total=records)
    started = time.perf_counter()
    for first in range(0, records, batch_size):
        count = min(batch_size, records - first)
        values = [b"record-%09d" % i for i in range(first, first + count)]
        records_bytes = build_record_batch(values, keys=[v[-4:] for v in values], codec=codec)
        data = TopicProduceData(topic, [PartitionProduceData(0, records_bytes)])
        response = await conn.request(
            ProduceRequest(acks=-1, timeout_ms=30_000, topic_data=[data]), PRODUCE_VERSION
        )
        raise_for_code(response.responses[0].partition_responses[0].error_code)  # type: ignore[attr-defined]
        progress.advance(task, count)
    produce_seconds = time.perf_counter() - started
    task = progress.add_task(f"fetch {codec.name.lower()}", total=records)
    started = time.perf_counter()
    offset, stored = 0, 0
    while offset < records:
        fetch = FetchRequest(
            max_wait_ms=500,
            min_bytes=1,
            max_bytes=16 << 20,
            topics=[
                FetchTopic(
                    topic=topic,
                    partitions=[
                        FetchPartition(0, fetch_offset=offset, partition_max_bytes=8 << 20)
                    ],
                )
            ],
        )
        response = await conn.request(fetch, FETCH_VERSION)
        partition = response.responses[0].partitions[0]  # type: ignore[attr-defined]
        raise_for_code(partition.error_code)
        stored += len(partition.records)
        for batch in parse_batches(partition.records):
            for record in batch:
                if record.offset < offset:
                    continue
                if record.value != b"record-%09d" % record.offset:
                    raise KayakError(f"{topic} offset {record.offset}: got {record.value!r}")
                offset = record.offset + 1
                progress.advance(task, 1)
    return CodecResult(codec, records, stored, produce_seconds, time.perf_counter() - started)


def _report(console: Console, results: list[CodecResult]) -> None:
    table = Table(title="protocol + broker round trip (acks=all, fsync before ack)")
    for column in ("codec", "records", "stored MiB", "produce rec/s", "fetch rec/s"):
        table.add_column(column, justify="right")
    for r in results:
        table.add_row(
            r.codec.name.lower(),
            f"{r.records:,}",
            f"{r.stored_bytes / 2**20:.1f}",
            f"{r.records / r.produce_seconds:,.0f}",
            f"{r.records / r.fetch_seconds:,.0f}",
        )
    console.print(table)


@click.command()
@click.option(
    "--records",
    type=click.IntRange(1),
    default=200_000,
    show_default=True,
    help="Records per codec.",
)
@click.option("--batch-size", type=click.IntRange(1, 100_000), default=1000, show_default=True)
@click.option(
    "--data-dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Broker data directory (default: a temporary one).",
)
def demo(records: int, batch_size: int, data_dir: Path | None) -> None:
    """Run the main job on the embedded defaults."""
    from kayak.cli.broker import run_event_loop

    console = Console()
    console.print(
        "[bold]kayak demo[/]: the CDC → Spark pipeline is not built yet, so this runs the "
        "protocol layer against the embedded broker end to end."
    )
    try:
        if data_dir is not None:
            run_event_loop(run_demo(data_dir, records, batch_size, console))
            return
        with tempfile.TemporaryDirectory(prefix="kayak-demo-") as tmp:
            run_event_loop(run_demo(Path(tmp), records, batch_size, console))
    except (KayakError, OSError) as exc:
        raise click.ClickException(str(exc)) from exc
