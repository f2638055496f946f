"""``kayak produce``: send stdin's lines to a topic, one record per line, like ``kcat -P``.

::

    seq 1000000 | kayak produce -b 127.0.0.1:9092 numbers
    kayak produce events -K : --acks all --compression zstd < events.txt   # key:value lines
    kayak produce events -H source=import -H run=7 -p 2 < events.txt       # headers, partition
    kayak produce events -X linger.ms=20 -X batch.size=1000000 < big.txt

With ``-K SEP`` each line is split at its first SEP into key and value (a line without SEP
has no key); ``-Z`` sends an empty key or value as null (a tombstone for an empty value).
A topic that does not exist is created by the broker with its defaults (the producer's
``allow.auto.create.topics``; ``-X allow.auto.create.topics=false`` refuses instead). Lines
are read in large chunks and sent with ``send_batch``, so piping a big file is fast; a line
typed at a terminal goes at once, Ctrl-D ends the input and Ctrl-C stops (status 130).
Afterwards a summary (records, records/s) goes to stderr (not with ``-q``); a progress bar is
shown while a large file is read from a terminal session. Failures (bad settings, a broker
that refuses connections or does not answer within ``--timeout``, records the broker
refused) print one line to stderr and exit with status 1.
"""

from __future__ import annotations

import asyncio
import functools
import os
import stat
import sys
import threading
import time
from collections.abc import Callable
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

from kayak.cli.options import (
    bootstrap_option,
    bootstrap_servers,
    check_reachable,
    client_properties,
    client_properties_options,
    run_event_loop,
)
from kayak.client.producer import Producer, RecordMetadataList
from kayak.errors import KayakError

__all__ = ["produce"]

_CHUNK = 1 << 20  # bytes read from stdin at a time
_PROGRESS_FROM = 8 << 20  # show a progress bar for files at least this large
_MAX_PENDING = 64  # send_batch futures in flight before waiting for the oldest
_READ_AHEAD = 4  # chunks the stdin thread may read before the producer takes them
INTERRUPTED = 130  # a shell's status for a command stopped by SIGINT

Headers = list[tuple[str, bytes | None]]


@dataclass
class _Options:
    topic: str
    bootstrap: str
    key_separator: bytes | None
    partition: int | None
    timeout: float
    properties: dict[str, object] = field(default_factory=dict)
    headers: Headers | None = None
    null_for_empty: bool = False


@dataclass
class _Tally:
    records: int = 0
    bytes: int = 0
    failed: int = 0
    first_error: BaseException | None = None


def _parse_headers(
    _ctx: click.Context, _param: click.Parameter, values: tuple[str, ...]
) -> Headers | None:
    headers: Headers = []
    for item in values:
        name, equals, value = item.partition("=")
        if not name:
            raise click.BadParameter(f"{item!r} is not NAME=VALUE", param_hint="-H")
        headers.append((name, value.encode() if equals else None))
    return headers or None


@click.command()
@click.argument("topic", required=False)
@click.option("-t", "--topic", "topic_option", metavar="TOPIC", help="The topic (kcat's -t).")
@bootstrap_option
@click.option(
    "-K",
    "--key-separator",
    "--key-delimiter",
    "key_separator",
    metavar="SEP",
    help="Split each line at the first SEP into key and value.",
)
@click.option(
    "-H",
    "--header",
    "headers",
    multiple=True,
    metavar="NAME=VALUE",
    callback=_parse_headers,
    help="Add this header to every record (repeatable; NAME alone: a null value).",
)
@click.option(
    "-Z", "--null", "null_for_empty", is_flag=True, help="Send empty keys and values as null."
)
@click.option(
    "-L", "--list", "list_metadata", is_flag=True, help="List brokers, topics and partitions."
)
@click.option("-q", "--quiet", is_flag=True, help="No summary line on stderr.")
@click.option("--acks", type=click.Choice(["0", "1", "all", "-1"]), help="acks (default: all).")
@click.option(
    "--compression",
    type=click.Choice(["none", "gzip", "snappy", "lz4", "zstd"]),
    help="compression.type (default: none).",
)
@click.option(
    "-p", "--partition", type=click.IntRange(min=0), help="Send every record to this partition."
)
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
    topic: str | None,
    topic_option: str | None,
    key_separator: str | None,
    headers: Headers | None,
    null_for_empty: bool,
    list_metadata: bool,
    quiet: bool,
    acks: str | None,
    compression: str | None,
    partition: int | None,
    timeout: float,
    properties: tuple[str, ...],
    command_config: Path | None,
    progress: bool | None,
) -> None:
    """Send stdin's lines to TOPIC, one record per line, like kcat -P."""
    topic = topic_option or topic
    if list_metadata:
        from kayak.cli.metadata import print_metadata

        print_metadata(
            bootstrap_servers(), client_properties(properties, command_config), timeout, topic
        )
        return
    if topic is None:
        raise click.UsageError("give a TOPIC (or -t TOPIC), or -L to list the cluster")
    settings: dict[str, object] = dict(client_properties(properties, command_config))
    if acks is not None:
        settings["acks"] = acks
    if compression is not None:
        settings["compression.type"] = compression
    if key_separator == "":
        raise click.BadParameter("must not be empty", param_hint="-K")
    options = _Options(
        topic,
        bootstrap_servers(),
        key_separator.encode() if key_separator is not None else None,
        partition,
        timeout,
        settings,
        headers,
        null_for_empty,
    )
    stdin = sys.stdin.buffer
    console = Console(stderr=True)
    tally = _Tally()
    start = time.perf_counter()
    interrupted = False
    try:
        with _progress_bar(stdin, console, progress) as bar:
            run_event_loop(_produce(options, stdin, tally, bar))
    except KayakError as exc:
        raise click.ClickException(_one_line(exc)) from None
    except KeyboardInterrupt:
        interrupted = True
    elapsed = max(time.perf_counter() - start, 1e-9)
    if not quiet:
        console.print(
            f"{tally.records - tally.failed:,} records ({tally.bytes:,} bytes) to {topic} in "
            f"{elapsed:.2f} s: {tally.records / elapsed:,.0f} records/s"
            + (" (interrupted)" if interrupted else ""),
            highlight=False,
        )
    if interrupted:
        sys.exit(INTERRUPTED)
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
    producer = Producer(config)  # a bad setting is reported before the broker is tried
    check_reachable(options.bootstrap)
    await producer.start()
    try:
        # Fail now if the topic is missing (and not created) or the partition is not there.
        count = len(await producer.partitions_for(options.topic))
        if options.partition is not None and options.partition >= count:
            raise click.ClickException(
                f"topic {options.topic} has no partition {options.partition} "
                f"(it has {count}: 0-{count - 1})"
            )
        await _send_lines(producer, options, _StdinReader(stdin), tally, bar)
        await producer.flush()
    finally:
        await producer.close()


