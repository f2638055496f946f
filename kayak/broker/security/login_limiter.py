"""Rate limiting of failed SASL logins, per client address: a token bucket over failures.

Each address has a bucket of ``burst`` failures that refills at ``per_second``. A failed
login takes a token; while an address has no token left, its logins are refused without
looking at the credentials (a correct password too), so that guessing from one address is
held to ``per_second`` attempts on average however many connections it opens. Successful
logins take nothing: a well-configured client never notices the limiter.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

DEFAULT_BURST = 10
DEFAULT_PER_SECOND = 1.0
_MAX_ADDRESSES = 10_000  # beyond this, the least recently failing address is forgotten


@dataclass(slots=True)
class _Bucket:
    tokens: float
    updated: float


class LoginLimiter:
    """Per-address token buckets of failed logins; see the module docstring."""

    def __init__(
        self,
        burst: int = DEFAULT_BURST,
        per_second: float = DEFAULT_PER_SECOND,
        *,
        clock: Callable[[], float] = time.monotonic,
        max_addresses: int = _MAX_ADDRESSES,
    ) -> None:
        if burst < 1 or per_second <= 0:
            raise ValueError("a login limiter needs burst >= 1 and per_second > 0")
        self.burst = burst
        self.per_second = per_second
        self._clock = clock
        self._max_addresses = max_addresses
        self._buckets: OrderedDict[str, _Bucket] = OrderedDict()

    def allows(self, address: str) -> bool:
        """Whether a login from ``address`` may be checked now."""
        bucket = self._current(address)
        return bucket is None or bucket.tokens >= 1

    def retry_after(self, address: str) -> float:
        """Seconds until ``address`` may try again (0: now)."""
        bucket = self._current(address)
        if bucket is None or bucket.tokens >= 1:
            return 0.0
        return (1 - bucket.tokens) / self.per_second

    def record_failure(self, address: str) -> None:
        """A login from ``address`` failed: take a token."""
        bucket = self._current(address) or _Bucket(float(self.burst), self._clock())
        bucket.tokens = max(bucket.tokens - 1, 0.0)
        self._buckets[address] = bucket
        self._buckets.move_to_end(address)
        while len(self._buckets) > self._max_addresses:
            self._buckets.popitem(last=False)

    def _current(self, address: str) -> _Bucket | None:
        bucket = self._buckets.get(address)
        if bucket is None:
            return None
        now = self._clock()
        bucket.tokens = min(self.burst, bucket.tokens + (now - bucket.updated) * self.per_second)
        bucket.updated = now
        if bucket.tokens >= self.burst:
            del self._buckets[address]  # full again: nothing to remember
        return bucket
