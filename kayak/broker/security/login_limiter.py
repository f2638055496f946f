"""Rate limiting of login attempts, per client address: a token bucket over password checks.

Each address has a bucket of ``burst`` tokens that refills at ``per_second``. Every attempt
takes a token *before* the password is looked at (:meth:`LoginLimiter.acquire`) and holds it
while the check runs; a successful login gives it back, a failed one keeps it. So however
many connections an address opens at once, at most ``burst`` of its guesses are checked, and
``per_second`` on average after that. While an address has no token left, its logins are
refused without looking at the credentials (a correct password too). A well-configured
client never notices: its logins succeed and cost nothing.

Tokens held by attempts still in flight are not lost: a login that finds the bucket empty
only because other attempts from its address are being checked waits a moment for them to
end (a burst of correct logins from one host all get in), and is refused at once when the
bucket was emptied by failures.

The SASL authenticator and the registry's HTTP basic authentication share one limiter, so
neither is a way around the other. All methods run on the event loop's thread.
"""

from __future__ import annotations

import asyncio
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

DEFAULT_BURST = 10
DEFAULT_PER_SECOND = 1.0
# How long a login waits for attempts in flight from its address to give their tokens back.
DEFAULT_PATIENCE_S = 1.0
_MAX_ADDRESSES = 10_000  # beyond this, the least recently limited address is forgotten


@dataclass(slots=True)
class _Bucket:
    tokens: float
    updated: float


class LoginAttempt:
    """The token one login attempt holds; settled once, by :meth:`succeeded` or
    :meth:`failed`. An attempt dropped unsettled (its connection closed mid-exchange)
    counts as failed."""

    __slots__ = ("_limiter", "_settled", "address")

    def __init__(self, limiter: LoginLimiter, address: str) -> None:
        self._limiter = limiter
        self.address = address
        self._settled = False

    def succeeded(self) -> None:
        """The credentials were right: the token goes back to the bucket."""
        self._settle(give_back=True)

    def failed(self) -> None:
        """The credentials were wrong (or the exchange was abandoned): the token stays spent."""
        self._settle(give_back=False)

    def _settle(self, *, give_back: bool, wake: bool = True) -> None:
        if not self._settled:
            self._settled = True
            self._limiter._settle(self.address, give_back=give_back, wake=wake)

    def __del__(self) -> None:
        # The garbage collector may run this on any thread: no waiter is woken from here
        # (they wake up by themselves when their patience runs out).
        self._settle(give_back=False, wake=False)


class LoginLimiter:
    """Per-address token buckets over login attempts; see the module docstring."""

    def __init__(
        self,
        burst: int = DEFAULT_BURST,
        per_second: float = DEFAULT_PER_SECOND,
        *,
        clock: Callable[[], float] = time.monotonic,
        max_addresses: int = _MAX_ADDRESSES,
        patience_s: float = DEFAULT_PATIENCE_S,
    ) -> None:
        if burst < 1 or per_second <= 0:
            raise ValueError("a login limiter needs burst >= 1 and per_second > 0")
        self.burst = burst
        self.per_second = per_second
        self.patience_s = patience_s
        self._clock = clock
        self._max_addresses = max_addresses
        self._buckets: OrderedDict[str, _Bucket] = OrderedDict()
        self._in_flight: dict[str, int] = {}
        self._waiters: list[asyncio.Future[None]] = []

    def allows(self, address: str) -> bool:
        """Whether ``address`` has a token now (nothing is taken)."""
        bucket = self._current(address)
        return bucket is None or bucket.tokens >= 1

    def retry_after(self, address: str) -> float:
        """Seconds until ``address`` has a token again (0: now)."""
        bucket = self._current(address)
        if bucket is None or bucket.tokens >= 1:
            return 0.0
        return (1 - bucket.tokens) / self.per_second

    def in_flight(self, address: str) -> int:
        """How many attempts from ``address`` hold a token now."""
        return self._in_flight.get(address, 0)

    def try_acquire(self, address: str) -> LoginAttempt | None:
        """Take a token for an attempt from ``address``, or None if it has none."""
        bucket = self._current(address) or _Bucket(float(self.burst), self._clock())
        if bucket.tokens < 1:
            return None
        bucket.tokens -= 1
        self._buckets[address] = bucket
        self._buckets.move_to_end(address)
        while len(self._buckets) > self._max_addresses:
            self._buckets.popitem(last=False)
        self._in_flight[address] = self._in_flight.get(address, 0) + 1
        return LoginAttempt(self, address)

    async def acquire(self, address: str) -> LoginAttempt | None:
        """:meth:`try_acquire`, waiting up to ``patience_s`` while the bucket is empty only
        because attempts from ``address`` are in flight; None if still no token."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.patience_s
        while (attempt := self.try_acquire(address)) is None:
            remaining = deadline - loop.time()
            if remaining <= 0 or not self.in_flight(address):
                return None
            waiter: asyncio.Future[None] = loop.create_future()
            self._waiters.append(waiter)
            try:
                # Woken when an attempt ends; otherwise when a token has been refilled.
                await asyncio.wait({waiter}, timeout=min(remaining, self.retry_after(address)))
            finally:
                if waiter in self._waiters:
                    self._waiters.remove(waiter)
        return attempt

    def _settle(self, address: str, *, give_back: bool, wake: bool) -> None:
        count = self._in_flight.get(address, 0) - 1
        if count > 0:
            self._in_flight[address] = count
        else:
            self._in_flight.pop(address, None)
        if give_back:
            bucket = self._current(address)
            if bucket is not None:  # None: forgotten, or full again
                bucket.tokens = min(float(self.burst), bucket.tokens + 1)
                if bucket.tokens >= self.burst:
                    del self._buckets[address]
        if not wake:
            return
        waiters, self._waiters = self._waiters, []
        for waiter in waiters:
            if not waiter.done():
                waiter.set_result(None)

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
