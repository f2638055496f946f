"""How long to wait before trying again, and how long is left before giving up.

``ExponentialBackoff`` is Kafka's (KIP-580, ``org.apache.kafka.common.utils.ExponentialBackoff``):
the wait grows by ``multiplier`` per failed attempt from ``base_ms`` up to ``max_ms``, and
each wait is spread by a random factor in ``[1 - jitter, 1 + jitter)`` so that many clients
failing together do not retry together; jitter never takes a wait above ``max_ms``. If
``base_ms >= max_ms`` the wait is a constant ``max_ms``, as in Java.

``Deadline`` tracks an overall time limit (``delivery.timeout.ms``, ``max.block.ms``) on the
monotonic clock, so wall-clock jumps cannot cut it short or stretch it.
"""

from __future__ import annotations

import math
import random
import time
from collections.abc import Callable
from typing import Protocol

from kayak.errors import ConfigError

__all__ = [
    "BackoffStrategy",
    "ConstantBackoff",
    "Deadline",
    "ExponentialBackoff",
    "backoff_from_config",
    "reconnect_backoff_from_config",
]

# Kafka's CommonClientConfigs.RETRY_BACKOFF_EXP_BASE and RETRY_BACKOFF_JITTER.
DEFAULT_MULTIPLIER = 2.0
DEFAULT_JITTER = 0.2


class BackoffStrategy(Protocol):
    """Gives the wait, in seconds, before retry number ``attempt`` (0 for the first retry)."""

    def delay(self, attempt: int) -> float:
        """Seconds to wait before retry ``attempt`` (``attempt >= 0``)."""
        ...


def _check_attempt(attempt: int) -> None:
    if attempt < 0:
        raise ValueError(f"attempt counts retries from 0, got {attempt}")


class ExponentialBackoff:
    """``base_ms * multiplier**attempt``, capped at ``max_ms``, times a random factor in
    ``[1 - jitter, 1 + jitter)``, never above ``max_ms``; returned in seconds.

    ``rng`` makes the jitter reproducible in tests. Bad arguments raise ``ConfigError``.
    """

    __slots__ = ("_base_ms", "_jitter", "_max_exponent", "_max_ms", "_multiplier", "_rng")

    def __init__(
        self,
        base_ms: float,
        max_ms: float,
        multiplier: float = DEFAULT_MULTIPLIER,
        jitter: float = DEFAULT_JITTER,
        rng: random.Random | None = None,
    ) -> None:
        if base_ms < 0:
            raise ConfigError("base_ms", f"{base_ms} is negative; a backoff is at least 0 ms")
        if max_ms < 0:
            raise ConfigError("max_ms", f"{max_ms} is negative; a backoff is at least 0 ms")
        if not multiplier > 1:
            raise ConfigError("multiplier", f"{multiplier} does not grow the backoff; use > 1")
        if not 0 <= jitter <= 1:
            raise ConfigError("jitter", f"{jitter} is not a fraction from 0 to 1")
        # As Java: a base above the cap means a constant backoff of the cap.
        self._base_ms = min(base_ms, max_ms)
        self._max_ms = max_ms
        self._multiplier = multiplier
        self._jitter = jitter
        self._rng = rng or random.Random()
        # The attempt at which the cap is reached; growing the exponent past it would only
        # risk overflow (multiplier**10_000 is not a float).
        self._max_exponent = (
            math.log(max_ms / max(self._base_ms, 1)) / math.log(multiplier)
            if max_ms > self._base_ms
            else 0.0
        )

    def delay_ms(self, attempt: int) -> float:
        """Milliseconds to wait before retry ``attempt``."""
        _check_attempt(attempt)
        if self._max_exponent == 0:
            return self._base_ms
        # float ** float is typed Any (it may be complex); here both are positive.
        growth: float = self._multiplier ** min(attempt, self._max_exponent)
        term = self._base_ms * growth
        if self._jitter:
            term *= self._rng.uniform(1 - self._jitter, 1 + self._jitter)
        return min(term, self._max_ms)

    def delay(self, attempt: int) -> float:
        """Seconds to wait before retry ``attempt``."""
        return self.delay_ms(attempt) / 1000

    def __repr__(self) -> str:
        return (
            f"ExponentialBackoff(base_ms={self._base_ms}, max_ms={self._max_ms}, "
            f"multiplier={self._multiplier}, jitter={self._jitter})"
        )


