"""Assignors and the subscription/assignment bytes, on plain data (no broker)."""

from __future__ import annotations

import itertools
import random

import pytest

from kayak.client.consumer.assignors import (
    CooperativeStickyAssignor,
    MemberSubscription,
    RangeAssignor,
    RebalanceProtocol,
    RoundRobinAssignor,
    decode_assignment,
    decode_subscription,
    encode_assignment,
    encode_subscription,
    make_assignors,
    sticky_assignment,
)
from kayak.client.types import TopicPartition
from kayak.protocol.messages.consumer_protocol_subscription import ConsumerProtocolSubscription

pytestmark = pytest.mark.timeout(30)


def members(*specs: tuple[str, tuple[str, ...]]) -> dict[str, MemberSubscription]:
    return {m: MemberSubscription(m, topics) for m, topics in specs}


def tps(topic: str, *partitions: int) -> list[TopicPartition]:
    return [TopicPartition(topic, p) for p in partitions]


def test_range_gives_each_topic_contiguous_ranges_extra_to_the_first() -> None:
    group = members(("a", ("t", "u")), ("b", ("t", "u")), ("c", ("t",)))
    result = RangeAssignor().assign({"t": 7, "u": 3}, group)
    assert result == {
        "a": tps("t", 0, 1, 2) + tps("u", 0, 1),
        "b": tps("t", 3, 4) + tps("u", 2),
        "c": tps("t", 5, 6),
    }


def test_roundrobin_deals_sorted_partitions_to_subscribed_members() -> None:
    group = members(("a", ("t", "u")), ("b", ("t",)))
    result = RoundRobinAssignor().assign({"t": 3, "u": 2}, group)
    assert result == {"a": tps("t", 0, 2) + tps("u", 0, 1), "b": tps("t", 1)}


def test_assignors_ignore_topics_that_do_not_exist() -> None:
    group = members(("a", ("t", "gone")))
    for assignor in (RangeAssignor(), RoundRobinAssignor(), CooperativeStickyAssignor()):
        assert assignor.assign({"t": 2}, group) == {"a": tps("t", 0, 1)}


def owned(member: str, partitions: list[TopicPartition], generation: int = 1) -> MemberSubscription:
    return MemberSubscription(member, ("t",), tuple(partitions), generation)


def test_sticky_balances_and_keeps_what_members_own() -> None:
    before = {"a": owned("a", tps("t", 0, 1, 2, 3, 4, 5)), "b": owned("b", [])}
    after = sticky_assignment({"t": 6}, before)
    assert sorted(len(p) for p in after.values()) == [3, 3]
    assert set(after["a"]) <= set(tps("t", 0, 1, 2, 3, 4, 5))
    # a newcomer takes from the fullest member only; the others keep everything they had
    three = {
        "a": owned("a", tps("t", 0, 1, 2)),
        "b": owned("b", tps("t", 3, 4, 5)),
        "c": owned("c", []),
    }
    result = sticky_assignment({"t": 6}, three)
    assert [len(result[m]) for m in "abc"] == [2, 2, 2]
    assert set(result["a"]) <= set(tps("t", 0, 1, 2))
    assert set(result["b"]) <= set(tps("t", 3, 4, 5))


def test_sticky_is_balanced_and_covers_everything_for_random_groups() -> None:
    rng = random.Random(7)
    for _ in range(50):
        count = rng.randint(1, 30)
        names = [f"m{i}" for i in range(rng.randint(1, 6))]
        shuffled = tps("t", *range(count))
        rng.shuffle(shuffled)
        claims = {m: [tp for tp in shuffled if rng.random() < 0.3] for m in names}
        group = {m: owned(m, claims[m], generation=i) for i, m in enumerate(names)}
        result = sticky_assignment({"t": count}, group)
        everything = sorted(itertools.chain.from_iterable(result.values()))
        assert everything == tps("t", *range(count))
        sizes = [len(p) for p in result.values()]
        assert max(sizes) - min(sizes) <= 1


def test_cooperative_sticky_holds_back_partitions_that_change_owner() -> None:
    group = {"a": owned("a", tps("t", 0, 1, 2, 3)), "b": owned("b", [])}
    first = CooperativeStickyAssignor().assign({"t": 4}, group)
    # phase one: b's future partitions are still a's, so nobody gets them yet
    assert first["b"] == []
    kept = first["a"]
    assert len(kept) == 2
    # a revoked the other two and rejoined: phase two hands them to b
    group = {"a": owned("a", kept, 2), "b": owned("b", [], 2)}
    second = CooperativeStickyAssignor().assign({"t": 4}, group)
    assert second["a"] == kept
    assert sorted(second["b"]) == sorted(set(tps("t", 0, 1, 2, 3)) - set(kept))


def test_cooperative_sticky_newer_generation_wins_a_double_claim() -> None:
    group = {"a": owned("a", tps("t", 0), 3), "b": owned("b", tps("t", 0), 2)}
    result = sticky_assignment({"t": 1}, group)
    assert result == {"a": tps("t", 0), "b": []}


def test_rebalance_protocol_is_cooperative_only_if_every_assignor_is() -> None:
    assert make_assignors(["cooperative-sticky"]).protocol is RebalanceProtocol.COOPERATIVE
    assert make_assignors(["range", "cooperative-sticky"]).protocol is RebalanceProtocol.EAGER


def test_subscription_and_assignment_round_trip_with_a_version_prefix() -> None:
    data = encode_subscription(["b", "a"], tps("a", 1, 0), generation=4, rack="r1")
    assert data[:2] == b"\x00\x03"
    decoded = decode_subscription("m", "static-1", data)
    assert decoded.topics == ("a", "b")
    assert decoded.owned == tuple(tps("a", 0, 1))
    assert (decoded.generation, decoded.rack, decoded.group_instance_id) == (4, "r1", "static-1")
    assert decode_assignment(encode_assignment(tps("x", 2) + tps("y", 0))) == tps("x", 2) + tps(
        "y", 0
    )
    # an empty assignment is encoded (not empty bytes); empty bytes decode as nothing
    assert len(encode_assignment([])) > 2
    assert decode_assignment(b"") == []


def test_a_v0_subscription_from_an_older_client_decodes() -> None:
    body = ConsumerProtocolSubscription(topics=["t"], user_data=b"x").encode(0)
    decoded = decode_subscription("m", None, b"\x00\x00" + body)
    assert decoded.topics == ("t",)
    assert decoded.owned == ()
    assert decoded.user_data == b"x"


def test_a_newer_subscription_version_decodes_as_the_newest_known() -> None:
    body = ConsumerProtocolSubscription(topics=["t"], generation_id=9).encode(3)
    decoded = decode_subscription("m", None, b"\x00\x07" + body + b"future fields")
    assert decoded.topics == ("t",)
    assert decoded.generation == 9
