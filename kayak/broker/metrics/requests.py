"""Per-API request counts, error codes and latency splits, kept as plain numbers.

The connection calls :meth:`RequestMetrics.finished` once per answered request with the
timestamps it took along the way; everything here is list indexing and additions on the
event loop's thread. Kafka's ``RequestMetrics`` split, per request type:

- queue: received (decoded) until its handler started running;
- local: the handler's run, including what it awaited (a group-commit fsync for acks=all,
  a long-polling fetch's wait: Kafka counts those apart as RemoteTimeMs);
- response queue: handler done until its turn to be encoded (responses leave in order);
- response send: encoding and handing the bytes to the socket (sendfile included);
- total: received until sent.
"""

from __future__ import annotations

import inspect
from bisect import bisect_left
from collections.abc import Callable, Iterator
from typing import Any

from kayak.broker.metrics.histogram import LATENCY_BUCKETS, FastHistogram
from kayak.protocol.message import Message, Struct
from kayak.protocol.messages import ApiKey

# API keys are small; anything at or above this (an unknown API) is counted as this key.
MAX_API_KEY = 128
PHASES = ("queue", "local", "response_queue", "response_send", "total")


class ApiStats:
    """One API's numbers: answered requests and a latency histogram per phase.

    The five histograms share one flat list of bucket counts (phase ``i`` owns
    ``counts[i * width : (i + 1) * width]``) and one list of sums, so that recording a request
    is a handful of list operations and no method call per phase.
    """

    __slots__ = ("counts", "requests", "sums")

    def __init__(self) -> None:
        self.requests = 0
        self.counts = [0] * (len(PHASES) * _WIDTH)
        self.sums = [0.0] * len(PHASES)

    def phases(self) -> Iterator[tuple[str, FastHistogram]]:
        """Each phase's histogram (copies, for the scrape)."""
        for i, phase in enumerate(PHASES):
            histogram = FastHistogram(LATENCY_BUCKETS)
            histogram.counts = self.counts[i * _WIDTH : (i + 1) * _WIDTH]
            histogram.sum = self.sums[i]
            yield phase, histogram


_WIDTH = len(LATENCY_BUCKETS) + 1
assert _WIDTH == 17  # RequestMetrics.finished writes the phases' offsets out


class RequestMetrics:
    """Requests, errors and latencies per API key."""

    def __init__(self) -> None:
        self.apis: list[ApiStats | None] = [None] * (MAX_API_KEY + 1)
        # (api key, error code) -> responses or partitions answered with that code (not NONE)
        self.errors: dict[tuple[int, int], int] = {}

    def finished(
        self,
        api_key: int,
        received: float,
        started: float,
        done: float,
        dequeued: float,
        sent: float,
    ) -> None:
        """A request's answer went out; the times are ``time.monotonic()`` seconds."""
        stats = self.apis[api_key if 0 <= api_key < MAX_API_KEY else MAX_API_KEY]
        if stats is None:
            stats = self._new_api(api_key)
        stats.requests += 1
        # Written out, phase by phase in PHASES order (17 = _WIDTH): once per request.
        counts, sums, bounds = stats.counts, stats.sums, LATENCY_BUCKETS
        seconds = started - received
        counts[bisect_left(bounds, seconds)] += 1
        sums[0] += seconds
        seconds = done - started
        counts[17 + bisect_left(bounds, seconds)] += 1
        sums[1] += seconds
        seconds = dequeued - done
        counts[34 + bisect_left(bounds, seconds)] += 1
        sums[2] += seconds
        seconds = sent - dequeued
        counts[51 + bisect_left(bounds, seconds)] += 1
        sums[3] += seconds
        seconds = sent - received
        counts[68 + bisect_left(bounds, seconds)] += 1
        sums[4] += seconds

    def _new_api(self, api_key: int) -> ApiStats:
        stats = self.apis[api_key if 0 <= api_key < MAX_API_KEY else MAX_API_KEY] = ApiStats()
        return stats

    def count_errors(self, api_key: int, response: Message) -> None:
        """Count the error codes in ``response`` (each partition's, for partitioned APIs)."""
        if api_key == 0:  # Produce (a plain int: comparing with an IntEnum member costs more)
            # The busiest API, walked inline: a generator per response costs more than this.
            for topic in response.responses:  # type: ignore[attr-defined]
                for partition in topic.partition_responses:
                    if partition.error_code:
                        self._error(api_key, partition.error_code)
            return
        walk = _ERROR_WALKERS.get(api_key, _walk_generic)
        for code in walk(response):
            if code:
                self._error(api_key, code)

    def _error(self, api_key: int, code: int) -> None:
        entry = (api_key, code)
        self.errors[entry] = self.errors.get(entry, 0) + 1

    def each_api(self) -> Iterator[tuple[int, ApiStats]]:
        for key, stats in enumerate(self.apis):
            if stats is not None:
                yield key, stats


def api_name(api_key: int) -> str:
    """Kafka's request name (``Produce``, ``OffsetCommit``); ``Unknown`` past the table."""
    try:
        return "".join(part.capitalize() for part in ApiKey(api_key).name.split("_"))
    except ValueError:
        return "Unknown"


# -- error codes in responses -----------------------------------------------------------
# Produce (in count_errors) and Fetch come first in every busy broker: their walks are
# written out. The rest are walked generically (their dataclass fields, once per class looked up).


def _walk_fetch(response: Any) -> Iterator[int]:
    yield response.error_code
    for topic in response.responses:
        for partition in topic.partitions:
            yield partition.error_code


def _walk_metadata(response: Any) -> Iterator[int]:
    # The broker's Metadata answers know their error codes (``error_codes()``): a topic of
    # 10,000 partitions walked here per request cost more than building the answer from its
    # cached encoding.
    known = getattr(response, "error_codes", None)
    if known is not None:
        yield from known()
        return
    yield from _walk_generic(response)


_FIELDS: dict[type, tuple[bool, tuple[str, ...]]] = {}


def _shape(cls: type) -> tuple[bool, tuple[str, ...]]:
    """Whether ``cls`` has an ``error_code`` field, and its fields that may hold lists."""
    shape = _FIELDS.get(cls)
    if shape is None:
        fields: tuple[str, ...] = getattr(cls, "FIELDS", ())
        annotations = _annotations(cls)
        has_code = "error_code" in fields
        nested = tuple(name for name in fields if "list" in str(annotations.get(name, "")))
        shape = _FIELDS[cls] = (has_code, nested)
    return shape


def _annotations(cls: type) -> dict[str, Any]:
    found: dict[str, Any] = {}
    for klass in reversed(cls.__mro__):
        found.update(inspect.get_annotations(klass))
    return found


def _walk_generic(message: Any) -> Iterator[int]:
    has_code, nested = _shape(type(message))
    if has_code:
        yield message.error_code
    for name in nested:
        items = getattr(message, name)
        if isinstance(items, list):
            for item in items:
                if isinstance(item, Struct):
                    yield from _walk_generic(item)


_ERROR_WALKERS: dict[int, Callable[[Any], Iterator[int]]] = {
    ApiKey.FETCH: _walk_fetch,
    ApiKey.METADATA: _walk_metadata,
}
