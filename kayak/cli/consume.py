"""``kayak consume``: print a topic's records, like ``kcat -C`` (with kcat's flags).

::

    kayak consume events -o beginning -e                 # everything there is, then exit
    kayak consume events -p 0 -o -10 -e -f '%o %k=%s\\n'  # the last 10 records of partition 0
    kayak consume events -o s@1764100000000 -c 5 -J      # 5 records from a time, as JSON
    kayak consume events -g readers -K :                 # as a group member, key:value
    kayak consume -L                                     # brokers, topics, partitions
    kayak consume orders -s value=avro -r http://localhost:8081 -J   # Avro values as JSON

Without ``-g`` every partition (or those given with ``-p``) is read from ``-o`` (default:
the end, or ``-X auto.offset.reset=earliest``/``--from-beginning`` for the beginning); with
``-g`` the group's share, resuming from its commits (``-o beginning|end`` then says where to
start without one). Output: see :mod:`kayak.cli.record_output` (plain lines or JSON, so it
pipes). A missing topic is an error (``-X allow.auto.create.topics=true`` creates it).

``-s value=avro`` (``-s key=avro``, or ``-s avro`` for both: kcat's flags) decodes
Confluent-framed Avro through the schema registry ``-r URL`` (or ``-X
schema.registry.url=URL``; ``-X schema.registry.basic.auth.user.info=...`` and the other
``schema.registry.*`` properties configure its client): printed as JSON, or as the decoded
object in ``-J``'s ``key``/``payload``. A record that cannot be decoded is printed as it is,
with one line on stderr; a registry that cannot be reached fails at once.
Failures print one line to stderr and exit with status 1; Ctrl-C stops with status 130.
"""

from __future__ import annotations

import contextlib
import sys
from dataclasses import dataclass, field
from pathlib import Path

import click

from kayak.cli.offset_spec import OffsetSpec, parse_offset_spec
from kayak.cli.options import (
    bootstrap_option,
    bootstrap_servers,
    check_reachable,
    client_properties,
    client_properties_options,
    run_event_loop,
)
from kayak.cli.record_output import (
    AvroFields,
    JsonPrinter,
    Printer,
    RecordWriter,
    compile_format,
    default_format,
)
from kayak.client.consumer import Consumer, TopicPartition
from kayak.errors import KayakError

__all__ = ["Printer", "compile_format", "consume"]

_POLL_MS = 200
_REGISTRY_PREFIX = "schema.registry."
_REGISTRY_CHECK_S = 1.5  # an unreachable registry is reported within 2 s
_SERDES = ("avro", "bytes")
INTERRUPTED = 130  # a shell's status for a command stopped by SIGINT


@dataclass
class _Options:
    bootstrap: str
    topic: str
    partitions: tuple[int, ...]
    start: OffsetSpec | None
    stop_timestamp: int | None
    group: str | None
    max_messages: int | None
    exit_at_end: bool
    timeout: float
    fmt: str | None
    null_as_text: bool
    as_json: bool
    properties: dict[str, str] = field(default_factory=dict)
    avro_key: bool = False
    avro_value: bool = False
    registry_url: str | None = None
    registry_config: dict[str, str] = field(default_factory=dict)


