"""``kayak acls``: a broker's ACLs, added, listed and removed as kafka-acls.sh spells them.

Works on the data directory itself, with or without a broker running on it: a running
broker (every shard) applies the change within a fraction of a second. Over the network,
use CreateAcls/DescribeAcls/DeleteAcls (e.g. confluent-kafka's ``AdminClient.create_acls``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TypeVar

import click
from rich.console import Console
from rich.table import Table

from kayak.broker.security.acls import (
    CLUSTER_NAME,
    AccessControlEntry,
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AclStore,
    AclStoreError,
    PatternType,
    ResourcePattern,
    ResourceType,
)
from kayak.broker.security.acls.model import WILDCARD, validate_binding
from kayak.cli.data_dir import data_dir_option, existing_data_dir

F = TypeVar("F", bound=Callable[..., object])

OPERATIONS = tuple(
    op.name.title().replace("_", "") for op in AclOperation if op.value > AclOperation.ANY
)


def _resource_options(command: F) -> F:
    for decorate in reversed(
        (
            click.option(
                "--topic", "topics", multiple=True, help="A topic (repeatable; '*' for all)."
            ),
            click.option("--group", "groups", multiple=True, help="A consumer group (repeatable)."),
            click.option("--cluster", is_flag=True, help="The cluster (cluster-wide operations)."),
            click.option(
                "--transactional-id",
                "transactional_ids",
                multiple=True,
                help="A transactional id (repeatable).",
            ),
        )
    ):
        command = decorate(command)
    return command


def _store(data_dir: Path) -> AclStore:
    """The data directory's ACLs, or a one-line error."""
    try:
        return AclStore.open(existing_data_dir(data_dir))
    except (AclStoreError, OSError) as exc:
        raise click.ClickException(str(exc)) from None


def _resources(
    topics: Iterable[str], groups: Iterable[str], cluster: bool, transactional_ids: Iterable[str]
) -> list[tuple[ResourceType, str]]:
    named = [(ResourceType.TOPIC, t) for t in topics]
    named += [(ResourceType.GROUP, g) for g in groups]
    named += [(ResourceType.TRANSACTIONAL_ID, t) for t in transactional_ids]
    if cluster:
        named.append((ResourceType.CLUSTER, CLUSTER_NAME))
    return named


def _operations(names: Iterable[str]) -> list[AclOperation]:
    try:
        return [AclOperation.parse(name) for name in names]
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--operation") from None


def _pattern_type(name: str, allowed: tuple[PatternType, ...]) -> PatternType:
    try:
        found = PatternType.parse(name)
    except ValueError:
        found = PatternType.UNKNOWN
    if found not in allowed:
        choices = ", ".join(p.name.lower() for p in allowed)
        raise click.BadParameter(
            f"{name!r} is not one of {choices}", param_hint="--resource-pattern-type"
        )
    return found


def _principals(values: Iterable[str], option: str) -> list[str]:
    for value in values:
        kind, sep, name = value.partition(":")
        if not sep or not kind or not name:
            raise click.BadParameter(
                f"{value!r} is not a principal like User:alice", param_hint=option
            )
    return list(values)


@click.group()
def acls() -> None:
    """ACLs: who may do what to which topic, group or the cluster (Kafka's model).

    Brokers with a TLS or SASL listener allow nothing that no ACL allows (unless
    --allow-everyone-if-no-acl-found); super users (--super-users) may do everything.
    """


@acls.command("add")
@click.option(
    "--allow-principal", "allow", multiple=True, help="Principal to allow, e.g. User:alice."
)
@click.option(
    "--deny-principal", "deny", multiple=True, help="Principal to deny, e.g. User:mallory."
)
@click.option(
    "--allow-host", default=WILDCARD, show_default=True, help="Host the allows apply from."
)
@click.option(
    "--deny-host", default=WILDCARD, show_default=True, help="Host the denies apply from."
)
@click.option(
    "--operation",
    "operations",
    multiple=True,
    help=f"Operation (repeatable): {', '.join(OPERATIONS)}.",
)
@click.option(
    "--producer", is_flag=True, help="Shortcut: Write, Describe and Create on the topics."
)
@click.option(
    "--consumer",
    is_flag=True,
    help="Shortcut: Read and Describe on the topics, Read on the groups.",
)
@_resource_options
@click.option(
    "--resource-pattern-type",
    default="literal",
    show_default=True,
    help="literal (the exact name, or '*') or prefixed (every name starting with it).",
)
@data_dir_option
def add(
    allow: tuple[str, ...],
    deny: tuple[str, ...],
    allow_host: str,
    deny_host: str,
    operations: tuple[str, ...],
    producer: bool,
    consumer: bool,
    topics: tuple[str, ...],
    groups: tuple[str, ...],
    cluster: bool,
    transactional_ids: tuple[str, ...],
    resource_pattern_type: str,
    data_dir: Path,
) -> None:
    """Add ACLs: every principal x operation x resource given."""
    pattern_type = _pattern_type(resource_pattern_type, (PatternType.LITERAL, PatternType.PREFIXED))
    allowed = _principals(allow, "--allow-principal")
    denied = _principals(deny, "--deny-principal")
    entries = [(p, allow_host, AclPermissionType.ALLOW) for p in allowed]
    entries += [(p, deny_host, AclPermissionType.DENY) for p in denied]
    if not entries:
        raise click.UsageError("give at least one --allow-principal or --deny-principal")
    resources = _resources(topics, groups, cluster, transactional_ids)
    if not resources:
        raise click.UsageError("give a resource: --topic, --group, --cluster or --transactional-id")
    wanted = _wanted_operations(operations, producer, consumer, resources)
    bindings = [
        AclBinding(ResourcePattern(kind, name, pattern_type), AccessControlEntry(p, h, op, perm))
        for kind, name in resources
        for op in wanted[kind]
        for p, h, perm in entries
    ]
    for binding in bindings:
        problem = validate_binding(binding)
        if problem is not None:
            raise click.ClickException(f"{binding}: {problem}")
    store = _store(data_dir)
    try:
        store.add(bindings)
    except (AclStoreError, OSError) as exc:
        raise click.ClickException(str(exc)) from None
    for binding in bindings:
        click.echo(f"added: {binding}")


