"""The CDC benchmark's workload: the demo's mix of changes to ``orders``, in a process of its own.

The workload runs in a child process so that its CPU (the source's own cost, SQLite included:
it runs in the writer) is told apart from the capture's and the Spark driver's, which share
the benchmark's process. The child connects, says ``ready``, waits for ``go`` on its stdin
(so its start-up is outside the measured interval), applies the changes and prints one JSON
line: its elapsed seconds and CPU seconds over the changes alone.

    python bench/cdc_workloads.py sqlite:/tmp/x.db 2000 --rate 500
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

PG_DDL = """
CREATE TABLE orders (
    id bigint PRIMARY KEY, customer text NOT NULL, status text NOT NULL, amount numeric(12,2),
    quantity integer NOT NULL, weight_kg double precision, note text, receipt bytea,
    updated_at timestamptz NOT NULL DEFAULT now()
)
"""


@dataclass(frozen=True)
class WorkloadRun:
    """What one workload process reports: seconds from its first change to its last commit
    and the CPU seconds (user + system) it spent in between."""

    elapsed_s: float
    cpu_s: float


def pg_workload(dsn: str, changes: int, *, seed: int = 11, rate: float = 0.0) -> None:
    """The SQLite workload's mix (45 % inserts, 40 % updates, 15 % deletes) in PostgreSQL,
    in transactions of 50, paced to ``rate`` changes/s when given."""
    import psycopg

    rng = random.Random(seed)
    # autocommit: each `transaction()` block below is then a real transaction of 50 changes
    with psycopg.connect(dsn, autocommit=True) as conn:
        ids = [r[0] for r in conn.execute("SELECT id FROM orders")]
        next_id = max(ids, default=0) + 1
        done = 0
        started = time.monotonic()
        while done < changes:
            if rate > 0:
                time.sleep(max(0.0, started + done / rate - time.monotonic()))
            with conn.transaction():
                for _ in range(min(50, changes - done)):
                    roll = rng.random()
                    if roll < 0.45 or not ids:
                        conn.execute(
                            "INSERT INTO orders (id, customer, status, amount, quantity, "
                            "weight_kg, note, receipt) VALUES (%s, %s, 'new', %s, %s, %s, %s, %s)",
                            (next_id, f"customer {rng.randint(1, 999)} ✓",
                             f"{rng.randint(0, 9999)}.{rng.randint(0, 99):02d}",
                             rng.randint(1, 20), rng.random() * 40, None,
                             rng.randbytes(rng.randint(0, 32))),
                        )  # fmt: skip
                        ids.append(next_id)
                        next_id += 1
                    elif roll < 0.85:
                        conn.execute(
                            "UPDATE orders SET status = %s, amount = %s, updated_at = now() "
                            "WHERE id = %s",
                            (rng.choice(["paid", "shipped", "returned"]),
                             f"{rng.randint(0, 999)}.{rng.randint(0, 99):02d}", rng.choice(ids)),
                        )  # fmt: skip
                    else:
                        index = rng.randrange(len(ids))
                        ids[index], ids[-1] = ids[-1], ids[index]
                        conn.execute("DELETE FROM orders WHERE id = %s", (ids.pop(),))
                    done += 1


def run_changes(source: str, changes: int, *, seed: int, rate: float) -> None:
    """``changes`` of the workload against ``source`` (``sqlite:PATH`` or a PostgreSQL URL)."""
    if source.startswith("sqlite:"):
        from kayak.pipeline.workload import run_workload

        run_workload(source.removeprefix("sqlite:"), changes, seed=seed, rate=rate)
    else:
        pg_workload(source, changes, seed=seed, rate=rate)


class WorkloadProcess:
    """A started workload child, waiting for :meth:`go`."""

    def __init__(self, source: str, changes: int, *, seed: int = 11, rate: float = 0.0) -> None:
        argv = [sys.executable, __file__, source, str(changes), "--seed", str(seed),
                "--rate", str(rate)]  # fmt: skip
        self._process = subprocess.Popen(
            argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
        )
        assert self._process.stdout is not None
        if self._process.stdout.readline().strip() != "ready":
            self._process.kill()
            raise RuntimeError(f"workload process did not start: {argv}")

    @property
    def pid(self) -> int:
        return self._process.pid

    def go(self) -> None:
        assert self._process.stdin is not None
        self._process.stdin.write("go\n")
        self._process.stdin.flush()

    def wait(self) -> WorkloadRun:
        out, _ = self._process.communicate()
        if self._process.returncode != 0:
            raise RuntimeError(f"workload process failed ({self._process.returncode})")
        report = json.loads(out.strip().splitlines()[-1])
        return WorkloadRun(elapsed_s=report["elapsed_s"], cpu_s=report["cpu_s"])


def run_workload_process(source: str, changes: int, *, seed: int = 11, rate: float = 0.0
                         ) -> WorkloadRun:  # fmt: skip
    """Run the workload in a child process to the end (the source alone)."""
    process = WorkloadProcess(source, changes, seed=seed, rate=rate)
    process.go()
    return process.wait()


def _cpu_seconds() -> float:
    times = os.times()
    return times.user + times.system


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("source")
    parser.add_argument("changes", type=int)
    parser.add_argument("--seed", type=int, default=11)
    parser.add_argument("--rate", type=float, default=0.0)
    args = parser.parse_args()
    # Imported before "ready": outside the measured interval.
    if args.source.startswith("sqlite:"):
        import kayak.pipeline.workload  # noqa: F401
    else:
        import psycopg  # noqa: F401
    print("ready", flush=True)
    if sys.stdin.readline().strip() != "go":
        raise SystemExit("expected go")
    cpu, started = _cpu_seconds(), time.monotonic()
    run_changes(args.source, args.changes, seed=args.seed, rate=args.rate)
    report = {"elapsed_s": time.monotonic() - started, "cpu_s": _cpu_seconds() - cpu}
    print(json.dumps(report), flush=True)


if __name__ == "__main__":
    main()
