"""Topic pages: the list (partitions, records, sizes, watermarks), one topic (partitions,
configs) and the topic actions (create, delete, add partitions, edit a config)."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from urllib.parse import quote, urlencode

from aiohttp import web

from kayak.client import Admin, NewTopic, OffsetSpec, TopicPartition
from kayak.client.admin import ConfigEntry, TopicDescription, topic_name_problem
from kayak.console.cluster import PAGE_TIMEOUT_MS
from kayak.console.html import (
    Html,
    action_form,
    bar_chart,
    definition_list,
    human_bytes,
    join,
    link,
    render,
    table,
)
from kayak.console.layout import PREFIX
from kayak.console.view import ActionRefused, PartitionSize, View, action_handler, page_handler
from kayak.errors import KayakError

MAX_LISTED_TOPICS = 500


@dataclass(frozen=True, slots=True)
class PartitionRow:
    """One partition as the pages show it."""

    partition: int
    leader: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    low: int | None
    high: int | None
    size: int | None

    @property
    def records(self) -> int | None:
        return None if self.low is None or self.high is None else self.high - self.low


@dataclass(frozen=True, slots=True)
class TopicRow:
    name: str
    internal: bool
    partitions: tuple[PartitionRow, ...]

    @property
    def records(self) -> int | None:
        counts = [p.records for p in self.partitions]
        return None if any(c is None for c in counts) else sum(c or 0 for c in counts)

    @property
    def size(self) -> int | None:
        sizes = [p.size for p in self.partitions]
        return None if any(s is None for s in sizes) else sum(s or 0 for s in sizes)


def topic_url(name: str) -> str:
    return f"{PREFIX}/topics/{quote(name, safe='')}"


def messages_url(name: str, partition: int, **params: object) -> str:
    query = urlencode({"partition": partition, **params})
    return f"{topic_url(name)}/messages?{query}"


async def topic_rows(
    admin: Admin, topics: Sequence[TopicDescription], size: PartitionSize | None
) -> list[TopicRow]:
    """Watermarks (two ListOffsets rounds for all partitions at once) and sizes."""
    partitions = [tp for topic in topics for tp in topic.topic_partitions()]
    failed: dict[TopicPartition, KayakError] = {}
    low, high = await asyncio.gather(
        admin.list_offsets(dict.fromkeys(partitions, OffsetSpec.EARLIEST),
                           timeout_ms=PAGE_TIMEOUT_MS, errors=failed),
        admin.list_offsets(dict.fromkeys(partitions, OffsetSpec.LATEST),
                           timeout_ms=PAGE_TIMEOUT_MS, errors=failed),
    )  # fmt: skip
    rows = []
    for topic in topics:
        rows.append(
            TopicRow(
                topic.name,
                topic.internal,
                tuple(
                    PartitionRow(
                        p.partition, p.leader, p.replicas, p.isr,
                        _offset(low.get(TopicPartition(topic.name, p.partition))),
                        _offset(high.get(TopicPartition(topic.name, p.partition))),
                        size(topic.name, p.partition) if size is not None else None,
                    )
                    for p in topic.partitions
                ),
            )
        )
    return rows


def _offset(found: tuple[int, int] | None) -> int | None:
    return None if found is None else found[0]


def _number(value: int | None) -> str:
    return "—" if value is None else f"{value:,}"


def _watermarks(topic: TopicRow) -> Html:
    shown = [f"{p.partition}: {_number(p.low)}-{_number(p.high)}" for p in topic.partitions[:8]]
    more = len(topic.partitions) - len(shown)
    return render("{}{}", ", ".join(shown), f" … (+{more})" if more > 0 else "")


def render_topic_list(topics: Sequence[TopicRow], *, query: str, total: int, csrf: str) -> Html:
    rows = [
        (link(topic_url(t.name), t.name), len(t.partitions), _number(t.records),
         human_bytes(t.size), _watermarks(t), "internal" if t.internal else "")
        for t in topics
    ]  # fmt: skip
    shown = (
        render('<p class="note">showing {} of {} topics</p>', len(topics), total)
        if len(topics) < total
        else Html("")
    )
    search = render(
        '<form class="inline" method="get" action="{}"><input name="q" value="{}" '
        'placeholder="filter by name" id="topic-filter"><label><input type="checkbox" '
        'name="internal" value="1">internal topics</label><button>Filter</button></form>',
        f"{PREFIX}/topics", query,
    )  # fmt: skip
    create = action_form(
        f"{PREFIX}/topics", csrf,
        Html('<label>name <input name="name" id="new-topic-name" required></label>'
             '<label>partitions <input name="partitions" id="new-topic-partitions" '
             'type="number" min="1" placeholder="default"></label>'
             '<label>configs <input name="configs" id="new-topic-configs" '
             'placeholder="retention.ms=86400000, cleanup.policy=delete" size="40"></label>'),
        "Create topic", form_id="create-topic",
    )  # fmt: skip
    return render(
        "<h1>Topics</h1>{}{}{}<h2>Create a topic</h2>{}",
        search, shown,
        table(["Topic", "Partitions", "Records", "Size", "Watermarks (partition: low-high)", ""],
              rows, table_id="topics", empty="no topics", numeric=(1, 2, 3)),
        create,
    )  # fmt: skip


def render_topic(
    topic: TopicRow, description: TopicDescription, configs: Mapping[str, ConfigEntry], csrf: str
) -> Html:
    facts = definition_list(
        {
            "Topic id": str(description.topic_id),
            "Partitions": len(topic.partitions),
            "Replication factor": description.replication_factor,
            "Records": _number(topic.records),
            "Size on disk": human_bytes(topic.size),
            "Internal": "yes" if topic.internal else "no",
        }
    )
    partitions = table(
        ["Partition", "Leader", "Replicas", "In sync", "Low watermark", "High watermark",
         "Records", "Size", ""],
        [
            (p.partition, p.leader, ",".join(map(str, p.replicas)), ",".join(map(str, p.isr)),
             _number(p.low), _number(p.high), _number(p.records), human_bytes(p.size),
             link(messages_url(topic.name, p.partition), "messages"))
            for p in topic.partitions
        ],
        table_id="partitions", numeric=(0, 4, 5, 6, 7),
    )  # fmt: skip
    chart = bar_chart(
        [(f"partition {p.partition}", p.records or 0) for p in topic.partitions[:32]],
        unit=" records", chart_id="records-chart",
    )  # fmt: skip
    config_rows = [
        (c.name, c.value if c.value is not None else "(sensitive)", c.source.name.lower(),
         "" if c.is_default else "override")
        for c in sorted(configs.values(), key=lambda c: c.name)
    ]  # fmt: skip
    names = join(render('<option value="{}">', name) for name in sorted(configs))
    base = topic_url(topic.name)
    grow = action_form(
        f"{base}/partitions", csrf,
        render('<label>total partitions <input name="total" id="partition-total" type="number" '
               'min="{}" value="{}" required></label>',
               len(topic.partitions) + 1, len(topic.partitions) + 1),
        "Add partitions", form_id="add-partitions",
    )  # fmt: skip
    edit = action_form(
        f"{base}/configs", csrf,
        render('<label>config <input name="name" id="config-name" list="config-names" required>'
               '</label><datalist id="config-names">{}</datalist><label>value <input '
               'name="value" id="config-value" placeholder="empty: back to the default">'
               "</label>", names),
        "Set config", form_id="edit-config",
    )  # fmt: skip
    delete = action_form(
        f"{base}/delete", csrf,
        Html('<label>type the topic name to delete it <input name="confirm" '
             'id="delete-confirm" required></label>'),
        "Delete topic", form_id="delete-topic", danger=True,
    )  # fmt: skip
    return render(
        "<h1>Topic {}</h1>{}<h2>Partitions</h2>{}{}<h2>Actions</h2>{}{}<h2>Configs</h2>{}"
        "<h2>Delete</h2>{}",
        topic.name, facts, partitions, chart, grow, edit,
        table(["Name", "Value", "Source", ""], config_rows, table_id="configs"), delete,
    )  # fmt: skip


# -- handlers ---------------------------------------------------------------------------------


@page_handler("topics")
async def topic_list(view: View) -> web.StreamResponse:
    query = view.request.query.get("q", "").strip()
    internal = view.request.query.get("internal") == "1"
    admin = await view.state.clients.admin(view.login)
    listed = await admin.list_topics(internal=internal, timeout_ms=PAGE_TIMEOUT_MS)
    matching = [t for name, t in listed.items() if query.lower() in name.lower()]
    rows = await topic_rows(admin, matching[:MAX_LISTED_TOPICS], view.state.partition_size)
    body = render_topic_list(rows, query=query, total=len(matching), csrf=view.csrf_token)
    return view.html("Topics", body, section="topics")


@page_handler("topics")
async def topic_detail(view: View) -> web.StreamResponse:
    name = view.request.match_info["topic"]
    admin = await view.state.clients.admin(view.login)
    description = (await admin.describe_topics([name], timeout_ms=PAGE_TIMEOUT_MS))[name]
    (row,), configs = await asyncio.gather(
        topic_rows(admin, [description], view.state.partition_size),
        admin.describe_configs(name, timeout_ms=PAGE_TIMEOUT_MS),
    )
    body = render_topic(row, description, configs, view.csrf_token)
    return view.html(f"Topic {name}", body, section="topics")


def parse_configs(text: str) -> dict[str, str]:
    """``a=1, b=2`` (commas or new lines) -> {"a": "1", "b": "2"}."""
    configs: dict[str, str] = {}
    for item in text.replace("\n", ",").split(","):
        if not item.strip():
            continue
        name, equals, value = item.partition("=")
        if not equals or not name.strip():
            raise ActionRefused(f"{item.strip()!r} is not name=value")
        configs[name.strip()] = value.strip()
    return configs


def _positive(text: str, what: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise ActionRefused(f"{what} must be a whole number, not {text!r}") from None
    if value < 1:
        raise ActionRefused(f"{what} must be at least 1")
    return value


@action_handler
async def create_topic(view: View, form: Mapping[str, str]) -> tuple[str, str]:
    name = form.get("name", "").strip()
    problem = topic_name_problem(name)
    if problem is not None:
        raise ActionRefused(problem)
    partitions = form.get("partitions", "").strip()
    count = _positive(partitions, "the partition count") if partitions else -1
    admin = await view.state.clients.admin(view.login)
    created = await admin.create_topics(
        [NewTopic(name, count, configs=parse_configs(form.get("configs", "")))],
        timeout_ms=PAGE_TIMEOUT_MS,
    )
    made = created[name].num_partitions
    shown = f" with {made} partition{'s' if made != 1 else ''}" if made > 0 else ""
    return f"created topic {name}{shown}", topic_url(name)


@action_handler
async def delete_topic(view: View, form: Mapping[str, str]) -> tuple[str, str]:
    name = view.request.match_info["topic"]
    if form.get("confirm", "").strip() != name:
        raise ActionRefused(f"type the topic's name ({name}) to delete it")
    admin = await view.state.clients.admin(view.login)
    await admin.delete_topics([name], timeout_ms=PAGE_TIMEOUT_MS)
    return f"deleted topic {name}", f"{PREFIX}/topics"


@action_handler
async def add_partitions(view: View, form: Mapping[str, str]) -> tuple[str, str]:
    name = view.request.match_info["topic"]
    total = _positive(form.get("total", "").strip(), "the total partition count")
    admin = await view.state.clients.admin(view.login)
    await admin.create_partitions({name: total}, timeout_ms=PAGE_TIMEOUT_MS)
    return f"topic {name} now has {total} partitions", topic_url(name)


@action_handler
async def set_config(view: View, form: Mapping[str, str]) -> tuple[str, str]:
    name = view.request.match_info["topic"]
    config = form.get("name", "").strip()
    if not config:
        raise ActionRefused("name the config to set")
    value = form.get("value", "").strip()
    admin = await view.state.clients.admin(view.login)
    await admin.alter_configs(name, {config: value or None}, timeout_ms=PAGE_TIMEOUT_MS)
    done = f"set {config}={value}" if value else f"restored the default of {config}"
    return f"topic {name}: {done}", topic_url(name)
