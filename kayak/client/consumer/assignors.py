"""Partition assignors, and the subscription/assignment bytes group members exchange.

The group leader runs one of these over every member's subscription (``JoinGroup``) and
hands the result out through ``SyncGroup``. They are Kafka's built-in ones, so kayak
consumers can share a group with Java, librdkafka and other clients:

* ``range`` (Kafka's ``RangeAssignor``): per topic, members sorted, each a contiguous range;
  the first ``partitions % members`` members get one extra.
* ``roundrobin``: all partitions sorted by topic and number, dealt to the sorted members in
  turn (skipping members not subscribed to a partition's topic).
* ``cooperative-sticky``: balanced (member counts differ by at most one where subscriptions
  allow), and members keep what they own; a partition moving from one member to another is
  left unassigned for one round, so its owner revokes it first (the cooperative protocol's
  two-phase hand-over: only moving partitions are ever revoked).

Subscriptions and assignments travel as ``ConsumerProtocolSubscription`` /
``ConsumerProtocolAssignment`` with an int16 version in front. Readers decode newer versions
as the newest they know: later versions only append fields.
"""

from __future__ import annotations

import enum
import logging
import struct
from abc import ABC, abstractmethod
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import ClassVar, TypeVar

from kayak.client.types import TopicPartition
from kayak.errors import MalformedMessageError
from kayak.protocol.messages.consumer_protocol_assignment import ConsumerProtocolAssignment
from kayak.protocol.messages.consumer_protocol_assignment import (
    TopicPartition as AssignedTopic,
)
from kayak.protocol.messages.consumer_protocol_subscription import (
    ConsumerProtocolSubscription,
)
from kayak.protocol.messages.consumer_protocol_subscription import (
    TopicPartition as OwnedTopic,
)

log = logging.getLogger(__name__)

__all__ = [
    "ASSIGNORS",
    "Assignor",
    "AssignorChoice",
    "CooperativeStickyAssignor",
    "MemberSubscription",
    "RangeAssignor",
    "RebalanceProtocol",
    "RoundRobinAssignor",
    "decode_assignment",
    "decode_subscription",
    "encode_assignment",
    "encode_subscription",
    "make_assignors",
]

_VERSION = struct.Struct(">h")
SUBSCRIPTION_VERSION = 3
ASSIGNMENT_VERSION = 3

Assignment = dict[str, list[TopicPartition]]


class RebalanceProtocol(enum.Enum):
    EAGER = "eager"  # revoke everything before rejoining
    COOPERATIVE = "cooperative"  # revoke only what moves, after the new assignment


@dataclass(frozen=True)
class MemberSubscription:
    """One member, as the leader sees it in the JoinGroup response."""

    member_id: str
    topics: tuple[str, ...]
    owned: tuple[TopicPartition, ...] = ()
    generation: int = -1
    group_instance_id: str | None = None
    rack: str | None = None
    user_data: bytes | None = None

    @property
    def sort_key(self) -> tuple[bool, str, str]:
        """Kafka orders members by static id when they have one, then by member id."""
        return (self.group_instance_id is None, self.group_instance_id or "", self.member_id)


# -- wire encoding ----------------------------------------------------------------------------


def encode_subscription(
    topics: Iterable[str],
    owned: Iterable[TopicPartition] = (),
    generation: int = -1,
    rack: str | None = None,
    user_data: bytes | None = None,
) -> bytes:
    """A member's JoinGroup protocol metadata: version-prefixed ConsumerProtocolSubscription."""
    message = ConsumerProtocolSubscription(
        topics=sorted(set(topics)),
        user_data=user_data,
        owned_partitions=_group_by_topic(owned, OwnedTopic),
        generation_id=generation,
        rack_id=rack or None,
    )
    return _VERSION.pack(SUBSCRIPTION_VERSION) + message.encode(SUBSCRIPTION_VERSION)


def decode_subscription(member_id: str, instance_id: str | None, data: bytes) -> MemberSubscription:
    version, body = _split_version(data, "subscription")
    message = ConsumerProtocolSubscription.decode(body, min(version, SUBSCRIPTION_VERSION))
    owned = tuple(
        TopicPartition(t.topic, p) for t in message.owned_partitions for p in t.partitions
    )
    return MemberSubscription(
        member_id=member_id,
        topics=tuple(message.topics),
        owned=owned,
        generation=message.generation_id,
        group_instance_id=instance_id,
        rack=message.rack_id,
        user_data=message.user_data,
    )


