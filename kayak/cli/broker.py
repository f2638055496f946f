"""``kayak broker``: run the embedded broker in the foreground."""

from __future__ import annotations

import asyncio
import gc
import json
import logging
import signal
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click

from kayak.broker.log import FlushMode
from kayak.broker.security.listeners import Listener, SecurityProtocol, parse_listeners
from kayak.broker.security.principal import Principal
from kayak.errors import ConfigError, KayakError

log = logging.getLogger("kayak.broker")
T = TypeVar("T")


def _listeners(ctx: click.Context, param: click.Parameter, value: str | None) -> object:
    if value is None:
        return ()
    name = (param.name or "listeners").replace("_", ".")
    try:
        return parse_listeners(value, name)
    except ConfigError as exc:
        raise click.BadParameter(exc.message) from None


def _names(ctx: click.Context, param: click.Parameter, value: str | None) -> tuple[str, ...]:
    """A comma-separated list (``a,b``) as a tuple, blanks dropped."""
    return tuple(part.strip() for part in (value or "").split(",") if part.strip())


def _is_principal(text: str) -> bool:
    try:
        Principal.parse(text.strip())
    except ValueError:
        return False
    return True


def _semicolon_list(value: str | None, *, bare_names: bool) -> tuple[str, ...]:
    """A ``;``-separated list, as Kafka separates ``super.users``: a certificate principal
    (``User:CN=admin,O=acme``) holds commas. A value that reads as a comma-separated list
    of entries is refused rather than taken as one odd principal."""
    text = value or ""
    entries = tuple(part.strip() for part in text.split(";") if part.strip())
    if ";" not in text and "," in text:
        parts = [part for part in text.split(",") if part.strip()]
        if all(_is_principal(part) for part in parts) or (
            bare_names and not any(":" in part for part in parts)
        ):
            raise click.BadParameter(
                f"{text!r} looks like a comma-separated list; separate entries with ';' "
                "(a certificate principal may contain commas), e.g. 'User:alice;User:bob'"
            )
    return entries


def _principals(ctx: click.Context, param: click.Parameter, value: str | None) -> object:
    """``User:alice;User:CN=admin,O=acme``: principals separated by ``;``."""
    names = _semicolon_list(value, bare_names=False)
    for name in names:
        try:
            Principal.parse(name)
        except ValueError as exc:
            hint = ""
            if value and "," in value and ";" not in value:
                hint = "; separate principals with ';', not ','"
            raise click.BadParameter(f"{exc}{hint}") from None
    return names


def _writers(ctx: click.Context, param: click.Parameter, value: str | None) -> object:
    """``alice;User:bob``: user names or principals separated by ``;``."""
    return _semicolon_list(value, bare_names=True)


def _mechanisms(ctx: click.Context, param: click.Parameter, value: str | None) -> object:
    return tuple(name.upper() for name in _names(ctx, param, value))


_FILE = click.Path(dir_okay=False, path_type=Path)


@click.command()
@click.option(
    "--data-dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=Path("kayak-data"),
    show_default=True,
    help="Directory holding topics, logs and offsets.",
)
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on.")
@click.option("--port", type=click.IntRange(0, 65535), default=9092, show_default=True)
@click.option(
    "--flush",
    type=click.Choice([m.value for m in FlushMode]),
    default=FlushMode.GROUP.value,
    show_default=True,
    help="group: fsync before ack, shared between waiting appends; always: one fsync per "
    "request; never: page cache only (Kafka's default).",
)
@click.option(
    "--num-partitions",
    type=click.IntRange(1),
    default=1,
    show_default=True,
    help="num.partitions for auto-created topics.",
)
@click.option(
    "--group-initial-rebalance-delay-ms",
    type=click.IntRange(0),
    default=3000,
    show_default=True,
    help="group.initial.rebalance.delay.ms",
)
@click.option(
    "--transaction-max-timeout-ms",
    type=click.IntRange(1),
    default=900_000,
    show_default=True,
    help="transaction.max.timeout.ms: the longest transaction.timeout.ms a producer may ask for.",
)
@click.option(
    "--transaction-abort-timed-out-transaction-cleanup-interval-ms",
    "transaction_cleanup_interval_ms",
    type=click.IntRange(1),
    default=10_000,
    show_default=True,
    help="transaction.abort.timed.out.transaction.cleanup.interval.ms: how often transactions "
    "open past their timeout are aborted.",
)
@click.option(
    "--shards",
    type=click.IntRange(1, 64),
    default=1,
    show_default=True,
    help="Broker processes (one per core), each owning some partitions, one cluster; a shard "
    "that crashes is restarted. Shard i listens on PORT+i (or a free port when PORT is 0).",
)
@click.option(
    "--schema-registry-port",
    type=click.IntRange(0, 65535),
    default=8081,
    show_default=True,
    help="Port of the Confluent-compatible schema registry (HTTP; 0: a free port). "
    "With --shards, shard 0 serves it.",
)
@click.option(
    "--no-schema-registry",
    is_flag=True,
    default=False,
    help="Do not serve the schema registry.",
)
@click.option("--node-id", type=click.IntRange(0), default=None, hidden=True)
@click.option("--exit-with-parent", is_flag=True, default=False, hidden=True,
              help="Shut down cleanly when the process that started this one exits "
              "(for a broker embedded as a child process).")  # fmt: skip
