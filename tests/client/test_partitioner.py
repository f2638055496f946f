"""kayak's partitioners against Kafka's test vectors, three other clients, and librdkafka itself.

The keyed-partition checks compare, for 2,000 keys and several partition counts, kayak with:
- ``confluent_kafka.murmur2`` / ``.consistent``: thin bindings to librdkafka's own
  ``rd_kafka_msg_partitioner_murmur2`` / ``_consistent`` (the C functions its producer calls);
- kafka-python's and aiokafka's pure-Python ports of Java's ``Utils.murmur2``;
- and, end to end, the partitions librdkafka's real producer picks when it sends to an
  in-process mock cluster (librdkafka's ``rdkafka_mock.h`` API, reached through ctypes).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import itertools
import random
import warnings
import zlib
from collections.abc import Iterator, Sequence
from pathlib import Path

import confluent_kafka
import pytest
from aiokafka.partitioner import murmur2 as aiokafka_murmur2
from hypothesis import given, settings
from hypothesis import strategies as st

from kayak.client.partitioner import (
    PARTITIONER_NAMES,
    ConsistentPartitioner,
    ConsistentRandomPartitioner,
    DefaultPartitioner,
    Murmur2Partitioner,
    Murmur2RandomPartitioner,
    RandomPartitioner,
    RoundRobinPartitioner,
    StickyPartitioner,
    _py_murmur2,
    murmur2,
    murmur2_partition,
    partitioner_from_config,
    partitioner_spec,
    to_positive,
)
from kayak.errors import ConfigError

with warnings.catch_warnings():
    # kafka-python reads its bundled specs through deprecated importlib.resources helpers.
    warnings.simplefilter("ignore", DeprecationWarning)
    from kafka.partitioner.default import murmur2 as kafka_python_murmur2

PARTITION_COUNTS = (1, 3, 7, 16, 100)


def _sample_keys(count: int = 2000) -> list[bytes]:
    rng = random.Random(20240611)
    texts = ["", "21", "foobar", "ключ", "キー", "🔑-key", "naïve café", "\u0000nul", "a" * 257]
    keys = [text.encode() for text in texts]
    while len(keys) < count:
        # Every length 0..67 often (all four tail sizes), some long ones, random content.
        length = rng.randrange(68) if rng.random() < 0.9 else rng.randrange(68, 600)
        keys.append(rng.randbytes(length))
    return keys


KEYS = _sample_keys()


# --------------------------------------------------------------------------------------------
# murmur2
# --------------------------------------------------------------------------------------------

# Apache Kafka's clients/src/test/java/org/apache/kafka/common/utils/UtilsTest.java, testMurmur2.
JAVA_VECTORS = {
    b"21": -973932308,
    b"foobar": -790332482,
    b"a-little-bit-long-string": -985981536,
    b"a-little-bit-longer-string": -1486304829,
    b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8": -58897971,
    b"abc": 479470107,
}


# murmur2 is the C function when the extension is built; _py_murmur2 is the reference.
MURMUR2_IMPLEMENTATIONS = {"selected": murmur2, "python": _py_murmur2}


@pytest.mark.parametrize("implementation", MURMUR2_IMPLEMENTATIONS)
@pytest.mark.parametrize(("data", "expected"), JAVA_VECTORS.items())
def test_murmur2_matches_kafkas_own_vectors(
    data: bytes, expected: int, implementation: str
) -> None:
    hash_function = MURMUR2_IMPLEMENTATIONS[implementation]
    assert hash_function(data) == expected
    assert hash_function(bytearray(data)) == expected
    assert hash_function(memoryview(data)) == expected


def test_murmur2_is_a_signed_32_bit_int() -> None:
    values = [murmur2(key) for key in KEYS]
    assert all(-(2**31) <= value < 2**31 for value in values)
    assert any(value < 0 for value in values) and any(value >= 0 for value in values)


def test_to_positive_clears_the_sign_bit_like_java() -> None:
    assert to_positive(-973932308) == -973932308 & 0x7FFFFFFF
    assert to_positive(-(2**31)) == 0  # where abs() would go wrong in Java
    assert to_positive(5) == 5


def test_murmur2_hash_matches_kafka_python_and_aiokafka() -> None:
    for key in KEYS:
        unsigned = murmur2(key) & 0xFFFFFFFF  # both ports return the unsigned bits
        assert unsigned == kafka_python_murmur2(key) == aiokafka_murmur2(key), key


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=300))
def test_murmur2_matches_kafka_python_for_any_bytes(data: bytes) -> None:
    assert murmur2(data) & 0xFFFFFFFF == kafka_python_murmur2(data)
    assert _py_murmur2(data) == murmur2(data)


@pytest.mark.parametrize("num_partitions", PARTITION_COUNTS)
def test_keyed_partition_matches_librdkafka_and_java_ports(num_partitions: int) -> None:
    partitioner = DefaultPartitioner()
    for key in KEYS:
        expected = confluent_kafka.murmur2(key, num_partitions)
        assert murmur2_partition(key, num_partitions) == expected, key
        assert partitioner("t", key, num_partitions, None) == expected, key
        assert to_positive(murmur2(key)) % num_partitions == expected
        assert (kafka_python_murmur2(key) & 0x7FFFFFFF) % num_partitions == expected
        assert (aiokafka_murmur2(key) & 0x7FFFFFFF) % num_partitions == expected


@pytest.mark.parametrize("num_partitions", PARTITION_COUNTS)
def test_consistent_matches_librdkafka_crc32(num_partitions: int) -> None:
    partitioner = ConsistentPartitioner()
    for key in KEYS:
        expected = confluent_kafka.consistent(key, num_partitions)
        assert expected == zlib.crc32(key) % num_partitions
        assert partitioner("t", key, num_partitions, None) == expected, key


# --------------------------------------------------------------------------------------------
# End to end: what librdkafka's producer actually picks, sending to its own mock cluster
# --------------------------------------------------------------------------------------------


def _find_librdkafka() -> Path | None:
    package = Path(confluent_kafka.__file__).parent
    # Wheels vendor the library next to the package (Linux) or inside it (macOS).
    for pattern in ("../confluent_kafka.libs/librdkafka*", ".dylibs/librdkafka*"):
        found = sorted(package.glob(pattern))
        if found:
            return found[0]
    system = ctypes.util.find_library("rdkafka")
    return Path(system) if system else None


class _MockCluster:
    """A one-broker Kafka cluster inside this process, from librdkafka's mock API."""

    def __init__(self, library: Path) -> None:
        lib = ctypes.CDLL(str(library))
        void_p, char_p = ctypes.c_void_p, ctypes.c_char_p
        lib.rd_kafka_conf_new.restype = void_p
        lib.rd_kafka_conf_set.argtypes = [void_p, char_p, char_p, char_p, ctypes.c_size_t]
        lib.rd_kafka_new.restype = void_p
        lib.rd_kafka_new.argtypes = [ctypes.c_int, void_p, char_p, ctypes.c_size_t]
        lib.rd_kafka_mock_cluster_new.restype = void_p
        lib.rd_kafka_mock_cluster_new.argtypes = [void_p, ctypes.c_int]
        lib.rd_kafka_mock_cluster_bootstraps.restype = char_p
        lib.rd_kafka_mock_cluster_bootstraps.argtypes = [void_p]
        lib.rd_kafka_mock_topic_create.argtypes = [void_p, char_p, ctypes.c_int, ctypes.c_int]
        lib.rd_kafka_mock_cluster_destroy.argtypes = [void_p]
        lib.rd_kafka_destroy.argtypes = [void_p]
        self._lib = lib
        errors = ctypes.create_string_buffer(512)
        conf = lib.rd_kafka_conf_new()
        # The handle only hosts the cluster; keep it from logging about having no brokers.
        lib.rd_kafka_conf_set(conf, b"log_level", b"0", errors, len(errors))
        self._handle = lib.rd_kafka_new(0, conf, errors, len(errors))  # 0: RD_KAFKA_PRODUCER
        if not self._handle:
            raise RuntimeError(errors.value.decode())
        self._cluster = lib.rd_kafka_mock_cluster_new(self._handle, 1)
        if not self._cluster:
            lib.rd_kafka_destroy(self._handle)
            raise RuntimeError("librdkafka could not start a mock cluster")
        self.bootstrap_servers: str = lib.rd_kafka_mock_cluster_bootstraps(self._cluster).decode()

    def create_topic(self, name: str, partitions: int) -> None:
        code = self._lib.rd_kafka_mock_topic_create(self._cluster, name.encode(), partitions, 1)
        assert code == 0, f"rd_kafka_mock_topic_create({name}) failed with {code}"

    def close(self) -> None:
        self._lib.rd_kafka_mock_cluster_destroy(self._cluster)
        self._lib.rd_kafka_destroy(self._handle)


