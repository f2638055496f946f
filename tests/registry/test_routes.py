"""Every REST route of the registry, with Confluent's answers and error codes."""

from __future__ import annotations

import json

from tests.registry.conftest import RegistryBroker, call, record_schema

USER_V1 = record_schema("User", ("name", "string"))
USER_V2 = record_schema("User", ("name", "string"), ("age", "int", 0))


def own_schemas(subject: str) -> tuple[str, str]:
    """Two compatible versions of a record no other test registers (ids are global)."""
    name = "R_" + subject.replace("-", "_")
    return record_schema(name, ("a", "string")), record_schema(
        name, ("a", "string"), ("b", "int", 0)
    )


def register(url: str, subject: str, schema: str, **extra: object) -> int:
    answer = call(url, "POST", f"/subjects/{subject}/versions", {"schema": schema, **extra})
    assert answer.status == 200, answer.document
    assert set(answer.document) == {"id"}
    return int(answer.document["id"])


def test_root_types_and_content_type(url: str) -> None:
    root = call(url, "GET", "/")
    assert (root.status, root.document) == (200, {})
    assert root.headers["Content-Type"] == "application/vnd.schemaregistry.v1+json"
    assert call(url, "GET", "/schemas/types").document == ["AVRO"]
    assert call(url, "GET", "/mode").document == {"mode": "READWRITE"}


def test_register_is_idempotent_and_ids_are_global(url: str, subject: str) -> None:
    first = register(url, subject, USER_V1)
    assert register(url, subject, USER_V1) == first
    # The same schema, spelled differently, is the same schema.
    respelled = json.dumps({"fields": [{"type": {"type": "string"}, "name": "name"}],
                            "name": "User", "type": "record"})  # fmt: skip
    assert register(url, subject, respelled) == first
    assert call(url, "GET", f"/subjects/{subject}/versions").document == [1]
    # Under another subject the identical schema keeps its global id, as a version 1 there.
    assert register(url, subject + "-other", USER_V1) == first
    second = register(url, subject, USER_V2, schemaType="AVRO")
    assert second > first
    assert call(url, "GET", f"/subjects/{subject}/versions").document == [1, 2]


def test_versions_and_schemas(url: str, subject: str) -> None:
    first, second = register(url, subject, USER_V1), register(url, subject, USER_V2)
    one = call(url, "GET", f"/subjects/{subject}/versions/1").document
    assert one == {"subject": subject, "version": 1, "id": first,
                   "schema": json.dumps(json.loads(USER_V1), separators=(",", ":"))}  # fmt: skip
    for latest in ("latest", "-1"):
        doc = call(url, "GET", f"/subjects/{subject}/versions/{latest}").document
        assert (doc["version"], doc["id"]) == (2, second)
    raw = call(url, "GET", f"/subjects/{subject}/versions/2/schema")
    assert raw.status == 200 and json.loads(raw.raw) == json.loads(USER_V2)
    assert call(url, "GET", f"/subjects/{subject}/versions/2/referencedby").document == []
    by_id = call(url, "GET", f"/schemas/ids/{second}")
    assert json.loads(by_id.document["schema"]) == json.loads(USER_V2)
    assert json.loads(call(url, "GET", f"/schemas/ids/{second}/schema").raw) == json.loads(USER_V2)
    # Other tests register the same schema under their subjects: look for this one's.
    usages = call(url, "GET", f"/schemas/ids/{second}/versions").document
    assert {"subject": subject, "version": 2} in usages
    assert {"subject": subject, "version": 1} not in usages
    assert subject in call(url, "GET", f"/schemas/ids/{second}/subjects").document
    assert subject in call(url, "GET", "/subjects").document
    assert call(url, "GET", f"/subjects?subjectPrefix={subject}").document == [subject]


def test_lookup(url: str, subject: str) -> None:
    schema_id = register(url, subject, USER_V1)
    found = call(url, "POST", f"/subjects/{subject}", {"schema": USER_V1})
    assert found.status == 200
    assert (found.document["id"], found.document["version"], found.document["subject"]) == (
        schema_id, 1, subject,
    )  # fmt: skip
    missing = call(url, "POST", f"/subjects/{subject}", {"schema": USER_V2})
    assert (missing.status, missing.document["error_code"]) == (404, 40403)
    nobody = call(url, "POST", f"/subjects/{subject}-none", {"schema": USER_V1})
    assert (nobody.status, nobody.document["error_code"]) == (404, 40401)
    assert nobody.document["message"] == f"Subject '{subject}-none' not found."