@click.option("--shard-count", type=click.IntRange(1), default=None, hidden=True)
@click.option(
    "--max-connections",
    type=click.IntRange(1),
    default=10_000,
    show_default=True,
    help="max.connections: further connections are closed at once.",
)
@click.option(
    "--socket-request-max-bytes",
    type=click.IntRange(1024),
    default=100 * 1024 * 1024,
    show_default=True,
    help="socket.request.max.bytes: larger requests close the connection.",
)
@click.option(
    "--sasl-server-max-receive-size",
    type=click.IntRange(1024),
    default=524_288,
    show_default=True,
    help="sasl.server.max.receive.size: on SASL listeners, a larger request before "
    "authentication closes the connection.",
)
@click.option(
    "--retention-check-interval-ms",
    type=click.IntRange(1),
    default=300_000,
    show_default=True,
    help="log.retention.check.interval.ms: how often old segments are deleted.",
)
@click.option(
    "--log-cleaner-backoff-ms",
    type=click.IntRange(0),
    default=15_000,
    show_default=True,
    help="log.cleaner.backoff.ms: how often compacted topics are checked for cleaning.",
)
@click.option(
    "--log-cleaner-enable/--no-log-cleaner-enable",
    default=True,
    show_default=True,
    help="log.cleaner.enable: compact topics with cleanup.policy=compact.",
)
@click.option(
    "--listeners",
    default=None,
    callback=_listeners,
    metavar="NAME://HOST:PORT,...",
    help="listeners: e.g. PLAINTEXT://127.0.0.1:9092,SASL_SSL://0.0.0.0:9093 (PLAINTEXT, "
    "SSL, SASL_PLAINTEXT, SASL_SSL; port 0: a free port). Replaces --host/--port.",
)
@click.option(
    "--advertised-listeners",
    default=None,
    callback=_listeners,
    metavar="NAME://HOST:PORT,...",
    help="advertised.listeners: the address clients are told for each listener (behind NAT "
    "or in a container); a listener not named is advertised as it listens.",
)
@click.option("--ssl-certificate-location", type=_FILE, default=None,
              help="PEM certificate (chain) of SSL and SASL_SSL listeners.")  # fmt: skip
@click.option("--ssl-key-location", type=_FILE, default=None, help="PEM private key.")
@click.option("--ssl-key-password", default=None, help="Password of an encrypted key.")
@click.option("--ssl-ca-location", type=_FILE, default=None,
              help="PEM CA bundle: TLS clients must present a certificate signed by it; its "
              "subject becomes the principal (User:CN=...,O=...).")  # fmt: skip
@click.option(
    "--sasl-enabled-mechanisms",
    default="PLAIN,SCRAM-SHA-256,SCRAM-SHA-512",
    show_default=True,
    callback=_mechanisms,
    help="sasl.enabled.mechanisms on SASL listeners (also OAUTHBEARER).",
)
@click.option("--connections-max-reauth-ms", type=click.IntRange(0), default=0,
              show_default=True,
              help="connections.max.reauth.ms: SASL sessions must re-authenticate within "
              "this (KIP-368); 0: never.")  # fmt: skip
@click.option("--super-users", default=None, callback=_principals, metavar="User:NAME;...",
              help="super.users: principals allowed everything, whatever the ACLs, separated "
              "by ';' as in Kafka (e.g. 'User:admin;User:CN=ops,O=acme').")  # fmt: skip
