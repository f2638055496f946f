"""Consumer group pages: the list (state, members, lag), one group (members, assignment,
committed offsets and lag per partition) and resetting an empty group's offsets."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from urllib.parse import urlencode

from aiohttp import web

from kayak.client import OffsetSpec, TopicPartition
from kayak.client.admin import Admin, GroupDescription, GroupListing
from kayak.console.cluster import PAGE_TIMEOUT_MS
from kayak.console.html import (
    Html,
    action_form,
    bar_chart,
    definition_list,
    join,
    link,
    render,
    table,
)
from kayak.console.layout import PREFIX
from kayak.console.messages import parse_timestamp
from kayak.console.topics import messages_url, topic_url
from kayak.console.view import ActionRefused, View, action_handler, page_handler
from kayak.errors import KayakError

MAX_LAG_LOOKUPS = 100  # groups whose total lag the list page looks up
RESETTABLE_STATES = ("Empty", "Dead")
RESET_TARGETS = ("earliest", "latest", "offset", "timestamp")


@dataclass(frozen=True, slots=True)
class OffsetRow:
    """One partition a group committed: where it is, where the log ends, who reads it."""

    partition: TopicPartition
    committed: int
    latest: int | None
    member: str

    @property
    def lag(self) -> int | None:
        return None if self.latest is None else max(self.latest - self.committed, 0)


def group_url(group_id: str) -> str:
    return f"{PREFIX}/group?{urlencode({'id': group_id})}"


def _badge(state: str) -> Html:
    kind = {"Stable": "ok", "Empty": "warn", "Dead": "bad"}.get(state, "warn")
    return render('<span class="badge {}">{}</span>', kind, state or "?")


def render_group_list(
    groups: Sequence[GroupListing],
    described: Mapping[str, GroupDescription],
    lag: Mapping[str, int | None],
) -> Html:
    rows = []
    for g in groups:
        description = described.get(g.group_id)
        state = description.state if description else g.state
        members = len(description.members) if description else "?"
        total = lag.get(g.group_id)
        rows.append((link(group_url(g.group_id), g.group_id), _badge(state), g.protocol_type,
                     members, "—" if total is None else f"{total:,}", g.coordinator))  # fmt: skip
    return render(
        "<h1>Consumer groups</h1>{}",
        table(["Group", "State", "Protocol type", "Members", "Lag", "Coordinator"], rows,
              table_id="groups", empty="no groups", numeric=(3, 4, 5)),
    )  # fmt: skip


def render_group(
    description: GroupDescription, offsets: Sequence[OffsetRow], csrf: str
) -> Html:
    facts = definition_list(
        {
            "State": _badge(description.state),
            "Protocol": " / ".join(filter(None, (description.protocol_type,
                                                 description.protocol))) or "—",
            "Coordinator": description.coordinator,
            "Members": len(description.members),
            "Total lag": f"{sum(r.lag or 0 for r in offsets):,}",
        }
    )
    members = table(
        ["Member", "Client id", "Host", "Instance id", "Assigned partitions"],
        [
            (m.member_id, m.client_id, m.host, m.group_instance_id or "",
             ", ".join(f"{tp.topic}-{tp.partition}" for tp in sorted(m.assignment)))
            for m in description.members
        ],
        table_id="members", empty="no members",
    )  # fmt: skip
    offset_rows = [
        (link(topic_url(r.partition.topic), r.partition.topic), r.partition.partition,
         r.committed, "—" if r.latest is None else r.latest,
         "—" if r.lag is None else r.lag, r.member or "",
         link(messages_url(r.partition.topic, r.partition.partition, **{
             "from": "offset", "offset": r.committed}), "messages"))
        for r in offsets
    ]  # fmt: skip
    chart = bar_chart(
        [(f"{r.partition.topic}-{r.partition.partition}", r.lag or 0) for r in offsets[:32]],
        chart_id="lag-chart",
    )
    return render(
        "<h1>Consumer group {}</h1>{}<h2>Members</h2>{}<h2>Offsets and lag</h2>{}{}"
        "<h2>Reset offsets</h2>{}",
        description.group_id, facts, members,
        table(["Topic", "Partition", "Committed", "Log end", "Lag", "Member", ""], offset_rows,
              table_id="offsets", empty="no committed offsets", numeric=(1, 2, 3, 4)),
        chart, _reset_form(description, offsets, csrf),
    )  # fmt: skip


def _reset_form(description: GroupDescription, offsets: Sequence[OffsetRow], csrf: str) -> Html:
    if description.state not in RESETTABLE_STATES:
        return render(
            '<p class="note" id="reset-unavailable">Offsets can be reset only while the group '
            "has no members (state Empty); it is {} with {} member(s).</p>",
            description.state, len(description.members),
        )  # fmt: skip
    topics = sorted({r.partition.topic for r in offsets})
    options = join(render('<option value="{}">{}</option>', t, t) for t in topics)
    targets = join(render('<option value="{}">{}</option>', t, t) for t in RESET_TARGETS)
    return action_form(
        f"{PREFIX}/group/reset?{urlencode({'id': description.group_id})}", csrf,
        render('<label>topic <select name="topic" id="reset-topic"><option value="">every '
               'committed topic</option>{}</select></label><label>to <select name="to" '
               'id="reset-to">{}</select></label><label>offset or time <input name="value" '
               'id="reset-value" placeholder="for offset / timestamp"></label>',
               options, targets),
        "Reset offsets", form_id="reset-offsets", danger=True,
    )  # fmt: skip


async def offset_rows(admin: Admin, description: GroupDescription) -> list[OffsetRow]:
    committed = await admin.list_group_offsets(description.group_id, timeout_ms=PAGE_TIMEOUT_MS)
    failed: dict[TopicPartition, KayakError] = {}
    latest = await admin.list_offsets(
        dict.fromkeys(committed, OffsetSpec.LATEST), timeout_ms=PAGE_TIMEOUT_MS, errors=failed
    )
    owners = description.assignment
    return [
        OffsetRow(tp, c.offset, latest[tp].offset if tp in latest else None, owners.get(tp, ""))
        for tp, c in committed.items()
    ]


async def _total_lag(admin: Admin, group_id: str) -> int | None:
    try:
        return sum((await admin.group_lag(group_id, timeout_ms=PAGE_TIMEOUT_MS)).values())
    except KayakError:
        return None


# -- handlers ---------------------------------------------------------------------------------


@page_handler("groups")
async def group_list(view: View) -> web.StreamResponse:
    admin = await view.state.clients.admin(view.login)
    groups = await admin.list_groups(timeout_ms=PAGE_TIMEOUT_MS)
    ids = [g.group_id for g in groups]
    described: dict[str, GroupDescription] = {}
    if ids:
        described = await admin.describe_groups(ids, timeout_ms=PAGE_TIMEOUT_MS, errors={})
    looked_up = ids[:MAX_LAG_LOOKUPS]
    lags = await asyncio.gather(*(_total_lag(admin, g) for g in looked_up))
    body = render_group_list(groups, described, dict(zip(looked_up, lags, strict=True)))
    return view.html("Consumer groups", body, section="groups")


@page_handler("groups")
async def group_detail(view: View) -> web.StreamResponse:
    group_id = view.request.query.get("id", "")
    admin = await view.state.clients.admin(view.login)
    description = (await admin.describe_groups([group_id], timeout_ms=PAGE_TIMEOUT_MS))[group_id]
    rows = await offset_rows(admin, description)
    body = render_group(description, rows, view.csrf_token)
    return view.html(f"Group {group_id}", body, section="groups")


@action_handler
async def reset_offsets(view: View, form: Mapping[str, str]) -> tuple[str, str]:
    """Commit new offsets for an empty group, as ``kafka-consumer-groups --reset-offsets``."""
    group_id = view.request.query.get("id", "")
    target = form.get("to", "")
    if target not in RESET_TARGETS:
        raise ActionRefused(f"reset to one of {', '.join(RESET_TARGETS)}")
    admin = await view.state.clients.admin(view.login)
    description = (await admin.describe_groups([group_id], timeout_ms=PAGE_TIMEOUT_MS))[group_id]
    if description.state not in RESETTABLE_STATES:
        raise ActionRefused(f"group {group_id} is {description.state}: stop its "
                            f"{len(description.members)} member(s) first")  # fmt: skip
    committed = await admin.list_group_offsets(group_id, timeout_ms=PAGE_TIMEOUT_MS)
    topic = form.get("topic", "")
    partitions = [tp for tp in committed if not topic or tp.topic == topic]
    if not partitions:
        raise ActionRefused(f"group {group_id} has no committed offsets to reset")
    offsets = await _targets(admin, partitions, target, form.get("value", "").strip())
    consumer = view.state.clients.consumer(view.login, **{"group.id": group_id})
    await consumer.start()
    try:
        await consumer.commit(offsets)
    finally:
        await consumer.close()
    shown = ", ".join(f"{tp.topic}-{tp.partition}→{o}" for tp, o in sorted(offsets.items()))
    return f"group {group_id}: offsets reset to {target} ({shown})", group_url(group_id)


async def _targets(
    admin: Admin, partitions: list[TopicPartition], target: str, value: str
) -> dict[TopicPartition, int]:
    """The offset to commit for each partition."""
    low = await admin.list_offsets(dict.fromkeys(partitions, OffsetSpec.EARLIEST),
                                   timeout_ms=PAGE_TIMEOUT_MS)  # fmt: skip
    high = await admin.list_offsets(dict.fromkeys(partitions, OffsetSpec.LATEST),
                                    timeout_ms=PAGE_TIMEOUT_MS)  # fmt: skip
    if target == "earliest":
        return {tp: low[tp].offset for tp in partitions}
    if target == "latest":
        return {tp: high[tp].offset for tp in partitions}
    if target == "offset":
        try:
            wanted = int(value)
        except ValueError:
            raise ActionRefused(f"the offset must be a whole number, not {value!r}") from None
        # Clamped into each partition's log, as Kafka's tool does.
        return {tp: min(max(wanted, low[tp].offset), high[tp].offset) for tp in partitions}
    try:
        ms = parse_timestamp(value)
    except ValueError as exc:
        raise ActionRefused(str(exc)) from None
    found = await admin.list_offsets(dict.fromkeys(partitions, OffsetSpec.timestamp(ms)),
                                     timeout_ms=PAGE_TIMEOUT_MS)  # fmt: skip
    # No record at or after the time: the end of the log, as Kafka's tool does.
    return {tp: found[tp].offset if found[tp].offset >= 0 else high[tp].offset
            for tp in partitions}  # fmt: skip
