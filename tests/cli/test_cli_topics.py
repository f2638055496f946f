"""``kayak topics``: through click's CliRunner against kayak's broker and Tansu, and once as a
real ``python -m kayak`` process."""

from __future__ import annotations

import subprocess
import time

import pytest
from click.testing import CliRunner, Result
from confluent_kafka.admin import AdminClient

from kayak.cli.topics import topics
from tests.cli.conftest import kayak_command, table_rows
from tests.client.conftest import RunningBroker
from tests.client.consumer_support import unique

pytestmark = pytest.mark.timeout(60)


def invoke(bootstrap: str, *args: str) -> Result:
    return CliRunner().invoke(topics, ["-b", bootstrap, "--timeout", "5", *args])


def one_error_line(result: Result) -> str:
    """The single line a failing command prints (on stderr)."""
    assert result.exit_code == 1, result.output
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("Error: ")
    return lines[0]


def test_create_list_describe_delete(any_broker: RunningBroker) -> None:
    # Names of its own: the run's Apache Kafka is shared by every test.
    bootstrap = any_broker.bootstrap_servers
    orders, audit = unique("orders"), unique("audit")
    created = invoke(bootstrap, "create", orders, "-p", "3", "--config", "retention.ms=60000")
    assert created.exit_code == 0, created.output
    assert created.output.strip() == f"created topic {orders} (3 partitions)"
    assert invoke(bootstrap, "create", audit, "--partitions", "1").exit_code == 0
    theirs = AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=10).topics
    assert len(theirs[orders].partitions) == 3

    listed = invoke(bootstrap, "list")
    assert listed.exit_code == 0
    assert [row[:3] for row in table_rows(listed.output) if row[0] in (orders, audit)] == [
        [audit, "1", "1"],
        [orders, "3", "1"],
    ]

    described = invoke(bootstrap, "describe", orders)
    assert described.exit_code == 0, described.output
    assert f"{orders}  id " in described.output and "partitions 3" in described.output
    assert "configs: retention.ms=60000" in described.output or any_broker.kind == "tansu"
    rows = table_rows(described.output)
    assert [row[0] for row in rows] == ["0", "1", "2"]
    assert all(row[4] == row[5] == "0" for row in rows)  # earliest, latest of empty partitions

    deleted = invoke(bootstrap, "delete", orders, audit)
    assert deleted.exit_code == 0
    assert deleted.output.splitlines() == [f"deleted topic {orders}", f"deleted topic {audit}"]
    left = invoke(bootstrap, "list").output
    assert orders not in left and audit not in left


def test_errors_are_one_line(kayak_broker: RunningBroker) -> None:
    bootstrap = kayak_broker.bootstrap_servers
    assert invoke(bootstrap, "create", "taken").exit_code == 0
    assert one_error_line(invoke(bootstrap, "create", "taken")) == (
        "Error: taken: topic 'taken' already exists [TOPIC_ALREADY_EXISTS]"
    )
    exists = invoke(bootstrap, "create", "taken", "--if-not-exists")
    assert exists.exit_code == 0 and "exists already" in exists.output
    assert "invalid topic name" in one_error_line(invoke(bootstrap, "create", "no spaces"))
    assert one_error_line(invoke(bootstrap, "describe", "taken", "ghost")) == (
        "Error: ghost: topic does not exist [UNKNOWN_TOPIC_OR_PARTITION]"
    )
    assert "ghost: topic does not exist" in one_error_line(invoke(bootstrap, "delete", "ghost"))
    quiet = invoke(bootstrap, "delete", "ghost", "--if-exists")
    assert quiet.exit_code == 0 and "ghost does not exist" in quiet.output
    bad_config = invoke(bootstrap, "create", "x", "--config", "novalue")
    assert bad_config.exit_code == 2 and "'novalue' is not NAME=VALUE" in bad_config.output

    altered = invoke(bootstrap, "alter", "taken", "--config", "retention.ms=1000")
    assert altered.exit_code == 0
    assert "configs: retention.ms=1000" in invoke(bootstrap, "describe", "taken").output
    assert invoke(bootstrap, "alter", "taken").exit_code == 2  # nothing to change


def test_unreachable_broker_and_bad_address() -> None:
    started = time.monotonic()
    result = CliRunner().invoke(topics, ["-b", "127.0.0.1:1", "--timeout", "1", "list"])
    line = one_error_line(result)
    assert "127.0.0.1:1" in line
    assert time.monotonic() - started < 4
    bad = CliRunner().invoke(topics, ["-b", "nohost", "list"])
    assert one_error_line(bad) == (
        "Error: invalid --bootstrap-server: 'nohost' has no port; expected host:port"
    )


def test_as_a_process(kayak_broker: RunningBroker) -> None:
    """``python -m kayak topics ...`` end to end, output and exit codes as a shell sees them."""
    base = [*kayak_command(), "topics", "-b", kayak_broker.bootstrap_servers]

    def kayak(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([*base, *args], capture_output=True, text=True, timeout=30)

    created = kayak("create", "proc-topic", "--partitions", "2")
    assert (created.returncode, created.stdout.strip()) == (
        0,
        "created topic proc-topic (2 partitions)",
    )
    listed = kayak("list")
    assert listed.returncode == 0 and table_rows(listed.stdout)[0][:3] == ["proc-topic", "2", "1"]
    missing = kayak("describe", "nope")
    assert missing.returncode == 1
    assert (
        missing.stderr.strip() == "Error: nope: topic does not exist [UNKNOWN_TOPIC_OR_PARTITION]"
    )
    assert missing.stdout == ""
