"""Several schema changes and a TRUNCATE through one running PostgreSQL → Spark → PostgreSQL
pipeline, with each reader of the change topics (Spark's Kafka source, kayak's data source);
the scenarios one by one, without Spark, are in ``test_schema_changes``."""

from __future__ import annotations

from pathlib import Path

import psycopg
import pytest

from kayak.pipeline.runner import Pipeline
from kayak.pipeline.source_setup import prepare_source
from kayak.pipeline.spec import PipelineSpec
from tests.pipeline.conftest import CdcBroker
from tests.pipeline.test_pipeline_postgres import target_dsn


@pytest.mark.parametrize("reader", ["kafka", "kayak"])
def test_ddl_while_the_pipeline_runs(
    spark: object, postgres_dsn: str, cdc_broker: CdcBroker, tmp_path: Path, reader: str
) -> None:
    source = psycopg.connect(postgres_dsn, autocommit=True)
    source.execute("CREATE TABLE t (id int PRIMARY KEY, a text, c int NOT NULL, d int, "
                   "n numeric(10,2))")  # fmt: skip
    source.execute("INSERT INTO t SELECT i, 'r' || i, i, i, i / 4.0 FROM generate_series(1, 50) i")
    spec = PipelineSpec(
        source=postgres_dsn, tables=["public.t"], target=target_dsn(postgres_dsn),
        work_dir=tmp_path / "work", bootstrap_servers=cdc_broker.bootstrap_servers,
        registry_url=cdc_broker.registry_url, slot_name=f"ddl_{reader}", reader=reader,
    )  # fmt: skip
    prepare_source(spec)
    # Rounds of DDL, each followed by DML, then caught up and verified.
    rounds = [
        ["ALTER TABLE t ADD COLUMN e text DEFAULT 'dflt'", "INSERT INTO t (id, c) VALUES (51, 0)",
         "ALTER TABLE t ADD COLUMN f int NOT NULL DEFAULT 42", "UPDATE t SET f = 1 WHERE id < 5"],
        ["ALTER TABLE t DROP COLUMN c", "INSERT INTO t (id) VALUES (52)",
         "DELETE FROM t WHERE id = 3", "ALTER TABLE t RENAME COLUMN a TO a2",
         "UPDATE t SET a2 = 'renamed' WHERE id = 7"],
        ["ALTER TABLE t ALTER COLUMN d TYPE bigint", "UPDATE t SET d = 5000000000 WHERE id = 8",
         "ALTER TABLE t ALTER COLUMN n TYPE numeric(12,4)", "UPDATE t SET n = 1.2345 WHERE id = 9"],
        ["INSERT INTO t (id, a2) VALUES (99, 'truncated')", "TRUNCATE t",
         "INSERT INTO t (id, a2, d, n) VALUES (100, 'after', 1, 0.0001)"],
    ]  # fmt: skip
    with Pipeline(spec, spark) as pipeline:
        assert pipeline.job is not None and pipeline.job.settings.reader == reader
        pipeline.catch_up()
        for statements in rounds:
            for statement in statements:
                source.execute(statement)
            pipeline.catch_up()
            (result,) = pipeline.verify()
            assert result.equal, (statements, [d.line() for d in result.differences[:3]])
    with psycopg.connect(spec.target) as target:
        assert target.execute("SELECT id, a2, d, n::text, e, f FROM t").fetchall() == [
            (100, "after", 1, "0.0001", "dflt", 42)
        ]
        columns = dict(target.execute(
            "SELECT column_name, data_type FROM information_schema.columns "
            "WHERE table_name = 't'").fetchall())  # fmt: skip
    assert "a" not in columns and columns["d"] == "bigint" and columns["c"] == "integer"
