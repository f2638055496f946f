"""Choosing a partition for each record: Kafka's and librdkafka's partitioners.

A partitioner is called once per record with the topic, the serialized key (``None`` for a
record without a key), the topic's partition count and the partitions that currently have a
leader (``None`` when the caller does not know). It returns a partition number.

By name (``partitioner_from_config``), keyed record / record without a key:

- ``default`` (``DefaultPartitioner``, Java's): murmur2 / sticky until a batch is complete.
- ``sticky`` (``StickyPartitioner``, Java's ``UniformStickyPartitioner``): sticky, keys ignored.
- ``round_robin`` (``RoundRobinPartitioner``, Java's): each partition in turn, keys ignored.
- ``random`` (``RandomPartitioner``, librdkafka's): uniformly random, keys ignored.
- ``murmur2`` (``Murmur2Partitioner``, librdkafka's): murmur2 / murmur2 of zero bytes.
- ``murmur2_random`` (``Murmur2RandomPartitioner``, librdkafka's): murmur2 / random.
- ``consistent`` (``ConsistentPartitioner``, librdkafka's): CRC32 / CRC32 of zero bytes = 0.
- ``consistent_random`` (``ConsistentRandomPartitioner``, librdkafka's default): CRC32 /
  random, also for an empty key.

Records with equal keys land on the same partition as with the Java client (``default``,
``murmur2``, ``murmur2_random``) or with librdkafka's default (``consistent_random``).

*Sticky* (KIP-480) means: keep sending keyless records to one partition until the producer's
accumulator reports, through ``on_new_batch(topic, prev_partition)``, that it had to start a
new batch for that partition; then switch to another partition, preferring ones with a leader.
Whole batches fill up instead of many one-record batches being spread over every partition.
librdkafka gets the same effect by changing its random partition for keyless records every
``sticky.partitioning.linger.ms`` (10 ms); kayak's ``*_random`` partitioners switch on
``on_new_batch`` instead (pass ``sticky=False`` for a fresh random partition per record).
"""

from __future__ import annotations

import inspect
import logging
import operator
import random
import struct
import zlib
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from typing import ClassVar, Protocol, SupportsIndex, TypeAlias

from kayak.errors import ConfigError
from kayak.protocol.records.native import codec as _codec

__all__ = [
    "PARTITIONER_NAMES",
    "ConsistentPartitioner",
    "ConsistentRandomPartitioner",
    "DefaultPartitioner",
    "Murmur2Partitioner",
    "Murmur2RandomPartitioner",
    "Partitioner",
    "PartitionerBase",
    "PartitionerFunc",
    "PartitionerSpec",
    "RandomPartitioner",
    "RoundRobinPartitioner",
    "StickyPartitioner",
    "canonical_partitioner_name",
    "murmur2",
    "murmur2_partition",
    "partitioner_from_config",
    "partitioner_spec",
    "to_positive",
]

logger = logging.getLogger(__name__)

PartitionerFunc: TypeAlias = Callable[[str, bytes | None, int, Sequence[int] | None], int]
"""A plain function ``(topic, key, num_partitions, available) -> partition``."""


class Partitioner(Protocol):
    """What the producer calls to place a record.

    Everything ``partitioner_from_config`` returns has both methods; a user's plain function
    gets a no-op ``on_new_batch``.
    """

    def __call__(
        self, topic: str, key: bytes | None, num_partitions: int, available: Sequence[int] | None
    ) -> int:
        """Return the partition, in ``range(num_partitions)``, for a record of ``topic``.

        ``available`` lists the partitions that have a leader, or is None when unknown.
        """
        ...

    def on_new_batch(self, topic: str, prev_partition: int) -> None:
        """The accumulator had to open a new batch on ``prev_partition`` of ``topic``."""
        ...


# --------------------------------------------------------------------------------------------
# murmur2, exactly as org.apache.kafka.common.utils.Utils.murmur2 computes it
#
# The C extension (kayak.protocol.records._codec) computes it when it is built; the Python
# functions below are the reference it is tested against and the fallback without it (or
# with KAYAK_PURE_PYTHON=1).
# --------------------------------------------------------------------------------------------

_SEED = 0x9747B28C
_M = 0x5BD1E995
_MASK32 = 0xFFFFFFFF
_iter_u32_le = struct.Struct("<I").iter_unpack

_BytesLike: TypeAlias = bytes | bytearray | memoryview


