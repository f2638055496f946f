"""The background lookup of the positions assigned partitions lack.

A partition assigned (by the group or by hand) or reset by a seek has no position until the
group's committed offset or ``auto.offset.reset`` gives it one (:class:`.offsets.PositionResolver`).
One task at a time does that lookup, so a poll never waits on it unless it has to; a
failure is kept and raised by the application's next poll.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable

from kayak.client.consumer.fetcher import Fetcher
from kayak.client.consumer.offsets import PositionResolver
from kayak.client.consumer.subscription import SubscriptionState
from kayak.errors import KayakError

log = logging.getLogger(__name__)

__all__ = ["PositionLookup"]


class PositionLookup:
    """Runs ``resolver`` while partitions lack a position, waking ``fetcher`` when done.
    ``closed`` says the consumer is closed: no lookup starts then."""

    def __init__(
        self,
        resolver: PositionResolver,
        subscriptions: SubscriptionState,
        fetcher: Fetcher,
        closed: Callable[[], bool],
    ) -> None:
        self._resolver = resolver
        self._subscriptions = subscriptions
        self._fetcher = fetcher
        self._closed = closed
        self._task: asyncio.Future[None] | None = None
        self._error: KayakError | None = None

    def schedule(self) -> None:
        """Start a lookup unless one is running."""
        if self._closed():
            return
        if self._task is None or self._task.done():
            self._task = asyncio.ensure_future(self._resolve())

    async def _resolve(self) -> None:
        try:
            while self._subscriptions.missing_positions():
                await self._resolver.resolve()
        except KayakError as exc:
            log.info("looking up positions failed: %s", exc)
            self._error = exc
        finally:
            self._fetcher.wake()

    async def ready(self, deadline: float) -> None:
        """Wait (until ``deadline``) for a position lookup that is due."""
        if not self._subscriptions.missing_positions():
            return
        if self._error is None:
            self.schedule()
        task = self._task
        if task is not None and not task.done():
            await asyncio.wait({task}, timeout=max(deadline - time.monotonic(), 0))

    @property
    def has_error(self) -> bool:
        """A failed lookup waits for :meth:`raise_error`."""
        return self._error is not None

    def raise_error(self) -> None:
        """Raise (once) what the last lookup failed with."""
        error, self._error = self._error, None
        if error is not None:
            raise error

    def cancel(self) -> None:
        if self._task is not None:
            self._task.cancel()