@pytest.fixture(scope="module")
def mock_cluster() -> Iterator[_MockCluster]:
    library = _find_librdkafka()
    if library is None:
        pytest.skip("librdkafka's shared library was not found next to confluent_kafka")
    cluster = _MockCluster(library)
    try:
        yield cluster
    finally:
        cluster.close()


def _librdkafka_choices(
    cluster: _MockCluster, partitioner: str, records: Sequence[tuple[str, bytes | None]]
) -> list[tuple[str, bytes | None, int]]:
    """Send ``(topic, key)`` records with librdkafka's producer; return where each landed."""
    landed: list[tuple[str, bytes | None, int]] = []
    failures: list[object] = []

    def on_delivery(error: object, message: confluent_kafka.Message) -> None:
        if error is not None:
            failures.append(error)
        else:
            topic, partition = message.topic(), message.partition()
            assert topic is not None and partition is not None
            landed.append((topic, message.key(), partition))

    producer = confluent_kafka.Producer(
        {"bootstrap.servers": cluster.bootstrap_servers, "partitioner": partitioner}
    )
    for topic, key in records:
        producer.produce(topic, key=key, value=b"", on_delivery=on_delivery)
        producer.poll(0)
    assert producer.flush(30) == 0, "librdkafka did not deliver every record"
    assert not failures
    assert len(landed) == len(records)
    return landed


