"""A pipeline over change topics something else captures: Debezium's, for one.

``kayak pipeline run --from-topics PATTERN --format debezium-json`` runs no capture of its
own: the Spark job subscribes to the topics matching ``PATTERN`` on the given cluster, decodes
each record in the chosen format (:mod:`kayak.pipeline.debezium_json`), and applies the changes
to the target through the same apply path as kayak's own events (latest per key, guarded by
position, one transaction per table). ``--source`` and ``--table`` name what to verify the
target against: verification reads the source database as the captured pipeline does.
"""

from __future__ import annotations

import logging
from typing import Self

from kayak.errors import KayakError
from kayak.pipeline.job import ReplicationJob, ReplicationSettings
from kayak.pipeline.runner import Pipeline
from kayak.pipeline.transient import ReconnectingTarget

__all__ = ["TopicsPipeline"]

log = logging.getLogger(__name__)


class TopicsPipeline(Pipeline):
    """A :class:`~kayak.pipeline.runner.Pipeline` whose changes are already in topics: no
    embedded broker, no capture, no schema registry unless the format needs one."""

    def _start(self) -> Self:
        spec = self.spec
        if spec.from_topics is None:
            raise KayakError("a pipeline over existing topics needs --from-topics PATTERN")
        if spec.bootstrap_servers is None:
            raise KayakError("--from-topics reads the topics of a cluster: give -b HOST:PORT")
        spec.work_dir.mkdir(parents=True, exist_ok=True)
        if self._spark is None:
            if self._spark_factory is None:
                from kayak.pipeline.session import local_spark

                self._spark_factory = local_spark
            self._spark = self._spark_factory()
        self.target = ReconnectingTarget(spec.target, spec.retry_policy)
        settings = ReplicationSettings(
            bootstrap_servers=spec.bootstrap_servers,
            registry_url=spec.registry_url or "",
            registry_config=spec.registry_config,
            checkpoint_dir=str(spec.work_dir / "checkpoint"),
            target_url=spec.target,
            topic_pattern=spec.from_topics,
            max_offsets_per_trigger=spec.max_offsets_per_trigger,
            dead_letter_topic=f"{spec.prefix}.dead-letter",
            client_options=spec.client_options,
            retry=spec.retry_policy,
            input_format=spec.input_format,
        )
        self.job = ReplicationJob(self._spark, settings)
        self.job.start()
        log.info("replicating topics matching %r (%s) into %s",
                 spec.from_topics, spec.input_format, spec.target)  # fmt: skip
        return self

    def catch_up(self, timeout_s: float = 600.0) -> None:
        """Return once every record in the topics now has been applied."""
        assert self.job is not None
        try:
            self.job.wait_caught_up()
        except Exception as e:
            query = self.job.query
            if query is not None and not query.isActive:
                self._query_failed(e)
            raise