def _py_murmur2_u32(data: _BytesLike) -> int:
    """murmur2 of ``data`` as an unsigned 32-bit int (the bits Java's int holds)."""
    length = len(data)
    h = _SEED ^ length
    body = length & ~3
    if body:
        for (k,) in _iter_u32_le(data if body == length else data[:body]):
            k = (k * _M) & _MASK32
            # Java: k ^= k >>> 24; k *= m; h *= m; h ^= k. Only the low 32 bits of each
            # product matter, so one mask after the xor does for both products.
            h = ((h * _M) ^ ((k ^ (k >> 24)) * _M)) & _MASK32
    if body != length:
        # The 1-3 trailing bytes, little-endian, xor-ed in at once: the same as Java's
        # fall-through switch over data[length-3..length-1].
        h = ((h ^ int.from_bytes(data[body:], "little")) * _M) & _MASK32
    h ^= h >> 13
    h = (h * _M) & _MASK32
    return h ^ (h >> 15)


def _py_murmur2(data: _BytesLike) -> int:
    """Kafka's murmur2 hash of ``data``: a signed 32-bit int, as Java's ``Utils.murmur2``."""
    h = _py_murmur2_u32(data)
    return h - 0x1_0000_0000 if h & 0x8000_0000 else h


murmur2: Callable[[_BytesLike], int] = _codec.murmur2 if _codec is not None else _py_murmur2
"""Kafka's murmur2 hash of ``data``: a signed 32-bit int, as Java's ``Utils.murmur2``
(the C function when the extension is built, else ``_py_murmur2``)."""

# What the keyed partitioners hash with. Only the low 31 bits are used (to_positive), and the
# signed and the unsigned result share them, so the Python fallback skips the sign step.
_key_hash: Callable[[_BytesLike], int] = _codec.murmur2 if _codec is not None else _py_murmur2_u32


def to_positive(number: int) -> int:
    """Java's ``Utils.toPositive``: clear the sign bit (not ``abs``, which fails on MIN_VALUE)."""
    return number & 0x7FFFFFFF


def murmur2_partition(key: bytes, num_partitions: int) -> int:
    """The partition the Java client's default partitioner picks for ``key``:
    ``to_positive(murmur2(key)) % num_partitions``."""
    _require_partitions(num_partitions)
    return (_key_hash(key) & 0x7FFFFFFF) % num_partitions


# --------------------------------------------------------------------------------------------
# Building blocks
# --------------------------------------------------------------------------------------------


def _require_partitions(num_partitions: int) -> None:
    if num_partitions < 1:
        raise ValueError(f"a topic has at least one partition, got num_partitions={num_partitions}")


def _random_partition(
    rng: random.Random, num_partitions: int, available: Sequence[int] | None, avoid: int = -1
) -> int:
    """A random partition, from ``available`` when it names any, other than ``avoid`` if there
    is a choice."""
    candidates: Sequence[int] = available if available else range(num_partitions)
    count = len(candidates)
    if count == 1:
        return candidates[0]
    index = rng.randrange(count)
    if candidates[index] == avoid:
        # Step to one of the other count-1 candidates, uniformly: no retry loop needed.
        index = (index + 1 + rng.randrange(count - 1)) % count
    return candidates[index]


class _StickyChoice:
    """KIP-480's per-topic sticky partition, changed only when a batch on it is complete."""

    __slots__ = ("_current", "_rng", "_stale")

    def __init__(self, rng: random.Random) -> None:
        self._rng = rng
        self._current: dict[str, int] = {}
        # Partitions that just completed a batch: the next choice for the topic avoids them.
        self._stale: dict[str, int] = {}

    def partition(self, topic: str, num_partitions: int, available: Sequence[int] | None) -> int:
        current = self._current.get(topic)
        if current is not None and current < num_partitions:
            return current
        # No choice yet, or it was dropped by new_batch (or the partition count shrank under
        # stale metadata): choose now, when the partition count and leaders are known.
        avoid = self._stale.pop(topic, -1)
        chosen = _random_partition(self._rng, num_partitions, available, avoid)
        self._current[topic] = chosen
        return chosen

    def new_batch(self, topic: str, prev_partition: int) -> None:
        # Like Java's StickyPartitionCache: only a report about the partition we are sticking
        # to moves us on; a late report about an older partition must not.
        if self._current.get(topic) == prev_partition:
            del self._current[topic]
            self._stale[topic] = prev_partition


