"""``kayak log``: check a broker's data directory, and dump its segments (kafka-dump-log).

Both commands only read: run them on a stopped broker's directory or on a copy (a running
broker appends while they read). Exit status: 0 clean, 1 problems found, 2 bad usage.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import NoReturn

import click
from rich.console import Console
from rich.progress import (
    BarColumn,
    DownloadColumn,
    Progress,
    TextColumn,
    TimeRemainingColumn,
    TransferSpeedColumn,
)
from rich.table import Table
from rich.text import Text

from kayak.broker.log.index import OFFSET_ENTRY, TIME_ENTRY
from kayak.broker.log.verify import (
    DEFAULT_CHUNK_SIZE,
    DataDirError,
    PartitionReport,
    Problem,
    ProblemKind,
    ScannedBatch,
    VerifyPlan,
    VerifyReport,
    read_index_entries,
    verify_segment,
)
from kayak.errors import KafkaError
from kayak.protocol.records import LegacyBatch, Record, RecordBatch
from kayak.protocol.records.compression import codec_from_id
from kayak.protocol.records.record import MAGIC_V2

_PIPE_WIDTH = 200  # rich's width when stdout is not a terminal (keeps rows on one line)
_PROGRESS_DELAY_S = 1.0  # a quick check shows no bar at all

_CHUNK_SIZE = click.option(
    "--chunk-size",
    type=click.IntRange(min=1),
    default=DEFAULT_CHUNK_SIZE,
    hidden=True,  # for tests: make chunk boundaries fall inside batches
    help="Bytes read from a segment file at a time.",
)


@click.group("log")
def log() -> None:
    """Check and inspect a broker's on-disk logs (read-only; best on a stopped broker)."""


# -- verify -------------------------------------------------------------------------------


@log.command("verify")
@click.argument("data_dir", type=click.Path(path_type=Path))
@click.option("--topic", metavar="NAME", help="Only this topic's partitions.")
@click.option(
    "--no-crc", is_flag=True, help="Skip CRC checks: a fast structural check of framing/offsets."
)
@_CHUNK_SIZE
def verify(data_dir: Path, topic: str | None, no_crc: bool, chunk_size: int) -> None:
    """Check every segment, index and checkpoint under DATA_DIR.

    Batches must parse and pass their CRCs, files must end at a batch boundary, offsets
    must run on without gaps within and across segments, index entries must point at the
    batches they name, and the log start offset must lie inside the log. Exit status 1 if
    anything is wrong.
    """
    try:
        plan = VerifyPlan.discover(data_dir, topic)
    except DataDirError as exc:
        _usage_error(str(exc))
    started = time.monotonic()
    progress = _DelayedProgress(plan.total_bytes)
    try:
        report = plan.verify(check_crc=not no_crc, chunk_size=chunk_size, on_bytes=progress.advance)
    finally:
        progress.close()
    out = _console()
    out.print(_partition_table(report))
    problems = report.all_problems
    if problems:
        out.print(Text("Problems:", style="bold red"))
        for problem in problems:
            _print_plain(out, f"  {problem}")
    _print_plain(out, _summary(report, time.monotonic() - started))
    if problems:
        sys.exit(1)


def _partition_table(report: VerifyReport) -> Table:
    table = Table(title=f"{report.data_dir}", title_justify="left")
    table.add_column("topic")
    for name in (
        "partition",
        "segments",
        "batches",
        "records",
        "first offset",
        "log end offset",
        "bytes",
    ):
        table.add_column(name, justify="right")
    table.add_column("status")
    for part in report.partitions:
        table.add_row(
            Text(part.topic),
            str(part.partition),
            str(len(part.segments)),
            str(part.batches),
            str(part.records),
            _optional(part.log_start_offset),
            _optional(part.log_end_offset),
            str(part.size),
            _status(part),
        )
    return table


