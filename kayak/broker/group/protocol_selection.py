"""Choosing a group's protocol (for consumers: the partition assignor) by members' votes."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence


def common_protocols(preferences: Sequence[Sequence[str]]) -> set[str]:
    """Protocol names every member supports; ``preferences`` holds one list per member."""
    if not preferences:
        return set()
    common = set(preferences[0])
    for names in preferences[1:]:
        common.intersection_update(names)
    return common


def select_protocol(preferences: Sequence[Sequence[str]]) -> str:
    """The protocol the group will use, chosen the way Kafka's coordinator chooses it.

    Each member votes for the first protocol in its own preference order that every member
    supports; the protocol with the most votes wins. Kafka leaves ties to hash order; here the
    tie goes to the candidate the first member prefers, so the choice is reproducible.

    Raises ``ValueError`` if there are no members or no protocol they all support; the
    coordinator refuses such joins (INCONSISTENT_GROUP_PROTOCOL) before it gets here.
    """
    candidates = common_protocols(preferences)
    if not candidates:
        raise ValueError("no protocol is supported by every member")
    votes = Counter(next(name for name in names if name in candidates) for names in preferences)
    most = max(votes.values())
    return next(name for name in preferences[0] if votes.get(name) == most)
