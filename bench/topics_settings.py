"""bench/topics.py's settings (what an invocation is asked to measure) and samples (what it has
measured, one sample per run and peer for each measure), shared by its phases' modules."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path


@dataclass(frozen=True)
class Settings:
    runs: int
    topics: int
    connections: int
    partitions: int
    segments: int
    metadata_requests: int
    probe_ms: float
    brokers: tuple[str, ...]
    data_root: Path

    @property
    def peers(self) -> tuple[str, ...]:
        return self.brokers


@dataclass
class Samples:
    """One sample per run and peer for each measure (name → peer → samples)."""

    values: dict[str, dict[str, list[float]]] = field(default_factory=dict)

    def add(self, measure: str, peer: str, value: float) -> None:
        self.values.setdefault(measure, {}).setdefault(peer, []).append(value)

    def of(self, measure: str, peer: str) -> list[float]:
        return self.values.get(measure, {}).get(peer, [])
