"""Kafka's murmur2 in C (``_codec.murmur2``) against the Python reference and against Java.

``kayak.client.partitioner`` hashes keys with the C function when the record codec extension
is built (and ``KAYAK_PURE_PYTHON`` is unset), else with ``_py_murmur2``. Checked here:

* C and Python agree on random bytes of every length 0..300, and on bytes >= 0x80 (Java's
  ``byte`` is signed: a wrong sign extension shows up only there);
* C takes bytes, bytearray and memoryview alike and refuses everything else with TypeError;
* the public ``murmur2`` and the partitioners run whichever implementation is selected;
* both agree with Apache Kafka 4.3's own ``Utils.murmur2`` and with
  ``BuiltInPartitioner.partitionForKey``, the function the Java producer places a keyed record
  with, run on the JVM.

These run whenever the extension is built, with or without ``KAYAK_PURE_PYTHON=1``.
"""

from __future__ import annotations

import os
import random
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kayak.client import partitioner
from kayak.client.partitioner import (
    DefaultPartitioner,
    Murmur2Partitioner,
    Murmur2RandomPartitioner,
    _py_murmur2,
    _py_murmur2_u32,
    murmur2,
    murmur2_partition,
)
from kayak.protocol.records import native
from tests.fixtures.jvm import java_command

try:
    from kayak.protocol.records import _codec
except ImportError:  # built without a compiler: nothing to compare
    pytest.skip("the C record codec is not built", allow_module_level=True)

INT32_MIN = -(2**31)
INT32_MAX = 2**31 - 1


def _random_keys(per_length: int, max_length: int = 300) -> list[bytes]:
    """``per_length`` random keys of each length 0..max_length, plus keys made only of bytes
    >= 0x80 (those that would break under sign extension) and only of 0x00 / 0xff."""
    rng = random.Random(29)
    keys: list[bytes] = []
    for length in range(max_length + 1):
        keys += [rng.randbytes(length) for _ in range(per_length)]
        keys.append(bytes(rng.randrange(0x80, 0x100) for _ in range(length)))
        keys += [b"\x00" * length, b"\xff" * length]
    return keys


# --------------------------------------------------------------------------------------------
# C against the Python reference
# --------------------------------------------------------------------------------------------


def test_c_matches_the_python_reference_for_every_length() -> None:
    keys = _random_keys(per_length=8)
    mismatches = [key for key in keys if _codec.murmur2(key) != _py_murmur2(key)]
    assert mismatches == []
    # Both signs occur, so the comparison covered the sign conversion too.
    values = [_codec.murmur2(key) for key in keys]
    assert min(values) < 0 <= max(values)
    assert all(INT32_MIN <= value <= INT32_MAX for value in values)


@settings(max_examples=500, deadline=None)
@given(st.binary(max_size=300))
def test_c_matches_the_python_reference_for_any_bytes(data: bytes) -> None:
    assert _codec.murmur2(data) == _py_murmur2(data)


def test_c_hashes_the_extremes_of_the_signed_range_like_python() -> None:
    # Keys whose hash has the sign bit set and clear, found among short keys, and the key
    # whose hash is the closest to INT32_MIN among them: the boundaries of the conversion.
    keys = [i.to_bytes(3, "little") for i in range(1 << 14)]
    hashes = {key: _py_murmur2(key) for key in keys}
    lowest = min(keys, key=hashes.__getitem__)
    highest = max(keys, key=hashes.__getitem__)
    for key in (lowest, highest):
        assert _codec.murmur2(key) == hashes[key]
    assert hashes[lowest] < -(2**31) + 2**20 and hashes[highest] > 2**31 - 2**20


def test_c_takes_bytearray_and_memoryview() -> None:
    for key in _random_keys(per_length=1, max_length=40):
        expected = _py_murmur2(key)
        assert _codec.murmur2(bytearray(key)) == expected
        assert _codec.murmur2(memoryview(key)) == expected
        assert _codec.murmur2(memoryview(bytearray(key))) == expected
        # A view into the middle of a larger buffer hashes only the bytes it shows.
        padded = b"\xaa\xbb\xcc" + key + b"\xdd\xee"
        assert _codec.murmur2(memoryview(padded)[3 : 3 + len(key)]) == expected


def test_c_takes_a_bytes_subclass_through_the_buffer_protocol() -> None:
    class Key(bytes):
        pass

    assert _codec.murmur2(Key(b"foobar")) == _py_murmur2(b"foobar") == -790332482


@pytest.mark.parametrize("value", ["", "21", 21, None, [50, 49], 2.0])
def test_c_refuses_what_is_not_bytes_like(value: object) -> None:
    with pytest.raises(TypeError, match="bytes-like object is required"):
        _codec.murmur2(value)  # type: ignore[arg-type]


def test_c_refuses_a_non_contiguous_view_like_python() -> None:
    strided = memoryview(b"0123456789")[::2]
    with pytest.raises(BufferError):
        _codec.murmur2(strided)
    with pytest.raises(BufferError):
        _py_murmur2(strided)


