"""``kayak consume``: print a topic's records, like ``kcat -C``.

::

    kayak consume -b 127.0.0.1:9092 events --from-beginning --exit-at-end
    kayak consume events --group readers --format '%p:%o %k=%v' -X fetch.max.wait.ms=100

Without ``--group`` every partition is read (from the end, or from the beginning with
``--from-beginning``); with one, the group's share, resuming from its commits.

Format tokens (kcat's): ``%v``/``%s`` value, ``%k`` key, ``%t`` topic, ``%p`` partition,
``%o`` offset, ``%T`` timestamp (ms), ``%h`` headers (``k=v,k2=v2``), ``%S``/``%K`` value and
key length (-1 for null), ``%%`` a percent sign; ``\\n``, ``\\t``, ``\\r``, ``\\0`` and ``\\\\``
escapes. A newline is added unless the format ends with one. Null keys and values print as
nothing. Failures print one line to stderr and exit with status 1.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO

import click

from kayak.cli.broker import run_event_loop
from kayak.cli.options import bootstrap_option, client_properties, client_properties_options
from kayak.client.consumer import Consumer, ConsumerRecord, TopicPartition
from kayak.errors import KayakError

__all__ = ["Printer", "compile_format", "consume"]

_POLL_MS = 200
_ESCAPES = {"n": b"\n", "t": b"\t", "r": b"\r", "0": b"\0", "\\": b"\\"}

Piece = bytes | Callable[[ConsumerRecord], bytes]


def _length(data: bytes | None) -> bytes:
    return b"-1" if data is None else str(len(data)).encode()


def _headers(record: ConsumerRecord) -> bytes:
    return b",".join(k.encode() + b"=" + (v or b"") for k, v in record.headers)


_TOKENS: dict[str, Callable[[ConsumerRecord], bytes]] = {
    "v": lambda r: r.value or b"",
    "s": lambda r: r.value or b"",
    "k": lambda r: r.key or b"",
    "t": lambda r: r.topic.encode(),
    "p": lambda r: str(r.partition).encode(),
    "o": lambda r: str(r.offset).encode(),
    "T": lambda r: str(r.timestamp).encode(),
    "h": _headers,
    "S": lambda r: _length(r.value),
    "K": lambda r: _length(r.key),
}


def compile_format(text: str) -> list[Piece]:
    """Turn a kcat-like format into literal bytes and field getters (a newline appended
    unless the format ends with one). Raises ``click.BadParameter`` for unknown tokens."""
    pieces: list[Piece] = []
    literal = bytearray()
    index = 0
    while index < len(text):
        char = text[index]
        following = text[index + 1] if index + 1 < len(text) else ""
        if char == "%" and following == "%":
            literal += b"%"
        elif char == "%":
            getter = _TOKENS.get(following)
            if getter is None:
                known = " ".join(f"%{t}" for t in _TOKENS)
                raise click.BadParameter(f"unknown token %{following} (known: {known} %%)")
            if literal:
                pieces.append(bytes(literal))
                literal.clear()
            pieces.append(getter)
        elif char == "\\" and following in _ESCAPES:
            literal += _ESCAPES[following]
        else:
            literal += char.encode()
            index += 1
            continue
        index += 2
    if not literal.endswith(b"\n"):
        literal += b"\n"
    pieces.append(bytes(literal))
    return pieces


@dataclass
class Printer:
    """Writes records to ``out`` in a compiled format."""

    pieces: list[Piece]
    out: BinaryIO
    printed: int = 0

    def write(self, records: Sequence[ConsumerRecord]) -> None:
        pieces = self.pieces
        chunks: list[bytes] = []
        for record in records:
            chunks += [p if isinstance(p, bytes) else p(record) for p in pieces]
        self.out.write(b"".join(chunks))
        self.printed += len(records)


@dataclass
class _Options:
    bootstrap: str
    topic: str
    from_beginning: bool
    group: str | None
    max_messages: int | None
    exit_at_end: bool
    timeout: float
    properties: dict[str, str] = field(default_factory=dict)


@click.command()
@click.argument("topic")
@bootstrap_option
@click.option("--from-beginning", is_flag=True, help="Start at the earliest offset.")
@click.option("-g", "--group", help="Consume as a member of this consumer group.")
@click.option(
    "-c", "--max-messages", type=click.IntRange(min=1), help="Exit after this many records."
)
@click.option(
    "-e", "--exit-at-end", is_flag=True, help="Exit once every partition's end is reached."
)
@click.option(
    "-f",
    "--format",
    "fmt",
    default="%v",
    show_default=True,
    help="Output format: %v %k %t %p %o %T %h %S %K %%, \\n \\t escapes.",
)
@click.option(
    "--timeout",
    type=click.FloatRange(min=0.1),
    default=10.0,
    show_default=True,
    help="Seconds to wait for the cluster (bootstrap, the topic's metadata).",
)
@client_properties_options("consumer", "fetch.max.wait.ms=100")
def consume(
    topic: str,
    bootstrap: str,
    from_beginning: bool,
    group: str | None,
    max_messages: int | None,
    exit_at_end: bool,
    fmt: str,
    timeout: float,
    properties: tuple[str, ...],
    command_config: Path | None,
) -> None:
    """Print TOPIC's records to stdout."""
    pieces = compile_format(fmt)
    options = _Options(
        bootstrap,
        topic,
        from_beginning,
        group,
        max_messages,
        exit_at_end,
        timeout,
        client_properties(properties, command_config),
    )
    printer = Printer(pieces, sys.stdout.buffer)
    try:
        run_event_loop(_consume(options, printer))
    except KayakError as exc:
        raise click.ClickException(str(exc)) from None
    except (KeyboardInterrupt, BrokenPipeError):
        pass
    finally:
        with contextlib.suppress(OSError, ValueError):
            sys.stdout.buffer.flush()


