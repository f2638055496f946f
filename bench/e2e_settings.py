"""bench/e2e_latency.py's settings: the points to measure (rates x lingers x consumers), the
brokers, and how each point is run."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Settings:
    rates: tuple[int, ...]
    seconds: float
    warmup: float
    drain: float
    size: int
    runs: int
    consumers: tuple[str, ...]
    brokers: tuple[str, ...]
    data_root: Path
    py_spy: Path | None
    producer_config: tuple[tuple[str, str], ...]  # --producer-config overrides
    flush: str = "group"  # kayak's --flush
    lingers: tuple[int, ...] = (0,)  # linger.ms, each measured
    tool_records: int = 0  # EndToEndLatency's records per broker and run (0: not run)

    def points(self) -> list[tuple[int, int, str]]:
        return [(r, li, c) for r in self.rates for li in self.lingers for c in self.consumers]