class ConstantBackoff:
    """The same wait, ``delay_ms``, before every retry."""

    __slots__ = ("_delay_ms",)

    def __init__(self, delay_ms: float) -> None:
        if delay_ms < 0:
            raise ConfigError("delay_ms", f"{delay_ms} is negative; a backoff is at least 0 ms")
        self._delay_ms = delay_ms

    def delay(self, attempt: int) -> float:
        """Seconds to wait before retry ``attempt`` (the same for all)."""
        _check_attempt(attempt)
        return self._delay_ms / 1000

    def __repr__(self) -> str:
        return f"ConstantBackoff(delay_ms={self._delay_ms})"


class _RetryBackoffSettings(Protocol):
    @property
    def retry_backoff_ms(self) -> int: ...
    @property
    def retry_backoff_max_ms(self) -> int: ...


class _ReconnectBackoffSettings(Protocol):
    @property
    def reconnect_backoff_ms(self) -> int: ...
    @property
    def reconnect_backoff_max_ms(self) -> int: ...


def backoff_from_config(
    config: _RetryBackoffSettings, rng: random.Random | None = None
) -> ExponentialBackoff:
    """The request retry backoff of a client configuration: ``retry.backoff.ms`` growing 2x
    per attempt up to ``retry.backoff.max.ms``, 20% jitter (Kafka's values)."""
    return ExponentialBackoff(config.retry_backoff_ms, config.retry_backoff_max_ms, rng=rng)


def reconnect_backoff_from_config(
    config: _ReconnectBackoffSettings, rng: random.Random | None = None
) -> ExponentialBackoff:
    """The reconnect backoff of a client configuration: ``reconnect.backoff.ms`` growing 2x
    per failed attempt up to ``reconnect.backoff.max.ms``, 20% jitter (Kafka's values)."""
    return ExponentialBackoff(config.reconnect_backoff_ms, config.reconnect_backoff_max_ms, rng=rng)


class Deadline:
    """A point in time ``timeout`` seconds from now on a monotonic clock.

    ``timeout=None`` never expires (``remaining()`` is infinite). ``clock`` is for tests.
    """

    __slots__ = ("_clock", "_expires_at")

    def __init__(
        self, timeout: float | None, *, clock: Callable[[], float] = time.monotonic
    ) -> None:
        if timeout is not None and timeout < 0:
            raise ValueError(f"a timeout is at least 0 seconds, got {timeout}")
        self._clock = clock
        self._expires_at = math.inf if timeout is None else clock() + timeout

    @classmethod
    def from_ms(cls, timeout_ms: float, *, clock: Callable[[], float] = time.monotonic) -> Deadline:
        """A deadline ``timeout_ms`` milliseconds from now (the unit of Kafka's settings)."""
        return cls(timeout_ms / 1000, clock=clock)

    @property
    def expires_at(self) -> float:
        """The deadline on ``clock``'s scale (``inf`` if it never expires)."""
        return self._expires_at

    def remaining(self) -> float:
        """Seconds left, never negative: use it directly as an ``asyncio`` timeout."""
        return max(0.0, self._expires_at - self._clock())

    def remaining_ms(self) -> float:
        """Milliseconds left, never negative (for a request's timeout field)."""
        return self.remaining() * 1000

    @property
    def expired(self) -> bool:
        """True once the deadline has passed."""
        return self._clock() >= self._expires_at

    def __repr__(self) -> str:
        return f"Deadline(remaining={self.remaining():.3f}s)"
