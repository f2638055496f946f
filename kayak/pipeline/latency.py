"""Latency statistics in bounded memory: a log-bucketed histogram of milliseconds.

A pipeline runs for days; keeping every change's latency in a list grows without bound.
Values are counted in buckets whose width grows with the value (32 per doubling, so a
percentile is exact to within ~2.2 %), and histograms add up, so executors can count their
own changes and the driver merges what they send back.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

__all__ = ["LatencyHistogram", "upper_bound_ms"]

_SUB_BUCKETS = 32  # per doubling: relative error 2**(1/32) - 1 ≈ 2.2 %
_LINEAR_BELOW = 32  # 0..31 ms each get a bucket of their own (exact)
# Up to ~2**40 ms (~35 years): anything larger lands in the last bucket.
_BUCKETS = _LINEAR_BELOW + _SUB_BUCKETS * 36


def _bucket(value_ms: int) -> int:
    if value_ms < _LINEAR_BELOW:
        return max(value_ms, 0)
    exponent = math.log2(value_ms / _LINEAR_BELOW)
    return min(_LINEAR_BELOW + int(exponent * _SUB_BUCKETS), _BUCKETS - 1)


def upper_bound_ms(bucket: int) -> float:
    """The largest value (ms) a bucket holds, which a percentile reports."""
    if bucket < _LINEAR_BELOW:
        return float(bucket)
    return _LINEAR_BELOW * 2 ** ((bucket - _LINEAR_BELOW + 1) / _SUB_BUCKETS)


class LatencyHistogram:
    """Counts of latencies (ms) in fixed buckets: memory independent of how many are added."""

    __slots__ = ("counts", "total")

    def __init__(self) -> None:
        self.counts: dict[int, int] = {}  # bucket -> count; only buckets that were hit
        self.total = 0

    def add(self, value_ms: int) -> None:
        bucket = _bucket(value_ms)
        self.counts[bucket] = self.counts.get(bucket, 0) + 1
        self.total += 1

    def extend(self, values_ms: Iterable[int]) -> None:
        for value in values_ms:
            self.add(value)

    def merge(self, other: LatencyHistogram | dict[int, int]) -> None:
        """Add another histogram's counts (or its ``counts`` dict, as sent by an executor)."""
        counts = other.counts if isinstance(other, LatencyHistogram) else other
        for bucket, count in counts.items():
            self.counts[int(bucket)] = self.counts.get(int(bucket), 0) + count
            self.total += count

    def clear(self) -> None:
        self.counts.clear()
        self.total = 0

    def __len__(self) -> int:
        return self.total

    def percentile(self, p: float) -> float:
        """The ``p``-th percentile in ms (0.0 when empty), to within one bucket's width."""
        if not self.total:
            return 0.0
        rank = min(self.total - 1, int(p / 100 * self.total))
        seen = 0
        for bucket in sorted(self.counts):
            seen += self.counts[bucket]
            if seen > rank:
                return upper_bound_ms(bucket)
        return upper_bound_ms(max(self.counts))