class _StdinReader:
    """Reads stdin in a daemon thread, a few chunks ahead of the producer.

    Not the event loop's default executor: a thread blocked reading a terminal would keep
    the loop from closing (Ctrl-C ignored), and its late result would land on a closed loop
    (a traceback after Ctrl-D). A daemon thread is simply left behind when the command ends.
    """

    def __init__(self, stream: BinaryIO) -> None:
        self._read = _raw_reader(stream)
        self._loop = asyncio.get_running_loop()
        self._chunks: asyncio.Queue[bytes | BaseException] = asyncio.Queue()
        self._room = threading.Semaphore(_READ_AHEAD)
        threading.Thread(target=self._run, name="kayak-stdin", daemon=True).start()

    def _run(self) -> None:
        while True:
            self._room.acquire()
            try:
                chunk: bytes | BaseException = self._read(_CHUNK)
            except (OSError, ValueError) as exc:
                chunk = exc
            try:
                self._loop.call_soon_threadsafe(self._chunks.put_nowait, chunk)
            except RuntimeError:  # the loop is closed: the command is over
                return
            if not chunk or isinstance(chunk, BaseException):
                return

    async def read(self) -> bytes:
        """The next chunk (b"" at the end of input)."""
        chunk = await self._chunks.get()
        self._room.release()
        if isinstance(chunk, BaseException):
            raise KayakError(f"cannot read stdin: {chunk}")
        return chunk


def _raw_reader(stream: BinaryIO) -> Callable[[int], bytes]:
    """Read straight from the file descriptor when there is one: a thread blocked inside a
    buffered reader holds its lock, and the interpreter aborts trying to take it at exit
    (Ctrl-C while a terminal is read)."""
    try:
        descriptor = stream.fileno()
    except (OSError, ValueError):  # not a real file (tests hand in BytesIO)
        read: Callable[[int], bytes] = getattr(stream, "read1", stream.read)
        return read
    return functools.partial(os.read, descriptor)


async def _send_lines(
    producer: Producer, options: _Options, stdin: _StdinReader, tally: _Tally, bar: _Bar
) -> None:
    pending: list[tuple[asyncio.Future[RecordMetadataList], int]] = []
    rest = b""
    while True:
        chunk = await stdin.read()
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
    headers = [options.headers] * len(lines) if options.headers else None
    if options.key_separator is None and not options.null_for_empty:
        return await producer.send_batch(
            options.topic, lines, headers=headers, partition=options.partition
        )
    keys: list[bytes | None] | None = None
    values: list[bytes | None] = list(lines)
    separator = options.key_separator
    if separator is not None:
        keys = []
        values = []
        for line in lines:
            key, found, value = line.partition(separator)
            keys.append(key if found else None)
            values.append(value if found else line)
    if options.null_for_empty:
        values = [v or None for v in values]
        keys = None if keys is None else [k or None for k in keys]
    return await producer.send_batch(
        options.topic, values, keys=keys, headers=headers, partition=options.partition
    )


async def _settle(future: asyncio.Future[RecordMetadataList], count: int, tally: _Tally) -> None:
    try:
        await future
    except KayakError as exc:
        # send_batch fails the whole lot with the first error; count them all as failed.
        tally.failed += count
        if tally.first_error is None:
            tally.first_error = exc