class PartitionerBase(ABC):
    """Base of kayak's partitioners: ``on_new_batch`` does nothing unless overridden."""

    name: ClassVar[str]

    @abstractmethod
    def __call__(
        self, topic: str, key: bytes | None, num_partitions: int, available: Sequence[int] | None
    ) -> int:
        """Return the partition for a record; see ``Partitioner``."""

    def on_new_batch(self, topic: str, prev_partition: int) -> None:  # noqa: B027 - optional hook
        """Note that a batch on ``prev_partition`` of ``topic`` is complete (no-op here)."""

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"


# --------------------------------------------------------------------------------------------
# Java's partitioners
# --------------------------------------------------------------------------------------------


class DefaultPartitioner(PartitionerBase):
    """The Java producer's partitioner: murmur2 of the key, or sticky (KIP-480) without a key.

    Keyed records are hashed over all partitions, available or not, so a key's partition
    never depends on which leaders happen to be up.
    """

    name = "default"

    def __init__(self, rng: random.Random | None = None) -> None:
        self._sticky = _StickyChoice(rng or random.Random())

    def __call__(
        self, topic: str, key: bytes | None, num_partitions: int, available: Sequence[int] | None
    ) -> int:
        # The keyed path runs once per keyed record: one comparison stands in for the
        # _require_partitions call, which runs only when it has something to reject.
        if key is not None and num_partitions > 0:
            return (_key_hash(key) & 0x7FFFFFFF) % num_partitions
        _require_partitions(num_partitions)
        return self._sticky.partition(topic, num_partitions, available)

    def on_new_batch(self, topic: str, prev_partition: int) -> None:
        """Move keyless records of ``topic`` off ``prev_partition`` (if they were on it)."""
        self._sticky.new_batch(topic, prev_partition)


class StickyPartitioner(PartitionerBase):
    """Sticky (KIP-480) for every record, keys ignored: Java's ``UniformStickyPartitioner``.

    Equal keys do *not* land on the same partition.
    """

    name = "sticky"

    def __init__(self, rng: random.Random | None = None) -> None:
        self._sticky = _StickyChoice(rng or random.Random())

    def __call__(
        self, topic: str, key: bytes | None, num_partitions: int, available: Sequence[int] | None
    ) -> int:
        _require_partitions(num_partitions)
        return self._sticky.partition(topic, num_partitions, available)

    def on_new_batch(self, topic: str, prev_partition: int) -> None:
        """Move ``topic`` off ``prev_partition`` (if it was on it)."""
        self._sticky.new_batch(topic, prev_partition)


class RoundRobinPartitioner(PartitionerBase):
    """Each topic's records go to its partitions in turn, keys ignored: Java's
    ``RoundRobinPartitioner``. Cycles over ``available`` when it names any."""

    name = "round_robin"

    def __init__(self) -> None:
        self._counters: dict[str, int] = {}

    def __call__(
        self, topic: str, key: bytes | None, num_partitions: int, available: Sequence[int] | None
    ) -> int:
        _require_partitions(num_partitions)
        turn = self._counters.get(topic, 0)
        self._counters[topic] = turn + 1
        if available:
            return available[turn % len(available)]
        return turn % num_partitions


# --------------------------------------------------------------------------------------------
# librdkafka's partitioners (its ``partitioner`` property)
# --------------------------------------------------------------------------------------------


class RandomPartitioner(PartitionerBase):
    """A uniformly random partition for every record, keys ignored (librdkafka's ``random``),
    chosen among ``available`` when it names any."""

    name = "random"

    def __init__(self, rng: random.Random | None = None) -> None:
        self._rng = rng or random.Random()

    def __call__(
        self, topic: str, key: bytes | None, num_partitions: int, available: Sequence[int] | None
    ) -> int:
        _require_partitions(num_partitions)
        return _random_partition(self._rng, num_partitions, available)


class _KeyHashOrRandom(PartitionerBase):
    """Hash the key; a record without one gets a random partition, sticky unless
    ``sticky=False`` (see the module docstring)."""

    # librdkafka's consistent_random treats an empty key like a missing one; murmur2_random
    # hashes it.
    empty_key_is_keyless: ClassVar[bool] = False

    def __init__(self, rng: random.Random | None = None, *, sticky: bool = True) -> None:
        self._rng = rng or random.Random()
        self._sticky = _StickyChoice(self._rng) if sticky else None

    @staticmethod
    @abstractmethod
    def _hash_partition(key: bytes, num_partitions: int) -> int: ...

    def __call__(
        self, topic: str, key: bytes | None, num_partitions: int, available: Sequence[int] | None
    ) -> int:
        _require_partitions(num_partitions)
        if key is None or (self.empty_key_is_keyless and not key):
            if self._sticky is not None:
                return self._sticky.partition(topic, num_partitions, available)
            return _random_partition(self._rng, num_partitions, available)
        return self._hash_partition(key, num_partitions)

    def on_new_batch(self, topic: str, prev_partition: int) -> None:
        """Move keyless records of ``topic`` off ``prev_partition`` (when sticky)."""
        if self._sticky is not None:
            self._sticky.new_batch(topic, prev_partition)

    def __repr__(self) -> str:
        return f"{type(self).__name__}(sticky={self._sticky is not None})"