def test_not_found_and_invalid_version_codes(url: str, subject: str) -> None:
    register(url, subject, USER_V1)
    cases = {
        f"/subjects/{subject}-none/versions": (404, 40401),
        f"/subjects/{subject}-none/versions/1": (404, 40401),
        f"/subjects/{subject}/versions/7": (404, 40402),
        f"/subjects/{subject}/versions/abc": (422, 42202),
        f"/subjects/{subject}/versions/0": (422, 42202),
        f"/subjects/{subject}/versions/99999999999": (422, 42202),
        "/schemas/ids/999999": (404, 40403),
        "/schemas/ids/notanumber": (404, 40403),
        "/no/such/route": (404, 404),
        "/subjects/a/b/c/d/e/f": (404, 404),
    }
    for path, (status, code) in cases.items():
        answer = call(url, "GET", path)
        assert (answer.status, answer.document["error_code"]) == (status, code), path
        assert isinstance(answer.document["message"], str) and answer.document["message"]


def test_wrong_method_is_405_with_allow(url: str) -> None:
    answer = call(url, "PATCH", "/subjects")
    assert (answer.status, answer.document["error_code"]) == (405, 405)
    assert answer.headers["Allow"] == "GET, HEAD"  # every GET route answers HEAD too
    put = call(url, "PUT", "/subjects/x/versions", {"schema": '"int"'})
    assert put.status == 405 and set(put.headers["Allow"].split(", ")) == {"GET", "HEAD", "POST"}


def test_head_has_no_body(url: str) -> None:
    answer = call(url, "HEAD", "/schemas/types")
    assert answer.status == 200 and answer.raw == b""
    assert int(answer.headers["Content-Length"]) == len(b'["AVRO"]')


def test_invalid_schemas_are_42201(url: str, subject: str) -> None:
    bodies = [
        {"schema": '{"type": "record", "name": "R"}'},  # no fields
        {"schema": '{"type": "nosuchtype"}'},
        {"schema": "not json at all"},
        {"schema": record_schema("R", ("a", "int", "not an int"))},  # a default of the wrong type
        {"schema": ""},
        {"schema": {"type": "string"}},  # an object where a JSON string is required
        {"nothing": 1},
        {"schema": USER_V1, "schemaType": "JSON"},
        {"schema": 'syntax = "proto3";', "schemaType": "PROTOBUF"},
        {"schema": USER_V1, "references": [{"name": "x", "subject": "y", "version": 1}]},
    ]
    for body in bodies:
        answer = call(url, "POST", f"/subjects/{subject}/versions", body)
        assert (answer.status, answer.document["error_code"]) == (422, 42201), body
    json_type = call(url, "POST", f"/subjects/{subject}/versions",
                     {"schema": "{}", "schemaType": "JSON"})  # fmt: skip
    assert "AVRO only" in json_type.document["message"]
    assert call(url, "GET", f"/subjects/{subject}/versions").status == 404  # nothing stored


def test_malformed_json_body_is_400(url: str, subject: str) -> None:
    for raw in (b"{", b"\xff\xfe", b"[1, 2"):
        answer = call(url, "POST", f"/subjects/{subject}/versions", raw=raw)
        assert (answer.status, answer.document["error_code"]) == (400, 400)
    not_object = call(url, "POST", f"/subjects/{subject}/versions", raw=b"[1]")
    assert not_object.status == 422
    deep = b"[" * 100_000 + b"]" * 100_000
    assert call(url, "POST", f"/subjects/{subject}/versions", raw=deep).status in (400, 422)
    assert call(url, "GET", "/").status == 200  # still serving


def test_json_content_types_are_accepted(url: str, subject: str) -> None:
    # Forms and other types are 415 (tests/registry/test_registry_security.py).
    for content_type in ("application/json", "application/vnd.schemaregistry+json",
                         "application/json; charset=utf-8"):  # fmt: skip
        answer = call(url, "POST", f"/subjects/{subject}/versions", {"schema": USER_V1},
                      headers={"Content-Type": content_type})  # fmt: skip
        assert answer.status == 200


