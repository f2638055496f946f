"""``kayak cdc``: set up change capture on a source table, and run the capture loop alone."""

from __future__ import annotations

import contextlib
import logging
import signal
import threading

import click
from rich.console import Console

from kayak.cli.options import (
    admin_properties,
    bootstrap_option,
    bootstrap_servers,
    parse_properties,
)
from kayak.cli.status_line import STATUS_INTERVAL_OPTION, StatusLine, capture_progress
from kayak.errors import KayakError

log = logging.getLogger("kayak.cdc")

SOURCE_HELP = "A SQLite database (PATH or sqlite:PATH) or a PostgreSQL URL (postgresql://…)."


@click.group()
def cdc() -> None:
    """Change data capture: enable it on tables, run the capture loop."""


SLOT_OPTION = click.option(
    "--slot", default=None,
    help="PostgreSQL: the replication slot and publication name [default: slot "
    "kayak_DATABASE (slots are shared by the server's databases), publication kayak; a "
    "slot 'kayak' an earlier version made for this database is kept].",
)  # fmt: skip


@cdc.command()
@click.argument("source")
@click.argument("tables", nargs=-1, required=True)
@SLOT_OPTION
def enable(source: str, tables: tuple[str, ...], slot: str | None) -> None:
    """Start capturing TABLES of SOURCE.

    SQLite: installs triggers writing every change into TABLE_kayak_cdc_log and logs the
    existing rows as the initial snapshot, in one transaction. PostgreSQL: creates the
    publication the capture's replication slot reads (wal_level must be logical).
    """
    from kayak.pipeline.source_database import source_kind, sqlite_path

    console = Console()
    try:
        if source_kind(source) == "sqlite":
            from kayak.cdc.sqlite import enable as enable_sqlite

            for table in tables:
                rows = enable_sqlite(sqlite_path(source), table)
                console.print(f"capturing {table} (snapshot: {rows} rows)")
        else:
            from kayak.cdc.postgres import enable as enable_postgres
            from kayak.cdc.postgres.slot import DEFAULT_PUBLICATION

            enable_postgres(source, list(tables), publication=slot or DEFAULT_PUBLICATION,
                            slot=slot)  # fmt: skip
            console.print(f"capturing {', '.join(tables)}")
    except (KayakError, OSError, ValueError) as e:
        raise click.ClickException(" ".join(str(e).split())) from None  # one line


@cdc.command()
@click.argument("source")
@click.argument("tables", nargs=-1, required=True)
@click.option("--drop-log", is_flag=True, help="SQLite: also drop the CDC log tables.")
@SLOT_OPTION
def disable(source: str, tables: tuple[str, ...], drop_log: bool, slot: str | None) -> None:
    """Stop capturing TABLES of SOURCE."""
    from kayak.pipeline.source_database import source_kind, sqlite_path

    try:
        if source_kind(source) == "sqlite":
            from kayak.cdc.sqlite import disable as disable_sqlite

            for table in tables:
                disable_sqlite(sqlite_path(source), table, drop_log=drop_log)
                Console().print(f"stopped capturing {table}")
        else:
            from kayak.cdc.postgres import disable as disable_postgres
            from kayak.cdc.postgres.slot import DEFAULT_PUBLICATION, DEFAULT_SLOT

            publication = slot or DEFAULT_PUBLICATION
            dropped = disable_postgres(source, publication=publication, slot=slot or DEFAULT_SLOT)
            Console().print(f"dropped slot {dropped} and publication {publication}")
    except (KayakError, OSError, ValueError) as e:
        raise click.ClickException(" ".join(str(e).split())) from None  # one line


@cdc.command()
@click.argument("source")
@click.argument("tables", nargs=-1, required=True)
@bootstrap_option
@click.option("--registry-url", default=None,
              help="Schema registry for the Avro schemas [default: -X schema.registry.url, "
              "else http://127.0.0.1:8081].")  # fmt: skip
@click.option("--prefix", default="kayak", show_default=True, help="Topic prefix.")
@click.option("--format", "value_format", type=click.Choice(["avro", "json"]), default="avro",
              show_default=True, help="Event encoding.")  # fmt: skip
@SLOT_OPTION
@click.option("-X", "properties", multiple=True, metavar="PROP=VALUE",
              help="Producer property (Kafka name), repeatable; schema.registry.* and "
              "basic.auth.* go to the schema registry client (Confluent's names).")  # fmt: skip
@STATUS_INTERVAL_OPTION
def run(
    source: str, tables: tuple[str, ...], registry_url: str | None, prefix: str,
    value_format: str, slot: str | None, properties: tuple[str, ...], status_interval: float,
) -> None:  # fmt: skip
    """Capture TABLES of SOURCE into topics PREFIX.SCHEMA.TABLE until Ctrl-C or SIGTERM.

    \b
    While it runs, a terminal shows one status line; off a terminal it is logged
    to stderr every --status-interval seconds:
      captured    changes published and acknowledged by the broker
      last batch  its changes, how long publishing it took, and how far its
                  oldest change was behind the source (its commit → the
                  broker's acknowledgement; without changes, this clock
                  stands still)
    """
    bootstrap = bootstrap_servers()
    from kayak.cdc.capture import CaptureLoop, capture_transactional_id
    from kayak.cdc.publisher import ChangePublisher, EventEncoder, open_capture_producer
    from kayak.client.sync import Admin
    from kayak.pipeline.source_database import database_name, open_source, source_kind
    from kayak.pipeline.topics import topic_ensurer
    from kayak.serde.registry import SchemaRegistryClient, split_registry_properties

    console = Console(stderr=True)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    try:
        registry_config, client = split_registry_properties(parse_properties(properties))
        url = registry_url or registry_config.pop("url", "http://127.0.0.1:8081")
        registry_config.pop("url", None)  # --registry-url wins
        registry = (
            SchemaRegistryClient(url, config=registry_config) if value_format == "avro" else None
        )
        change_source = open_source(source, tables, slot_name=slot)
        config = {"bootstrap.servers": bootstrap, "acks": "all", **client}
        # The admin client (it creates the topics) reaches the cluster as the producer does:
        # same security settings, none of the producer's own properties.
        admin_config = {"bootstrap.servers": bootstrap, **admin_properties(client)}
        # One Kafka transaction per batch, under an id a restarted capture shares (it fences
        # a capture killed mid-batch and aborts what that one left open).
        producer, transactional = open_capture_producer(
            config, capture_transactional_id(prefix, database_name(source), slot)
        )
        with producer, Admin(admin_config) as admin:
            encoder = EventEncoder(
                prefix=prefix, connector=source_kind(source),
                value_format="avro" if value_format == "avro" else "json", registry=registry,
            )  # fmt: skip
            publisher = ChangePublisher(
                producer, encoder, db=database_name(source), ensure_topic=topic_ensurer(admin),
                transactional=transactional,
            )  # fmt: skip
            loop = CaptureLoop(change_source, publisher)
            console.print(f"capturing {', '.join(tables)} from {source} into {bootstrap}")
            status = StatusLine(console, lambda: capture_progress(loop.stats),
                                label="capturing", interval_s=status_interval)  # fmt: skip
            with status, contextlib.suppress(KeyboardInterrupt):
                loop.run(stop)
            console.print(f"captured {loop.stats.changes} changes ({loop.stats.events} events)")
    except (KayakError, OSError, ValueError) as e:
        raise click.ClickException(" ".join(str(e).split())) from None  # one line
