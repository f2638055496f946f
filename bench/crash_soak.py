"""Crash soak: many rounds of acks=all load, ``kill -9`` and verification on one kayak broker.

Each round (see ``tests/broker/crash/``): confluent-kafka producers (idempotent and
not) and kayak's own idempotent producer write records of 24 B to ~9 kB, with bursts above
1 MiB, to their own 4-partition topics while a consumer group commits, DeleteRecords trims a
partition and a retention change deletes segments of a throwaway topic; after at least
``--mb-per-round`` MiB acknowledged the broker (with ``--shards 2``: one shard) is killed with
SIGKILL at a random point and restarted on the same data directory; then every partition is
read back from its log start and checked against every acknowledgement of every round so far.
The data directory keeps the default 1 GiB segments, so the crashes hit large active segments.

Run from the repository root::

    .venv/bin/python bench/crash_soak.py --rounds 10 [--shards 1|2] [--flush group|always]
        [--mb-per-round 50] [--seed N] [--work-dir DIR] [--keep] [-v]

It prints a table of the rounds and, last, one line: rounds, records acknowledged, lost,
duplicated. The exit status is 0 only if nothing was lost or duplicated and no other check
(offset gaps, committed offsets going back, DeleteRecords or retention, ``kayak log verify``)
failed. A temporary work directory is removed afterwards unless ``--keep`` or something
failed; a ``--work-dir`` is always kept.
"""

from __future__ import annotations

import argparse
import logging
import shutil
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from rich.console import Console  # noqa: E402
from rich.logging import RichHandler  # noqa: E402
from rich.table import Table  # noqa: E402

from tests.broker.crash import (  # noqa: E402
    CrashHarness,
    HarnessConfig,
    LogVerify,
    RoundResult,
)


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5, help="kill -9 rounds (default 5)")
    parser.add_argument("--shards", type=int, choices=(1, 2), default=1)
    parser.add_argument("--flush", choices=("group", "always"), default="group")
    parser.add_argument(
        "--mb-per-round",
        type=float,
        default=50.0,
        help="MiB acknowledged before the kill, at least (default 50)",
    )
    parser.add_argument("--seed", type=int, default=None, help="seed of the random choices")
    parser.add_argument("--work-dir", type=Path, default=None, help="default: a temp directory")
    parser.add_argument("--keep", action="store_true", help="keep the work directory")
    parser.add_argument("-v", "--verbose", action="store_true", help="log each round's steps")
    return parser.parse_args()


def rounds_table(results: list[RoundResult]) -> Table:
    table = Table(title="crash soak: kill -9 rounds")
    for name in (
        "round", "MiB at kill", "MiB written", "acked", "acked (all rounds)", "lost",
        "duplicated", "plain retry copies", "commits", "torn tails cut", "came back",
        "restart s", "verify s", "round s", "other violations",
    ):  # fmt: skip
        wide = name == "came back"
        table.add_column(name, justify="left" if wide else "right", no_wrap=wide)
    for r in results:
        table.add_row(
            str(r.round_number), f"{r.mib_before_kill:.1f}", f"{r.mib_written:.1f}",
            f"{r.records_acked:,}", f"{r.total_acked:,}", _flag(r.lost), _flag(r.duplicated),
            f"{r.acknowledged_twice_stored:,}", str(r.commits_acked), str(r.torn_tail_cuts),
            r.came_back, f"{r.restart_s:.1f}", f"{r.verify_s:.1f}", f"{r.round_s:.1f}",
            _flag(len(r.violations)),
        )  # fmt: skip
    return table


def _flag(count: int) -> str:
    return f"[bold red]{count:,}[/]" if count else "0"


def report_details(console: Console, results: list[RoundResult], checked: LogVerify) -> None:
    for result in results:
        if result.lost or result.duplicated or result.violations or result.torn_tail_cuts:
            console.print(result.describe(), markup=False, highlight=False)
    if not checked.available:
        console.print("kayak log verify: not run, `kayak log --help` failed")
    elif checked.returncode != 0:
        console.print(f"kayak log verify failed (exit {checked.returncode}):")
        console.print(checked.output, markup=False, highlight=False)
    else:
        console.print("kayak log verify: no problems")


def main() -> int:
    args = parse_args()
    logging.basicConfig(
        level=logging.INFO if args.verbose else logging.WARNING,
        format="%(message)s",
        handlers=[RichHandler(show_path=False)],
    )
    # Piped output (a log file) gets the whole table, not 80 columns of ellipses.
    console = Console(width=None if sys.stdout.isatty() else 180)
    work_dir = args.work_dir or Path(tempfile.mkdtemp(prefix="kayak-crash-soak-"))
    config = HarnessConfig(
        work_dir,
        shards=args.shards,
        flush=args.flush,
        mib_per_round=args.mb_per_round,
        seed=args.seed,
    )
    results: list[RoundResult] = []
    with CrashHarness(config) as harness:
        console.print(f"{config.variant} seed={harness.seed}, data in {harness.broker.data_dir}")
        for _ in range(args.rounds):
            result = harness.run_round()
            results.append(result)
            console.print(
                f"round {result.round_number}: {result.mib_written:.1f} MiB, "
                f"{result.records_acked:,} acknowledged, lost {result.lost}, "
                f"duplicated {result.duplicated}, {len(result.violations)} other violations"
            )
        checked = harness.finish()
    console.print(rounds_table(results))
    report_details(console, results, checked)
    failed = (
        bool(harness.lost_ids or harness.duplicated_ids)
        or any(r.violations for r in results)
        or (checked.available and checked.returncode != 0)
    )
    if failed or args.keep or args.work_dir is not None:
        console.print(f"work directory kept: {work_dir}")
    else:  # only a directory this run made itself
        shutil.rmtree(work_dir, ignore_errors=True)
    console.print(
        f"rounds {len(results)}, records acknowledged {harness.acknowledged}, "
        f"lost {len(harness.lost_ids)}, duplicated {len(harness.duplicated_ids)}",
        highlight=False,
    )
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