def test_librdkafka_producer_picks_kayaks_partitions(mock_cluster: _MockCluster) -> None:
    for count in PARTITION_COUNTS:
        mock_cluster.create_topic(f"murmur2-random-{count}", count)
        mock_cluster.create_topic(f"consistent-{count}", count)
        mock_cluster.create_topic(f"murmur2-{count}", count)
    keyed = [(f"murmur2-random-{n}", key) for n in PARTITION_COUNTS for key in KEYS]
    keyed_consistent = [(f"consistent-{n}", key) for n in PARTITION_COUNTS for key in KEYS[:300]]
    keyless = [(f"{name}-{n}", None) for name in ("consistent", "murmur2") for n in (7, 16)]

    kayak = {
        "murmur2_random": Murmur2RandomPartitioner(),
        "consistent": ConsistentPartitioner(),
        "murmur2": Murmur2Partitioner(),
    }
    for name, records in (
        ("murmur2_random", keyed),
        ("consistent", keyed_consistent + keyless[:2]),
        ("murmur2", keyless[2:]),
    ):
        for topic, key, partition in _librdkafka_choices(mock_cluster, name, records):
            count = int(topic.rsplit("-", 1)[1])
            assert kayak[name](topic, key, count, None) == partition, (name, topic, key)


# --------------------------------------------------------------------------------------------
# Sticky (KIP-480)
# --------------------------------------------------------------------------------------------


def test_default_partitioner_sticks_until_a_batch_is_complete() -> None:
    partitioner = DefaultPartitioner(random.Random(1))
    first = partitioner("t", None, 16, None)
    assert {partitioner("t", None, 16, None) for _ in range(100)} == {first}
    partitioner.on_new_batch("t", first)
    second = partitioner("t", None, 16, None)
    assert second != first
    assert {partitioner("t", None, 16, None) for _ in range(100)} == {second}


def test_sticky_always_moves_to_another_partition_when_there_is_one() -> None:
    partitioner = DefaultPartitioner(random.Random(2))
    seen = []
    for _ in range(500):
        current = partitioner("t", None, 3, None)
        seen.append(current)
        partitioner.on_new_batch("t", current)
    assert all(a != b for a, b in itertools.pairwise(seen))
    assert set(seen) == {0, 1, 2}


def test_sticky_ignores_a_report_about_a_partition_it_already_left() -> None:
    partitioner = StickyPartitioner(random.Random(3))
    current = partitioner("t", None, 8, None)
    partitioner.on_new_batch("t", (current + 1) % 8)  # a late report about another partition
    assert partitioner("t", None, 8, None) == current


def test_sticky_prefers_available_partitions() -> None:
    partitioner = DefaultPartitioner(random.Random(4))
    for _ in range(200):
        current = partitioner("t", None, 10, [2, 5, 7])
        assert current in (2, 5, 7)
        partitioner.on_new_batch("t", current)


def test_sticky_stays_when_only_one_partition_is_available() -> None:
    partitioner = DefaultPartitioner(random.Random(5))
    assert partitioner("t", None, 10, [4]) == 4
    partitioner.on_new_batch("t", 4)
    assert partitioner("t", None, 10, [4]) == 4
    single = DefaultPartitioner()
    assert single("u", None, 1, None) == 0
    single.on_new_batch("u", 0)
    assert single("u", None, 1, None) == 0


