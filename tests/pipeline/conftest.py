"""Pipeline fixtures: a real broker serving the schema registry, and a captured SQLite table."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.broker.conftest import BrokerProcess
from tests.registry.conftest import registry_url


@dataclass
class CdcBroker:
    process: BrokerProcess
    bootstrap_servers: str
    registry_url: str


@pytest.fixture
def cdc_broker(tmp_path: Path) -> Iterator[CdcBroker]:
    process = BrokerProcess(tmp_path / "broker", web=True).start()
    yield CdcBroker(process, process.bootstrap_servers, registry_url(process))
    if process.process is not None:
        process.stop()


ITEMS_DDL = (
    "CREATE TABLE items (region TEXT NOT NULL, id INTEGER NOT NULL, name TEXT NOT NULL, "
    "price NUMERIC, weight REAL, photo BLOB, note TEXT, PRIMARY KEY (region, id))"
)


@pytest.fixture
def items_db(tmp_path: Path) -> str:
    """A SQLite source with a composite-key table of awkward values, not yet captured."""
    path = str(tmp_path / "source.db")
    conn = sqlite3.connect(path)
    with conn:
        conn.execute(ITEMS_DDL)
        conn.executemany(
            "INSERT INTO items VALUES (?, ?, ?, ?, ?, ?, ?)",
            [
                ("eu", 1, "Zoë ⚓ 李雷 🎁", "12.50", 0.1, b"\x00\xff", None),
                ("eu", 2, "", None, None, None, "x" * 300_000),
                ("us", 1, "plain", "-0.001", 1e300, b"", "note"),
            ],
        )
    conn.close()
    return path