def _status(part: PartitionReport) -> Text:
    count = len(part.all_problems)
    if count:
        return Text(_count(count, "problem"), style="bold red")
    if not part.exists:
        return Text("no data", style="dim")
    return Text("ok", style="green")


def _summary(report: VerifyReport, elapsed: float) -> str:
    crc = "" if report.check_crc else ", CRCs not checked"
    return (
        f"{_count(len(report.partitions), 'partition')}, {_count(report.segments, 'segment')}, "
        f"{_count(report.batches, 'batch')}, {_count(report.records, 'record')}, "
        f"{report.size} bytes in {elapsed:.1f}s{crc}: {_outcome(len(report.all_problems))}"
    )


class _DelayedProgress:
    """A progress bar over bytes read that appears only once the check has taken a second."""

    def __init__(self, total: int) -> None:
        self._console = Console(stderr=True)
        self._progress = Progress(
            TextColumn("verifying"),
            BarColumn(),
            DownloadColumn(),
            TransferSpeedColumn(),
            TimeRemainingColumn(),
            console=self._console,
            transient=True,
        )
        self._task = self._progress.add_task("verify", total=total)
        self._started = time.monotonic()
        self._shown = False

    def advance(self, count: int) -> None:
        self._progress.advance(self._task, count)
        if self._shown or not self._console.is_terminal:
            return
        if time.monotonic() - self._started >= _PROGRESS_DELAY_S:
            self._progress.start()
            self._shown = True

    def close(self) -> None:
        if self._shown:
            self._progress.stop()


# -- dump ---------------------------------------------------------------------------------


@log.command("dump")
@click.argument("segment", type=click.Path(path_type=Path))
@click.option(
    "--records", "show_records", is_flag=True, help="Also each record's offset, key and value."
)
@click.option(
    "--index", "show_index", is_flag=True, help="The .index and .timeindex entries instead."
)
@click.option(
    "--width",
    type=click.IntRange(min=8),
    default=60,
    show_default=True,
    help="Keys and values are shown as Python reprs cut to this many characters.",
)
@_CHUNK_SIZE
def dump(segment: Path, show_records: bool, show_index: bool, width: int, chunk_size: int) -> None:
    """Print the batches of SEGMENT (a .log file; an index file implies --index).

    One line per batch (position, offsets, count, size, magic, codec, CRC, producer,
    timestamps); the segment is checked as ``verify`` does and problems give exit status 1.
    """
    if not segment.is_file():
        _usage_error(f"{segment} {'is not a file' if segment.exists() else 'does not exist'}")
    log_path = segment
    if segment.suffix in (".index", ".timeindex"):
        show_index, log_path = True, segment.with_suffix(".log")
    out = _console()
    undecodable: list[Problem] = []
    if show_index:
        _dump_indexes(out, log_path)
        if not log_path.exists():
            return  # nothing to check the index against
    else:
        _print_plain(out, f"Dumping {log_path}")

    def on_batch(batch: ScannedBatch) -> None:
        _print_plain(out, _batch_line(batch))
        if show_records:
            undecodable.extend(_print_records(out, log_path, batch, width))

    report = verify_segment(
        log_path, chunk_size=chunk_size, on_batch=None if show_index else on_batch
    )
    problems = report.problems + undecodable
    if problems:
        out.print(Text("Problems:", style="bold red"))
        for problem in problems:
            _print_plain(out, f"  {problem}")
    offsets = (
        f"offsets {report.base_offset}..{report.next_offset - 1}"
        if report.next_offset > report.base_offset
        else "no offsets"
    )
    _print_plain(
        out,
        f"{_count(report.batches, 'batch')}, {_count(report.records, 'record')}, "
        f"{report.size} bytes, {offsets}: {_outcome(len(problems))}",
    )
    if problems:
        sys.exit(1)


