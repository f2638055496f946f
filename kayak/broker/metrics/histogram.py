"""A histogram the hot path can afford: a list of bucket counts and a sum.

prometheus_client's own ``Histogram`` takes a lock and walks its buckets on every
observation; here an observation is one ``bisect`` and two additions on the event loop's
thread, and the cumulative ``le`` buckets Prometheus wants are computed at scrape time.
"""

from __future__ import annotations

from bisect import bisect_left

# Seconds, 100 µs to 10 s (request and fsync latencies).
LATENCY_BUCKETS: tuple[float, ...] = (
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025,
    0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
)  # fmt: skip

# Records made durable by one group-commit round.
RECORD_COUNT_BUCKETS: tuple[float, ...] = (
    1, 2, 5, 10, 20, 50, 100, 200, 500, 1_000, 2_000, 5_000, 10_000, 50_000, 100_000,
)  # fmt: skip


class FastHistogram:
    """Counts per bucket (``counts[i]``: observations ≤ ``bounds[i]`` and > the one before;
    the last: above every bound) and the sum of what was observed."""

    __slots__ = ("bounds", "counts", "sum")

    def __init__(self, bounds: tuple[float, ...] = LATENCY_BUCKETS) -> None:
        self.bounds = bounds
        self.counts = [0] * (len(bounds) + 1)
        self.sum = 0.0

    def observe(self, value: float) -> None:
        self.counts[bisect_left(self.bounds, value)] += 1
        self.sum += value

    @property
    def count(self) -> int:
        return sum(self.counts)

    def cumulative(self) -> list[tuple[str, float]]:
        """``(le, count at or below it)`` per bucket, ``+Inf`` last, as Prometheus wants."""
        out: list[tuple[str, float]] = []
        running = 0
        for bound, count in zip(self.bounds, self.counts, strict=False):
            running += count
            out.append((_le(bound), running))
        out.append(("+Inf", running + self.counts[-1]))
        return out


def _le(bound: float) -> str:
    return repr(float(bound))
