"""kayak's own registry client and Avro serdes, against the broker's registry."""

from __future__ import annotations

import pickle
import socket
import struct
import threading
from typing import Any

import pytest

from kayak.errors import SchemaRegistryError, SerializationError
from kayak.serde import AvroDeserializer, AvroSerializer, RegisteredSchema, SchemaRegistryClient
from tests.registry.conftest import call

USER = {
    "type": "record",
    "name": "User",
    "namespace": "kayak.test",
    "fields": [
        {"name": "name", "type": "string"},
        {"name": "age", "type": ["null", "int"], "default": None},
        {"name": "tags", "type": {"type": "array", "items": "string"}, "default": []},
    ],
}
USER_WITH_EMAIL = {**USER, "fields": [*USER["fields"], {"name": "email", "type": "string",
                                                         "default": "none"}]}  # fmt: skip


def test_client_routes(url: str, subject: str) -> None:
    client = SchemaRegistryClient(url)
    first = client.register(subject, USER)
    assert client.register(subject, USER) == first  # cached, and idempotent on the server
    second = client.register(subject, USER_WITH_EMAIL)
    assert client.versions(subject) == [1, 2]
    assert subject in client.subjects()
    latest = client.latest_version(subject)
    assert latest == RegisteredSchema(subject, 2, second, USER_WITH_EMAIL)
    assert client.version(subject, 1).schema_id == first
    assert client.schema_by_id(first) == USER
    assert client.lookup(subject, USER).version == 1
    assert client.check_compatibility(subject, USER) is True
    breaking = {**USER, "fields": [{"name": "name", "type": "int"}]}
    assert client.check_compatibility(subject, breaking) is False
    assert client.check_compatibility(subject + "-new", breaking) is True  # nothing to break
    assert client.get_compatibility(subject) == "BACKWARD"  # the global default
    assert client.set_compatibility("forward", subject) == "FORWARD"
    assert client.get_compatibility(subject) == "FORWARD"
    assert client.get_compatibility() == "BACKWARD"
    with pytest.raises(SchemaRegistryError) as refused:
        client.register(subject, breaking)
    assert (refused.value.http_status, refused.value.error_code) == (409, 409)
    assert client.delete_subject(subject) == [1, 2]
    assert client.delete_subject(subject, permanent=True) == [1, 2]
    with pytest.raises(SchemaRegistryError) as missing:
        client.latest_version(subject)
    assert (missing.value.http_status, missing.value.error_code) == (404, 40401)
    assert "not found" in str(missing.value)


def test_client_errors_name_the_problem(url: str) -> None:
    client = SchemaRegistryClient(url)
    with pytest.raises(SchemaRegistryError) as invalid:
        client.register("x", '{"type": "nope"}')
    assert invalid.value.error_code == 42201
    with pytest.raises(SchemaRegistryError) as level:
        client.set_compatibility("sideways")
    assert level.value.error_code == 42203
    with socket.socket() as unused:
        unused.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{unused.getsockname()[1]}"
    with pytest.raises(SchemaRegistryError) as unreachable:
        SchemaRegistryClient(dead, timeout_s=2).subjects()
    assert dead in str(unreachable.value)
    assert unreachable.value.http_status is None and unreachable.value.error_code is None
    restored = pickle.loads(pickle.dumps(invalid.value))
    assert (restored.error_code, restored.http_status, restored.message) == (
        42201, 422, invalid.value.message,
    )  # fmt: skip


def test_round_trip_and_wire_format(url: str, subject: str) -> None:
    serializer = AvroSerializer(SchemaRegistryClient(url))
    deserializer = AvroDeserializer(url)
    value = {"name": "ada", "age": 36, "tags": ["a", "b"]}
    data = serializer.serialize(subject, USER, value)
    schema_id = SchemaRegistryClient(url).latest_version(subject).schema_id
    assert data[:5] == struct.pack(">bI", 0, schema_id)
    assert deserializer.deserialize(data) == value
    assert deserializer.deserialize_with_id(memoryview(data)) == (schema_id, value)
    assert deserializer.deserialize(bytearray(data)) == value
    # A str schema with the same content is the same registration.
    import json

    assert serializer.serialize(subject, json.dumps(USER), value) == data


