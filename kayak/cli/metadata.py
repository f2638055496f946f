"""``kayak metadata`` (and ``-L`` on ``consume``/``produce``): the cluster's brokers, topics
and partitions, as ``kcat -L`` prints them, or as kcat's JSON with ``-J``."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import click

from kayak.cli.admin_common import ClusterTarget, run_admin
from kayak.cli.options import (
    bootstrap_option,
    bootstrap_servers,
    client_properties,
    client_properties_options,
)
from kayak.client.admin import Admin, ClusterDescription, TopicDescription

__all__ = ["metadata", "print_metadata"]


@dataclass
class _Snapshot:
    cluster: ClusterDescription
    topics: list[TopicDescription]


def print_metadata(
    bootstrap: str,
    properties: dict[str, str],
    timeout: float,
    topic: str | None = None,
    as_json: bool = False,
) -> None:
    """Print the cluster's metadata (only ``topic``'s if given) to stdout."""
    target = ClusterTarget(timeout, properties, bootstrap)

    async def action(admin: Admin) -> _Snapshot:
        cluster = await admin.describe_cluster()
        if topic is not None:
            topics = list((await admin.describe_topics([topic])).values())
        else:
            topics = list((await admin.list_topics(internal=True)).values())
        return _Snapshot(cluster, topics)

    snapshot = run_admin(target, action)
    if as_json:
        click.echo(json.dumps(_as_json(snapshot, bootstrap, topic)))
    else:
        click.echo("\n".join(_as_text(snapshot, bootstrap, topic)))


def _as_text(snapshot: _Snapshot, bootstrap: str, topic: str | None) -> list[str]:
    cluster = snapshot.cluster
    lines = [
        f"Metadata for {'all topics' if topic is None else topic} (from {bootstrap}), "
        f"cluster id {cluster.cluster_id or '-'}:",
        f" {len(cluster.brokers)} brokers:",
    ]
    for b in cluster.brokers:
        role = " (controller)" if b.node_id == cluster.controller_id else ""
        lines.append(f"  broker {b.node_id} at {b.host}:{b.port}{role}")
    lines.append(f" {len(snapshot.topics)} topics:")
    for t in snapshot.topics:
        lines.append(f'  topic "{t.name}" with {t.partition_count} partitions:')
        for p in t.partitions:
            lines.append(
                f"    partition {p.partition}, leader {p.leader}, replicas: "
                f"{','.join(map(str, p.replicas))}, isrs: {','.join(map(str, p.isr))}"
            )
    return lines


def _as_json(snapshot: _Snapshot, bootstrap: str, topic: str | None) -> dict[str, object]:
    cluster = snapshot.cluster
    return {
        "originating_broker": {"name": bootstrap},
        "query": {"topic": topic or "*"},
        "cluster_id": cluster.cluster_id,
        "controllerid": cluster.controller_id,
        "brokers": [{"id": b.node_id, "name": f"{b.host}:{b.port}"} for b in cluster.brokers],
        "topics": [
            {
                "topic": t.name,
                "partitions": [
                    {
                        "partition": p.partition,
                        "leader": p.leader,
                        "replicas": [{"id": r} for r in p.replicas],
                        "isrs": [{"id": r} for r in p.isr],
                    }
                    for p in t.partitions
                ],
            }
            for t in snapshot.topics
        ],
    }


@click.command()
@bootstrap_option
@click.option("-t", "--topic", help="Only this topic.")
@click.option("-J", "--json", "as_json", is_flag=True, help="kcat's -L -J JSON.")
@click.option(
    "--timeout",
    type=click.FloatRange(min=0.1),
    default=5.0,
    show_default=True,
    help="Seconds to wait for the cluster.",
)
@client_properties_options("admin client", "request.timeout.ms=5000")
def metadata(
    topic: str | None,
    as_json: bool,
    timeout: float,
    properties: tuple[str, ...],
    command_config: Path | None,
) -> None:
    """List brokers, topics and partitions (leader, replicas, in-sync replicas), like
    kcat -L."""
    print_metadata(
        bootstrap_servers(), client_properties(properties, command_config), timeout, topic, as_json
    )
