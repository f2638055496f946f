"""``kayak users``: SCRAM users of a broker's data directory, added, listed and deleted.

Works on the data directory itself, with or without a broker running on it: a running
broker sees the change at the next login. Over the network, use AlterUserScramCredentials
(e.g. confluent-kafka's ``AdminClient.alter_user_scram_credentials``).
"""

from __future__ import annotations

import sys
from pathlib import Path

import click
from rich.console import Console
from rich.table import Table

from kayak.broker.security.credentials import (
    CredentialFileError,
    CredentialStore,
    UserChange,
    make_credential,
)
from kayak.cli.data_dir import data_dir_option, existing_data_dir
from kayak.protocol.sasl.scram import MAX_ITERATIONS, MIN_ITERATIONS, SCRAM_MECHANISMS

MECHANISMS = tuple(SCRAM_MECHANISMS)


def _store(data_dir: Path) -> CredentialStore:
    """The data directory's credentials, or a one-line error."""
    try:
        return CredentialStore.open(existing_data_dir(data_dir))
    except (CredentialFileError, OSError) as exc:
        raise click.ClickException(str(exc)) from None


@click.group()
def users() -> None:
    """SCRAM users for SASL (PLAIN, SCRAM-SHA-256, SCRAM-SHA-512) and the schema registry.

    Passwords are stored salted and iterated, as Kafka stores them; never in clear.
    """


@users.command("add")
@click.argument("name")
@click.option(
    "--password",
    help="The password (visible in the process list and shell history: prefer the prompt "
    "or --password-stdin).",
)
@click.option(
    "--password-stdin", is_flag=True, help="Read the password from the first line of stdin."
)
@click.option(
    "--mechanism",
    "mechanisms",
    type=click.Choice(MECHANISMS, case_sensitive=False),
    metavar="|".join(MECHANISMS),
    multiple=True,
    help="SCRAM mechanism to store a credential for (repeatable; default: both). PLAIN "
    "logins check the password against either.",
)
@click.option(
    "--iterations",
    type=click.IntRange(MIN_ITERATIONS, MAX_ITERATIONS),
    default=MIN_ITERATIONS,
    show_default=True,
    help="PBKDF2 iterations.",
)
@data_dir_option
def add(
    name: str,
    password: str | None,
    password_stdin: bool,
    mechanisms: tuple[str, ...],
    iterations: int,
    data_dir: Path,
) -> None:
    """Add user NAME, or change its password."""
    store = _store(data_dir)
    secret = _password(password, password_stdin)
    chosen = tuple(dict.fromkeys(m.upper() for m in mechanisms)) or MECHANISMS
    try:
        credentials = tuple(
            make_credential(name, m, password=secret, iterations=iterations) for m in chosen
        )
        store.apply([UserChange(name, upsertions=credentials)])
    except (ValueError, CredentialFileError, OSError) as exc:
        raise click.ClickException(str(exc)) from None
    noun = "credential" if len(chosen) == 1 else "credentials"
    click.echo(f"user {name!r}: {', '.join(chosen)} {noun} stored in {store.path}")


def _password(given: str | None, from_stdin: bool) -> str:
    if given is not None and from_stdin:
        raise click.UsageError("give --password or --password-stdin, not both")
    if from_stdin:
        line = sys.stdin.readline()
        secret = line.removesuffix("\n").removesuffix("\r")
    elif given is not None:
        secret = given
    else:
        secret = click.prompt("Password", hide_input=True, confirmation_prompt=True)
    if not secret:
        raise click.ClickException("the password must not be empty")
    return secret


@users.command("list")
@data_dir_option
def list_users(data_dir: Path) -> None:
    """Every user with its mechanisms and iterations (never a secret)."""
    store = _store(data_dir)
    try:
        found = store.users()
    except CredentialFileError as exc:
        raise click.ClickException(str(exc)) from None
    out = Console(width=200)
    if not found:
        out.print("no users")
        return
    table = Table("user", "mechanisms", "iterations")
    for user, credentials in found.items():
        table.add_row(
            user,
            ", ".join(m for m, _ in credentials),
            ", ".join(str(i) for _, i in credentials),
        )
    out.print(table)


@users.command("delete")
@click.argument("name")
@click.option(
    "--mechanism",
    type=click.Choice(MECHANISMS, case_sensitive=False),
    metavar="|".join(MECHANISMS),
    default=None,
    help="Delete only this mechanism's credential (default: the user altogether).",
)
@data_dir_option
def delete(name: str, mechanism: str | None, data_dir: Path) -> None:
    """Delete user NAME (or one of its credentials)."""
    store = _store(data_dir)
    try:
        held = dict(store.users().get(name, []))
        if not held:
            raise click.ClickException(f"no user {name!r} in {data_dir}")
        if mechanism is not None and mechanism.upper() not in held:
            raise click.ClickException(f"user {name!r} has no {mechanism.upper()} credential")
        targets = (mechanism.upper(),) if mechanism is not None else tuple(held)
        if store.apply([UserChange(name, deletions=targets)]):
            raise click.ClickException(f"user {name!r} changed meanwhile; nothing deleted")
    except (CredentialFileError, OSError) as exc:
        raise click.ClickException(str(exc)) from None
    click.echo(f"user {name!r}: deleted {', '.join(targets)}")
