"""The demo's source: a realistic ``orders`` table and a seeded mix of changes to it."""

from __future__ import annotations

import random
import sqlite3
import time
from collections.abc import Callable

__all__ = ["ORDERS_DDL", "create_orders", "run_workload"]

ORDERS_DDL = """
CREATE TABLE IF NOT EXISTS orders (
    id INTEGER PRIMARY KEY,
    customer TEXT NOT NULL,
    status TEXT NOT NULL,
    amount NUMERIC,
    quantity INTEGER NOT NULL,
    weight_kg REAL,
    note TEXT,
    receipt BLOB,
    updated_at TEXT NOT NULL
)
"""

_CUSTOMERS = [
    "Ada Lovelace", "Grace Hopper", "Zoë Ødegaard", "Łukasz Żółć", "李雷", "José Núñez",
    "Søren Kierkegaard", "Amélie Poulain", "Юрий Гагарин", "Ngũgĩ wa Thiong'o",
]  # fmt: skip
_STATUSES = ["new", "paid", "packed", "shipped", "delivered", "returned"]
_NOTES = [None, "", "leave at the door", "fragile ⚠", "gift 🎁 wrap please", "x" * 2000]


def _row(rng: random.Random, order_id: int) -> tuple[object, ...]:
    return (
        order_id,
        rng.choice(_CUSTOMERS),
        rng.choice(_STATUSES),
        f"{rng.randint(0, 99999)}.{rng.randint(0, 99):02d}" if rng.random() > 0.05 else None,
        rng.randint(1, 20),
        rng.random() * 40 if rng.random() > 0.1 else None,
        rng.choice(_NOTES),
        rng.randbytes(rng.randint(0, 64)) if rng.random() > 0.3 else None,
        time.strftime("%Y-%m-%dT%H:%M:%S"),
    )


def create_orders(path: str, rows: int, *, seed: int = 7) -> None:
    """Create ``orders`` at ``path`` with ``rows`` rows (ids 1..rows)."""
    rng = random.Random(seed)
    conn = sqlite3.connect(path)
    with conn:
        conn.execute(ORDERS_DDL)
        conn.executemany(
            "INSERT INTO orders VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (_row(rng, i) for i in range(1, rows + 1)),
        )
    conn.close()


def run_workload(
    path: str, changes: int, *, seed: int = 11, transaction_size: int = 50,
    progress: Callable[[int], None] | None = None, rate: float = 0.0,
) -> dict[str, int]:  # fmt: skip
    """Apply ``changes`` inserts/updates/deletes (about 45/40/15 %) to ``orders`` in
    transactions of ``transaction_size``; returns the count of each kind. With ``rate``
    (changes/s) the transactions are paced to it, else they go as fast as they can."""
    rng = random.Random(seed)
    conn = sqlite3.connect(path, timeout=30.0)
    ids = [r[0] for r in conn.execute("SELECT id FROM orders")]
    next_id = max(ids, default=0) + 1
    counts = {"insert": 0, "update": 0, "delete": 0}
    done = 0
    started = time.monotonic()
    while done < changes:
        if rate > 0:
            time.sleep(max(0.0, started + done / rate - time.monotonic()))
        with conn:
            for _ in range(min(transaction_size, changes - done)):
                roll = rng.random()
                if roll < 0.45 or not ids:
                    conn.execute("INSERT INTO orders VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                                 _row(rng, next_id))  # fmt: skip
                    ids.append(next_id)
                    next_id += 1
                    counts["insert"] += 1
                elif roll < 0.85:
                    order_id = rng.choice(ids)
                    conn.execute(
                        "UPDATE orders SET status = ?, amount = ?, note = ?, updated_at = ? "
                        "WHERE id = ?",
                        (rng.choice(_STATUSES), f"{rng.randint(0, 999)}.{rng.randint(0, 99)}",
                         rng.choice(_NOTES), time.strftime("%Y-%m-%dT%H:%M:%S"), order_id),
                    )  # fmt: skip
                    counts["update"] += 1
                else:
                    index = rng.randrange(len(ids))
                    ids[index], ids[-1] = ids[-1], ids[index]
                    conn.execute("DELETE FROM orders WHERE id = ?", (ids.pop(),))
                    counts["delete"] += 1
                done += 1
        if progress is not None:
            progress(done)
    conn.close()
    return counts