def test_subject_config(url: str, subject: str) -> None:
    unset = call(url, "GET", f"/config/{subject}")
    assert (unset.status, unset.document["error_code"]) == (404, 40408)
    fallback = call(url, "GET", f"/config/{subject}?defaultToGlobal=true")
    assert fallback.document == {"compatibilityLevel": "BACKWARD"}
    put = call(url, "PUT", f"/config/{subject}", {"compatibility": "full_transitive"})
    assert put.document == {"compatibility": "FULL_TRANSITIVE"}
    got = call(url, "GET", f"/config/{subject}")
    assert got.document == {"compatibilityLevel": "FULL_TRANSITIVE"}
    for bad in ({"compatibility": "SIDEWAYS"}, {"compatibility": None}, {}):
        answer = call(url, "PUT", f"/config/{subject}", bad)
        assert (answer.status, answer.document["error_code"]) == (422, 42203), bad
    deleted = call(url, "DELETE", f"/config/{subject}")
    assert deleted.document == {"compatibilityLevel": "FULL_TRANSITIVE"}
    assert call(url, "GET", f"/config/{subject}").status == 404
    gone = call(url, "DELETE", f"/config/{subject}-none")
    assert (gone.status, gone.document["error_code"]) == (404, 40401)


def test_global_config(own_registry: RegistryBroker) -> None:
    url = own_registry.url
    assert call(url, "GET", "/config").document == {"compatibilityLevel": "BACKWARD"}
    assert call(url, "PUT", "/config", {"compatibility": "NONE"}).document == {
        "compatibility": "NONE"
    }
    assert call(url, "GET", "/config").document == {"compatibilityLevel": "NONE"}
    bad = call(url, "PUT", "/config", {"compatibility": "nope"})
    assert (bad.status, bad.document["error_code"]) == (422, 42203)
    # NONE lets anything follow anything.
    register(url, "s", record_schema("R", ("a", "int")))
    register(url, "s", record_schema("R", ("b", "string")))


def test_compatibility_route(url: str, subject: str) -> None:
    register(url, subject, USER_V1)
    base = f"/compatibility/subjects/{subject}/versions"
    added_with_default = call(url, "POST", f"{base}/latest", {"schema": USER_V2})
    assert added_with_default.document == {"is_compatible": True}
    no_default = record_schema("User", ("name", "string"), ("age", "int"))
    refused = call(url, "POST", f"{base}/1?verbose=true", {"schema": no_default})
    assert refused.document["is_compatible"] is False
    assert any("age" in m for m in refused.document["messages"])
    assert (
        call(url, "POST", f"{base}?verbose=true", {"schema": no_default}).document["is_compatible"]
        is False
    )
    unknown = call(url, "POST", f"/compatibility/subjects/{subject}-none/versions/latest",
                   {"schema": USER_V1})  # fmt: skip
    assert (unknown.status, unknown.document["error_code"]) == (404, 40401)
    fresh = call(url, "POST", f"/compatibility/subjects/{subject}-none/versions",
                 {"schema": USER_V1})  # fmt: skip
    assert fresh.document == {"is_compatible": True}
    bad_version = call(url, "POST", f"{base}/x", {"schema": USER_V1})
    assert bad_version.document["error_code"] == 42202
    bad_schema = call(url, "POST", f"{base}/latest", {"schema": "{"})
    assert bad_schema.document["error_code"] == 42201


def test_register_incompatible_is_409(url: str, subject: str) -> None:
    register(url, subject, USER_V1)
    no_default = record_schema("User", ("name", "string"), ("age", "int"))
    answer = call(url, "POST", f"/subjects/{subject}/versions", {"schema": no_default})
    assert (answer.status, answer.document["error_code"]) == (409, 409)
    assert subject in answer.document["message"] and "age" in answer.document["message"]
    assert call(url, "GET", f"/subjects/{subject}/versions").document == [1]


