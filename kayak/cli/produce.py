"""``kayak produce``: send stdin's lines to a topic, one record per line, like ``kcat -P``.

::

    seq 1000000 | kayak produce -b 127.0.0.1:9092 numbers
    kayak produce events -K : --acks all --compression zstd < events.txt   # key:value lines
    kayak produce events -X linger.ms=20 -X batch.size=1000000 < big.txt

With ``-K SEP`` each line is split at its first SEP into key and value (a line without SEP
has no key). Lines are read in large chunks and sent with ``send_batch``, so piping a big file
is fast; a line typed at a terminal goes at once. Afterwards a summary (records, records/s)
goes to stderr; a progress bar is shown while a large file is read from a terminal session.
Failures (bad settings, a broker that does not answer within ``--timeout``, records the
broker refused) print one line to stderr and exit with status 1.
"""

from __future__ import annotations

import asyncio
import os
import stat
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO

import click
from rich.console import Console
from rich.progress import (
    BarColumn,
    DownloadColumn,
    Progress,
    TaskProgressColumn,
    TextColumn,
    TimeRemainingColumn,
    TransferSpeedColumn,
)

from kayak.cli.broker import run_event_loop
from kayak.cli.options import bootstrap_option, client_properties, client_properties_options
from kayak.client.producer import Producer, RecordMetadataList
from kayak.errors import KayakError

__all__ = ["produce"]

_CHUNK = 1 << 20  # bytes read from stdin at a time
_PROGRESS_FROM = 8 << 20  # show a progress bar for files at least this large
_MAX_PENDING = 64  # send_batch futures in flight before waiting for the oldest


@dataclass
class _Options:
    topic: str
    bootstrap: str
    key_separator: bytes | None
    partition: int | None
    timeout: float
    properties: dict[str, object] = field(default_factory=dict)


@dataclass
class _Tally:
    records: int = 0
    bytes: int = 0
    failed: int = 0
    first_error: BaseException | None = None


@click.command()
@click.argument("topic")
@bootstrap_option
@click.option(
    "-K",
    "--key-separator",
    metavar="SEP",
    help="Split each line at the first SEP into key and value.",
)
@click.option("--acks", type=click.Choice(["0", "1", "all", "-1"]), help="acks (default: all).")
@click.option(
    "--compression",
    type=click.Choice(["none", "gzip", "snappy", "lz4", "zstd"]),
    help="compression.type (default: none).",
)
@click.option("-p", "--partition", type=click.IntRange(min=0), help="Send every record here.")
@click.option(
    "--timeout",
    type=click.FloatRange(min=0.1),
    default=10.0,
    show_default=True,
    help="Seconds to wait for the cluster (bootstrap, metadata, buffer space).",
)
@client_properties_options("producer", "linger.ms=20")
@click.option(
    "--progress/--no-progress",
    default=None,
    help="Show a progress bar (default: for large files read in a terminal).",
)
def produce(
    topic: str,
    bootstrap: str,
    key_separator: str | None,
    acks: str | None,
    compression: str | None,
    partition: int | None,
    timeout: float,
    properties: tuple[str, ...],
    command_config: Path | None,
    progress: bool | None,
) -> None:
    """Send stdin's lines to TOPIC, one record per line."""
    settings: dict[str, object] = dict(client_properties(properties, command_config))
    if acks is not None:
        settings["acks"] = acks
    if compression is not None:
        settings["compression.type"] = compression
    if key_separator == "":
        raise click.BadParameter("must not be empty", param_hint="-K")
    options = _Options(
        topic,
        bootstrap,
        key_separator.encode() if key_separator is not None else None,
        partition,
        timeout,
        settings,
    )
    stdin = sys.stdin.buffer
    console = Console(stderr=True)
    tally = _Tally()
    start = time.perf_counter()
    try:
        with _progress_bar(stdin, console, progress) as bar:
            run_event_loop(_produce(options, stdin, tally, bar))
    except KayakError as exc:
        raise click.ClickException(_one_line(exc)) from None
    except KeyboardInterrupt:
        pass
    elapsed = max(time.perf_counter() - start, 1e-9)
    console.print(
        f"{tally.records - tally.failed:,} records ({tally.bytes:,} bytes) to {topic} in "
        f"{elapsed:.2f} s: {tally.records / elapsed:,.0f} records/s",
        highlight=False,
    )
    if tally.failed:
        raise click.ClickException(
            f"{tally.failed:,} records failed: {_one_line(tally.first_error)}"
        )


