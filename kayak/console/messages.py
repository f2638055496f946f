"""The message browser: one partition's records from an offset, a time or the end, with keys,
headers, timestamps and values decoded (Avro through the registry, JSON, text, hex); and the
rows a live tail polls for."""

from __future__ import annotations

import asyncio
import datetime
import time
from collections.abc import Sequence
from dataclasses import dataclass

from aiohttp import web

from kayak.client import ConsumerRecord, OffsetSpec, TopicPartition
from kayak.console.cluster import PAGE_TIMEOUT_MS, Clients, Login
from kayak.console.decode import FORMATS, SchemaById, Shown, header_text, show
from kayak.console.html import Html, join, link, render
from kayak.console.topics import topic_url
from kayak.console.view import View, html_response, page_handler
from kayak.errors import KayakError, UnknownTopicOrPartitionError

DEFAULT_LIMIT = 50
MAX_LIMIT = 500
TAIL_LIMIT = 100
# How long a page waits for records it knows are there (below the high watermark).
READ_WAIT_S = 3.0
STARTS = ("end", "offset", "timestamp", "beginning")


@dataclass(frozen=True, slots=True)
class ShownRecord:
    """A record ready for the page."""

    offset: int
    timestamp: str
    key: Shown
    headers: tuple[tuple[str, str], ...]
    value: Shown


@dataclass(frozen=True, slots=True)
class BrowseRequest:
    """What the browser form asks for."""

    partition: int
    start: str  # one of STARTS
    offset: int
    timestamp: str
    limit: int
    format: str

    @classmethod
    def of(cls, query: web.Request) -> BrowseRequest:
        q = query.query
        start = q.get("from", "end")
        fmt = q.get("format", "auto")
        return cls(
            partition=_int(q.get("partition"), 0, 0),
            start=start if start in STARTS else "end",
            offset=_int(q.get("offset"), 0, 0),
            timestamp=q.get("timestamp", "").strip(),
            limit=min(_int(q.get("limit"), DEFAULT_LIMIT, 1), MAX_LIMIT),
            format=fmt if fmt in FORMATS else "auto",
        )


def _int(text: str | None, default: int, minimum: int) -> int:
    try:
        return max(int(text), minimum) if text not in (None, "") else default
    except ValueError:
        return default


def parse_timestamp(text: str) -> int:
    """Milliseconds since the epoch from ms digits or ISO 8601 (UTC when no zone is given)."""
    if text.isdigit():
        return int(text)
    try:
        moment = datetime.datetime.fromisoformat(text)
    except ValueError:
        raise ValueError(f"{text!r} is neither milliseconds nor an ISO 8601 time") from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=datetime.UTC)
    return int(moment.timestamp() * 1000)


def format_timestamp(ms: int) -> str:
    if ms < 0:
        return "none"
    moment = datetime.datetime.fromtimestamp(ms / 1000, datetime.UTC)
    return moment.strftime("%Y-%m-%d %H:%M:%S.") + f"{ms % 1000:03d}Z"


async def read_records(
    clients: Clients, login: Login | None, tp: TopicPartition, start: int, count: int,
    high: int, *, wait_s: float = READ_WAIT_S,
) -> list[ConsumerRecord]:  # fmt: skip
    """Up to ``count`` records of ``tp`` from ``start``, stopping at ``high`` (records at or
    past it are not waited for)."""
    if start >= high or count <= 0:
        return []
    consumer = clients.consumer(login, **{"max.poll.records": count})
    await consumer.start()
    try:
        consumer.assign([tp])
        consumer.seek(tp, start)
        records: list[ConsumerRecord] = []
        deadline = time.monotonic() + wait_s
        while len(records) < count:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                break
            batch = await consumer.getmany(
                tp, max_records=count - len(records), timeout_ms=int(remaining * 1000)
            )
            records.extend(batch.get(tp, []))
            if await consumer.position(tp) >= high:
                break
        return records[:count]
    finally:
        await consumer.close()


async def shown(records: Sequence[ConsumerRecord], fmt: str, schemas: SchemaById | None) -> list[ShownRecord]:  # noqa: E501
    async def one(record: ConsumerRecord) -> ShownRecord:
        key, value = await asyncio.gather(
            show(record.key, fmt, schemas), show(record.value, fmt, schemas)
        )
        stamp = format_timestamp(record.timestamp)
        kind = record.timestamp_type.name.lower().replace("_", " ")
        return ShownRecord(
            record.offset, f"{stamp} ({kind})", key,
            tuple((name, header_text(v)) for name, v in record.headers), value,
        )  # fmt: skip

    return [await one(r) for r in records]


def _cell(value: Shown) -> Html:
    return render('<pre>{}</pre><span class="format">{}</span>', value.text, value.format)


def record_rows(records: Sequence[ShownRecord]) -> Html:
    """Table rows (also what the live tail appends)."""
    return join(
        render(
            '<tr data-offset="{}"><td class="num">{}</td><td>{}</td><td>{}</td><td>{}</td>'
            "<td>{}</td></tr>",
            r.offset, r.offset, r.timestamp, _cell(r.key),
            join(render("<div>{}: {}</div>", k, v) for k, v in r.headers), _cell(r.value),
        )
        for r in records
    )


