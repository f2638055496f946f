"""Retry backoff (Kafka's KIP-580 exponential backoff) and deadlines."""

from __future__ import annotations

import random
import statistics
from typing import Any

import pytest

from kayak.client.backoff import (
    BackoffStrategy,
    ConstantBackoff,
    Deadline,
    ExponentialBackoff,
    backoff_from_config,
    reconnect_backoff_from_config,
)
from kayak.client.config import ConsumerConfig, ProducerConfig
from kayak.errors import ConfigError


def seeded(base_ms: float = 100, max_ms: float = 1000, **kwargs: float) -> ExponentialBackoff:
    return ExponentialBackoff(base_ms, max_ms, rng=random.Random(580), **kwargs)


def test_every_delay_stays_within_its_jitter_band_and_the_cap() -> None:
    backoff = seeded(100, 10_000)
    for attempt in range(200):
        for _ in range(20):
            unjittered = min(100 * 2**attempt, 10_000)
            delay = backoff.delay_ms(attempt)
            assert unjittered * 0.8 <= delay <= min(unjittered * 1.2, 10_000), attempt


def test_growth_is_exponential_until_the_cap() -> None:
    backoff = seeded(100, 1000, jitter=0)
    assert [backoff.delay_ms(a) for a in range(7)] == [100, 200, 400, 800, 1000, 1000, 1000]
    tripled = seeded(10, 10_000, multiplier=3, jitter=0)
    assert [tripled.delay_ms(a) for a in range(4)] == pytest.approx([10, 30, 90, 270])


def test_jitter_spreads_both_sides_of_attempt_zero() -> None:
    backoff = seeded(100, 1000)
    samples = [backoff.delay_ms(0) for _ in range(2000)]
    assert all(80 <= s <= 120 for s in samples)  # attempt 0 is base ± 20%
    assert min(samples) < 85 and max(samples) > 115  # ... and really uses the whole band
    assert statistics.fmean(samples) == pytest.approx(100, rel=0.02)


def test_at_the_cap_jitter_only_goes_down() -> None:
    backoff = seeded(100, 1000)
    samples = [backoff.delay_ms(20) for _ in range(1000)]
    assert max(samples) <= 1000
    assert min(samples) >= 1000 * 0.8 - 1e-9
    assert sum(s == 1000 for s in samples) > 300  # the upper half of the band is clipped


def test_huge_attempts_do_not_overflow() -> None:
    backoff = seeded(100, 30_000)
    for attempt in (64, 1_024, 10_000, 10**9):
        assert 24_000 <= backoff.delay_ms(attempt) <= 30_000


def test_a_base_above_the_cap_is_a_constant_cap_like_java() -> None:
    backoff = seeded(5_000, 1_000)
    assert {backoff.delay_ms(a) for a in range(10)} == {1_000}
    assert seeded(1_000, 1_000).delay_ms(3) == 1_000


def test_delay_is_in_seconds() -> None:
    first, second = seeded(), seeded()
    assert [first.delay(a) for a in range(5)] == [second.delay_ms(a) / 1000 for a in range(5)]
    no_jitter = seeded(100, 1000, jitter=0)
    assert no_jitter.delay(1) == 0.2


def test_seeded_backoffs_repeat_exactly() -> None:
    assert [seeded().delay_ms(a) for a in range(10)] == [seeded().delay_ms(a) for a in range(10)]


@pytest.mark.parametrize(
    ("kwargs", "name"),
    [
        ({"base_ms": -1, "max_ms": 10}, "base_ms"),
        ({"base_ms": 1, "max_ms": -10}, "max_ms"),
        ({"base_ms": 1, "max_ms": 10, "multiplier": 1}, "multiplier"),
        ({"base_ms": 1, "max_ms": 10, "jitter": 1.5}, "jitter"),
        ({"base_ms": 1, "max_ms": 10, "jitter": -0.1}, "jitter"),
    ],
)
def test_bad_backoff_settings(kwargs: dict[str, Any], name: str) -> None:
    with pytest.raises(ConfigError) as info:
        ExponentialBackoff(**kwargs)
    assert info.value.name == name


def test_attempts_count_from_zero() -> None:
    with pytest.raises(ValueError, match="from 0"):
        seeded().delay(-1)
    with pytest.raises(ValueError, match="from 0"):
        ConstantBackoff(5).delay(-1)


def test_constant_backoff() -> None:
    backoff: BackoffStrategy = ConstantBackoff(250)
    assert {backoff.delay(a) for a in range(100)} == {0.25}
    with pytest.raises(ConfigError):
        ConstantBackoff(-1)


def test_backoffs_from_client_configuration() -> None:
    cfg = ProducerConfig.from_user(
        bootstrap_servers="h:1", retry_backoff_ms=50, retry_backoff_max_ms=400
    )
    retry = backoff_from_config(cfg, rng=random.Random(1))
    assert all(40 <= retry.delay_ms(0) <= 60 for _ in range(100))
    assert all(320 <= retry.delay_ms(10) <= 400 for _ in range(100))

    consumer = ConsumerConfig.from_user(bootstrap_servers="h:1")
    reconnect = reconnect_backoff_from_config(consumer, rng=random.Random(2))
    assert all(40 <= reconnect.delay_ms(0) <= 60 for _ in range(100))  # 50 ms ± 20%
    assert all(800 <= reconnect.delay_ms(10) <= 1000 for _ in range(100))


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_deadline_counts_down_on_its_clock() -> None:
    clock = FakeClock()
    deadline = Deadline(2.5, clock=clock)
    assert deadline.remaining() == 2.5 and not deadline.expired
    clock.now += 2
    assert deadline.remaining() == pytest.approx(0.5)
    assert deadline.remaining_ms() == pytest.approx(500)
    clock.now += 0.5
    assert deadline.expired and deadline.remaining() == 0
    clock.now += 10
    assert deadline.remaining() == 0  # never negative: safe as an asyncio timeout


def test_deadline_from_milliseconds_and_without_limit() -> None:
    clock = FakeClock()
    deadline = Deadline.from_ms(120_000, clock=clock)
    assert deadline.expires_at == 1120.0
    forever = Deadline(None, clock=clock)
    clock.now += 10**9
    assert not forever.expired and forever.remaining() == float("inf")
    with pytest.raises(ValueError, match="at least 0"):
        Deadline(-1)


def test_deadline_uses_the_monotonic_clock_by_default() -> None:
    deadline = Deadline(60)
    assert 59 < deadline.remaining() <= 60
    assert Deadline(0).expired
