"""``kayak produce``: stdin lines to records, keys split off, settings passed through, and
one-line failures with exit status 1."""

from __future__ import annotations

import pytest
from click.testing import CliRunner, Result

from kayak.cli.produce import produce
from tests.client.conftest import RunningBroker, _free_port
from tests.client.test_producer_support import create_topic, read_back, shared_broker, unique

pytestmark = pytest.mark.timeout(60)
__all__ = ["shared_broker"]  # the fixture, imported to be found


def invoke(args: list[str], stdin: bytes = b"") -> Result:
    return CliRunner().invoke(produce, args, input=stdin)


def test_lines_become_records_with_keys_split_at_the_separator(
    shared_broker: RunningBroker,
) -> None:
    bootstrap = shared_broker.bootstrap_servers
    topic = create_topic(bootstrap, unique("cli"), 3)
    lines = b"k1:v1\nk2:v2:with:colons\nno key here\n:empty key\r\nlast:no newline"
    result = invoke(
        ["-b", bootstrap, topic, "-K", ":", "--acks", "1", "--compression", "zstd",
         "-X", "linger.ms=1", "-X", "client.id=cli-test"],
        lines,
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    assert "5 records" in result.stderr and "records/s" in result.stderr
    stored = read_back(bootstrap, topic, 3, 5)
    assert sorted(((s.key, s.value) for s in stored), key=repr) == sorted(
        [
            (b"k1", b"v1"),
            (b"k2", b"v2:with:colons"),
            (None, b"no key here"),
            (b"", b"empty key"),
            (b"last", b"no newline"),
        ],
        key=repr,
    )


def test_many_lines_to_one_partition(shared_broker: RunningBroker) -> None:
    bootstrap = shared_broker.bootstrap_servers
    topic = create_topic(bootstrap, unique("cli-bulk"), 2)
    count = 50_000
    result = invoke(
        ["-b", bootstrap, topic, "-p", "1"], b"".join(b"%d\n" % i for i in range(count))
    )
    assert result.exit_code == 0, result.output
    stored = read_back(bootstrap, topic, 2, count)
    assert {s.partition for s in stored} == {1}
    assert [s.value for s in stored] == [b"%d" % i for i in range(count)]


@pytest.mark.parametrize(
    ("args", "complaint"),
    [
        (["-X", "linger.ms=soon"], "linger.ms"),
        (["-X", "no-equals-sign"], "prop=value"),
        (["-X", "acks=1", "-X", "enable.idempotence=true"], "idempotent"),
    ],
)
def test_bad_settings_exit_1_with_one_line(args: list[str], complaint: str) -> None:
    result = invoke(["-b", "127.0.0.1:9092", "topic", *args])
    assert result.exit_code != 0
    assert complaint in result.output
    assert "Traceback" not in result.output


def test_an_unreachable_broker_or_missing_topic_fails_within_the_timeout(
    shared_broker: RunningBroker,
) -> None:
    result = invoke(["-b", f"127.0.0.1:{_free_port()}", "topic", "--timeout", "0.5"], b"x\n")
    assert result.exit_code == 1
    assert result.stderr.strip().count("\n") == 0 and "bootstrap" in result.stderr
    missing = invoke(
        ["-b", shared_broker.bootstrap_servers, "nope", "--timeout", "0.5",
         "-X", "allow.auto.create.topics=false"],
        b"x\n",
    )  # fmt: skip
    assert missing.exit_code == 1
    assert "'nope'" in missing.stderr
