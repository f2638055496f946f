"""``bench/produce.py --profile``: where a message's time goes in kayak's per-message send loop,
and what the parts any asyncio producer pays per message cost on this machine."""

from __future__ import annotations

import asyncio
import cProfile
import io
import pstats
import sys
import time

from peers import REPO
from produce_clients import BATCH_BYTES, GROUP, value_groups
from protocol_clients import create_topic
from result_tables import median


def profile_send(bootstrap: str, messages: int, size: int) -> None:
    """Where a message's time goes in kayak's per-message loops: ``await send(...)``, and
    ``produce(..., on_delivery=callback)`` (no future, no coroutine per record).

    Prints, for each, the CPU per message of the loop and of the flush (encode, request,
    answer, futures or callbacks), measured without a profiler; then cProfile's top functions;
    then what the parts no producer can avoid cost on this machine (a coroutine call, a
    future, a clock read).
    """
    sys.path.insert(0, str(REPO))
    import uvloop

    from kayak.client.producer import Producer, RecordMetadata

    topic = "bench-profile"
    create_topic(bootstrap, topic)
    groups = value_groups(messages, size)
    delivered: list[int] = []

    def on_delivery(error: BaseException | None, metadata: RecordMetadata) -> None:
        delivered.append(metadata.offset)  # what a delivery report does at least: look at it

    async def phases(producer: Producer, mode: str) -> tuple[list[float], list[float]]:
        sending: list[float] = []
        flushing: list[float] = []
        send, produce = producer.send, producer.produce
        for group in groups:
            start = time.process_time()
            if mode == "send":
                for value in group:
                    await send(topic, value)
            else:
                for value in group:
                    produce(topic, value, on_delivery=on_delivery)
            middle = time.process_time()
            await producer.flush()
            sending.append((middle - start) / GROUP)
            flushing.append((time.process_time() - middle) / GROUP)
        delivered.clear()
        return sending, flushing

    async def main() -> None:
        config = {"bootstrap.servers": bootstrap, "acks": 1, "batch.size": BATCH_BYTES}
        async with Producer(config) as producer:
            await (await producer.send_batch(topic, groups[0]))
            for mode, loop in (("send", "await send()"), ("produce", "produce(on_delivery=)")):
                sending, flushing = await phases(producer, mode)
                print(f"kayak {mode}, {size} B values, groups of {GROUP}, CPU per message "
                      "(median):")  # fmt: skip
                print(f"  {loop} loop: {median(sending) * 1e6:.2f} µs")
                print(
                    f"  flush (encode, request, answer, reports): {median(flushing) * 1e6:.2f} µs"
                )
                profiler = cProfile.Profile()
                profiler.enable()
                await phases(producer, mode)
                profiler.disable()
                text = io.StringIO()
                pstats.Stats(profiler, stream=text).sort_stats("tottime").print_stats(12)
                print(f"\ncProfile of {mode} (inflates Python calls), by own time:")
                print(text.getvalue().split("\n\n", 1)[-1].rstrip() + "\n")
            await _floor(RecordMetadata)

    uvloop.run(main())


async def _floor(record_metadata: type) -> None:
    """The per-message parts every asyncio producer pays, timed alone."""

    async def empty(value: bytes) -> None:
        return None

    loop = asyncio.get_running_loop()
    count = 200_000

    async def coroutine_calls() -> None:
        for _ in range(count):
            await empty(b"")

    def per_call(seconds: float) -> str:
        return f"{seconds / count * 1e6:.2f} µs"

    start = time.process_time()
    await coroutine_calls()
    print("\nunavoidable parts, each:")
    print(f"  await of an async def call: {per_call(time.process_time() - start)}")
    start = time.process_time()
    for _ in range(count):
        loop.create_future()
    print(f"  loop.create_future(): {per_call(time.process_time() - start)}")
    start = time.process_time()
    for _ in range(count):
        time.time_ns() // 1_000_000
    print(f"  a millisecond timestamp: {per_call(time.process_time() - start)}")
    futures = [loop.create_future() for _ in range(count)]
    start = time.process_time()
    for index, future in enumerate(futures):
        future.set_result(record_metadata("t", 0, index, 0))
    print(f"  RecordMetadata + set_result: {per_call(time.process_time() - start)}")