class Murmur2Partitioner(PartitionerBase):
    """murmur2 of the key, Java-compatible (librdkafka's ``murmur2``).

    A record without a key is hashed as zero bytes, so all of them go to one partition
    (``murmur2_partition(b"", n)``), exactly as librdkafka does.
    """

    name = "murmur2"

    def __call__(
        self, topic: str, key: bytes | None, num_partitions: int, available: Sequence[int] | None
    ) -> int:
        _require_partitions(num_partitions)
        return (_key_hash(key or b"") & 0x7FFFFFFF) % num_partitions


class Murmur2RandomPartitioner(_KeyHashOrRandom):
    """murmur2 of the key (Java-compatible), random without a key (librdkafka's
    ``murmur2_random``). An empty key is a key: it is hashed, like librdkafka does."""

    name = "murmur2_random"

    @staticmethod
    def _hash_partition(key: bytes, num_partitions: int) -> int:
        return (_key_hash(key) & 0x7FFFFFFF) % num_partitions


class ConsistentPartitioner(PartitionerBase):
    """CRC32 of the key modulo the partition count (librdkafka's ``consistent``).

    A record without a key is hashed as zero bytes: CRC32 is 0, so it goes to partition 0,
    exactly as librdkafka does.
    """

    name = "consistent"

    def __call__(
        self, topic: str, key: bytes | None, num_partitions: int, available: Sequence[int] | None
    ) -> int:
        _require_partitions(num_partitions)
        return zlib.crc32(key or b"") % num_partitions


class ConsistentRandomPartitioner(_KeyHashOrRandom):
    """CRC32 of the key, random for a missing *or empty* key (librdkafka's default,
    ``consistent_random``)."""

    name = "consistent_random"

    empty_key_is_keyless = True

    @staticmethod
    def _hash_partition(key: bytes, num_partitions: int) -> int:
        return zlib.crc32(key) % num_partitions


# --------------------------------------------------------------------------------------------
# From configuration
# --------------------------------------------------------------------------------------------

_BY_NAME: dict[str, Callable[[], PartitionerBase]] = {
    cls.name: cls
    for cls in (
        DefaultPartitioner,
        StickyPartitioner,
        RoundRobinPartitioner,
        RandomPartitioner,
        Murmur2Partitioner,
        Murmur2RandomPartitioner,
        ConsistentPartitioner,
        ConsistentRandomPartitioner,
    )
}

# partitioner.class values carried over from Java .properties files.
_JAVA_CLASS_NAMES = {
    "org.apache.kafka.clients.producer.internals.DefaultPartitioner": "default",
    "org.apache.kafka.clients.producer.UniformStickyPartitioner": "sticky",
    "org.apache.kafka.clients.producer.RoundRobinPartitioner": "round_robin",
}

PARTITIONER_NAMES: tuple[str, ...] = tuple(_BY_NAME)
"""The names ``partitioner_from_config`` accepts (besides Java's class names)."""

PartitionerSpec: TypeAlias = str | Callable[..., object]
"""What the ``partitioner`` setting may hold: a name, or a function, partitioner, or class
to instantiate with no arguments (all callables)."""

_CONFIG_NAME = "partitioner"


def canonical_partitioner_name(name: str) -> str:
    """The kayak name for ``name`` (a kayak/librdkafka name or a Java class name).

    Raises ``ConfigError`` for a name kayak does not know.
    """
    cleaned = name.strip()
    if cleaned in _JAVA_CLASS_NAMES:
        return _JAVA_CLASS_NAMES[cleaned]
    lowered = cleaned.lower()
    if lowered in _BY_NAME:
        return lowered
    raise ConfigError(
        _CONFIG_NAME,
        f"unknown partitioner {name!r}; use one of {', '.join(PARTITIONER_NAMES)}, a Java "
        f"partitioner class name ({', '.join(_JAVA_CLASS_NAMES)}), or a callable "
        "(topic, key, num_partitions, available) -> partition",
    )


