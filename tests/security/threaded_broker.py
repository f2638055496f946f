"""An in-process broker on its own event loop thread, for tests driving blocking clients."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Coroutine
from pathlib import Path
from types import TracebackType
from typing import Any, TypeVar

from kayak.broker.server import Broker

T = TypeVar("T")


class ThreadedBroker:
    """``with ThreadedBroker(path, listeners=...) as broker:`` a running :class:`Broker`."""

    def __init__(self, data_dir: Path, **settings: Any) -> None:
        settings.setdefault("schema_registry_port", None)
        settings.setdefault("group_initial_rebalance_delay_ms", 0)
        self.broker = Broker(data_dir, **settings)
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, daemon=True)

    def run(self, coro: Coroutine[Any, Any, T], timeout: float = 30.0) -> T:
        """Run ``coro`` on the broker's loop and wait for its result."""
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def __enter__(self) -> Broker:
        self._thread.start()
        try:
            self.run(self.broker.start())
        except BaseException:
            self._shutdown()
            raise
        return self.broker

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        try:
            if self.broker.context is not None:
                self.run(self.broker.stop())
            self.run(_settle())
        finally:
            self._shutdown()

    def _shutdown(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(10)
        self.loop.close()


async def _settle() -> None:
    """Let closed connections run their callbacks, then cancel what is left."""
    await asyncio.sleep(0.05)
    current = asyncio.current_task()
    tasks = [task for task in asyncio.all_tasks() if task is not current]
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