def _wanted_operations(
    operations: tuple[str, ...],
    producer: bool,
    consumer: bool,
    resources: list[tuple[ResourceType, str]],
) -> dict[ResourceType, list[AclOperation]]:
    """Per resource type, the operations to grant (``--producer``/``--consumer`` add theirs)."""
    given = _operations(operations)
    if not given and not producer and not consumer:
        raise click.UsageError("give --operation (or --producer / --consumer)")
    wanted = {kind: list(given) for kind, _ in resources}
    topic_ops, group_ops = wanted.get(ResourceType.TOPIC), wanted.get(ResourceType.GROUP)
    if producer and topic_ops is not None:
        topic_ops += [AclOperation.WRITE, AclOperation.DESCRIBE, AclOperation.CREATE]
    if consumer and topic_ops is not None:
        topic_ops += [AclOperation.READ, AclOperation.DESCRIBE]
    if consumer and group_ops is not None:
        group_ops.append(AclOperation.READ)
    result = {kind: list(dict.fromkeys(ops)) for kind, ops in wanted.items()}
    empty = [kind.name.lower() for kind, ops in result.items() if not ops]
    if empty:
        raise click.UsageError(f"no operation for the {', '.join(empty)} given: add --operation")
    return result


def _filters(
    principals: tuple[str, ...],
    operations: tuple[str, ...],
    topics: tuple[str, ...],
    groups: tuple[str, ...],
    cluster: bool,
    transactional_ids: tuple[str, ...],
    resource_pattern_type: str,
) -> list[AclBindingFilter]:
    pattern_type = _pattern_type(
        resource_pattern_type,
        (PatternType.ANY, PatternType.MATCH, PatternType.LITERAL, PatternType.PREFIXED),
    )
    resources: list[tuple[ResourceType, str | None]] = list(
        _resources(topics, groups, cluster, transactional_ids)
    ) or [(ResourceType.ANY, None)]
    who: list[str | None] = list(_principals(principals, "--principal")) or [None]
    ops: list[AclOperation] = _operations(operations) or [AclOperation.ANY]
    return [
        AclBindingFilter(kind, name, pattern_type, principal, None, op)
        for kind, name in resources
        for principal in who
        for op in ops
    ]


_PATTERN_FILTER_HELP = "any (default), match (every ACL that applies), literal or prefixed."


@acls.command("list")
@click.option("--principal", "principals", multiple=True, help="Only this principal's ACLs.")
@click.option("--operation", "operations", multiple=True, help="Only ACLs for this operation.")
@_resource_options
@click.option(
    "--resource-pattern-type", default="any", show_default=True, help=_PATTERN_FILTER_HELP
)
@data_dir_option
def list_acls(
    principals: tuple[str, ...],
    operations: tuple[str, ...],
    topics: tuple[str, ...],
    groups: tuple[str, ...],
    cluster: bool,
    transactional_ids: tuple[str, ...],
    resource_pattern_type: str,
    data_dir: Path,
) -> None:
    """The ACLs (all, or those the filters select)."""
    filters = _filters(
        principals, operations, topics, groups, cluster, transactional_ids, resource_pattern_type
    )
    store = _store(data_dir)
    found = [b for b in store.bindings if any(f.matches(b) for f in filters)]
    out = Console(width=200)
    if not found:
        out.print("no ACLs")
        return
    table = Table("resource", "pattern", "name", "principal", "host", "operation", "permission")
    for binding in found:
        pattern, entry = binding.pattern, binding.entry
        table.add_row(
            pattern.resource_type.name,
            pattern.pattern_type.name,
            pattern.name,
            entry.principal,
            entry.host,
            entry.operation.name,
            entry.permission.name,
        )
    out.print(table)


@acls.command("remove")
@click.option("--principal", "principals", multiple=True, help="Only this principal's ACLs.")
@click.option("--operation", "operations", multiple=True, help="Only ACLs for this operation.")
@_resource_options
@click.option(
    "--resource-pattern-type", default="any", show_default=True, help=_PATTERN_FILTER_HELP
)
@click.option(
    "--all", "remove_all", is_flag=True, help="Allow removing every ACL (no filter given)."
)
@data_dir_option
def remove(
    principals: tuple[str, ...],
    operations: tuple[str, ...],
    topics: tuple[str, ...],
    groups: tuple[str, ...],
    cluster: bool,
    transactional_ids: tuple[str, ...],
    resource_pattern_type: str,
    remove_all: bool,
    data_dir: Path,
) -> None:
    """Remove the ACLs the filters select."""
    unfiltered = not (principals or operations or topics or groups or cluster or transactional_ids)
    if unfiltered and not remove_all:
        raise click.UsageError("no filter given: name a resource/principal/operation, or --all")
    filters = _filters(
        principals, operations, topics, groups, cluster, transactional_ids, resource_pattern_type
    )
    store = _store(data_dir)
    try:
        removed = {b for found in store.remove(filters) for b in found}
    except (AclStoreError, OSError) as exc:
        raise click.ClickException(str(exc)) from None
    if not removed:
        raise click.ClickException("no ACL matched; nothing removed")
    for binding in sorted(removed, key=str):
        click.echo(f"removed: {binding}")