class _CheckedPartitioner(PartitionerBase):
    """A user's partitioner, its answers checked so a bad one fails loudly and by name."""

    name = "custom"

    def __init__(self, func: Callable[..., object], label: str) -> None:
        self._func = func
        self._label = label
        hook = getattr(func, "on_new_batch", None)
        self._hook: Callable[[str, int], object] | None = hook if callable(hook) else None

    def __call__(
        self, topic: str, key: bytes | None, num_partitions: int, available: Sequence[int] | None
    ) -> int:
        answer = self._func(topic, key, num_partitions, available)
        # Ints and int-likes (numpy's) are fine; bool is an int, but True as a partition number
        # is surely a bug.
        if isinstance(answer, bool) or not isinstance(answer, SupportsIndex):
            raise ConfigError(
                _CONFIG_NAME,
                f"partitioner {self._label} returned {answer!r} ({type(answer).__name__}) "
                f"for topic {topic!r}; it must return an int partition number",
            )
        partition = operator.index(answer)
        if not 0 <= partition < num_partitions:
            raise ConfigError(
                _CONFIG_NAME,
                f"partitioner {self._label} returned partition {partition} for topic "
                f"{topic!r}, which has {num_partitions} partitions (valid: 0 to "
                f"{num_partitions - 1})",
            )
        return partition

    def on_new_batch(self, topic: str, prev_partition: int) -> None:
        """Forward to the user's ``on_new_batch``, if it has one."""
        if self._hook is not None:
            self._hook(topic, prev_partition)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self._label})"


def _describe(func: object) -> str:
    name = getattr(func, "__qualname__", None) or type(func).__qualname__
    module = getattr(func, "__module__", None) or type(func).__module__
    return f"{module}.{name}" if module and module != "builtins" else str(name)


def _check_signature(func: Callable[..., object], label: str) -> None:
    """Fail at configuration time, not on the first record, if ``func`` cannot take the four
    partitioner arguments."""
    try:
        signature = inspect.signature(func)
    except (TypeError, ValueError):  # some builtins and C callables have no signature
        return
    try:
        signature.bind("topic", b"key", 1, None)
    except TypeError as exc:
        raise ConfigError(
            _CONFIG_NAME,
            f"partitioner {label} must accept (topic, key, num_partitions, available): {exc}",
        ) from None


def partitioner_spec(value: object) -> PartitionerSpec:
    """Check a ``partitioner`` setting without building anything: return a name in kayak's
    spelling, or the callable itself once it is known to take the four arguments.

    Raises ``ConfigError`` for an unknown name or something that is not callable.
    """
    if isinstance(value, str):
        return canonical_partitioner_name(value)
    if isinstance(value, type | PartitionerBase):
        return value  # a class is checked when it is instantiated; ours need no check
    if callable(value):
        _check_signature(value, _describe(value))
        return value
    raise ConfigError(
        _CONFIG_NAME,
        f"expected a partitioner name or a callable, got {value!r} ({type(value).__name__})",
    )


def partitioner_from_config(value: object) -> Partitioner:
    """Turn the ``partitioner`` setting into a ready ``Partitioner``.

    ``value`` may be a name (``"default"``, ``"sticky"``, ``"round_robin"``, ``"random"``,
    ``"murmur2"``, ``"murmur2_random"``, ``"consistent"``, ``"consistent_random"``), a Java
    partitioner class name, a kayak partitioner instance (used as is), a class (instantiated
    with no arguments), or any callable ``(topic, key, num_partitions, available) -> int``.
    Callables other than kayak's own are wrapped so that a partition out of range raises
    ``ConfigError`` naming the partitioner, and their ``on_new_batch``, if any, is kept.
    Each call with a name or class returns a new partitioner with its own sticky state.
    """
    spec = partitioner_spec(value)
    if isinstance(spec, str):
        return _BY_NAME[spec]()
    if isinstance(spec, PartitionerBase):
        return spec
    if isinstance(spec, type):
        if issubclass(spec, PartitionerBase):
            return spec()
        try:
            instance = spec()
        except TypeError as exc:
            raise ConfigError(
                _CONFIG_NAME,
                f"partitioner class {_describe(spec)} cannot be instantiated with no "
                f"arguments: {exc}",
            ) from None
        return partitioner_from_config(instance)
    label = _describe(spec)
    logger.debug("using custom partitioner %s", label)
    return _CheckedPartitioner(spec, label)
