"""kcat's flags on `kayak consume`/`produce` and the Kafka tools' abilities (topics alter
--partitions, configs, groups reset-offsets, records delete, schemas), in-process through
click's runner against one broker process."""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from kayak.cli.main import cli
from kayak.client.sync import Consumer
from tests.broker.conftest import BrokerProcess

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    process = BrokerProcess(Path(tmp_path_factory.mktemp("kcat")) / "data", web=True).start()
    yield process
    process.stop()


def ok(*args: str, stdin: bytes = b"", broker: BrokerProcess) -> str:
    result: Result = CliRunner().invoke(cli, ["-b", broker.bootstrap_servers, *args], input=stdin)
    assert result.exit_code == 0, (args, result.output, result.exception)
    return result.stdout


def test_produce_and_consume_with_kcat_flags(broker: BrokerProcess) -> None:
    ok("topics", "create", "kc", "-p", "2", broker=broker)
    lines = b"k1:one\nk2:two\n:\nk4:four\n"
    ok("produce", "kc", "-p", "1", "-K", ":", "-Z", "-H", "src=cli", "-H", "flag",
       stdin=lines, broker=broker)  # fmt: skip
    ok("produce", "kc", "-p", "0", stdin=b"zero\n", broker=broker)

    # -J: kcat's envelope; -Z made the empty key and value nulls; headers as a flat list
    out = ok("consume", "kc", "-p", "1", "-o", "beginning", "-e", "-J", broker=broker)
    records = [json.loads(line) for line in out.splitlines()]
    assert [r["offset"] for r in records] == [0, 1, 2, 3]
    first = records[0]
    assert set(first) == {"topic", "partition", "offset", "tstype", "ts", "broker", "headers",
                          "key", "payload"}  # fmt: skip
    assert (first["topic"], first["partition"], first["tstype"], first["broker"]) == (
        "kc", 1, "create", 0,
    )  # fmt: skip
    assert first["headers"] == ["src", "cli", "flag", None]
    assert (records[2]["key"], records[2]["payload"]) == (None, None)

    # -f tokens, -o N and -c
    out = ok("consume", "kc", "-p", "1", "-o", "1", "-c", "2",
             "-f", "%t/%p/%o %k=%s %K %S|%h", broker=broker)  # fmt: skip
    assert out.splitlines() == ["kc/1/1 k2=two 2 3|src=cli,flag=", "kc/1/2 = -1 -1|src=cli,flag="]
    # -o -N: the last N of each partition; -K and -Z in the default line; -H headers first
    out = ok("consume", "kc", "-o", "-1", "-e", "-K", "=", "-Z", "-H", broker=broker)
    assert sorted(out.splitlines()) == sorted(["\tNULL=zero", "src=cli,flag=\tk4=four"])

    # s@TS / e@TS: times around the records of partition 1
    stamps = [r["ts"] for r in records]
    out = ok("consume", "kc", "-p", "1", "-o", f"s@{stamps[0]}", "-o", f"e@{stamps[-1] + 1}",
             "-f", "%o", broker=broker)  # fmt: skip
    assert out.splitlines() == ["0", "1", "2", "3"]
    out = ok("consume", "kc", "-p", "1", "-o", f"s@{stamps[-1] + 60_000}", "-e", broker=broker)
    assert out == ""

    # -L on consume, and kayak metadata -J
    assert 'topic "kc" with 2 partitions:' in ok("consume", "-L", broker=broker)
    listing = json.loads(ok("metadata", "-t", "kc", "-J", broker=broker))
    assert [p["partition"] for p in listing["topics"][0]["partitions"]] == [0, 1]
    assert listing["brokers"][0]["id"] == 0


def test_topics_alter_partitions_configs_and_records_delete(broker: BrokerProcess) -> None:
    ok("topics", "create", "grow", "-p", "1", "--config", "retention.ms=3600000", broker=broker)
    out = ok("topics", "alter", "grow", "--partitions", "3", broker=broker)
    assert "partitions 1 -> 3" in out
    assert "partitions 3" in ok("topics", "describe", "grow", broker=broker)
    shrink = CliRunner().invoke(cli, ["topics", "-b", broker.bootstrap_servers, "alter", "grow",
                                      "--partitions", "2"])  # fmt: skip
    assert shrink.exit_code == 1 and "cannot be removed" in shrink.stderr

    overrides = ok("topics", "configs", "grow", "--describe", broker=broker)
    assert "retention.ms" in overrides and "3600000" in overrides
    every = ok("topics", "configs", "grow", "--describe", "--all", broker=broker)
    assert "segment.bytes" in every and "DEFAULT_CONFIG" in every

    ok("produce", "grow", "-p", "0", stdin=b"".join(b"%d\n" % i for i in range(10)),
       broker=broker)  # fmt: skip
    out = ok("records", "delete", "grow", "--partition", "0", "--before-offset", "4",
             broker=broker)  # fmt: skip
    assert "earliest offset now 4" in out
    remaining = ok("consume", "grow", "-p", "0", "-o", "beginning", "-e", broker=broker)
    assert remaining.splitlines() == [str(i) for i in range(4, 10)]


