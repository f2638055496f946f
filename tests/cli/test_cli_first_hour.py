"""A new user's first hour (issue 16): a fresh broker takes `kayak produce newtopic`, `-b` and
KAYAK_BOOTSTRAP_SERVER work the same everywhere, and every mistake on the list gives one line
and a non-zero exit, fast. In-process through click's runner, except what needs a terminal."""

from __future__ import annotations

import os
import pty
import select
import socket
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from kayak.cli.main import cli
from kayak.client.admin import OffsetSpec
from kayak.client.sync import Admin
from kayak.client.types import TopicPartition
from tests.broker.conftest import BrokerProcess

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(scope="module")
def bootstrap(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    broker = BrokerProcess(Path(tmp_path_factory.mktemp("first-hour")) / "data").start()
    yield broker.bootstrap_servers
    broker.stop()


def kayak(*args: str, stdin: bytes = b"", env: dict[str, str] | None = None) -> Result:
    return CliRunner().invoke(cli, list(args), input=stdin, env=env)


def one_error_line(result: Result) -> str:
    """The single line a failing command prints on stderr (exit status 1)."""
    assert result.exit_code == 1, (result.exit_code, result.output, result.exception)
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("Error: "), result.stderr
    return lines[0]


def dead_address() -> str:
    with socket.socket() as unused:
        unused.bind(("127.0.0.1", 0))
        return f"127.0.0.1:{unused.getsockname()[1]}"


def test_a_fresh_broker_takes_new_topics_and_b_works_everywhere(bootstrap: str) -> None:
    env = {"KAYAK_BOOTSTRAP_SERVER": bootstrap}
    produced = kayak("produce", "newtopic", stdin=b"x\ny\n", env=env)
    assert produced.exit_code == 0, produced.output
    for args in (
        ["-b", bootstrap, "topics", "list"],
        ["topics", "-b", bootstrap, "list"],
        ["topics", "list", "-b", bootstrap],
    ):
        listed = kayak(*args)
        assert listed.exit_code == 0 and "newtopic" in listed.stdout, (args, listed.output)
    assert "newtopic" in kayak("topics", "list", env=env).stdout
    # the innermost -b wins over an outer one and over the environment
    dead = {"KAYAK_BOOTSTRAP_SERVER": dead_address()}
    assert kayak("-b", dead_address(), "groups", "list", "-b", bootstrap, env=dead).exit_code == 0
    # -X auto.offset.reset=earliest on a group-less consume starts at the beginning
    read = kayak("consume", "newtopic", "-X", "auto.offset.reset=earliest", "-e", env=env)
    assert (read.exit_code, read.stdout) == (0, "x\ny\n"), read.output
    assert kayak("consume", "newtopic", "-e", env=env).stdout == ""  # default: from the end


def test_mistakes_are_one_line_and_fail_fast(bootstrap: str, tmp_path: Path) -> None:
    assert "no partition 999" in one_error_line(
        kayak("produce", "-b", bootstrap, "newtopic", "-p", "999", stdin=b"x\n")
    )
    dead = dead_address()
    for args in (
        ["produce", "t", "--timeout", "60"],
        ["consume", "t", "--timeout", "60"],
        ["topics", "--timeout", "60", "list"],
        ["groups", "--timeout", "60", "list"],
        ["metadata", "--timeout", "60"],
    ):
        start = time.monotonic()
        line = one_error_line(kayak("-b", dead, *args, stdin=b"x\n"))
        assert "connection refused" in line, (args, line)
        assert time.monotonic() - start < 20, args  # not the 60 s of --timeout
    empty = tmp_path / "not-kayak"
    empty.mkdir()
    assert "holds no kayak data" in one_error_line(
        kayak("partitions", "list", "--data-dir", str(empty))
    )
    assert list(empty.iterdir()) == []
    damaged = tmp_path / "damaged"
    damaged.mkdir()
    (damaged / "topics.json").write_text("{broken")
    assert "topics.json" in one_error_line(
        kayak("broker", "--data-dir", str(damaged), "--port", "0", "--no-schema-registry")
    )


def test_source_and_target_mistakes_still_fail(tmp_path: Path) -> None:
    """Fixed in the last session (kayak/cli/cdc.py, pipeline.py): kept from coming back."""
    shop = tmp_path / "shop.db"
    import sqlite3

    with sqlite3.connect(shop) as db:
        db.execute("create table orders (id integer primary key, v text)")
    missing = tmp_path / "missing.db"
    cases = [
        (["cdc", "enable", "mysql://me@db/shop", "orders"], "mysql"),
        (["cdc", "enable", str(tmp_path / "no" / "dir.db"), "orders"], "does not exist"),
        (["cdc", "enable", str(missing), "orders"], "does not exist"),
        (["cdc", "disable", str(shop), "nosuchtable"], "nosuchtable"),
        (["pipeline", "run", "--source", f"sqlite:{shop}", "--table", "orders",
          "--target", "sqlite:/missing/dir/r.db", "--once", "--work-dir", str(tmp_path / "w")],
         "/missing/dir"),
        (["pipeline", "run", "--source", f"sqlite:{shop}", "--table", "orders",
          "--target", "foo://x", "--once", "--work-dir", str(tmp_path / "w")], "foo://x"),
    ]  # fmt: skip
    for args, named in cases:
        assert named in one_error_line(kayak(*args)), args
    assert not missing.exists()


def test_a_missing_postgres_driver_names_the_extra(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from kayak.cli.main import main

    monkeypatch.setitem(sys.modules, "psycopg", None)  # `import psycopg` fails as if absent
    for name in [n for n in sys.modules if n.startswith("kayak.cdc.postgres")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setattr(
        sys, "argv", ["kayak", "cdc", "enable", "postgresql://me@127.0.0.1:1/shop", "orders"]
    )
    with pytest.raises(SystemExit) as exited:
        main()
    assert exited.value.code == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "pip install 'kayak[postgres]'" in err, err


def _latest(bootstrap: str, topic: str) -> int:
    with Admin({"bootstrap.servers": bootstrap}) as admin:
        if topic not in admin.list_topics():
            return 0
        spec = {TopicPartition(topic, 0): OffsetSpec.LATEST}
        return admin.list_offsets(spec)[TopicPartition(topic, 0)].offset


def _wait_for_a_record(bootstrap: str, topic: str, before: int) -> None:
    deadline = time.monotonic() + 60
    while _latest(bootstrap, topic) <= before:
        assert time.monotonic() < deadline, "the typed line never arrived"
        time.sleep(0.2)


def _produce_at_a_terminal(bootstrap: str, last_key: bytes) -> tuple[int, bytes]:
    """`kayak produce` with a pty as its terminal: one line typed (and stored), then
    ``last_key``."""
    before = _latest(bootstrap, "typed")
    pid, fd = pty.fork()
    if pid == 0:  # the child: a session leader whose controlling terminal is the pty
        os.execv(sys.executable, [sys.executable, "-m", "kayak", "produce", "-b", bootstrap,
                                  "typed"])  # fmt: skip
    output = b""
    # poll, not select: in a long-lived test worker the pty's descriptor can be past 1023,
    # which select() refuses with "filedescriptor out of range".
    readable = select.poll()
    readable.register(fd, select.POLLIN)

    def read_for(seconds: float, until: bytes | None = None) -> None:
        nonlocal output
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline and (until is None or until not in output):
            if readable.poll(100):
                try:
                    output += os.read(fd, 4096)
                except OSError:
                    return

    os.write(fd, b"hello\n")
    _wait_for_a_record(bootstrap, "typed", before)  # the producer runs: the line was sent
    deadline = time.monotonic() + 60
    os.write(fd, last_key)
    while time.monotonic() < deadline:
        read_for(0.2)
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            read_for(0.5, b"records")
            os.close(fd)
            return os.waitstatus_to_exitcode(status), output
    os.kill(pid, 9)
    os.waitpid(pid, 0)
    raise AssertionError(f"kayak produce did not exit after {last_key!r}: {output!r}")


@pytest.mark.parametrize(
    ("key", "status"), [(b"\x04", 0), (b"\x03", 130)], ids=["ctrl-d", "ctrl-c"]
)
def test_produce_at_a_terminal_ends_cleanly(bootstrap: str, key: bytes, status: int) -> None:
    code, output = _produce_at_a_terminal(bootstrap, key)
    assert code == status, output
    assert b"Traceback" not in output and b"Fatal" not in output, output
    assert b"records" in output, output  # the summary line