@click.command()
@click.argument("topic", required=False)
@click.option("-t", "--topic", "topic_option", metavar="TOPIC", help="The topic (kcat's -t).")
@bootstrap_option
@click.option(
    "-p",
    "--partition",
    "partitions",
    type=click.IntRange(min=0),
    multiple=True,
    help="Read only this partition (repeatable); not with -g.",
)
@click.option(
    "-o",
    "--offset",
    "offsets",
    multiple=True,
    metavar="SPEC",
    help="Where to start: beginning, end, stored (-g), N, -N (N before the end), s@TS "
    "(first record at/after TS ms); e@TS stops before the first record at/after TS. "
    "May be given twice (a start and an e@TS).",
)
@click.option("--from-beginning", is_flag=True, help="Same as -o beginning.")
@click.option("-g", "--group", help="Consume as a member of this consumer group.")
@click.option(
    "-c",
    "--count",
    "--max-messages",
    "max_messages",
    type=click.IntRange(min=1),
    help="Exit after this many records.",
)
@click.option(
    "-e", "--exit-at-end", is_flag=True, help="Exit once every partition's end is reached."
)
@click.option(
    "-f",
    "--format",
    "fmt",
    help="Output format: %s (or %v) value, %k key, %t topic, %p partition, %o offset, "
    "%T timestamp, %h headers, %S/%K value/key length, %%; \\n \\t escapes.",
)
@click.option(
    "-K",
    "--key-delimiter",
    "key_separator",
    metavar="SEP",
    help="Print the key and SEP before each value (when no -f is given).",
)
@click.option(
    "-H",
    "--headers",
    "show_headers",
    is_flag=True,
    help="Print each record's headers (k=v,k2=v2) and a tab first (when no -f is given).",
)
@click.option(
    "-Z", "--null", "null_as_text", is_flag=True, help="Print null keys and values as NULL."
)
@click.option(
    "-J",
    "--json",
    "as_json",
    is_flag=True,
    help="One JSON object per record: topic, partition, offset, tstype, ts, broker, headers, "
    "key, payload (kcat's -J).",
)
@click.option(
    "-s",
    "--serdes",
    "serdes",
    multiple=True,
    metavar="[key=|value=]avro",
    help="Decode keys (key=avro), values (value=avro) or both (avro) as Confluent-framed "
    "Avro through the schema registry (-r), printed as JSON (kcat's -s); bytes: as they are.",
)
@click.option(
    "-r",
    "--registry-url",
    "registry_url",
    metavar="URL",
    help="The schema registry for -s avro (kcat's -r; or -X schema.registry.url=URL).",
)
@click.option(
    "-L", "--list", "list_metadata", is_flag=True, help="List brokers, topics and partitions."
)
@click.option("-q", "--quiet", is_flag=True, help="No informational output on stderr.")
@click.option(
    "--timeout",
    type=click.FloatRange(min=0.1),
    default=10.0,
    show_default=True,
    help="Seconds to wait for the cluster (bootstrap, the topic's metadata).",
)
@client_properties_options("consumer", "fetch.max.wait.ms=100")
def consume(
    topic: str | None,
    topic_option: str | None,
    partitions: tuple[int, ...],
    offsets: tuple[str, ...],
    from_beginning: bool,
    group: str | None,
    max_messages: int | None,
    exit_at_end: bool,
    fmt: str | None,
    key_separator: str | None,
    show_headers: bool,
    null_as_text: bool,
    as_json: bool,
    serdes: tuple[str, ...],
    registry_url: str | None,
    list_metadata: bool,
    quiet: bool,
    timeout: float,
    properties: tuple[str, ...],
    command_config: Path | None,
) -> None:
    """Print TOPIC's records to stdout, like kcat -C (-s value=avro -r URL: Avro as JSON)."""
    settings = client_properties(properties, command_config)
    registry_config = {
        name.removeprefix(_REGISTRY_PREFIX): settings.pop(name)
        for name in list(settings)
        if name.startswith(_REGISTRY_PREFIX)
    }
    registry_url = registry_url or registry_config.pop("url", None)
    avro_key, avro_value = _avro_fields(serdes)
    if (avro_key or avro_value) and registry_url is None:
        raise click.UsageError("-s avro needs the schema registry: -r URL")
    topic = topic_option or topic
    if list_metadata:
        from kayak.cli.metadata import print_metadata

        print_metadata(bootstrap_servers(), settings, timeout, topic, as_json)
        return
    if topic is None:
        raise click.UsageError("give a TOPIC (or -t TOPIC), or -L to list the cluster")
    start, stop = _offsets(offsets, from_beginning, settings)
    if group is not None and partitions:
        raise click.UsageError("-p chooses partitions itself; a group (-g) is assigned them")
    if group is None and start is not None and start.kind == "stored":
        raise click.UsageError("-o stored reads a group's committed offsets: give -g GROUP")
    if group is not None and start is not None and start.kind not in _GROUP_STARTS:
        raise click.UsageError("with -g, -o takes beginning, end or stored")
    if fmt is None and not as_json:
        fmt = default_format(key_separator, show_headers)
    if fmt is not None:
        compile_format(fmt)  # a bad token is a usage error before anything connects
    options = _Options(
        bootstrap_servers(), topic, partitions, start, stop, group, max_messages, exit_at_end,
        timeout, fmt, null_as_text, as_json, settings, avro_key, avro_value, registry_url,
        registry_config,
    )  # fmt: skip
    try:
        run_event_loop(_consume(options))
    except KayakError as exc:
        raise click.ClickException(" ".join(str(exc).split())) from None
    except KeyboardInterrupt:
        sys.exit(INTERRUPTED)
    except BrokenPipeError:
        pass
    finally:
        with contextlib.suppress(OSError, ValueError):
            sys.stdout.buffer.flush()