def test_sticky_spreads_over_all_partitions_when_none_is_known_available() -> None:
    partitioner = StickyPartitioner(random.Random(6))
    chosen = set()
    for _ in range(400):
        current = partitioner("t", None, 8, [])  # nothing known to have a leader: use all
        chosen.add(current)
        partitioner.on_new_batch("t", current)
    assert chosen == set(range(8))


def test_sticky_state_is_per_topic() -> None:
    partitioner = DefaultPartitioner(random.Random(7))
    a = partitioner("a", None, 50, None)
    b = partitioner("b", None, 50, None)
    partitioner.on_new_batch("a", a)
    assert partitioner("b", None, 50, None) == b


def test_default_partitioner_hashes_keys_over_all_partitions_not_just_available() -> None:
    partitioner = DefaultPartitioner()
    for key in KEYS[:200]:
        assert partitioner("t", key, 16, [0]) == murmur2_partition(key, 16)


def test_sticky_partitioner_ignores_keys() -> None:
    partitioner = StickyPartitioner(random.Random(8))
    assert len({partitioner("t", key, 100, None) for key in KEYS[:100]}) == 1


# --------------------------------------------------------------------------------------------
# Round robin, random, and librdkafka's *_random flavours
# --------------------------------------------------------------------------------------------


def test_round_robin_cycles_per_topic() -> None:
    partitioner = RoundRobinPartitioner()
    assert [partitioner("t", b"k", 3, None) for _ in range(7)] == [0, 1, 2, 0, 1, 2, 0]
    assert [partitioner("u", None, 2, None) for _ in range(3)] == [0, 1, 0]
    assert partitioner("t", None, 3, None) == 1


def test_round_robin_cycles_over_available_partitions() -> None:
    partitioner = RoundRobinPartitioner()
    assert [partitioner("t", None, 6, [1, 4]) for _ in range(5)] == [1, 4, 1, 4, 1]


def test_random_stays_in_range_and_reaches_every_partition() -> None:
    partitioner = RandomPartitioner(random.Random(9))
    chosen = [partitioner("t", b"same key", 7, None) for _ in range(1000)]
    assert set(chosen) == set(range(7))
    assert {partitioner("t", None, 7, [3, 6]) for _ in range(200)} == {3, 6}


def test_murmur2_random_hashes_keys_and_randomises_keyless_records() -> None:
    sticky = Murmur2RandomPartitioner(random.Random(10))
    for key in KEYS[:300]:
        assert sticky("t", key, 16, None) == murmur2_partition(key, 16)
    assert sticky("t", b"", 16, None) == murmur2_partition(b"", 16)  # empty is a key
    first = sticky("t", None, 16, None)
    assert {sticky("t", None, 16, None) for _ in range(50)} == {first}
    sticky.on_new_batch("t", first)
    assert sticky("t", None, 16, None) != first

    per_record = Murmur2RandomPartitioner(random.Random(11), sticky=False)
    assert {per_record("t", None, 16, None) for _ in range(500)} == set(range(16))


def test_consistent_random_treats_an_empty_key_as_no_key() -> None:
    partitioner = ConsistentRandomPartitioner(random.Random(12), sticky=False)
    for key in KEYS[1:300]:
        if key:
            assert partitioner("t", key, 16, None) == zlib.crc32(key) % 16
    assert len({partitioner("t", b"", 16, None) for _ in range(300)}) > 1
    assert len({partitioner("t", None, 16, None) for _ in range(300)}) > 1


def test_librdkafka_hash_partitioners_hash_a_missing_key_as_zero_bytes() -> None:
    assert ConsistentPartitioner()("t", None, 16, None) == 0  # CRC32 of nothing is 0
    assert Murmur2Partitioner()("t", None, 16, None) == murmur2_partition(b"", 16)


@pytest.mark.parametrize("name", PARTITIONER_NAMES)
def test_every_partitioner_rejects_a_topic_without_partitions(name: str) -> None:
    partitioner = partitioner_from_config(name)
    for key in (None, b"k"):
        with pytest.raises(ValueError, match="at least one partition"):
            partitioner("t", key, 0, None)