def encode_assignment(
    partitions: Iterable[TopicPartition], user_data: bytes | None = None
) -> bytes:
    """A member's SyncGroup assignment (an empty one is still encoded, never empty bytes)."""
    message = ConsumerProtocolAssignment(
        assigned_partitions=_group_by_topic(partitions, AssignedTopic), user_data=user_data
    )
    return _VERSION.pack(ASSIGNMENT_VERSION) + message.encode(ASSIGNMENT_VERSION)


def decode_assignment(data: bytes) -> list[TopicPartition]:
    """The partitions in a SyncGroup assignment (empty bytes: none)."""
    if not data:
        return []
    version, body = _split_version(data, "assignment")
    message = ConsumerProtocolAssignment.decode(body, min(version, ASSIGNMENT_VERSION))
    return [TopicPartition(t.topic, p) for t in message.assigned_partitions for p in t.partitions]


def _split_version(data: bytes, what: str) -> tuple[int, memoryview]:
    if len(data) < _VERSION.size:
        raise MalformedMessageError(f"consumer {what} of {len(data)} bytes has no version")
    (version,) = _VERSION.unpack_from(data)
    if version < 0:
        raise MalformedMessageError(f"consumer {what} has negative version {version}")
    return version, memoryview(data)[_VERSION.size :]


_Topic = TypeVar("_Topic", OwnedTopic, AssignedTopic)


def _group_by_topic(partitions: Iterable[TopicPartition], kind: type[_Topic]) -> list[_Topic]:
    by_topic: dict[str, list[int]] = defaultdict(list)
    for tp in partitions:
        by_topic[tp.topic].append(tp.partition)
    return [kind(topic, sorted(numbers)) for topic, numbers in sorted(by_topic.items())]


# -- assignors ----------------------------------------------------------------------------------


class Assignor(ABC):
    """Computes every member's partitions from the members' subscriptions."""

    name: ClassVar[str]
    protocol: ClassVar[RebalanceProtocol] = RebalanceProtocol.EAGER

    @abstractmethod
    def assign(
        self, partition_counts: Mapping[str, int], members: Mapping[str, MemberSubscription]
    ) -> Assignment:
        """``partition_counts``: topic -> number of partitions (topics that exist)."""


class RangeAssignor(Assignor):
    name = "range"

    def assign(
        self, partition_counts: Mapping[str, int], members: Mapping[str, MemberSubscription]
    ) -> Assignment:
        result: Assignment = {member_id: [] for member_id in members}
        for topic, count in sorted(partition_counts.items()):
            subscribers = sorted(
                (m for m in members.values() if topic in m.topics), key=lambda m: m.sort_key
            )
            if not subscribers:
                continue
            each, extra = divmod(count, len(subscribers))
            start = 0
            for index, member in enumerate(subscribers):
                length = each + (1 if index < extra else 0)
                result[member.member_id] += [
                    TopicPartition(topic, p) for p in range(start, start + length)
                ]
                start += length
        return result


class RoundRobinAssignor(Assignor):
    name = "roundrobin"

    def assign(
        self, partition_counts: Mapping[str, int], members: Mapping[str, MemberSubscription]
    ) -> Assignment:
        result: Assignment = {member_id: [] for member_id in members}
        ordered = sorted(members.values(), key=lambda m: m.sort_key)
        if not ordered:
            return result
        turn = 0
        for tp in _all_partitions(partition_counts, members):
            for _ in range(len(ordered)):
                member = ordered[turn % len(ordered)]
                turn += 1
                if tp.topic in member.topics:
                    result[member.member_id].append(tp)
                    break
        return result


class CooperativeStickyAssignor(Assignor):
    """Balanced and sticky, handed over in two phases (see the module docstring).

    Balancing: members first keep what they own (a partition claimed by two members stays
    with the one of the newer generation), then unowned partitions go, fewest candidates
    first, to the subscribed member with the fewest partitions, and finally partitions move
    from the fullest to the emptiest eligible member until no move narrows the gap. With
    equal subscriptions that gives counts differing by at most one and moves as few
    partitions as possible.
    """

    name = "cooperative-sticky"
    protocol = RebalanceProtocol.COOPERATIVE

    def assign(
        self, partition_counts: Mapping[str, int], members: Mapping[str, MemberSubscription]
    ) -> Assignment:
        target = sticky_assignment(partition_counts, members)
        owners = _current_owners(partition_counts, members)
        # Phase one of a hand-over: a partition its owner must give up goes to nobody yet.
        return {
            member_id: [tp for tp in partitions if owners.get(tp, member_id) == member_id]
            for member_id, partitions in target.items()
        }