def _one_line(error: BaseException | None) -> str:
    return " ".join(str(error).split()) if error is not None else "unknown error"


class _Bar:
    """Progress by bytes read, or nothing."""

    def __init__(self, progress: Progress | None, total: int | None) -> None:
        self._progress = progress
        self._task = progress.add_task("producing", total=total) if progress else None

    def advance(self, count: int) -> None:
        if self._progress is not None and self._task is not None:
            self._progress.advance(self._task, count)

    def __enter__(self) -> _Bar:
        if self._progress is not None:
            self._progress.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._progress is not None:
            self._progress.stop()


def _progress_bar(stdin: BinaryIO, console: Console, wanted: bool | None) -> _Bar:
    size = _file_size(stdin)
    if wanted is None:
        wanted = console.is_terminal and size is not None and size >= _PROGRESS_FROM
    if not wanted:
        return _Bar(None, None)
    progress = Progress(
        TextColumn("[progress.description]{task.description}"),
        BarColumn(),
        TaskProgressColumn(),
        DownloadColumn(),
        TransferSpeedColumn(),
        TimeRemainingColumn(),
        console=console,
    )
    return _Bar(progress, size)


def _file_size(stream: BinaryIO) -> int | None:
    """The size of stdin when it is a regular file (not a pipe or a terminal)."""
    try:
        info = os.fstat(stream.fileno())
    except (OSError, ValueError):
        return None
    return info.st_size if stat.S_ISREG(info.st_mode) else None


async def _produce(options: _Options, stdin: BinaryIO, tally: _Tally, bar: _Bar) -> None:
    config: dict[str, object] = {
        "bootstrap.servers": options.bootstrap,
        "client.id": "kayak-produce",
        "max.block.ms": int(options.timeout * 1000),
        "request.timeout.ms": int(options.timeout * 1000),
    }
    config.update(options.properties)
    producer = Producer(config)
    await producer.start()
    try:
        await producer.partitions_for(options.topic)  # fail now if the topic is missing
        await _send_lines(producer, options, stdin, tally, bar)
        await producer.flush()
    finally:
        await producer.close()


async def _send_lines(
    producer: Producer, options: _Options, stdin: BinaryIO, tally: _Tally, bar: _Bar
) -> None:
    loop = asyncio.get_running_loop()
    read = getattr(stdin, "read1", stdin.read)
    pending: list[tuple[asyncio.Future[RecordMetadataList], int]] = []
    rest = b""
    while True:
        # In a thread: a terminal or a slow pipe must not stop the producer sending meanwhile.
        chunk: bytes = await loop.run_in_executor(None, read, _CHUNK)
        if not chunk:
            break
        bar.advance(len(chunk))
        data = rest + chunk
        lines = data.split(b"\n")
        rest = lines.pop()
        if b"\r\n" in data:  # CRLF line ends
            lines = [line.removesuffix(b"\r") for line in lines]
        if lines:
            pending.append((await _send(producer, options, lines, tally), len(lines)))
        while len(pending) > _MAX_PENDING:
            await _settle(*pending.pop(0), tally)
    if rest:
        pending.append((await _send(producer, options, [rest], tally), 1))
    for future, count in pending:
        await _settle(future, count, tally)


async def _send(
    producer: Producer, options: _Options, lines: list[bytes], tally: _Tally
) -> asyncio.Future[RecordMetadataList]:
    tally.records += len(lines)
    tally.bytes += sum(map(len, lines))
    if options.key_separator is None:
        return await producer.send_batch(options.topic, lines, partition=options.partition)
    keys: list[bytes | None] = []
    values: list[bytes | None] = []
    separator = options.key_separator
    for line in lines:
        key, found, value = line.partition(separator)
        if found:
            keys.append(key)
            values.append(value)
        else:
            keys.append(None)
            values.append(line)
    return await producer.send_batch(options.topic, values, keys=keys, partition=options.partition)


async def _settle(future: asyncio.Future[RecordMetadataList], count: int, tally: _Tally) -> None:
    try:
        await future
    except KayakError as exc:
        # send_batch fails the whole lot with the first error; count them all as failed.
        tally.failed += count
        if tally.first_error is None:
            tally.first_error = exc