@click.option(
    "--allow-everyone-if-no-acl-found/--no-allow-everyone-if-no-acl-found",
    default=None,
    help="allow.everyone.if.no.acl.found (default: yes only when every listener is PLAINTEXT).",
)
@click.option("--connections-max-idle-ms", type=click.IntRange(1), default=600_000,
              show_default=True,
              help="connections.max.idle.ms: idle connections are closed.")  # fmt: skip
@click.option("--max-connections-per-ip", type=click.IntRange(1), default=2**31 - 1,
              help="max.connections.per.ip: further connections from one address are "
              "closed at once.")  # fmt: skip
@click.option("--request-receive-timeout-ms", type=click.IntRange(1), default=30_000,
              show_default=True,
              help="A request (or TLS handshake) that started arriving must be complete "
              "within this, else the connection is closed.")  # fmt: skip
@click.option("--schema-registry-tls", is_flag=True, default=False,
              help="Serve the schema registry over HTTPS (the broker's certificate).")  # fmt: skip
@click.option("--schema-registry-writers", default=None, callback=_writers, metavar="USER;...",
              help="Users who may register and delete schemas (others may only read), "
              "separated by ';' (e.g. 'alice;bob').")  # fmt: skip
@click.option("--schema-registry-allowed-hosts", default=None, callback=_names,
              metavar="HOST,...",
              help="Without registry authentication, further host names the registry (and "
              "/metrics, the console) may be reached under; others get 421 (DNS rebinding). "
              "Its own addresses, localhost and this machine's name always work; * allows "
              "any.")  # fmt: skip
@click.option(
    "--schema-registry-auth/--no-schema-registry-auth",
    default=None,
    help="HTTP basic authentication on the schema registry (default: on when any listener "
    "uses TLS or SASL).",
)
def broker(
    data_dir: Path,
    host: str,
    port: int,
    flush: str,
    num_partitions: int,
    group_initial_rebalance_delay_ms: int,
    transaction_max_timeout_ms: int,
    transaction_cleanup_interval_ms: int,
    shards: int,
    schema_registry_port: int,
    no_schema_registry: bool,
    node_id: int | None,
    shard_count: int | None,
    exit_with_parent: bool,
    max_connections: int,
    socket_request_max_bytes: int,
    retention_check_interval_ms: int,
    log_cleaner_backoff_ms: int,
    log_cleaner_enable: bool,
    listeners: tuple[Listener, ...],
    advertised_listeners: tuple[Listener, ...],
    ssl_certificate_location: Path | None,
    ssl_key_location: Path | None,
    ssl_key_password: str | None,
    ssl_ca_location: Path | None,
    sasl_enabled_mechanisms: tuple[str, ...],
    connections_max_reauth_ms: int,
    sasl_server_max_receive_size: int,
    super_users: tuple[str, ...],
    allow_everyone_if_no_acl_found: bool | None,
    connections_max_idle_ms: int,
    max_connections_per_ip: int,
    request_receive_timeout_ms: int,
    schema_registry_tls: bool,
    schema_registry_writers: tuple[str, ...],
    schema_registry_auth: bool | None,
    schema_registry_allowed_hosts: tuple[str, ...],
) -> None:
    """Run a durable Kafka-compatible broker until SIGTERM or Ctrl-C."""
    from kayak.broker import Broker
    from kayak.console import mount_console

    logging.getLogger("kayak").setLevel(min(logging.getLogger().level, logging.INFO))
    _check_listener_options(listeners)
    security: dict[str, Any] = {
        "listeners": listeners,
        "advertised_listeners": advertised_listeners,
        "ssl_certificate_location": ssl_certificate_location,
        "ssl_key_location": ssl_key_location,
        "ssl_key_password": ssl_key_password,
        "ssl_ca_location": ssl_ca_location,
        "sasl_enabled_mechanisms": sasl_enabled_mechanisms,
        "connections_max_reauth_ms": connections_max_reauth_ms,
        "sasl_server_max_receive_size": sasl_server_max_receive_size,
        "super_users": super_users,
        "allow_everyone_if_no_acl_found": allow_everyone_if_no_acl_found,
        "connections_max_idle_ms": connections_max_idle_ms,
        "max_connections_per_ip": max_connections_per_ip,
        "request_receive_timeout_ms": request_receive_timeout_ms,
        "schema_registry_tls": schema_registry_tls,
        "schema_registry_writers": schema_registry_writers,
        "schema_registry_auth": schema_registry_auth,
        "schema_registry_allowed_hosts": schema_registry_allowed_hosts,
    }
    if shards > 1 and node_id is None:
        from kayak.broker.config import BrokerConfig
        from kayak.cli.shard_supervisor import supervise_shards

        # Refuse bad settings before starting any shard (one line, not N crash loops).
        _checked(lambda: BrokerConfig(host=host, port=port, **security).validate())
        if exit_with_parent:
            _watch_parent()
        registry_port = None if no_schema_registry else schema_registry_port
        raise SystemExit(
            supervise_shards(shards, host, port, registry_port, listeners, advertised_listeners)
        )
    settings = {
        "node_id": node_id or 0,
        "shard_count": shard_count or 1,
        "host": host,
        "port": port,
        "flush": FlushMode(flush),
        "num_partitions": num_partitions,
        "group_initial_rebalance_delay_ms": group_initial_rebalance_delay_ms,
        "transaction_max_timeout_ms": transaction_max_timeout_ms,
        "transaction_abort_timed_out_transaction_cleanup_interval_ms": (
            transaction_cleanup_interval_ms
        ),
        "retention_check_interval_ms": retention_check_interval_ms,
        "log_cleaner_backoff_ms": log_cleaner_backoff_ms,
        "log_cleaner_enable": log_cleaner_enable,
        "max_connections": max_connections,
        "socket_request_max_bytes": socket_request_max_bytes,
        "schema_registry_port": None if no_schema_registry else schema_registry_port,
        **security,
    }
    if exit_with_parent:
        _watch_parent()
    # The web console rides on the registry's web server; the CLI, not the broker, adds it.
    server = _checked(lambda: Broker(data_dir, web_mounts=(mount_console,), **settings))
    try:
        run_event_loop(_serve(server))
    except OSError as exc:
        raise click.ClickException(f"cannot start the broker: {exc}") from exc
    except json.JSONDecodeError as exc:
        # The broker's state files are JSON (the cluster map, topics.json, first of all).
        raise click.ClickException(
            f"cannot start the broker: a state file in {data_dir} is damaged (not JSON: "
            f"{exc}); the cluster map is {Path(data_dir) / 'topics.json'}"
        ) from None
    except KayakError as exc:
        raise click.ClickException(
            f"cannot start the broker: {' '.join(str(exc).split())}"
        ) from None


