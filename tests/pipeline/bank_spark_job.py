"""The bank test's Spark side as a process of its own, so that the test can SIGKILL it.

``kayak pipeline run --from-topics`` reads Debezium's topics only (``--format debezium-json``);
the bank test's topics are kayak's own events, written by a separate ``kayak cdc run``. This
runs the same :class:`~kayak.pipeline.from_topics.TopicsPipeline` the CLI would, from a spec
given as JSON (argument 1), on its own local Spark (JVM output to ``WORK_DIR/spark.log``):

- logs :data:`STARTED` once the streaming query runs (it resumes from the checkpoint in
  ``WORK_DIR/checkpoint`` when one is there), and stops with exit 1 when a part of it dies;
- on SIGTERM catches up, verifies source == target and writes each table's verification to
  the JSON file named by argument 2; exit 0 when all are equal, else 1.

Run as ``python -m tests.pipeline.bank_spark_job SPEC_JSON RESULT_JSON``.
"""

from __future__ import annotations

import json
import logging
import signal
import sys
import threading
from pathlib import Path
from typing import Any

from kayak.pipeline.from_topics import TopicsPipeline
from kayak.pipeline.session import local_spark, stop_spark
from kayak.pipeline.spec import PipelineSpec

log = logging.getLogger("bank_spark_job")

STARTED = "bank job: the streaming query runs"  # the log line a start announces itself with


def spec_from_json(path: Path) -> PipelineSpec:
    fields = json.loads(path.read_text())
    fields["work_dir"] = Path(fields["work_dir"])
    return PipelineSpec(**fields)


def main(spec_path: Path, result_path: Path) -> int:
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    spec = spec_from_json(spec_path)
    stopping = threading.Event()
    signal.signal(signal.SIGTERM, lambda signum, frame: stopping.set())
    sessions: list[Any] = []

    # The same settings as the tests' shared session (tests/fixtures/spark.py).
    settings: dict[str, Any] = {
        "spark.driver.memory": "1g",
        "spark.sql.execution.arrow.pyspark.enabled": "true",
    }

    def start_spark() -> Any:
        session = local_spark("local[2]", "kayak-bank", output=spec.work_dir / "spark.log",
                              **settings)  # fmt: skip
        sessions.append(session)
        return session

    try:
        with TopicsPipeline(spec, spark_factory=start_spark) as pipeline:
            log.info("%s", STARTED)
            while not stopping.wait(0.5):
                pipeline.check()
            pipeline.catch_up()
            verifications = pipeline.verify()
    finally:
        for spark in sessions:
            stop_spark(spark)
    result = {
        v.table: {
            "equal": v.equal,
            "rows": v.rows,
            "differences": [d.line() for d in v.differences],
        }
        for v in verifications
    }
    result_path.write_text(json.dumps(result))
    log.info("verified: %s", result)
    return 0 if all(v.equal for v in verifications) else 1


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1]), Path(sys.argv[2])))