def test_reader_schema_resolution(url: str, subject: str) -> None:
    old = AvroSerializer(url).serialize(subject, USER, {"name": "bo", "age": None, "tags": []})
    reader = AvroDeserializer(url, reader_schema=USER_WITH_EMAIL)
    assert reader.deserialize(old) == {"name": "bo", "age": None, "tags": [], "email": "none"}


def test_registration_happens_once_per_subject_and_schema(url: str, subject: str) -> None:
    client = SchemaRegistryClient(url)
    serializer = AvroSerializer(client)
    calls = 0
    original = client.register

    def counting(*args: Any) -> int:
        nonlocal calls
        calls += 1
        return original(*args)

    client.register = counting  # type: ignore[method-assign,assignment]
    for i in range(50):
        serializer.serialize(subject, USER, {"name": str(i), "age": i, "tags": []})
    assert calls == 1
    serializer.serialize(subject + "-b", USER, {"name": "x", "age": 1, "tags": []})
    assert calls == 2


def test_auto_register_off_looks_up(url: str, subject: str) -> None:
    strict = AvroSerializer(url, auto_register=False)
    with pytest.raises(SchemaRegistryError) as missing:
        strict.serialize(subject, USER, {"name": "x"})
    assert missing.value.error_code == 40401
    SchemaRegistryClient(url).register(subject, USER)
    data = strict.serialize(subject, USER, {"name": "x", "age": None, "tags": []})
    assert AvroDeserializer(url).deserialize(data)["name"] == "x"


def test_serialization_errors(url: str, subject: str) -> None:
    serializer = AvroSerializer(url)
    deserializer = AvroDeserializer(url)
    good = serializer.serialize(subject, USER, {"name": "x", "age": 1, "tags": ["t"]})
    with pytest.raises(SerializationError, match="subject"):
        serializer.serialize(subject, USER, {"name": 5})
    with pytest.raises(SerializationError, match="invalid Avro schema"):
        serializer.serialize(subject, {"type": "record", "name": "R"}, {})
    bad_inputs = {
        b"": "too short",
        b"\x00\x00\x00": "too short",
        b"\x01" + good[1:]: "magic byte",
        good[:-3]: "cannot decode",
        good + b"\x00\x00": "left over",
        b"\x00" + struct.pack(">I", 2**31 - 7) + b"\x02": "unknown schema id",
    }
    for data, problem in bad_inputs.items():
        with pytest.raises(SerializationError, match=problem):
            deserializer.deserialize(data)
    with pytest.raises(SerializationError, match="null"):
        deserializer.deserialize(None)  # type: ignore[arg-type]
    assert isinstance(SerializationError("x"), ValueError)


def test_pickling_keeps_options_and_drops_caches(url: str, subject: str) -> None:
    client = SchemaRegistryClient(url, timeout_s=3.5)
    serializer = AvroSerializer(client, auto_register=False)
    deserializer = AvroDeserializer(client, reader_schema=USER_WITH_EMAIL)
    client.register(subject, USER)
    data = serializer.serialize(subject, USER, {"name": "p", "age": 2, "tags": []})
    deserializer.deserialize(data)
    for thing in (client, serializer, deserializer):
        assert len(pickle.dumps(thing)) < 2000  # no caches, no locks, no parsed schemas
    copy = pickle.loads(pickle.dumps(serializer))
    assert (copy.registry.url, copy.registry.timeout_s, copy.auto_register) == (url, 3.5, False)
    assert copy.serialize(subject, USER, {"name": "p", "age": 2, "tags": []}) == data
    reader = pickle.loads(pickle.dumps(deserializer))
    assert reader.deserialize(data)["email"] == "none"


def test_thread_safety(url: str, subject: str) -> None:
    serializer = AvroSerializer(url)
    deserializer = AvroDeserializer(url)
    failures: list[BaseException] = []

    def work(n: int) -> None:
        try:
            for i in range(30):
                value = {"name": f"{n}-{i}", "age": i, "tags": []}
                sub = f"{subject}-{i % 3}"
                assert deserializer.deserialize(serializer.serialize(sub, USER, value)) == value
        except BaseException as exc:  # reported below
            failures.append(exc)

    threads = [threading.Thread(target=work, args=(n,)) for n in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert failures == []
    ids = {call(url, "GET", f"/subjects/{subject}-{k}/versions/1").document["id"] for k in range(3)}
    assert len(ids) == 1  # one schema, one id, under every subject
