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
from kayak.pipeline.runner import Pipeline

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
        self._replicate(topic_pattern=spec.from_topics)
        log.info("replicating topics matching %r (%s) into %s",
                 spec.from_topics, spec.input_format, spec.target)  # fmt: skip
        return self

    def catch_up(self, timeout_s: float = 600.0) -> None:
        """Return once every record in the topics now has been applied."""
        self._wait_applied()