async def _consume(options: _Options, printer: Printer) -> None:
    config: dict[str, object] = {
        "bootstrap.servers": options.bootstrap,
        "auto.offset.reset": "earliest" if options.from_beginning else "latest",
        "client.id": "kayak-consume",
        "request.timeout.ms": int(options.timeout * 1000),
    }
    if options.group is not None:
        config["group.id"] = options.group
    config.update(options.properties)
    consumer = Consumer(config)
    await consumer.start()
    try:
        await _read(consumer, options, printer)
    finally:
        await consumer.close()


async def _read(consumer: Consumer, options: _Options, printer: Printer) -> None:
    if options.group is not None:
        consumer.subscribe([options.topic])
    else:
        partitions = await consumer.partitions_for_topic(options.topic, timeout=options.timeout)
        assigned = [TopicPartition(options.topic, p) for p in sorted(partitions)]
        consumer.assign(assigned)
        if options.from_beginning:
            consumer.seek_to_beginning(*assigned)
        else:
            consumer.seek_to_end(*assigned)
    ends: dict[TopicPartition, int] = {}
    while options.max_messages is None or printer.printed < options.max_messages:
        wanted = None if options.max_messages is None else options.max_messages - printer.printed
        batches = await consumer.getmany(max_records=wanted, timeout_ms=_POLL_MS)
        for records in batches.values():
            printer.write(records)
        printer.out.flush()
        if options.exit_at_end and await _at_end(consumer, ends):
            return


async def _at_end(consumer: Consumer, ends: dict[TopicPartition, int]) -> bool:
    """Whether every assigned partition's position reached the end it had when first seen."""
    assigned = consumer.assignment()
    if not assigned:
        return False
    unknown = [tp for tp in assigned if tp not in ends]
    if unknown:
        ends.update(await consumer.end_offsets(unknown))
    for tp in assigned:
        if await consumer.position(tp) < ends[tp]:
            return False
    return True