def render_browser(
    topic: str, partitions: int, wanted: BrowseRequest, low: int, high: int,
    records: Sequence[ShownRecord], note: str,
) -> Html:  # fmt: skip
    def option(value: str, label: str, chosen: str) -> Html:
        return render('<option value="{}"{}>{}</option>', value,
                      Html(" selected") if value == chosen else Html(""), label)  # fmt: skip

    form = render(
        '<form class="inline" method="get" id="browse">'
        '<label>partition <select name="partition" id="browse-partition">{}</select></label>'
        '<label>from <select name="from" id="browse-from">{}</select></label>'
        '<label>offset <input name="offset" id="browse-offset" type="number" min="0" value="{}">'
        '</label><label>time <input name="timestamp" id="browse-timestamp" value="{}" '
        'placeholder="2026-11-26T10:00:00Z or ms"></label>'
        '<label>records <input name="limit" type="number" min="1" max="{}" value="{}"></label>'
        '<label>decode as <select name="format" id="browse-format">{}</select></label>'
        '<button type="submit">Show</button></form>',
        join(option(str(p), str(p), str(wanted.partition)) for p in range(partitions)),
        join(option(s, label, wanted.start) for s, label in
             (("end", "the end (newest)"), ("beginning", "the beginning"),
              ("offset", "an offset"), ("timestamp", "a time"))),
        wanted.offset, wanted.timestamp, MAX_LIMIT, wanted.limit,
        join(option(f, f, wanted.format) for f in FORMATS),
    )  # fmt: skip
    next_offset = records[-1].offset + 1 if records else high
    tail_url = (f"{topic_url(topic)}/tail?partition={wanted.partition}"
                f"&format={wanted.format}")  # fmt: skip
    tail = render(
        '<div class="toolbar"><button type="button" id="tail" data-url="{}" data-next="{}">'
        'Live tail</button> <span id="tail-status" class="note"></span></div>',
        tail_url, next_offset,
    )  # fmt: skip
    headers = ["Offset", "Timestamp", "Key", "Headers", "Value"]
    records_table = render(
        '<table id="records"><thead><tr>{}</tr></thead><tbody>{}</tbody></table>',
        join(render("<th>{}</th>", h) for h in headers),
        record_rows(records)
        or render('<tr><td colspan="5" class="empty">{}</td></tr>', "no records"),
    )
    return render(
        '<h1>Messages of {} <span class="note">partition {}</span></h1>'
        '<p class="note">{} · watermarks: low {}, high {} · {}</p>{}{}{}',
        topic, wanted.partition, link(topic_url(topic), "back to the topic"), low, high, note,
        form, tail, records_table,
    )  # fmt: skip


async def _watermarks(view: View, tp: TopicPartition) -> tuple[int, int]:
    admin = await view.state.clients.admin(view.login)
    low, high = await asyncio.gather(
        admin.list_offsets({tp: OffsetSpec.EARLIEST}, timeout_ms=PAGE_TIMEOUT_MS),
        admin.list_offsets({tp: OffsetSpec.LATEST}, timeout_ms=PAGE_TIMEOUT_MS),
    )
    return low[tp].offset, high[tp].offset


async def _start_offset(view: View, tp: TopicPartition, wanted: BrowseRequest,
                        low: int, high: int) -> tuple[int, str]:  # fmt: skip
    """Where to start reading, and a note saying what that is."""
    if wanted.start == "beginning":
        return low, f"the first {wanted.limit} records"
    if wanted.start == "offset":
        start = max(wanted.offset, low)
        return start, f"{wanted.limit} records from offset {start}"
    if wanted.start == "timestamp":
        try:
            ms = parse_timestamp(wanted.timestamp)
        except ValueError as exc:
            return high, str(exc)
        admin = await view.state.clients.admin(view.login)
        found = await admin.list_offsets({tp: OffsetSpec.timestamp(ms)},
                                         timeout_ms=PAGE_TIMEOUT_MS)  # fmt: skip
        if found[tp].offset < 0:
            return high, f"no record at or after {format_timestamp(ms)}"
        return found[tp].offset, f"records from {format_timestamp(ms)} (offset {found[tp].offset})"
    return max(low, high - wanted.limit), f"the last {wanted.limit} records"


@page_handler("topics")
async def browse(view: View) -> web.StreamResponse:
    topic = view.request.match_info["topic"]
    wanted = BrowseRequest.of(view.request)
    admin = await view.state.clients.admin(view.login)
    description = (await admin.describe_topics([topic], timeout_ms=PAGE_TIMEOUT_MS))[topic]
    if wanted.partition >= description.partition_count:
        raise UnknownTopicOrPartitionError(f"{topic} has no partition {wanted.partition}")
    tp = TopicPartition(topic, wanted.partition)
    low, high = await _watermarks(view, tp)
    start, note = await _start_offset(view, tp, wanted, low, high)
    records = await read_records(view.state.clients, view.login, tp, start, wanted.limit, high)
    rows = await shown(records, wanted.format, view.schema_lookup())
    body = render_browser(topic, description.partition_count, wanted, low, high, rows, note)
    return view.html(f"Messages of {topic}", body, section="topics")


async def tail(request: web.Request) -> web.StreamResponse:
    """New rows from ``offset`` (an HTML fragment), ``X-Next-Offset`` where to go on."""
    view = View.of(request)
    topic = request.match_info["topic"]
    wanted = BrowseRequest.of(request)
    tp = TopicPartition(topic, wanted.partition)
    try:
        _, high = await _watermarks(view, tp)
        records = await read_records(view.state.clients, view.login, tp, wanted.offset,
                                     TAIL_LIMIT, high, wait_s=1.0)  # fmt: skip
    except KayakError as exc:  # the script tries again at its next poll
        return web.Response(status=502, text=str(exc))
    rows = await shown(records, wanted.format, view.schema_lookup())
    response = html_response(record_rows(rows))
    response.headers["X-Next-Offset"] = str(records[-1].offset + 1 if records else wanted.offset)
    return response