_GROUP_STARTS = {"beginning": "earliest", "end": "latest", "stored": None}


def _avro_fields(serdes: tuple[str, ...]) -> tuple[bool, bool]:
    """Whether keys and values are Avro, from kcat's ``-s [key=|value=]SERDES``."""
    chosen = {"key": "bytes", "value": "bytes"}
    for item in serdes:
        which, equals, name = item.partition("=")
        fields = [which] if equals else ["key", "value"]
        name = name if equals else item
        if equals and which not in chosen:
            raise click.BadParameter(f"{item!r}: say key=, value= or neither", param_hint="-s")
        if name not in _SERDES:
            raise click.BadParameter(
                f"{item!r}: {name!r} is not one of {', '.join(_SERDES)}", param_hint="-s"
            )
        for field_name in fields:
            chosen[field_name] = name
    return chosen["key"] == "avro", chosen["value"] == "avro"


def _offsets(
    given: tuple[str, ...], from_beginning: bool, settings: dict[str, str]
) -> tuple[OffsetSpec | None, int | None]:
    """The start (None: the group's or the default) and the e@TS stop time from ``-o``."""
    specs = [parse_offset_spec(text) for text in given]
    starts = [s for s in specs if s.is_start]
    stops = [s.value for s in specs if not s.is_start]
    if len(starts) > 1 or len(stops) > 1:
        raise click.UsageError("-o takes at most one start and one e@TS")
    if from_beginning:
        if starts:
            raise click.UsageError("give either --from-beginning or -o, not both")
        starts = [OffsetSpec("beginning")]
    if not starts:
        # Without -o, -X auto.offset.reset says where a group-less read starts, as it would
        # for the consumer of a group without committed offsets.
        reset = settings.get("auto.offset.reset")
        if reset in ("earliest", "latest"):
            starts = [OffsetSpec("beginning" if reset == "earliest" else "end")]
    return (starts[0] if starts else None), (stops[0] if stops else None)


async def _consume(options: _Options) -> None:
    config: dict[str, object] = {
        "bootstrap.servers": options.bootstrap,
        "auto.offset.reset": "latest",
        "client.id": "kayak-consume",
        "request.timeout.ms": int(options.timeout * 1000),
        # A typo must not create a topic (librdkafka's consumer default; -X can change it).
        "allow.auto.create.topics": False,
    }
    if options.group is not None:
        config["group.id"] = options.group
        if options.start is not None and _GROUP_STARTS[options.start.kind] is not None:
            config["auto.offset.reset"] = _GROUP_STARTS[options.start.kind]
    config.update(options.properties)
    consumer = Consumer(config)
    check_reachable(options.bootstrap)
    fields = _avro_decoder(options)
    await consumer.start()
    try:
        writer = _writer(options, consumer, fields)
        await _read(consumer, options, writer)
    finally:
        await consumer.close()


