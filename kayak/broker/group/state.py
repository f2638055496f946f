"""The states of a classic consumer group and the transitions between them, as one table.

- Empty → PreparingRebalance: a member joins.
- PreparingRebalance → CompletingRebalance: every expected member rejoined, or the rebalance
  timeout passed with at least one of them.
- PreparingRebalance → Empty: nobody is left when the join phase ends.
- CompletingRebalance → Stable: the leader's SyncGroup delivered the assignments.
- CompletingRebalance / Stable → PreparingRebalance: a join with new metadata, a leave, or a
  session expiry.
- Any state but Dead → Dead: the group is deleted. Dead is final.
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import Enum

from kayak.errors import KayakError


class GroupState(Enum):
    """A group's state; the value is the name Kafka reports in DescribeGroups/ListGroups."""

    EMPTY = "Empty"
    PREPARING_REBALANCE = "PreparingRebalance"
    COMPLETING_REBALANCE = "CompletingRebalance"
    STABLE = "Stable"
    DEAD = "Dead"


_S = GroupState

ALLOWED_TRANSITIONS: Mapping[GroupState, frozenset[GroupState]] = {
    _S.EMPTY: frozenset({_S.PREPARING_REBALANCE, _S.DEAD}),
    _S.PREPARING_REBALANCE: frozenset({_S.COMPLETING_REBALANCE, _S.EMPTY, _S.DEAD}),
    _S.COMPLETING_REBALANCE: frozenset({_S.STABLE, _S.PREPARING_REBALANCE, _S.DEAD}),
    _S.STABLE: frozenset({_S.PREPARING_REBALANCE, _S.DEAD}),
    _S.DEAD: frozenset(),
}


class IllegalGroupTransitionError(KayakError, RuntimeError):
    """The coordinator tried a transition the table forbids: a bug, never a client's fault."""


def can_transition(source: GroupState, target: GroupState) -> bool:
    """Whether a group in ``source`` may move to ``target``."""
    return target in ALLOWED_TRANSITIONS[source]


def check_transition(group_id: str, source: GroupState, target: GroupState) -> None:
    """Raise :class:`IllegalGroupTransitionError` unless ``source -> target`` is allowed."""
    if not can_transition(source, target):
        raise IllegalGroupTransitionError(
            f"group {group_id!r} cannot go from {source.value} to {target.value}"
        )
