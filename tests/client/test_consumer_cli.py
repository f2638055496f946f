"""``kayak consume``: formats, limits, groups and one-line errors, against kayak's broker (and
reading against Apache Kafka too)."""

from __future__ import annotations

import socket

import pytest
from click.testing import CliRunner

from kayak.cli.consume import compile_format, consume
from kayak.client.consumer import ConsumerRecord
from tests.client.conftest import RunningBroker
from tests.client.consumer_support import create_topic, produce, unique

pytestmark = pytest.mark.timeout(60)


def invoke(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(consume, list(args), catch_exceptions=False)
    return result.exit_code, result.stdout, result.stderr


def test_format_tokens_and_escapes() -> None:
    record = ConsumerRecord("t", 3, 42, 1700, 0, b"key", b"val", [("a", b"1"), ("b", None)])
    pieces = compile_format(r"%t|%p|%o|%T|%k|%v|%s|%S|%K|%h|100%%\t")
    line = b"".join(p if isinstance(p, bytes) else p(record) for p in pieces)
    assert line == b"t|3|42|1700|key|val|val|3|3|a=1,b=|100%\t\n"
    nulls = ConsumerRecord("t", 0, 0, 0, 0, None, None)
    pieces = compile_format("%k:%v:%K:%S\\n")
    assert b"".join(p if isinstance(p, bytes) else p(nulls) for p in pieces) == b"::-1:-1\n"


def test_consume_prints_every_record_and_exits_at_the_end(kafka_cluster: RunningBroker) -> None:
    bootstrap = kafka_cluster.bootstrap_servers
    topic, group_id = unique("cli"), unique("g")
    create_topic(bootstrap, topic, 2)
    produce(
        bootstrap, topic, [(i % 2, b"k%d" % i, b"v%d" % i) for i in range(6)], headers=[("h", b"x")]
    )
    code, out, err = invoke(
        "-b", bootstrap, topic, "--from-beginning", "--exit-at-end", "-f", "%p %o %k=%v %h"
    )
    assert code == 0, err
    lines = sorted(out.splitlines())
    assert lines == sorted(f"{i % 2} {i // 2} k{i}=v{i} h=x" for i in range(6))

    code, out, _ = invoke("-b", bootstrap, topic, "--from-beginning", "-c", "2")
    assert code == 0
    assert len(out.splitlines()) == 2

    # without --from-beginning nothing old is printed
    code, out, _ = invoke("-b", bootstrap, topic, "-e")
    assert (code, out) == (0, "")

    # as a group member: the first run reads everything and commits, the second nothing
    group = ["-b", bootstrap, topic, "--group", group_id, "--from-beginning", "-e"]
    code, out, err = invoke(*group, "-X", "fetch.max.wait.ms=50")
    assert code == 0, err
    assert sorted(out.splitlines()) == sorted(f"v{i}" for i in range(6))
    code, out, err = invoke(*group)
    assert (code, out) == (0, ""), err


@pytest.mark.kayak_only("the CLI's own one-line errors: one broker shows them")
def test_errors_are_one_line_with_a_nonzero_exit(kayak_broker: RunningBroker) -> None:
    with socket.socket() as unused:
        unused.bind(("127.0.0.1", 0))
        dead = f"127.0.0.1:{unused.getsockname()[1]}"
    code, _, err = invoke("-b", dead, "t", "--timeout", "1")
    assert code == 1
    assert err.startswith("Error: ") and err.count("\n") == 1

    code, _, err = invoke("-b", kayak_broker.bootstrap_servers, "missing", "--timeout", "1")
    assert code == 1
    assert "missing" in err and err.count("\n") == 1

    code, _, err = invoke("-b", kayak_broker.bootstrap_servers, "t", "-X", "fetch.max.bytes=lots")
    assert code == 1
    assert "fetch.max.bytes" in err and err.count("\n") == 1

    code, _, err = invoke("t", "-f", "%q")
    assert code == 2
    assert "%q" in err

    code, _, err = invoke("t", "-X", "novalue")
    assert code == 2