def _avro_decoder(options: _Options) -> AvroFields | None:
    """The Avro decoding ``-s`` asked for, once the registry answered (a one-line error
    within two seconds when it does not)."""
    if not (options.avro_key or options.avro_value):
        return None
    from kayak.serde.avro import AvroDeserializer
    from kayak.serde.registry import SchemaRegistryClient

    assert options.registry_url is not None
    probe = SchemaRegistryClient(
        options.registry_url, timeout_s=_REGISTRY_CHECK_S, config=options.registry_config
    )
    probe.subjects()  # reachable, and the credentials work: else SchemaRegistryError
    registry = SchemaRegistryClient(
        options.registry_url, timeout_s=options.timeout, config=options.registry_config
    )
    return AvroFields(AvroDeserializer(registry), key=options.avro_key, value=options.avro_value)


def _writer(options: _Options, consumer: Consumer, fields: AvroFields | None) -> RecordWriter:
    out = sys.stdout.buffer
    if options.as_json:
        leader = consumer.partition_leader
        return JsonPrinter(out, lambda t, p: leader(TopicPartition(t, p)), fields=fields)
    assert options.fmt is not None
    pieces = compile_format(options.fmt, null_as_text=options.null_as_text, fields=fields)
    return Printer(pieces, out)


async def _read(consumer: Consumer, options: _Options, writer: RecordWriter) -> None:
    stops: dict[TopicPartition, int] = {}
    if options.group is not None:
        consumer.subscribe([options.topic])
    else:
        assigned = await _assign(consumer, options)
        await _seek(consumer, assigned, options.start)
        if options.stop_timestamp is not None:
            stops = await _stop_offsets(consumer, assigned, options.stop_timestamp)
    ends: dict[TopicPartition, int] = dict(stops)
    exit_at_end = options.exit_at_end or bool(stops)
    while options.max_messages is None or writer.printed < options.max_messages:
        wanted = None if options.max_messages is None else options.max_messages - writer.printed
        batches = await consumer.getmany(max_records=wanted, timeout_ms=_POLL_MS)
        for tp, records in batches.items():
            stop = stops.get(TopicPartition(*tp))
            if stop is not None:
                records = [r for r in records if r.offset < stop]
            if records:
                writer.write(records)
        writer.out.flush()
        if exit_at_end and await _at_end(consumer, ends):
            return


async def _assign(consumer: Consumer, options: _Options) -> list[TopicPartition]:
    found = await consumer.partitions_for_topic(options.topic, timeout=options.timeout)
    chosen = list(options.partitions) or sorted(found)
    missing = [p for p in chosen if p not in found]
    if missing:
        raise click.ClickException(
            f"topic {options.topic} has no partition {missing[0]} "
            f"(it has {len(found)}: 0-{len(found) - 1})"
        )
    assigned = [TopicPartition(options.topic, p) for p in chosen]
    consumer.assign(assigned)
    return assigned


async def _seek(
    consumer: Consumer, assigned: list[TopicPartition], start: OffsetSpec | None
) -> None:
    kind = "end" if start is None else start.kind
    if kind == "beginning":
        consumer.seek_to_beginning(*assigned)
    elif kind == "end":
        consumer.seek_to_end(*assigned)
    elif kind == "absolute":
        assert start is not None
        for tp in assigned:
            consumer.seek(tp, start.value)
    elif kind == "relative":
        assert start is not None
        ends = await consumer.end_offsets(assigned)
        begins = await consumer.beginning_offsets(assigned)
        for tp in assigned:
            consumer.seek(tp, max(ends[tp] - start.value, begins[tp]))
    elif kind == "timestamp":
        assert start is not None
        found = await consumer.offsets_for_time(assigned, start.value)
        for tp in assigned:
            if found.get(tp, -1) < 0:
                consumer.seek_to_end(tp)  # no record that recent: only new ones
            else:
                consumer.seek(tp, found[tp])


async def _stop_offsets(
    consumer: Consumer, assigned: list[TopicPartition], timestamp: int
) -> dict[TopicPartition, int]:
    found = await consumer.offsets_for_time(assigned, timestamp)
    ends = await consumer.end_offsets(assigned)
    return {tp: found[tp] if found.get(tp, -1) >= 0 else ends[tp] for tp in assigned}


async def _at_end(consumer: Consumer, ends: dict[TopicPartition, int]) -> bool:
    """Whether every assigned partition's position reached its end (the end it had when first
    seen, or its e@TS stop)."""
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