def sticky_assignment(
    partition_counts: Mapping[str, int], members: Mapping[str, MemberSubscription]
) -> Assignment:
    """The balanced assignment keeping as much of current ownership as balance allows."""
    eligible: dict[TopicPartition, list[str]] = {
        tp: [m for m in sorted(members) if tp.topic in members[m].topics]
        for tp in _all_partitions(partition_counts, members)
    }
    owners = _current_owners(partition_counts, members)
    held: dict[str, list[TopicPartition]] = {member_id: [] for member_id in members}
    for tp, owner in sorted(owners.items()):
        held[owner].append(tp)
    _trim_to_fair_share(held, eligible, len(members))
    taken = {tp for partitions in held.values() for tp in partitions}
    for tp in sorted((tp for tp in eligible if tp not in taken), key=lambda t: len(eligible[t])):
        if eligible[tp]:
            fewest = min(eligible[tp], key=lambda m: (len(held[m]), m))
            held[fewest].append(tp)
    _balance(held, eligible)
    return {member_id: sorted(partitions) for member_id, partitions in held.items()}


def _current_owners(
    partition_counts: Mapping[str, int], members: Mapping[str, MemberSubscription]
) -> dict[TopicPartition, str]:
    """Who owns each partition that still exists and is still subscribed to by its owner;
    of two claims the newer generation wins, equal claims both lose."""
    claims: dict[TopicPartition, list[tuple[int, str]]] = defaultdict(list)
    for member in members.values():
        for tp in member.owned:
            if tp.topic in member.topics and 0 <= tp.partition < partition_counts.get(tp.topic, 0):
                claims[tp].append((member.generation, member.member_id))
    owners: dict[TopicPartition, str] = {}
    for tp, found in claims.items():
        found.sort(reverse=True)
        if len(found) == 1 or found[0][0] > found[1][0]:
            owners[tp] = found[0][1]
        else:
            log.warning("%s is claimed by %s in the same generation", tp, [m for _, m in found])
    return owners


def _trim_to_fair_share(
    held: dict[str, list[TopicPartition]],
    eligible: Mapping[TopicPartition, list[str]],
    member_count: int,
) -> None:
    """Members keeping more than anyone could fairly have give the surplus back."""
    if not member_count:
        return
    ceiling = -(-len(eligible) // member_count)
    for member_id, partitions in held.items():
        if len(partitions) > ceiling:
            held[member_id] = partitions[:ceiling]


def _balance(
    held: dict[str, list[TopicPartition]], eligible: Mapping[TopicPartition, list[str]]
) -> None:
    """Move partitions from fuller to emptier eligible members while that narrows the gap."""
    moved = True
    while moved:
        moved = False
        for donor in sorted(held, key=lambda m: (-len(held[m]), m)):
            for tp in reversed(held[donor]):
                taker = min(eligible[tp], key=lambda m: (len(held[m]), m))
                if len(held[donor]) - len(held[taker]) > 1:
                    held[donor].remove(tp)
                    held[taker].append(tp)
                    moved = True
                    break
            if moved:
                break


def _all_partitions(
    partition_counts: Mapping[str, int], members: Mapping[str, MemberSubscription]
) -> list[TopicPartition]:
    subscribed = {topic for member in members.values() for topic in member.topics}
    return [
        TopicPartition(topic, p)
        for topic in sorted(subscribed)
        for p in range(partition_counts.get(topic, 0))
    ]


ASSIGNORS: dict[str, type[Assignor]] = {
    cls.name: cls for cls in (RangeAssignor, RoundRobinAssignor, CooperativeStickyAssignor)
}


@dataclass
class AssignorChoice:
    """The configured assignors, preferred first, and the rebalance protocol they allow."""

    assignors: list[Assignor] = field(default_factory=list)

    @property
    def protocol(self) -> RebalanceProtocol:
        """Cooperative only if every configured assignor is (as Kafka's Java client)."""
        if self.assignors and all(
            a.protocol is RebalanceProtocol.COOPERATIVE for a in self.assignors
        ):
            return RebalanceProtocol.COOPERATIVE
        return RebalanceProtocol.EAGER

    def by_name(self, name: str) -> Assignor:
        for assignor in self.assignors:
            if assignor.name == name:
                return assignor
        raise MalformedMessageError(f"the group chose assignor {name!r}, which kayak was not given")


def make_assignors(names: Iterable[str]) -> AssignorChoice:
    return AssignorChoice([ASSIGNORS[name]() for name in names])