def _committed(broker: BrokerProcess, group: str) -> dict[int, int]:
    out = ok("groups", "describe", group, broker=broker)
    rows = [line.strip("│ ").split("│") for line in out.splitlines() if line.startswith("│ rg")]
    return {int(r[1]): int(r[2]) for r in rows}


def test_groups_reset_offsets(broker: BrokerProcess) -> None:
    ok("topics", "create", "rg", "-p", "2", broker=broker)
    for partition in ("0", "1"):
        ok("produce", "rg", "-p", partition, stdin=b"a\nb\nc\nd\n", broker=broker)
    ok("consume", "rg", "-g", "resetme", "-o", "beginning", "-e", broker=broker)
    assert _committed(broker, "resetme") == {0: 4, 1: 4}

    plan = ok("groups", "reset-offsets", "resetme", "--topic", "rg", "--to-earliest",
              broker=broker)  # fmt: skip
    assert "dry run" in plan
    assert _committed(broker, "resetme") == {0: 4, 1: 4}
    ok("groups", "reset-offsets", "resetme", "--topic", "rg:1", "--shift-by", "-3", "--execute",
       broker=broker)  # fmt: skip
    assert _committed(broker, "resetme") == {0: 4, 1: 1}
    ok("groups", "reset-offsets", "resetme", "--all-topics", "--to-offset", "2", "--execute",
       broker=broker)  # fmt: skip
    assert _committed(broker, "resetme") == {0: 2, 1: 2}
    after = int(time.time() * 1000) + 60_000
    moment = time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(after / 1000))
    ok("groups", "reset-offsets", "resetme", "--all-topics", "--to-datetime", moment,
       "--execute", broker=broker)  # fmt: skip
    assert _committed(broker, "resetme") == {0: 4, 1: 4}

    # a group with an active member is refused, as Kafka's tool refuses it
    member = Consumer({"bootstrap.servers": broker.bootstrap_servers, "group.id": "resetme",
                       "auto.offset.reset": "earliest"})  # fmt: skip
    try:
        member.subscribe(["rg"])
        deadline = time.monotonic() + 30
        while not member.assignment() and time.monotonic() < deadline:
            member.poll(timeout_ms=200)
        refused = CliRunner().invoke(cli, ["groups", "-b", broker.bootstrap_servers,
                                           "reset-offsets", "resetme", "--all-topics",
                                           "--to-earliest", "--execute"])  # fmt: skip
        assert refused.exit_code == 1 and "active members" in refused.stderr, refused.output
    finally:
        member.close()


def test_schemas(broker: BrokerProcess, tmp_path: Path) -> None:
    assert broker.log_path is not None
    found = re.findall(r"schema registry on (\S+)", broker.log_path.read_text())
    url = found[-1]
    schema = {"type": "record", "name": "Order", "fields": [{"name": "id", "type": "long"}]}
    first = tmp_path / "v1.avsc"
    first.write_text(json.dumps(schema))
    runner = CliRunner()

    def schemas(*args: str) -> Result:
        return runner.invoke(cli, ["schemas", "-r", url, *args])

    registered = schemas("register", "orders-value", str(first))
    assert registered.exit_code == 0 and "id " in registered.stdout, registered.output
    listed = schemas("list")
    assert listed.stdout.splitlines() == ["orders-value\tversions 1"]
    got = schemas("get", "orders-value")
    assert json.loads(got.stdout) == schema
    assert "BACKWARD" in schemas("compatibility", "orders-value").stdout
    breaking = tmp_path / "v2.avsc"
    breaking.write_text(json.dumps({**schema, "fields": [{"name": "id", "type": "string"}]}))
    checked = schemas("compatibility", "orders-value", "--check", str(breaking))
    assert checked.exit_code == 1 and "not compatible" in checked.stderr
    assert "NONE" in schemas("compatibility", "orders-value", "--set", "NONE").stdout
    assert schemas("compatibility", "orders-value", "--check", str(breaking)).exit_code == 0
    missing = schemas("get", "nope")
    assert missing.exit_code == 1 and missing.stderr.count("\n") == 1
