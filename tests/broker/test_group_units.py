"""The coordinator's small parts on their own: state table, protocol vote, config, store."""

from __future__ import annotations

import asyncio

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kayak.broker.group import (
    ALLOWED_TRANSITIONS,
    CommittedOffset,
    GroupCoordinatorConfig,
    GroupState,
    IllegalGroupTransitionError,
    InMemoryOffsetStore,
    OffsetStore,
    select_protocol,
)
from kayak.broker.group.group import Group
from kayak.broker.group.state import can_transition
from kayak.errors import ConfigError

pytestmark = pytest.mark.timeout(30)

S = GroupState

KAFKA_TRANSITIONS = {
    (S.EMPTY, S.PREPARING_REBALANCE),
    (S.PREPARING_REBALANCE, S.COMPLETING_REBALANCE),
    (S.PREPARING_REBALANCE, S.EMPTY),
    (S.COMPLETING_REBALANCE, S.STABLE),
    (S.COMPLETING_REBALANCE, S.PREPARING_REBALANCE),
    (S.STABLE, S.PREPARING_REBALANCE),
    *((s, S.DEAD) for s in S if s is not S.DEAD),
}


def test_transition_table_is_kafkas() -> None:
    allowed = {(src, dst) for src, targets in ALLOWED_TRANSITIONS.items() for dst in targets}
    assert allowed == KAFKA_TRANSITIONS
    assert set(ALLOWED_TRANSITIONS) == set(S)


@pytest.mark.parametrize("source", list(S))
@pytest.mark.parametrize("target", list(S))
def test_group_enforces_the_table(source: GroupState, target: GroupState) -> None:
    group = Group("g")
    group.state = source
    if (source, target) in KAFKA_TRANSITIONS:
        group.transition_to(target)
        assert group.state is target
    else:
        with pytest.raises(IllegalGroupTransitionError):
            group.transition_to(target)
        assert group.state is source
    assert can_transition(source, target) == ((source, target) in KAFKA_TRANSITIONS)


def test_state_names_are_kafkas() -> None:
    assert [s.value for s in S] == [
        "Empty",
        "PreparingRebalance",
        "CompletingRebalance",
        "Stable",
        "Dead",
    ]


def test_select_protocol_by_votes() -> None:
    assert select_protocol([["range", "rr"], ["rr", "range"], ["rr"]]) == "rr"
    assert select_protocol([["a", "b"], ["b", "a"], ["a", "b"]]) == "a"
    # a tie goes to the first member's preference
    assert select_protocol([["b", "a"], ["a", "b"]]) == "b"
    # a member's favourite that others lack does not count: it votes for its next choice
    assert select_protocol([["sticky", "range"], ["range"]]) == "range"
    with pytest.raises(ValueError):
        select_protocol([["a"], ["b"]])
    with pytest.raises(ValueError):
        select_protocol([])


names = st.sampled_from(["range", "roundrobin", "sticky", "cooperative-sticky"])


@given(st.lists(st.lists(names, min_size=1, unique=True), min_size=1, max_size=6))
def test_selected_protocol_is_supported_by_everyone_and_most_voted(
    preferences: list[list[str]],
) -> None:
    common = set(preferences[0]).intersection(*preferences[1:])
    if not common:
        with pytest.raises(ValueError):
            select_protocol(preferences)
        return
    chosen = select_protocol(preferences)
    assert all(chosen in p for p in preferences)
    votes = [next(n for n in p if n in common) for p in preferences]
    assert votes.count(chosen) == max(votes.count(n) for n in common)


def test_config_defaults_are_kafkas() -> None:
    config = GroupCoordinatorConfig()
    assert config.group_initial_rebalance_delay_ms == 3000
    assert config.group_min_session_timeout_ms == 6000
    assert config.group_max_session_timeout_ms == 1_800_000
    assert config.offset_metadata_max_bytes == 4096
    assert config.group_max_size == 2**31 - 1


def test_config_from_kafka_property_names() -> None:
    config = GroupCoordinatorConfig.from_properties(
        {"group.initial.rebalance.delay.ms": "0", "group.max.size": 10}
    )
    assert config.group_initial_rebalance_delay_ms == 0
    assert config.group_max_size == 10
    with pytest.raises(ConfigError, match=r"group\.min\.session"):
        GroupCoordinatorConfig.from_properties({"group.min.session.timeout.ms": "soon"})
    with pytest.raises(ConfigError, match="not a group coordinator"):
        GroupCoordinatorConfig.from_properties({"session.timeout.ms": 1})


@pytest.mark.parametrize(
    ("settings", "property_name"),
    [
        ({"group_initial_rebalance_delay_ms": -1}, "group.initial.rebalance.delay.ms"),
        (
            {"group_min_session_timeout_ms": 10, "group_max_session_timeout_ms": 5},
            "group.max.session.timeout.ms",
        ),
        ({"group_max_size": 0}, "group.max.size"),
        ({"offset_metadata_max_bytes": -1}, "offset.metadata.max.bytes"),
    ],
)
def test_config_rejects_unusable_values(settings: dict[str, int], property_name: str) -> None:
    with pytest.raises(ConfigError) as raised:
        GroupCoordinatorConfig(**settings)
    assert raised.value.name == property_name


def test_in_memory_store() -> None:
    async def scenario() -> None:
        store = InMemoryOffsetStore()
        assert isinstance(store, OffsetStore)
        assert store.fetch("g", "t", 0) is None
        await store.commit("g", "t", 0, 5, 2, "m", 100)
        await store.commit("g", "t", 0, 6, 2, "m2", 200)  # the latest commit wins
        await store.commit("g", "u", 1, 1, -1, "", 300)
        await store.commit("other", "t", 0, 9, -1, "", 400)
        assert store.fetch("g", "t", 0) == CommittedOffset(6, 2, "m2", 200)
        assert store.fetch_all("g") == {
            ("t", 0): CommittedOffset(6, 2, "m2", 200),
            ("u", 1): CommittedOffset(1, -1, "", 300),
        }
        assert store.groups() == ["g", "other"]
        snapshot = store.fetch_all("g")
        await store.delete_group("g")
        assert store.fetch_all("g") == {}
        assert store.groups() == ["other"]
        assert len(snapshot) == 2  # fetch_all hands out a copy
        assert store.fetch("other", "t", 0) is not None
        await store.delete_group("never-existed")

    asyncio.run(scenario())
