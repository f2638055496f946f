"""PostgreSQL → log → Spark (local[2]) → PostgreSQL, on a real throwaway cluster."""

from __future__ import annotations

import threading
from pathlib import Path

import psycopg

from kayak.pipeline.runner import Pipeline
from kayak.pipeline.source_setup import prepare_source
from kayak.pipeline.spec import PipelineSpec
from tests.pipeline.conftest import CdcBroker

DDL = """
CREATE TABLE public.accounts (
    tenant text NOT NULL,
    id bigint NOT NULL,
    owner varchar(80) NOT NULL,
    balance numeric(14, 2),
    ratio double precision,
    active boolean,
    small smallint,
    opened timestamptz,
    birthday date,
    tags jsonb,
    avatar bytea,
    bio text,
    PRIMARY KEY (tenant, id)
)
"""


def target_dsn(source_dsn: str) -> str:
    """A second database in the same cluster for the target."""
    base, name = source_dsn.rsplit("/", 1)
    with psycopg.connect(source_dsn, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}_target"')
    return f"{base}/{name}_target"


def write(conn: psycopg.Connection, start: int, count: int) -> None:
    with conn.transaction():
        conn.cursor().executemany(
            "INSERT INTO accounts VALUES ('t', %s, %s, %s, %s, %s, %s, now(), '2001-02-03', "
            "%s, %s, %s)",
            [(i, f"owner {i} — Ærøskøbing", f"{i}.{i % 100:02d}", i / 3, i % 2 == 0, i % 300,
              f'{{"n": {i}, "name": "ü"}}', bytes([i % 256, 0]), None if i % 4 else "bio")
             for i in range(start, start + count)],
        )  # fmt: skip
    with conn.transaction():
        conn.execute("UPDATE accounts SET balance = NULL, bio = %s WHERE id %% 3 = 0 AND id >= %s",
                     ("long " * 50_000, start))  # fmt: skip
        conn.execute("DELETE FROM accounts WHERE id %% 5 = 0 AND id >= %s", (start,))
        conn.execute("UPDATE accounts SET id = id + 1000000 WHERE id = %s", (start + 1,))


def test_postgres_to_postgres(
    spark: object, postgres_dsn: str, cdc_broker: CdcBroker, tmp_path: Path
) -> None:
    source = psycopg.connect(postgres_dsn, autocommit=True)
    source.execute(DDL)
    write(source, 0, 300)  # before capture: the initial snapshot carries these
    spec = PipelineSpec(
        source=postgres_dsn, tables=["public.accounts"], target=target_dsn(postgres_dsn),
        work_dir=tmp_path / "work", bootstrap_servers=cdc_broker.bootstrap_servers,
        registry_url=cdc_broker.registry_url, slot_name="replica1",
    )  # fmt: skip
    prepare_source(spec)
    with Pipeline(spec, spark) as pipeline:
        # writers keep going while the snapshot is taken and streaming starts
        writer_conn = psycopg.connect(postgres_dsn, autocommit=True)
        writer = threading.Thread(target=write, args=(writer_conn, 1000, 300))
        writer.start()
        writer.join()
        pipeline.catch_up()
        (result,) = pipeline.verify()
        assert result.equal, result.differences
        assert result.rows == 2 * (300 - 60)
        source.execute("ALTER TABLE accounts ADD COLUMN nickname text")
        source.execute("UPDATE accounts SET nickname = 'nick' WHERE id < 10")
        pipeline.catch_up()
        (result,) = pipeline.verify()
        assert result.equal, result.differences
        assert "nickname" in {c.name for c in pipeline.verify()[0].table_schema.columns}
    with psycopg.connect(spec.target) as target:
        assert target.execute("SELECT count(*) FROM accounts WHERE nickname = 'nick'"
                              ).fetchone() == (7,)  # fmt: skip
        # the target table was created with the source's own types
        types = dict(target.execute(
            "SELECT column_name, data_type FROM information_schema.columns "
            "WHERE table_name = 'accounts'").fetchall())  # fmt: skip
        assert types["balance"] == "numeric" and types["opened"] == "timestamp with time zone"
        assert types["tags"] == "jsonb"
