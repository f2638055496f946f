"""What a pipeline is asked to do: :class:`PipelineSpec`, its endpoints and settings, and
the micro-batch cap that follows from them."""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from kayak.pipeline.source_database import absolute_sqlite_url, source_kind
from kayak.pipeline.transient import DEFAULT_GIVE_UP_AFTER_S, RetryPolicy

__all__ = ["SQLITE_MAX_OFFSETS", "PipelineSpec", "micro_batch_cap"]

log = logging.getLogger(__name__)


# The micro-batch cap of a pipeline from a SQLite source (see PipelineSpec).
SQLITE_MAX_OFFSETS = 50_000


@dataclass
class PipelineSpec:
    """A pipeline's endpoints and settings (see ``kayak pipeline run``)."""

    source: str
    tables: Sequence[str]
    target: str
    work_dir: Path
    bootstrap_servers: str | None = None
    registry_url: str | None = None
    prefix: str = "kayak"
    slot_name: str | None = None  # PostgreSQL: None = the database's own (see open_source)
    # Caps a micro-batch (records). None: everything committed, for a PostgreSQL source (a
    # capped micro-batch could end inside a source transaction) and SQLITE_MAX_OFFSETS for a
    # SQLite source, whose changes carry no transactions.
    max_offsets_per_trigger: int | None = None
    capture_batch: int = 5_000
    client_options: dict[str, str] = field(default_factory=dict)
    # How long a transient source or target failure is retried before the pipeline stops.
    retry_timeout_s: float = DEFAULT_GIVE_UP_AFTER_S
    # The pipeline's own web server (/metrics and its console page): None = none; 0 = an
    # ephemeral port (see Pipeline.metrics_url).
    metrics_port: int | None = None
    metrics_host: str = "127.0.0.1"
    # The schema registry client's settings (basic.auth.user.info, ssl.ca.location, ...);
    # schema.registry.* and basic.auth.* in client_options are moved here.
    registry_config: dict[str, str] = field(default_factory=dict)
    # Read existing change topics (a regex) instead of capturing: kayak.pipeline.from_topics.
    from_topics: str | None = None
    input_format: str = "kayak"  # of the change topics (kayak.pipeline.input_formats)
    # What reads the change topics in Spark: "kafka" (Spark's Kafka source) or "kayak"
    # (kayak's data source); None: Spark's when its jars are found, else kayak's with a
    # warning (kayak.pipeline.spark_kafka.choose_reader).
    reader: str | None = None

    def __post_init__(self) -> None:
        from kayak.serde.registry import split_registry_properties

        registry, self.client_options = split_registry_properties(self.client_options)
        self.registry_config = {**registry, **self.registry_config}
        url = self.registry_config.pop("url", None)
        self.registry_url = self.registry_url or url
        # Paths are resolved here, against this process's directory: the capture, Spark's
        # checkpoint and the executors' apply (each in a directory of its own on a cluster)
        # must all name the same files.
        self.source = absolute_sqlite_url(self.source)
        if self.target.startswith("sqlite:"):
            self.target = absolute_sqlite_url(self.target)
        self.work_dir = Path(os.path.abspath(os.path.expanduser(self.work_dir)))

    @property
    def retry_policy(self) -> RetryPolicy:
        """The retry policy of the target side (apply and verification)."""
        return RetryPolicy(give_up_after_s=self.retry_timeout_s)


def micro_batch_cap(spec: PipelineSpec) -> int | None:
    """``maxOffsetsPerTrigger`` of the replication query. Micro-batches are read with
    read_committed and end at the last stable offset, so each holds whole capture batches
    (Kafka transactions) and with them whole source transactions; a cap in records would end
    one inside a transaction, so there is none unless asked for (then a warning says what it
    costs). A SQLite source has no transactions to keep whole: capped at SQLITE_MAX_OFFSETS."""
    cap = spec.max_offsets_per_trigger
    if spec.from_topics is None and source_kind(spec.source) == "sqlite":
        return cap or SQLITE_MAX_OFFSETS
    if cap is not None:
        log.warning("max_offsets_per_trigger=%d: a micro-batch may end inside a source "
                    "transaction, which the target then shows half applied until the next "
                    "one", cap)  # fmt: skip
    return cap