def test_soft_and_hard_delete_of_a_subject(url: str, subject: str) -> None:
    v1, v2 = own_schemas(subject)
    first, second = register(url, subject, v1), register(url, subject, v2)
    too_soon = call(url, "DELETE", f"/subjects/{subject}?permanent=true")
    assert (too_soon.status, too_soon.document["error_code"]) == (404, 40405)
    assert call(url, "DELETE", f"/subjects/{subject}").document == [1, 2]
    again = call(url, "DELETE", f"/subjects/{subject}")
    assert (again.status, again.document["error_code"]) == (404, 40404)
    assert subject not in call(url, "GET", "/subjects").document
    assert subject in call(url, "GET", "/subjects?deleted=true").document
    assert call(url, "GET", f"/subjects/{subject}/versions").status == 404
    assert call(url, "GET", f"/subjects/{subject}/versions?deleted=true").document == [1, 2]
    assert call(url, "GET", f"/subjects/{subject}/versions/1").status == 404
    assert call(url, "GET", f"/subjects/{subject}/versions/1?deleted=true").document["id"] == first
    # Soft-deleted schemas can still be read by id (old records still need them).
    assert call(url, "GET", f"/schemas/ids/{second}").status == 200
    # Registering again continues the version numbers and keeps the ids.
    assert register(url, subject, v1) == first
    assert call(url, "GET", f"/subjects/{subject}/versions").document == [3]
    assert call(url, "DELETE", f"/subjects/{subject}").document == [3]
    assert call(url, "DELETE", f"/subjects/{subject}?permanent=true").document == [1, 2, 3]
    assert subject not in call(url, "GET", "/subjects?deleted=true").document
    assert call(url, "GET", f"/schemas/ids/{second}").document["error_code"] == 40403
    gone = call(url, "DELETE", f"/subjects/{subject}")
    assert (gone.status, gone.document["error_code"]) == (404, 40401)
    # Ids never change meaning: the same schema gets its old id back, a new one a new id.
    assert register(url, subject, v2) == second
    assert call(url, "GET", f"/subjects/{subject}/versions").document == [1]


def test_soft_and_hard_delete_of_a_version(url: str, subject: str) -> None:
    register(url, subject, USER_V1)
    register(url, subject, USER_V2)
    early = call(url, "DELETE", f"/subjects/{subject}/versions/1?permanent=true")
    assert (early.status, early.document["error_code"]) == (404, 40407)
    assert call(url, "DELETE", f"/subjects/{subject}/versions/1").document == 1
    again = call(url, "DELETE", f"/subjects/{subject}/versions/1")
    assert (again.status, again.document["error_code"]) == (404, 40406)
    assert call(url, "GET", f"/subjects/{subject}/versions").document == [2]
    assert call(url, "DELETE", f"/subjects/{subject}/versions/1?permanent=true").document == 1
    assert call(url, "GET", f"/subjects/{subject}/versions?deleted=true").document == [2]
    assert call(url, "DELETE", f"/subjects/{subject}/versions/latest").document == 2
    missing = call(url, "DELETE", f"/subjects/{subject}/versions/5")
    assert missing.document["error_code"] in (40401, 40402)
    bad = call(url, "DELETE", f"/subjects/{subject}/versions/zero")
    assert bad.document["error_code"] == 42202


def test_url_encoded_subject_names(url: str, subject: str) -> None:
    odd = f"{subject}/with space:and%"
    from urllib.parse import quote

    path = f"/subjects/{quote(odd, safe='')}/versions"
    assert call(url, "POST", path, {"schema": USER_V1}).status == 200
    assert odd in call(url, "GET", "/subjects").document
    assert call(url, "GET", path).document == [1]


def test_concurrent_registrations_get_distinct_versions_and_one_id_per_schema(
    url: str, subject: str
) -> None:
    from concurrent.futures import ThreadPoolExecutor

    call(url, "PUT", f"/config/{subject}", {"compatibility": "NONE"})
    name = "C_" + subject.replace("-", "_")
    schemas = [record_schema(name, (f"f{i}", "int")) for i in range(8)] * 3  # each one 3 times
    with ThreadPoolExecutor(12) as pool:
        ids = list(pool.map(lambda s: register(url, subject, s), schemas))
    by_schema = dict(zip(schemas, ids, strict=True))
    assert [by_schema[s] for s in schemas] == ids  # the same schema always got the same id
    assert len(set(ids)) == 8
    versions = call(url, "GET", f"/subjects/{subject}/versions").document
    assert versions == list(range(1, 9))
    seen = [call(url, "GET", f"/subjects/{subject}/versions/{v}").document for v in versions]
    assert sorted(d["id"] for d in seen) == sorted(set(ids))
    # Ids follow registration order: a later version never has a smaller new id.
    assert [d["id"] for d in seen] == sorted(d["id"] for d in seen)
