"""Kafka's own command-line tools (4.3.1, each a real JVM process) against one kayak broker:
kafka-topics, kafka-configs, the console producer and consumer, kafka-consumer-groups,
kafka-get-offsets, kafka-delete-records, and kafka-dump-log reading kayak's segment files."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator

import pytest
from confluent_kafka import Producer

from tests.broker.conftest import BrokerProcess
from tests.fixtures.jvm import KafkaTools

pytestmark = pytest.mark.timeout(300)


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    running = BrokerProcess(tmp_path_factory.mktemp("kafka-tools") / "data").start()
    yield running
    running.stop()


def tool(kafka_tools: KafkaTools, broker: BrokerProcess, name: str, *args: str,
         input: str | None = None, check: bool = True) -> str:  # fmt: skip
    """Run a tool against the broker; its stdout (stderr too when it may fail)."""
    done = kafka_tools.run(
        name, "--bootstrap-server", broker.bootstrap_servers, *args, input=input, check=check
    )
    return done.stdout if check else f"exit {done.returncode}\n{done.stdout}{done.stderr}"


def test_kafka_topics(kafka_tools: KafkaTools, broker: BrokerProcess) -> None:
    run = lambda *a, **k: tool(kafka_tools, broker, "kafka-topics", *a, **k)  # noqa: E731
    assert run("--create", "--topic", "shapes", "--partitions", "2", "--config",
               "retention.ms=3600000", "--config", "cleanup.policy=delete").strip() == (
        "Created topic shapes."
    )  # fmt: skip
    described = run("--describe", "--topic", "shapes")
    assert re.search(
        r"Topic: shapes\tTopicId: \S+\tPartitionCount: 2\tReplicationFactor: 1", described
    )
    assert "Configs: cleanup.policy=delete,retention.ms=3600000" in described
    assert described.count("Leader: 0\tReplicas: 0\tIsr: 0") == 2
    run("--alter", "--topic", "shapes", "--partitions", "5")
    assert "PartitionCount: 5" in run("--describe", "--topic", "shapes")
    fewer = run("--alter", "--topic", "shapes", "--partitions", "3", check=False)
    assert fewer.startswith("exit 1") and "InvalidPartitionsException" in fewer
    again = run("--create", "--topic", "shapes", check=False)
    assert again.startswith("exit 1") and "TopicExistsException" in again
    bad = run("--create", "--topic", "bad", "--config", "retention.ms=soon", check=False)
    assert bad.startswith("exit 1") and "retention.ms" in bad
    assert "shapes" in run("--list").split()
    run("--delete", "--topic", "shapes")
    assert "shapes" not in run("--list").split()
    missing = run("--describe", "--topic", "shapes", check=False)
    assert missing.startswith("exit 1") and "does not exist" in missing


def test_kafka_configs(kafka_tools: KafkaTools, broker: BrokerProcess) -> None:
    run = lambda *a, **k: tool(kafka_tools, broker, "kafka-configs", *a, **k)  # noqa: E731
    tool(kafka_tools, broker, "kafka-topics", "--create", "--topic", "tuned")
    topic = ("--entity-type", "topics", "--entity-name", "tuned")
    everything = run("--describe", "--all", *topic)
    assert "All configs for topic tuned are:" in everything
    assert ("cleanup.policy=delete sensitive=false "
            "synonyms={DEFAULT_CONFIG:log.cleanup.policy=delete}") in everything  # fmt: skip
    assert len([line for line in everything.splitlines() if "sensitive=" in line]) >= 30
    run("--alter", *topic, "--add-config", "retention.ms=7200000,max.message.bytes=2000000")
    dynamic = run("--describe", *topic)
    assert ("retention.ms=7200000 sensitive=false synonyms={DYNAMIC_TOPIC_CONFIG:retention.ms="
            "7200000, DEFAULT_CONFIG:log.retention.ms=604800000}") in dynamic  # fmt: skip
    assert "max.message.bytes=2000000" in dynamic
    run("--alter", *topic, "--delete-config", "retention.ms")
    dynamic = run("--describe", *topic)
    assert "retention.ms" not in dynamic and "max.message.bytes=2000000" in dynamic
    refused = run("--alter", *topic, "--add-config", "retention.ms=abc", check=False)
    assert refused.startswith("exit 1") and "InvalidConfigurationException" in refused
    assert "'retention.ms'" in refused
    broker_configs = run("--describe", "--all", "--entity-type", "brokers", "--entity-name", "0")
    assert "broker.id=0 sensitive=false" in broker_configs


def test_console_producer_consumer_and_consumer_groups(
    kafka_tools: KafkaTools, broker: BrokerProcess
) -> None:
    tool(kafka_tools, broker, "kafka-topics", "--create", "--topic", "lines")
    produce = ("kafka-console-producer", "--topic", "lines", "--reader-property", "parse.key=true",
               "--reader-property", "parse.headers=true")  # fmt: skip
    tool(kafka_tools, broker, *produce,
         input="h1:v1,h2:v2\tk0\tfirst\nh1:x\tk1\tsecond\nh1:\tk2\tthird\n")  # fmt: skip
    consume = ("kafka-console-consumer", "--topic", "lines", "--group", "readers",
               "--formatter-property", "print.key=true", "--formatter-property",
               "print.headers=true", "--formatter-property", "print.offset=true")  # fmt: skip
    lines = tool(kafka_tools, broker, *consume, "--from-beginning", "--max-messages", "3")
    assert lines.splitlines() == [
        "Offset:0\th1:v1,h2:v2\tk0\tfirst",
        "Offset:1\th1:x\tk1\tsecond",
        "Offset:2\th1:\tk2\tthird",
    ]
    tool(kafka_tools, broker, *produce[:-2], input="k3\tfourth\nk4\tfifth\n")  # no headers
    groups = lambda *a, **k: tool(kafka_tools, broker, "kafka-consumer-groups", *a, **k)  # noqa: E731
    assert "readers" in groups("--list").split()
    lag = groups("--describe", "--group", "readers")
    assert re.search(r"readers\s+lines\s+0\s+3\s+5\s+2\s", lag), lag  # current, end, lag
    # The group goes on where it committed: only the two new records.
    more = tool(kafka_tools, broker, *consume, "--max-messages", "2")
    assert more.splitlines() == [
        "Offset:3\tNO_HEADERS\tk3\tfourth",
        "Offset:4\tNO_HEADERS\tk4\tfifth",
    ]
    reset = groups("--group", "readers", "--reset-offsets", "--to-earliest", "--topic", "lines",
                   "--execute")  # fmt: skip
    assert re.search(r"readers\s+lines\s+0\s+0", reset)
    groups("--group", "readers", "--reset-offsets", "--shift-by", "3", "--all-topics", "--execute")
    assert re.search(
        r"readers\s+lines\s+0\s+3\s+5\s+2\s", groups("--describe", "--group", "readers")
    )
    state = groups("--describe", "--group", "readers", "--state")
    assert re.search(r"readers\s+127\.0\.0\.1:\d+\s+\(0\)\s+-\s+Empty\s+0", state), state
    deleted = groups("--group", "readers", "--delete-offsets", "--topic", "lines")
    assert re.search(r"lines\s+0\s+Successful", deleted)
    assert "Deletion of requested consumer groups ('readers') was successful." in groups(
        "--delete", "--group", "readers"
    )
    assert "readers" not in groups("--list").split()
    unknown = groups("--delete", "--group", "nobody", check=False)
    assert "GroupIdNotFoundException" in unknown


def test_get_offsets_and_delete_records(kafka_tools: KafkaTools, broker: BrokerProcess) -> None:
    tool(kafka_tools, broker, "kafka-topics", "--create", "--topic", "counted")
    producer = Producer({"bootstrap.servers": broker.bootstrap_servers})
    for i, timestamp in enumerate([1000, 1001, 1002, 9000, 1004, 1005]):
        producer.produce("counted", f"value-{i}", partition=0, timestamp=timestamp)
    assert producer.flush(20) == 0
    offsets = lambda *a: tool(kafka_tools, broker, "kafka-get-offsets", "--topic", "counted", *a)  # noqa: E731
    assert offsets().strip() == "counted:0:6"  # latest
    assert offsets("--time", "-2").strip() == "counted:0:0"  # earliest
    assert offsets("--time", "-3").strip() == "counted:0:3"  # max timestamp
    assert offsets("--time", "1002").strip() == "counted:0:2"
    offsets_file = broker.data_dir.parent / "delete.json"
    offsets_file.write_text(
        '{"partitions":[{"topic":"counted","partition":0,"offset":4}],"version":1}'
    )
    deleted = tool(
        kafka_tools, broker, "kafka-delete-records", "--offset-json-file", str(offsets_file)
    )
    assert "partition: counted-0\tlow_watermark: 4" in deleted
    assert offsets("--time", "-2").strip() == "counted:0:4"
    # ListOffsets v8/v9 (a Kafka 3.9 broker's): earliest local is the log start, nothing tiered.
    assert offsets("--time", "-4").strip() == "counted:0:4"
    assert offsets("--time", "-5").strip() == ""
    offsets_file.write_text(
        '{"partitions":[{"topic":"counted","partition":0,"offset":99}],"version":1}'
    )
    beyond = tool(kafka_tools, broker, "kafka-delete-records", "--offset-json-file",
                  str(offsets_file), check=False)  # fmt: skip
    assert "OffsetOutOfRangeException" in beyond


def _dump(kafka_tools: KafkaTools, *args: str) -> tuple[str, str]:
    done = kafka_tools.run("kafka-dump-log", *args)
    return done.stdout, done.stderr


def test_dump_log_reads_kayaks_segments(kafka_tools: KafkaTools, broker: BrokerProcess) -> None:
    tool(kafka_tools, broker, "kafka-topics", "--create", "--topic", "dumped", "--config",
         "segment.bytes=1048576")  # fmt: skip
    kafka_tools.run(
        "kafka-producer-perf-test", "--topic", "dumped", "--num-records", "2500",
        "--record-size", "1000", "--throughput", "-1", "--bootstrap-server",
        broker.bootstrap_servers, "--command-property", "acks=all",
    )  # fmt: skip
    files = sorted((broker.data_dir / "dumped-0").glob("*.log"))
    assert len(files) >= 3, files  # 2.5 MB in 1 MiB segments
    sealed, following = files[0], files[1]
    text, errors = _dump(kafka_tools, "--files", str(sealed), "--print-data-log")
    assert "invalid bytes" not in text and not errors.strip(), errors
    batch_line = (r"baseOffset: (\d+) lastOffset: (\d+) count: (\d+) .* position: (\d+) "
                  r".* magic: 2 compresscodec: none crc: \d+ isvalid: (\w+)")  # fmt: skip
    batches = re.findall(batch_line, text)
    records = [int(o) for o in re.findall(r"^\| offset: (\d+) CreateTime: \d+ keySize: -1 "
                                          r"valueSize: 1000 ", text, re.M)]  # fmt: skip
    next_base = int(following.stem)
    assert records == list(range(0, next_base))  # every offset of the segment, in order
    assert {valid for *_, valid in batches} == {"true"}  # every CRC checks out
    assert sum(int(count) for _, _, count, _, _ in batches) == next_base
    # The indexes: Kafka's entry layout, which kafka-dump-log reads and sanity-checks.
    indexes = f"{sealed.with_suffix('.index')},{sealed.with_suffix('.timeindex')}"
    checked, _ = _dump(kafka_tools, "--files", indexes, "--index-sanity-check")
    assert checked.count("passed sanity check") == 2, checked
    dumped, index_errors = _dump(kafka_tools, "--files", indexes)
    entries = [
        (int(o), int(p)) for o, p in re.findall(r"^offset: (\d+) position: (\d+)$", dumped, re.M)
    ]
    batch_at = {int(position): int(last) for _, last, _, position, _ in batches}
    assert len(entries) > 10 and entries[0][1] == 0
    # Kafka's convention: an entry names the last offset of the batch it points at, and a
    # time index entry the last offset of the batch holding its timestamp; the tool reports
    # any entry that does not ("Mismatches in ...", "indexed offsets are not found").
    assert all(batch_at[position] == offset for offset, position in entries)
    stamps = [int(t) for t in re.findall(r"^timestamp: (\d+) offset: \d+$", dumped, re.M)]
    assert stamps and stamps == sorted(set(stamps))
    assert not index_errors.strip(), index_errors


def test_dump_log_decodes_kayaks_group_metadata(
    kafka_tools: KafkaTools, broker: BrokerProcess
) -> None:
    """kayak stores a group's settled generations in Kafka's own record schema
    (GroupMetadataKey/Value): Kafka's offsets decoder reads the members out of them."""
    tool(kafka_tools, broker, "kafka-topics", "--create", "--topic", "decoded")
    tool(kafka_tools, broker, "kafka-console-producer", "--topic", "decoded", input="one\n")
    read = tool(kafka_tools, broker, "kafka-console-consumer", "--topic", "decoded", "--group",
                "decoders", "--from-beginning", "--max-messages", "1")  # fmt: skip
    assert read.splitlines() == ["one"]
    segments = sorted((broker.data_dir / "__consumer_offsets-0").glob("*.log"))
    text, errors = _dump(kafka_tools, "--files", ",".join(map(str, segments)), "--offsets-decoder")
    assert not errors.strip(), errors
    generations = [
        json.loads(payload)["data"]
        for payload in re.findall(
            r'key: \{"type":"2","data":\{"group":"decoders"\}\} payload: (\{.*\})$', text, re.M
        )
    ]
    # Joined (generation 1, the console consumer its one member, assigned the partition),
    # then left (generation 2, empty).
    assert [(g["generation"], g["protocolType"]) for g in generations] == [
        (1, "consumer"), (2, "consumer")]  # fmt: skip
    (member,) = generations[0]["members"]
    assert member["memberId"] == generations[0]["leader"]
    assert member["clientId"].startswith("console-consumer")
    assert "decoded" in json.dumps(member["assignment"])
    assert generations[1]["members"] == []