def _check_listener_options(listeners: tuple[Listener, ...]) -> None:
    """--listeners replaces --host/--port; giving both is a mistake worth a clear word."""
    if not listeners:
        return
    ctx = click.get_current_context()
    for name in ("host", "port"):
        if ctx.get_parameter_source(name) is click.core.ParameterSource.COMMANDLINE:
            raise click.UsageError(
                f"--{name} and --listeners both say where to listen; give the address in "
                f"--listeners only (e.g. {SecurityProtocol.PLAINTEXT.value}://127.0.0.1:9092)"
            )


def _checked(build: Callable[[], T]) -> T:
    """``build()``, with a configuration error as the one line the CLI prints (exit 1)."""
    try:
        return build()
    except ConfigError as exc:
        option = exc.name.replace(".", "-")
        raise click.ClickException(f"invalid --{option}: {exc.message}") from None


def _watch_parent() -> None:
    """SIGTERM ourselves (a clean shutdown) once our parent is gone: an embedding program
    that was killed must not leave its broker running."""
    import os
    import threading
    import time

    parent = os.getppid()

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(0.5)
        log.info("parent process %d exited; shutting down", parent)
        os.kill(os.getpid(), signal.SIGTERM)

    threading.Thread(target=watch, name="kayak-parent-watch", daemon=True).start()


async def _serve(server: object) -> None:
    from kayak.broker import Broker

    assert isinstance(server, Broker)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    async with server:
        # What start-up built (catalog, logs, indexes) lives as long as the process: out of
        # the collector's sight, so that collections under load walk only per-request objects.
        gc.freeze()
        await stop.wait()
        log.info("shutting down")


def run_event_loop(main: object) -> None:
    """Run a coroutine on uvloop when it is installed, else on asyncio's own loop."""
    try:
        import uvloop
    except ImportError:
        asyncio.run(main)  # type: ignore[arg-type]
    else:
        uvloop.run(main)  # type: ignore[arg-type]
