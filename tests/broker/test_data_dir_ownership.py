"""Start-up deletes only what kayak marked for deletion: a topic deletion renames its
directories to ``…-delete`` first, and nothing else in the data directory is ever removed."""

from __future__ import annotations

import asyncio
import logging
import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from kayak.broker import Broker


def _start_and_stop(data: Path) -> None:
    async def run() -> None:
        async with Broker(data, port=0):
            pass

    asyncio.run(run())


def test_unknown_directories_are_left_alone_and_named(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    data = tmp_path / "data"
    _start_and_stop(data)
    users = data / "mystuff-3"  # looks like a partition of a topic kayak does not know
    users.mkdir()
    (users / "00000000000000000000.log").write_bytes(b"precious")
    backup = data / "backup-delete"  # a user's folder that merely ends like a deletion
    backup.mkdir()
    (backup / "notes.txt").write_text("keep me")
    with caplog.at_level(logging.WARNING, logger="kayak.broker.catalog"):
        _start_and_stop(data)
    assert (users / "00000000000000000000.log").read_bytes() == b"precious"
    assert (backup / "notes.txt").read_text() == "keep me"
    warnings = [r.getMessage() for r in caplog.records if "left alone" in r.getMessage()]
    assert len(warnings) == 1 and "mystuff-3" in warnings[0], warnings


def test_a_deletion_a_crash_interrupted_is_finished_at_start(tmp_path: Path) -> None:
    data = tmp_path / "data"
    _start_and_stop(data)
    interrupted = data / f"orders-0.{uuid.uuid4().hex}-delete"
    interrupted.mkdir()
    (interrupted / "00000000000000000000.log").write_bytes(b"x" * 100)
    _start_and_stop(data)
    assert not interrupted.exists()


def test_deleting_a_topic_leaves_nothing_behind(tmp_path: Path) -> None:
    data = tmp_path / "data"

    async def run() -> None:
        async with Broker(data, port=0) as broker:
            assert broker.context is not None
            catalog = broker.context.catalog
            catalog.create("orders", 3)
            for index in range(3):
                catalog.partition("orders", index)  # opened: its directory exists
            assert len(list(data.glob("orders-*"))) == 3
            catalog.delete("orders")
            assert list(data.glob("orders*")) == []

    asyncio.run(run())


def test_a_second_broker_on_a_locked_directory_is_refused_naming_the_holder(
    tmp_path: Path,
) -> None:
    data = tmp_path / "data"

    async def run() -> None:
        async with Broker(data, port=0):
            with pytest.raises(OSError, match=rf"{data} is in use .* \(pid {os.getpid()}"):
                await Broker(data, port=0).start()
        async with Broker(data, port=0):  # released at stop
            pass

    asyncio.run(run())


def test_the_cli_exits_at_once_with_one_line(tmp_path: Path) -> None:
    data = tmp_path / "data"

    async def run() -> subprocess.CompletedProcess[str]:
        async with Broker(data, port=0):
            return await asyncio.to_thread(
                subprocess.run,
                [sys.executable, "-m", "kayak", "broker", "--data-dir", str(data), "--port", "0",
                 "--no-schema-registry"],
                capture_output=True, text=True, timeout=60, check=False,
            )  # fmt: skip

    result = asyncio.run(run())
    assert result.returncode == 1
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "in use by another broker process" in lines[0], result.stderr
    assert str(os.getpid()) in lines[0]