def _batch_line(batch: ScannedBatch) -> str:
    h = batch.header
    crc = "not checked" if batch.crc_ok is None else "valid" if batch.crc_ok else "INVALID"
    try:
        codec = codec_from_id(h.codec_id).name.lower()
    except KafkaError:
        codec = f"unknown({h.codec_id})"
    return (
        f"position: {h.position} baseOffset: {h.base_offset} lastOffset: {h.last_offset} "
        f"count: {h.record_count} size: {h.size} magic: {h.magic} codec: {codec} "
        f"crc: {h.crc:#010x} ({crc}) producerId: {h.producer_id} producerEpoch: "
        f"{h.producer_epoch} baseSequence: {h.base_sequence} leaderEpoch: "
        f"{h.partition_leader_epoch} transactional: {str(h.is_transactional).lower()} "
        f"control: {str(h.is_control).lower()} baseTimestamp: {h.base_timestamp} "
        f"maxTimestamp: {h.max_timestamp}"
    )


def _print_records(out: Console, path: Path, batch: ScannedBatch, width: int) -> list[Problem]:
    """Print a batch's records; a batch that cannot be decoded is a problem, not a crash."""
    try:
        records = _decode(batch)
    except KafkaError as exc:
        where = batch.header
        problem = Problem(
            path,
            ProblemKind.CORRUPT,
            f"records cannot be decoded: {exc.message}",
            where.position,
            where.base_offset,
        )
        _print_plain(out, f"| {problem.message}")
        return [problem]
    for record in records:
        headers = f" headers: {_cut(repr(record.headers), width)}" if record.headers else ""
        _print_plain(
            out,
            f"| offset: {record.offset} timestamp: {record.timestamp} key: "
            f"{_shown(record.key, width)} value: {_shown(record.value, width)}{headers}",
        )
    return []


def _decode(batch: ScannedBatch) -> list[Record]:
    if batch.header.magic == MAGIC_V2:
        return RecordBatch(batch.data).record_list()
    return list(LegacyBatch(batch.data).records())


def _shown(data: bytes | None, width: int) -> str:
    if data is None:
        return "null"
    text = _cut(repr(data), width)
    return text if len(text) == len(repr(data)) else f"{text} ({len(data)} bytes)"


def _cut(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"


def _dump_indexes(out: Console, log_path: Path) -> None:
    base = int(log_path.stem) if log_path.stem.isdigit() else 0
    for suffix, entry in ((".index", OFFSET_ENTRY), (".timeindex", TIME_ENTRY)):
        path = log_path.with_suffix(suffix)
        try:
            entries, stray = read_index_entries(path, entry)
        except FileNotFoundError:
            _print_plain(out, f"No {path}")
            continue
        _print_plain(out, f"Dumping {path} ({len(entries)} entries)")
        for first, second in entries:
            if entry is OFFSET_ENTRY:
                _print_plain(out, f"offset: {base + first} position: {second}")
            else:
                _print_plain(out, f"timestamp: {first} offset: {base + second}")
        if stray:
            _print_plain(out, f"({stray} stray bytes after the last entry)")


# -- shared -------------------------------------------------------------------------------


def _console() -> Console:
    """Rich console on stdout; wide when piped so table rows are not wrapped."""
    if sys.stdout.isatty() or "COLUMNS" in os.environ:
        return Console()
    return Console(width=_PIPE_WIDTH)


def _print_plain(out: Console, line: str) -> None:
    # File names and record reprs are data: no markup, no highlighting, no wrapping mid-path.
    out.print(line, markup=False, highlight=False, soft_wrap=True)


def _count(number: int, noun: str) -> str:
    plural = noun + ("es" if noun.endswith("ch") else "s")
    return f"{number} {noun if number == 1 else plural}"


def _outcome(problems: int) -> str:
    return _count(problems, "problem") if problems else "no problems"


def _optional(value: int | None) -> str:
    return "-" if value is None else str(value)


def _usage_error(message: str) -> NoReturn:
    """One line on stderr and exit status 2: no usage text, no traceback."""
    Console(stderr=True).print(f"error: {message}", markup=False, highlight=False)
    sys.exit(2)
