"""Blocking facades over kayak's asyncio clients: ``Producer``, ``Consumer`` and ``Admin``.

For scripts, Spark executors and other code without an event loop::

    from kayak.client.sync import Admin

    with Admin(bootstrap_servers="localhost:9092") as admin:
        admin.create_topics(["orders"])

**One event loop per process.** Every facade runs its asyncio client on a single event loop
(uvloop when installed) in a daemon thread, ``kayak-sync``, started on first use. Clients
are still separate (own connections, own state); only the loop is shared, so a process with
many short-lived clients (a Spark executor running many tasks) keeps one extra thread. The
cost is that a callback that blocks the loop (a producer's delivery callback doing slow I/O,
say) stalls every facade of the process: keep callbacks short. After ``fork()`` the child
starts its own loop on first use (the parent's thread does not survive a fork). At exit the
facades still open are closed and the loop stopped.

**Calls.** A facade is connected (its client started) when constructed, like other blocking
Kafka clients; ``with`` closes it at the end. A facade method runs the asyncio method on the
loop and blocks the calling thread until it is done, returning its result or raising its
exception; Ctrl-C cancels it. Where the asyncio method hands back an ``asyncio.Future``
(``Producer.send``), the facade returns a ``concurrent.futures.Future`` that completes with
it, so sends can be pipelined; an async iterator becomes a blocking iterator. The main
methods are typed wrappers; anything else is forwarded by ``__getattr__`` the same way, so
new methods of the asyncio clients work here at once. Calling a facade from the loop thread
itself (inside a callback) would deadlock and raises ``RuntimeError``: use the asyncio
client (``facade.async_client``) there.
"""

from __future__ import annotations

from kayak.client.sync.admin import Admin
from kayak.client.sync.consumer import Consumer
from kayak.client.sync.facade import BlockingIterator, SyncFacade, wrap
from kayak.client.sync.forwarding import blocking, future_of, on_loop
from kayak.client.sync.loop import LoopThread, shared_loop
from kayak.client.sync.producer import Producer

# Importable from here before the split into modules (bench/consume.py uses it).
from kayak.client.types import TopicPartition as TopicPartition

__all__ = [
    "Admin",
    "BlockingIterator",
    "Consumer",
    "LoopThread",
    "Producer",
    "SyncFacade",
    "blocking",
    "future_of",
    "on_loop",
    "shared_loop",
    "wrap",
]