# --------------------------------------------------------------------------------------------
# partitioner_from_config
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("default", DefaultPartitioner),
        ("sticky", StickyPartitioner),
        ("round_robin", RoundRobinPartitioner),
        ("random", RandomPartitioner),
        ("murmur2", Murmur2Partitioner),
        ("murmur2_random", Murmur2RandomPartitioner),
        ("consistent", ConsistentPartitioner),
        ("consistent_random", ConsistentRandomPartitioner),
        (" Murmur2_Random ", Murmur2RandomPartitioner),
        ("org.apache.kafka.clients.producer.internals.DefaultPartitioner", DefaultPartitioner),
        ("org.apache.kafka.clients.producer.UniformStickyPartitioner", StickyPartitioner),
        ("org.apache.kafka.clients.producer.RoundRobinPartitioner", RoundRobinPartitioner),
        (RoundRobinPartitioner, RoundRobinPartitioner),
    ],
)
def test_partitioner_from_config_by_name_or_class(value: object, expected: type) -> None:
    first, second = partitioner_from_config(value), partitioner_from_config(value)
    assert type(first) is expected
    assert first is not second  # each producer gets its own sticky/round-robin state


def test_partitioner_from_config_keeps_a_partitioner_instance() -> None:
    mine = DefaultPartitioner()
    assert partitioner_from_config(mine) is mine


def test_unknown_partitioner_name_lists_the_known_ones() -> None:
    with pytest.raises(ConfigError, match=r"unknown partitioner 'fnv1a'.*murmur2_random") as info:
        partitioner_from_config("fnv1a")
    assert info.value.name == "partitioner"


def test_a_custom_callable_is_used_and_checked() -> None:
    def by_first_byte(topic: str, key: bytes | None, n: int, available: object) -> int:
        return key[0] if key else 0

    partitioner = partitioner_from_config(by_first_byte)
    assert partitioner("t", b"\x02", 3, None) == 2
    partitioner.on_new_batch("t", 2)  # a plain function gets a no-op hook
    with pytest.raises(ConfigError, match=r"by_first_byte returned partition 7 .* 3 partitions"):
        partitioner("t", b"\x07", 3, None)


@pytest.mark.parametrize("answer", [-1, 3, "1", 1.0, True, None])
def test_a_custom_callable_with_a_bad_answer_fails_by_name(answer: object) -> None:
    def broken(topic: str, key: bytes | None, n: int, available: object) -> object:
        return answer

    partitioner = partitioner_from_config(broken)
    with pytest.raises(ConfigError, match=r"partitioner .*broken returned") as info:
        partitioner("orders", b"k", 3, None)
    assert info.value.name == "partitioner"
    assert "orders" in str(info.value)


def test_a_custom_callable_may_return_an_int_like() -> None:
    class NumpyLikeInt:
        def __index__(self) -> int:
            return 2

    partitioner = partitioner_from_config(lambda topic, key, n, available: NumpyLikeInt())
    assert partitioner("t", None, 3, None) == 2


def test_a_custom_partitioner_object_keeps_its_on_new_batch() -> None:
    class Recording:
        def __init__(self) -> None:
            self.batches: list[tuple[str, int]] = []

        def __call__(self, topic: str, key: bytes | None, n: int, available: object) -> int:
            return 0

        def on_new_batch(self, topic: str, prev_partition: int) -> None:
            self.batches.append((topic, prev_partition))

    mine = Recording()
    partitioner = partitioner_from_config(mine)
    assert partitioner("t", None, 2, None) == 0
    partitioner.on_new_batch("t", 0)
    assert mine.batches == [("t", 0)]
    # A class is instantiated with no arguments.
    assert partitioner_from_config(Recording)("t", None, 2, None) == 0


def test_a_callable_with_the_wrong_arguments_is_rejected_up_front() -> None:
    def two_arguments(key: bytes, n: int) -> int:
        return 0

    with pytest.raises(ConfigError, match=r"must accept \(topic, key, num_partitions, available"):
        partitioner_spec(two_arguments)
    with pytest.raises(ConfigError, match="must accept"):
        partitioner_from_config(two_arguments)


def test_a_class_needing_arguments_and_non_callables_are_rejected() -> None:
    class NeedsArguments:
        def __init__(self, seed: int) -> None:
            self.seed = seed

        def __call__(self, topic: str, key: bytes | None, n: int, available: object) -> int:
            return self.seed % n

    with pytest.raises(ConfigError, match="cannot be instantiated with no arguments"):
        partitioner_from_config(NeedsArguments)
    for value in (42, b"default", None):
        with pytest.raises(ConfigError, match="expected a partitioner name or a callable"):
            partitioner_from_config(value)
