"""Slowing down password guessing without locking anyone out: failures are answered late.

Kafka's way (``connection.failed.authentication.delay.ms``) is to answer a failed login after
a delay and never to refuse a correct password; kayak does the same, with delays that grow
with the failures, per client address and per user name:

- Every address and every user name has a budget of ``burst`` failures that refills at
  ``per_second``. A failure within the budget is answered at once (plus Kafka's fixed
  delay); past it, later and later: the n-th failure beyond the budget is answered n /
  ``per_second`` seconds after the budget ran out. The user name's delay is capped at
  ``max_user_delay_s`` (an attacker spraying wrong passwords for a user from many addresses
  must not make that user's own clients wait long); the address's grows with its failures.
- A password is checked only under one of the address's ``max_in_flight`` slots. A login
  takes a slot before its password is looked at; a correct one gives it back at once, a
  wrong one keeps it until its answer is due. So however many connections an address
  opens, its guesses are checked at ``per_second`` on average, after ``burst`` +
  ``max_in_flight`` at most: the parallel attempts that used to get round a per-connection
  delay wait for a slot instead.
- Logins waiting for a slot queue in order, at most ``max_waiting`` per address, each for up
  to ``patience_s``; beyond that a login is refused with a time to retry after
  (:meth:`LoginLimiter.retry_after`) and its password is not looked at.

A correct password is never refused because of other clients' failures: successes cost
nothing and are not delayed, so a client with the right password shares an address (a NAT,
a Kubernetes node) with a misconfigured one and still gets in, at most after waiting for a
slot.

The SASL authenticator and the registry's HTTP basic authentication share one limiter, so
neither is a way around the other. All methods run on the event loop's thread (except a
dropped attempt's clean-up, see :meth:`LoginAttempt.__del__`).
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import time
from collections import OrderedDict, deque
from collections.abc import Callable
from dataclasses import dataclass, field

DEFAULT_BURST = 10
DEFAULT_PER_SECOND = 1.0
DEFAULT_MAX_IN_FLIGHT = 8  # passwords of one address checked (or failures pending) at once
DEFAULT_MAX_WAITING = 100  # logins of one address queued for a slot; more are refused
DEFAULT_PATIENCE_S = 10.0  # how long a queued login waits for a slot before it is refused
DEFAULT_MAX_USER_DELAY_S = 30.0
_MAX_BUDGETS = 10_000  # beyond this, the least recently charged address or user is forgotten


@dataclass(slots=True)
class _Budget:
    """Failures an address or user may have without delay; below zero, a debt being repaid."""

    tokens: float
    updated: float


@dataclass(eq=False, slots=True)
class _Ticket:
    """A login queued for a slot; its event is set when it may be first in line now."""

    event: asyncio.Event = field(default_factory=asyncio.Event)


@dataclass(slots=True)
class _Slots:
    """One address's slots: logins being checked, failures held until their answer is due,
    and logins waiting in line."""

    checking: int = 0
    held_until: list[float] = field(default_factory=list)  # heap of release times
    waiting: deque[_Ticket] = field(default_factory=deque)


class LoginAttempt:
    """The slot one login holds while its password is checked; settled once, by
    :meth:`succeeded` or :meth:`failed`. An attempt dropped unsettled (its connection closed
    mid-exchange) gives its slot back: nothing was checked under it."""

    __slots__ = ("_limiter", "_settled", "address")

    def __init__(self, limiter: LoginLimiter, address: str) -> None:
        self._limiter = limiter
        self.address = address
        self._settled = False

    def succeeded(self) -> None:
        """The credentials were right: the slot is free again, nothing is charged."""
        if self._begin_settling():
            self._limiter._release(self.address, hold_s=0.0)

    def failed(self, user: str | None = None) -> float:
        """The credentials were wrong: one failure is charged to the address and to ``user``
        (the name the client gave, if any). Returns how many seconds the failure's answer is
        to be held back; the slot stays taken until then."""
        if not self._begin_settling():
            return 0.0
        delay = self._limiter._charge(self.address, user)
        self._limiter._release(self.address, hold_s=delay)
        return delay

    def abandoned(self) -> None:
        """The exchange ended before the password was checked: the slot is free again."""
        if self._begin_settling():
            self._limiter._release(self.address, hold_s=0.0)

    def _begin_settling(self) -> bool:
        if self._settled:
            return False
        self._settled = True
        return True

    def __del__(self) -> None:
        # The garbage collector may run this on any thread: no waiter is woken from here
        # (they look again by themselves when their patience runs out).
        if self._begin_settling():
            self._limiter._release(self.address, hold_s=0.0, wake=False)


class LoginLimiter:
    """Delays failed logins per address and user, checks passwords under per-address slots;
    see the module docstring."""

    def __init__(
        self,
        burst: int = DEFAULT_BURST,
        per_second: float = DEFAULT_PER_SECOND,
        *,
        max_in_flight: int = DEFAULT_MAX_IN_FLIGHT,
        max_waiting: int = DEFAULT_MAX_WAITING,
        patience_s: float = DEFAULT_PATIENCE_S,
        max_user_delay_s: float = DEFAULT_MAX_USER_DELAY_S,
        clock: Callable[[], float] = time.monotonic,
        max_budgets: int = _MAX_BUDGETS,
    ) -> None:
        if burst < 1 or per_second <= 0 or max_in_flight < 1 or max_waiting < 0:
            raise ValueError(
                "a login limiter needs burst >= 1, per_second > 0, max_in_flight >= 1 and "
                "max_waiting >= 0"
            )
        self.burst = burst
        self.per_second = per_second
        self.max_in_flight = max_in_flight
        self.max_waiting = max_waiting
        self.patience_s = patience_s
        self.max_user_delay_s = max_user_delay_s
        self._clock = clock
        self._max_budgets = max_budgets
        self._addresses: OrderedDict[str, _Budget] = OrderedDict()
        self._users: OrderedDict[str, _Budget] = OrderedDict()
        self._slots: dict[str, _Slots] = {}

    # -- what an address may do now ------------------------------------------------------

    def allows(self, address: str) -> bool:
        """Whether a login from ``address`` would be checked or queued now (not refused)."""
        slots = self._current_slots(address)
        return slots is None or self._free(slots) or len(slots.waiting) < self.max_waiting

    def retry_after(self, address: str) -> float:
        """Seconds a refused login from ``address`` should wait before trying again: until
        its next slot is released, or its failure budget has a failure to spare (0: now)."""
        now = self._clock()
        waits = [0.0]
        budget = self._refilled(self._addresses, address, now)
        if budget is not None and budget.tokens < 1:
            waits.append((1 - budget.tokens) / self.per_second)
        slots = self._current_slots(address)
        if slots is not None and not self._free(slots) and slots.held_until:
            waits.append(slots.held_until[0] - now)
        return max(waits)

    def in_flight(self, address: str) -> int:
        """How many of ``address``'s slots are taken now (checks, and failures not yet due)."""
        slots = self._current_slots(address)
        return 0 if slots is None else slots.checking + len(slots.held_until)

    def waiting(self, address: str) -> int:
        """How many logins from ``address`` wait for a slot."""
        slots = self._slots.get(address)
        return 0 if slots is None else len(slots.waiting)

    def failure_delay(self, address: str, user: str | None = None) -> float:
        """The delay the next failure from ``address`` (as ``user``) would get; nothing is
        charged."""
        now = self._clock()
        delay = self._debt_s(self._refilled(self._addresses, address, now), 1)
        if user is not None:
            user_delay = self._debt_s(self._refilled(self._users, user, now), 1)
            delay = max(delay, min(user_delay, self.max_user_delay_s))
        return delay

    # -- taking a slot ---------------------------------------------------------------------

    def try_acquire(self, address: str) -> LoginAttempt | None:
        """A slot for a login from ``address`` if one is free and nobody waits, else None."""
        slots = self._current_slots(address)
        if slots is not None and (slots.waiting or not self._free(slots)):
            return None
        return self._take(address)

    async def acquire(self, address: str) -> LoginAttempt | None:
        """A slot for a login from ``address``, waiting in line for up to ``patience_s``;
        None when the line is full or the wait too long (refuse the login)."""
        attempt = self.try_acquire(address)
        if attempt is not None:
            return attempt
        slots = self._slots.setdefault(address, _Slots())
        if len(slots.waiting) >= self.max_waiting:
            return None
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.patience_s
        ticket = _Ticket()
        slots.waiting.append(ticket)
        try:
            while True:
                self._expire(slots)
                if slots.waiting[0] is ticket and self._free(slots):
                    slots.waiting.popleft()
                    attempt = self._take(address)
                    self._wake_first(slots)  # a second free slot is the next one's
                    return attempt
                remaining = deadline - loop.time()
                if remaining <= 0:
                    return None
                await self._wait_turn(ticket, slots, remaining)
        finally:
            if ticket in slots.waiting:
                slots.waiting.remove(ticket)
                self._wake_first(slots)
            self._forget_if_idle(address, slots)

    # -- inside ---------------------------------------------------------------------------

    async def _wait_turn(self, ticket: _Ticket, slots: _Slots, remaining: float) -> None:
        """Until ``ticket`` is woken (a check ended), the next held slot is released, or
        ``remaining`` seconds have passed."""
        ticket.event.clear()
        timeout = remaining
        if slots.held_until:
            timeout = min(timeout, slots.held_until[0] - self._clock())
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(max(timeout, 0.001)):
                await ticket.event.wait()

    def _take(self, address: str) -> LoginAttempt:
        slots = self._slots.setdefault(address, _Slots())
        slots.checking += 1
        return LoginAttempt(self, address)

    def _release(self, address: str, *, hold_s: float, wake: bool = True) -> None:
        slots = self._slots.get(address)
        if slots is None:
            return
        slots.checking = max(slots.checking - 1, 0)
        if hold_s > 0:
            heapq.heappush(slots.held_until, self._clock() + hold_s)
            if len(self._slots) > self._max_budgets:
                self._sweep()
        if wake:
            self._wake_first(slots)
        if not slots.waiting:
            self._forget_if_idle(address, slots)

    def _charge(self, address: str, user: str | None) -> float:
        now = self._clock()
        delay = self._charge_one(self._addresses, address, now, cap_s=None)
        if user:
            delay = max(delay, self._charge_one(self._users, user, now, self.max_user_delay_s))
        return delay

    def _charge_one(
        self, budgets: OrderedDict[str, _Budget], key: str, now: float, cap_s: float | None
    ) -> float:
        budget = self._refilled(budgets, key, now) or _Budget(float(self.burst), now)
        budget.tokens -= 1
        if cap_s is not None:
            # A capped delay keeps a capped debt: later failures are not pushed further.
            budget.tokens = max(budget.tokens, -cap_s * self.per_second)
        budgets[key] = budget
        budgets.move_to_end(key)
        while len(budgets) > self._max_budgets:
            budgets.popitem(last=False)
        return self._debt_s(budget, 0)

    def _debt_s(self, budget: _Budget | None, spending: int) -> float:
        if budget is None:
            return 0.0
        return max(0.0, (spending - budget.tokens) / self.per_second)

    def _refilled(self, budgets: OrderedDict[str, _Budget], key: str, now: float) -> _Budget | None:
        budget = budgets.get(key)
        if budget is None:
            return None
        budget.tokens = min(self.burst, budget.tokens + (now - budget.updated) * self.per_second)
        budget.updated = now
        if budget.tokens >= self.burst:
            del budgets[key]  # full again: nothing to remember
            return None
        return budget

    def _current_slots(self, address: str) -> _Slots | None:
        slots = self._slots.get(address)
        if slots is not None:
            self._expire(slots)
            self._forget_if_idle(address, slots)
        return self._slots.get(address)

    def _expire(self, slots: _Slots) -> None:
        now = self._clock()
        while slots.held_until and slots.held_until[0] <= now:
            heapq.heappop(slots.held_until)

    def _free(self, slots: _Slots) -> bool:
        self._expire(slots)
        return slots.checking + len(slots.held_until) < self.max_in_flight

    def _sweep(self) -> None:
        """Forget the addresses whose held slots have all been released (an address is
        otherwise looked at again only when it logs in again)."""
        for address, slots in list(self._slots.items()):
            self._forget_if_idle(address, slots)

    def _wake_first(self, slots: _Slots) -> None:
        if slots.waiting:
            slots.waiting[0].event.set()

    def _forget_if_idle(self, address: str, slots: _Slots) -> None:
        self._expire(slots)
        idle = not (slots.checking or slots.held_until or slots.waiting)
        if idle and self._slots.get(address) is slots:
            del self._slots[address]
