"""The replication pipeline: change topics → Spark Structured Streaming → a target database.

:class:`~kayak.pipeline.runner.Pipeline` runs one end to end (capture, broker, Spark job,
verification); :class:`~kayak.pipeline.job.ReplicationJob` is the Spark part alone, for
change topics that something else fills.
"""

from __future__ import annotations

from kayak.pipeline.job import ReplicationJob, ReplicationSettings, ReplicationStats
from kayak.pipeline.runner import Pipeline
from kayak.pipeline.spec import PipelineSpec
from kayak.pipeline.verify import Verification

__all__ = [
    "Pipeline",
    "PipelineSpec",
    "ReplicationJob",
    "ReplicationSettings",
    "ReplicationStats",
    "Verification",
]