def test_c_takes_exactly_one_argument() -> None:
    with pytest.raises(TypeError):
        _codec.murmur2()  # type: ignore[call-arg]
    with pytest.raises(TypeError):
        _codec.murmur2(b"a", b"b")  # type: ignore[call-arg]


# --------------------------------------------------------------------------------------------
# Which implementation runs
# --------------------------------------------------------------------------------------------


def test_the_public_murmur2_is_the_selected_implementation() -> None:
    assert murmur2 is (_codec.murmur2 if native.NATIVE else _py_murmur2)
    assert partitioner.murmur2 is murmur2


def _selected_in_a_fresh_interpreter(pure_python: bool) -> str:
    env = {k: v for k, v in os.environ.items() if k != "KAYAK_PURE_PYTHON"}
    if pure_python:
        env["KAYAK_PURE_PYTHON"] = "1"
    code = (
        "from kayak.client import partitioner as p\n"
        "assert p.murmur2(b'21') == -973932308\n"
        "assert p.murmur2_partition(b'21', 7) == (-973932308 & 0x7FFFFFFF) % 7\n"
        "print(type(p.murmur2).__name__, p.murmur2.__name__)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_kayak_pure_python_selects_the_python_murmur2() -> None:
    assert _selected_in_a_fresh_interpreter(pure_python=True) == "function _py_murmur2"
    assert (
        _selected_in_a_fresh_interpreter(pure_python=False) == "builtin_function_or_method murmur2"
    )


# --------------------------------------------------------------------------------------------
# Against Apache Kafka's Java client
# --------------------------------------------------------------------------------------------

# Reads "<partitions> <hex key>" lines; prints "<Utils.murmur2> <partitionForKey>" for each.
JAVA_SOURCE = """
import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.util.HexFormat;
import org.apache.kafka.clients.producer.internals.BuiltInPartitioner;
import org.apache.kafka.common.utils.Utils;

public class Murmur2Vectors {
    public static void main(String[] args) throws Exception {
        BufferedReader in = new BufferedReader(
            new InputStreamReader(System.in, StandardCharsets.US_ASCII));
        StringBuilder out = new StringBuilder();
        for (String line; (line = in.readLine()) != null; ) {
            String[] fields = line.split(" ", -1);
            int partitions = Integer.parseInt(fields[0]);
            byte[] key = HexFormat.of().parseHex(fields[1]);
            out.append(Utils.murmur2(key)).append(' ')
               .append(BuiltInPartitioner.partitionForKey(key, partitions)).append('\\n');
        }
        System.out.print(out);
    }
}
"""


@pytest.fixture(scope="module")
def java_vectors(tmp_path_factory: pytest.TempPathFactory) -> list[tuple[bytes, int, int, int]]:
    """(key, partitions, Java's murmur2, Java's partition) for ~1,500 keys of length 0..300."""
    source = tmp_path_factory.mktemp("murmur2") / "Murmur2Vectors.java"
    source.write_text(JAVA_SOURCE)
    rng = random.Random(4242)
    cases = [(key, rng.choice((1, 3, 7, 12, 16, 100, 1000))) for key in _random_keys(2)]
    stdin = "".join(f"{partitions} {key.hex()}\n" for key, partitions in cases)
    done = subprocess.run(
        java_command(str(Path(source))),
        input=stdin,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert len(lines) == len(cases)
    vectors = []
    for (key, partitions), line in zip(cases, lines, strict=True):
        java_hash, java_partition = (int(field) for field in line.split())
        vectors.append((key, partitions, java_hash, java_partition))
    return vectors


def test_both_implementations_equal_javas_utils_murmur2(
    java_vectors: list[tuple[bytes, int, int, int]],
) -> None:
    for key, _, java_hash, _ in java_vectors:
        assert (_codec.murmur2(key), _py_murmur2(key)) == (java_hash, java_hash), key.hex()
    assert any(java_hash < 0 for _, _, java_hash, _ in java_vectors)


@pytest.mark.parametrize("implementation", ["c", "python"])
def test_keyed_partitions_equal_the_java_producers(
    java_vectors: list[tuple[bytes, int, int, int]],
    implementation: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """murmur2_partition and every murmur2 partitioner put each key where Java's
    ``BuiltInPartitioner.partitionForKey`` does, hashing in C and in Python."""
    key_hash = _codec.murmur2 if implementation == "c" else _py_murmur2_u32
    monkeypatch.setattr(partitioner, "_key_hash", key_hash)
    default, plain, random_ = DefaultPartitioner(), Murmur2Partitioner(), Murmur2RandomPartitioner()
    for key, partitions, _, java_partition in java_vectors:
        placed = [
            murmur2_partition(key, partitions),
            default("t", key, partitions, None),
            plain("t", key, partitions, None),
            random_("t", key, partitions, None),
        ]
        assert placed == [java_partition] * 4, key.hex()
