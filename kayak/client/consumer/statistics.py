"""The consumer's part of ``Consumer.statistics()``: per partition, records and bytes
handed to the application, offsets and lag; the group's state as ``cgrp`` (see
:mod:`kayak.client.statistics`)."""

from __future__ import annotations

from typing import Any

from kayak.client.cluster import Cluster
from kayak.client.config import ConsumerConfig
from kayak.client.consumer.group import GroupMember, MemberState
from kayak.client.consumer.subscription import SubscriptionState
from kayak.client.statistics import (
    UNKNOWN_OFFSET,
    ClientStatistics,
    StatsReporter,
    cluster_connections,
    nest_partitions,
    partition_entry,
    reporter_for,
    sum_partitions,
)

__all__ = ["ConsumerStatistics", "consumer_statistics"]

# librdkafka's names for the join states that map onto kayak's.
_JOIN_STATES = {
    MemberState.UNJOINED: "init",
    MemberState.REBALANCING: "wait-join",
    MemberState.STABLE: "steady",
    MemberState.CLOSED: "term",
}


class ConsumerStatistics:
    """A consumer's statistics: snapshots on demand, and ``stats_cb`` reports once started."""

    def __init__(self, config: ConsumerConfig, subscriptions: SubscriptionState) -> None:
        self._config = config
        self._subscriptions = subscriptions
        self._cluster: Cluster | None = None
        self._group: GroupMember | None = None
        self._stats = ClientStatistics("consumer", config.client_id, self._connections)
        self._reporter: StatsReporter | None = None

    def _connections(self) -> list[tuple[str, Any]]:
        connections: list[tuple[str, Any]] = cluster_connections(self._cluster)
        if self._group is not None and self._group.coordinator_connection is not None:
            connections.append(("GroupCoordinator", self._group.coordinator_connection))
        return connections

    def started(self, cluster: Cluster, group: GroupMember | None) -> None:
        self._cluster, self._group = cluster, group
        config = self._config
        self._reporter = reporter_for(config.statistics_interval_ms, config.stats_cb, self.snapshot)
        if self._reporter is not None:
            self._reporter.start()

    async def stop(self) -> None:
        if self._reporter is not None:
            await self._reporter.stop()

    def snapshot(self) -> dict[str, Any]:
        return consumer_statistics(
            self._stats,
            self._subscriptions,
            self._group,
            read_committed=self._config.isolation_level == "read_committed",
        )


def consumer_statistics(
    stats: ClientStatistics,
    subscriptions: SubscriptionState,
    group: GroupMember | None,
    *,
    read_committed: bool = False,
) -> dict[str, Any]:
    """The statistics dict of a consumer: ``consumer_lag`` is the high watermark minus the
    position (records the application has not been given yet), -1 while either is unknown;
    with ``read_committed`` the last stable offset (``ls_offset``) stands in for the high
    watermark, as in librdkafka and Java: records of open transactions cannot be read yet."""
    entries = []
    assignment = subscriptions.assignment
    for tp, counters in subscriptions.counters.items():
        entry: dict[str, int] = {}
        state = assignment.get(tp)
        if state is not None:
            high = state.high_watermark if state.high_watermark is not None else UNKNOWN_OFFSET
            stable = state.last_stable_offset
            stable = stable if stable is not None and stable >= 0 else UNKNOWN_OFFSET
            position = state.position if state.has_position else None
            end = stable if read_committed else high
            entry = {
                "fetch_offset": state.fetch_offset,
                "hi_offset": high,
                "ls_offset": stable,
                "app_offset": position if position is not None else UNKNOWN_OFFSET,
                "consumer_lag": max(end - position, 0)
                if end >= 0 and position is not None
                else UNKNOWN_OFFSET,
            }
        entries.append(
            (
                tp.topic,
                tp.partition,
                partition_entry(
                    rxmsgs=counters.rx_records,
                    rxbytes=counters.rx_bytes,
                    committed_offset=counters.committed_offset,
                    **entry,
                ),
            )
        )
    topics = nest_partitions(entries)
    extra: dict[str, Any] = {
        "rxmsgs": sum_partitions(topics, "rxmsgs"),
        "rxmsg_bytes": sum_partitions(topics, "rxbytes"),
    }
    if group is not None:
        extra["cgrp"] = group_statistics(group, len(assignment))
    return stats.snapshot(topics, **extra)


def group_statistics(group: GroupMember, assignment_size: int) -> dict[str, Any]:
    """``cgrp``: librdkafka's ``state`` (of the coordinator connection) and ``join_state``."""
    coordinator = group.coordinator_connection
    if group.state is MemberState.CLOSED:
        state = "term"
    elif coordinator is not None and coordinator.usable:
        state = "up"
    else:
        state = "wait-coord"
    return {
        "state": state,
        "join_state": _JOIN_STATES[group.state],
        "rebalance_cnt": group.rebalances,
        "assignment_size": assignment_size,
        "generation": group.generation,
        "member_id": group.member_id,
    }
