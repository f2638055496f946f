"""``kayak schemas``: the schema registry (kayak's own or Confluent's) from the command line.

::

    kayak schemas list                                   # subjects and their versions
    kayak schemas get orders-value [--version 2]         # the schema, as JSON
    kayak schemas register orders-value schema.avsc      # (- reads stdin); prints the id
    kayak schemas compatibility orders-value             # the level in force
    kayak schemas compatibility orders-value --set FULL  # change it (no subject: global)
    kayak schemas compatibility orders-value --check new.avsc   # may new.avsc follow?

The registry is ``--registry-url`` (``-r``, kcat's flag), else ``KAYAK_REGISTRY_URL``, else
``http://127.0.0.1:8081``. ``-X basic.auth.user.info=user:password`` and ``-X
ssl.ca.location=ca.pem`` for a secured one (``--command-config FILE`` keeps the password off
the command line). Failures are one line and exit status 1.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from kayak.cli.options import client_properties, client_properties_options

__all__ = ["schemas"]

DEFAULT_REGISTRY = "http://127.0.0.1:8081"
REGISTRY_ENV = "KAYAK_REGISTRY_URL"

if TYPE_CHECKING:  # the client is imported when a subcommand runs
    from kayak.serde.registry import SchemaRegistryClient


@click.group()
@click.option(
    "-r",
    "--registry-url",
    envvar=REGISTRY_ENV,
    default=DEFAULT_REGISTRY,
    show_default=True,
    metavar="URL",
    help=f"The schema registry (env {REGISTRY_ENV}).",
)
@click.option(
    "--timeout", type=click.FloatRange(min=0.1), default=10.0, show_default=True,
    help="Seconds to wait for the registry.",
)  # fmt: skip
@client_properties_options("schema registry client", "basic.auth.user.info=user:password")
@click.pass_context
def schemas(
    ctx: click.Context,
    registry_url: str,
    timeout: float,
    properties: tuple[str, ...],
    command_config: Path | None,
) -> None:
    """List, read and register schemas, and read or set compatibility, in a schema registry."""
    from kayak.serde.registry import SchemaRegistryClient

    config = client_properties(properties, command_config)
    ctx.obj = _run(lambda: SchemaRegistryClient(registry_url, timeout_s=timeout, config=config))


def _run(call: Any) -> Any:
    """``call()``, with registry and configuration errors as one-line failures."""
    from kayak.errors import KayakError

    try:
        return call()
    except KayakError as exc:
        raise click.ClickException(" ".join(str(exc).split())) from None


@schemas.command("list")
@click.pass_obj
def list_subjects(client: SchemaRegistryClient) -> None:
    """Every subject with its versions."""
    subjects = _run(client.subjects)
    if not subjects:
        click.echo("no subjects")
        return
    for subject in sorted(subjects):
        versions = _run(lambda s=subject: client.versions(s))
        click.echo(f"{subject}\tversions {','.join(map(str, versions))}")


@schemas.command("get")
@click.argument("subject")
@click.option(
    "--version", default="latest", show_default=True, help="A version number, or latest."
)
@click.pass_obj
def get(client: SchemaRegistryClient, subject: str, version: str) -> None:
    """SUBJECT's schema (one version) as JSON, with its id and version on stderr."""
    found = _run(lambda: client.version(subject, version))
    click.echo(f"{found.subject} version {found.version} id {found.schema_id}", err=True)
    click.echo(json.dumps(found.schema, indent=2))


def _read_schema(path: str) -> str:
    try:
        text = sys.stdin.read() if path == "-" else Path(path).read_text(encoding="utf-8")
        json.loads(text)
    except OSError as exc:
        raise click.ClickException(f"cannot read {path}: {exc.strerror or exc}") from None
    except ValueError as exc:
        raise click.ClickException(f"{path} is not JSON (an Avro schema): {exc}") from None
    return text


@schemas.command("register")
@click.argument("subject")
@click.argument("schema_file", metavar="SCHEMA.avsc|-")
@click.pass_obj
def register(client: SchemaRegistryClient, subject: str, schema_file: str) -> None:
    """Register the Avro schema in SCHEMA.avsc (or stdin) under SUBJECT; prints its id."""
    text = _read_schema(schema_file)
    schema_id = _run(lambda: client.register(subject, text))
    click.echo(f"registered under {subject}: id {schema_id}")


@schemas.command("compatibility")
@click.argument("subject", required=False)
@click.option(
    "--set",
    "level",
    type=click.Choice(
        ["NONE", "BACKWARD", "BACKWARD_TRANSITIVE", "FORWARD", "FORWARD_TRANSITIVE", "FULL",
         "FULL_TRANSITIVE"],
        case_sensitive=False,
    ),
    help="Set the level (of SUBJECT, or the global one without a SUBJECT).",
)  # fmt: skip
@click.option(
    "--check",
    "candidate",
    metavar="SCHEMA.avsc|-",
    help="Whether this schema may follow SUBJECT's latest version (exit 1 if not).",
)
@click.pass_obj
def compatibility(
    client: SchemaRegistryClient, subject: str | None, level: str | None, candidate: str | None
) -> None:
    """Show or set the compatibility level of SUBJECT (or the global one), or check a schema
    against it."""
    if candidate is not None:
        if subject is None:
            raise click.UsageError("--check needs a SUBJECT")
        text = _read_schema(candidate)
        if not _run(lambda: client.check_compatibility(subject, text)):
            raise click.ClickException(f"{candidate} is not compatible with {subject}")
        click.echo(f"{candidate} is compatible with {subject}")
        return
    if level is not None:
        now = _run(lambda: client.set_compatibility(level, subject))
    else:
        now = _run(lambda: client.get_compatibility(subject))
    click.echo(f"{subject or 'global'}: {now}")

