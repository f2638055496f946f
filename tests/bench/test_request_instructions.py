"""bench/request_instructions.py: its load reaches every request's answer, and its counts come
from callgrind's own dump format."""

from __future__ import annotations

import importlib
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest

REPO = Path(__file__).resolve().parents[2]

DUMP = """\
# callgrind format
version: 1
creator: callgrind-3.19.0
events: Ir
summary: 2820784701
totals: 2820784701
"""


@pytest.fixture
def bench(monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[ModuleType, ModuleType]]:
    monkeypatch.syspath_prepend(str(REPO / "bench"))
    yield importlib.import_module("request_instructions"), importlib.import_module("peers")


def test_every_request_of_the_load_is_answered_by_each_server(
    bench: tuple[ModuleType, ModuleType], tmp_path: Path
) -> None:
    instructions, peers = bench
    load = instructions.Load(connections=3, window=4, per_connection=25, partitions=2)
    with peers.start_empty_server(tmp_path, instructions.TOPIC) as server:
        assert instructions.run_load(server.port, load) == 75
    with peers.start_kayak(tmp_path, "group") as broker:
        instructions.create_topic(broker.port, load.partitions)
        assert instructions.run_load(broker.port, load) == 75
        broker_log = broker.log_path.read_text()
    assert "Traceback" not in broker_log, broker_log[-2000:]


def test_the_total_is_read_from_a_callgrind_dump(bench: tuple[ModuleType, ModuleType]) -> None:
    instructions, _ = bench
    assert instructions.dump_total(DUMP) == 2820784701
    with pytest.raises(RuntimeError, match="no totals: line"):
        instructions.dump_total("events: Ir\n")


@pytest.mark.parametrize(
    ("argv", "problem"),
    [
        (["--flush", "sometimes"], "unknown --flush mode 'sometimes'"),
        (["--requests", "4", "--connections", "16"], "--requests must be at least --connections"),
        (["--window", "0"], "--window positive"),
    ],
)
def test_bad_arguments_exit_with_one_line_naming_the_problem(
    bench: tuple[ModuleType, ModuleType], capsys: pytest.CaptureFixture[str], argv: list[str],
    problem: str,
) -> None:
    instructions, _ = bench
    with pytest.raises(SystemExit) as exited:
        instructions.parse_args(argv)
    assert exited.value.code == 2
    assert problem in capsys.readouterr().err
