"""The Confluent Schema Registry REST API: routes, request bodies, response documents.

Documents have Confluent's shapes (``{"id": 1}``, ``{"subject", "version", "id",
"schema"}``, ``{"compatibilityLevel": ...}``, ``{"is_compatible": ...}``) so Confluent's own
clients and serializers work unchanged. Only AVRO schemas are served.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import Any

from kayak.broker.registry import errors
from kayak.broker.registry.compatibility import CompatibilityLevel, check_level
from kayak.broker.registry.errors import RegistryError
from kayak.broker.registry.http import HttpRequest, HttpResponse, error_response
from kayak.broker.registry.schema import SUPPORTED_TYPES, AvroSchema, parse_avro
from kayak.broker.registry.store import SchemaStore, SubjectVersion

Route = Callable[[HttpRequest, list[str]], Awaitable[HttpResponse]]


def _ok(document: Any) -> HttpResponse:
    return HttpResponse(200, document)


def _parse_version(raw: str) -> int | None:
    """A version path segment: a number in [1, 2^31-1], or "latest" / -1 (None)."""
    if raw == "latest" or raw == "-1":
        return None
    if raw.isdigit() and 1 <= int(raw) <= errors.MAX_VERSION:
        return int(raw)
    raise errors.invalid_version(raw)


def _parse_schema_id(raw: str) -> int:
    if raw.isdigit() and int(raw) < 2**31:
        return int(raw)
    raise errors.schema_not_found(f"Schema {raw} not found")


def _parse_level(raw: object) -> CompatibilityLevel:
    if not isinstance(raw, str):  # str(None) would read as the level NONE
        raise errors.invalid_compatibility(raw)
    try:
        return CompatibilityLevel(raw.upper())
    except ValueError:
        raise errors.invalid_compatibility(raw) from None


def _version_document(entry: SubjectVersion) -> dict[str, Any]:
    return {
        "subject": entry.subject,
        "version": entry.version,
        "id": entry.schema_id,
        "schema": entry.schema.text,
    }


class SchemaRegistryApi:
    """Turns HTTP requests into store operations and their answers."""

    def __init__(self, store: SchemaStore) -> None:
        self.store = store
        # (method, path pattern): "*" matches one segment, passed to the route in order.
        self._routes: list[tuple[str, tuple[str, ...], Route]] = [
            ("GET", (), self._root),
            ("GET", ("subjects",), self._list_subjects),
            ("POST", ("subjects", "*"), self._lookup),
            ("DELETE", ("subjects", "*"), self._delete_subject),
            ("GET", ("subjects", "*", "versions"), self._list_versions),
            ("POST", ("subjects", "*", "versions"), self._register),
            ("GET", ("subjects", "*", "versions", "*"), self._get_version),
            ("DELETE", ("subjects", "*", "versions", "*"), self._delete_version),
            ("GET", ("subjects", "*", "versions", "*", "schema"), self._get_version_schema),
            ("GET", ("subjects", "*", "versions", "*", "referencedby"), self._referenced_by),
            ("GET", ("schemas", "types"), self._schema_types),
            ("GET", ("schemas", "ids", "*"), self._get_schema),
            ("GET", ("schemas", "ids", "*", "schema"), self._get_raw_schema),
            ("GET", ("schemas", "ids", "*", "versions"), self._get_schema_versions),
            ("GET", ("schemas", "ids", "*", "subjects"), self._get_schema_subjects),
            ("GET", ("config",), self._get_global_config),
            ("PUT", ("config",), self._put_global_config),
            ("GET", ("config", "*"), self._get_subject_config),
            ("PUT", ("config", "*"), self._put_subject_config),
            ("DELETE", ("config", "*"), self._delete_subject_config),
            ("POST", ("compatibility", "subjects", "*", "versions", "*"), self._check_one),
            ("POST", ("compatibility", "subjects", "*", "versions"), self._check_all),
            ("GET", ("mode",), self._mode),
        ]

    async def handle(self, request: HttpRequest) -> HttpResponse:
        """Answer one request (every failure becomes a Confluent-shaped error)."""
        allowed: list[str] = []
        for method, pattern, route in self._routes:
            params = _match(pattern, request.segments)
            if params is None:
                continue
            if method != request.method and not (method == "GET" and request.method == "HEAD"):
                allowed.append(method)
                continue
            try:
                return await route(request, params)
            except RegistryError as exc:
                return HttpResponse(exc.http_status, exc.body())
            except RecursionError:  # a schema nested deeper than Python recurses
                too_deep = errors.invalid_schema("nested too deeply")
                return HttpResponse(too_deep.http_status, too_deep.body())
        if allowed:
            response = error_response(405, "HTTP 405 Method Not Allowed")
            response.headers["Allow"] = ", ".join(sorted(set(allowed)))
            return response
        return error_response(404, "HTTP 404 Not Found")

    # -- request bodies -----------------------------------------------------------------

    @staticmethod
    def _json_body(request: HttpRequest) -> dict[str, Any]:
        # The Content-Type is not checked: Confluent's clients send
        # application/vnd.schemaregistry.v1+json, others application/json, and curl -d sends
        # a form type with a JSON body. What counts is that the body is JSON.
        try:
            document = json.loads(request.body)
        except (ValueError, RecursionError) as exc:
            raise errors.bad_request(f"Malformed JSON body: {exc}") from None
        if not isinstance(document, dict):
            raise RegistryError(422, 422, "the request body must be a JSON object")
        return document

    def _schema_body(self, request: HttpRequest) -> AvroSchema:
        document = self._json_body(request)
        schema_type = document.get("schemaType") or "AVRO"
        if not isinstance(schema_type, str) or schema_type.upper() not in SUPPORTED_TYPES:
            raise errors.invalid_schema(
                f"schemaType {schema_type!r} is not supported: kayak's registry serves AVRO only"
            )
        if document.get("references"):
            raise errors.invalid_schema("schema references are not supported")
        text = document.get("schema")
        if not isinstance(text, str) or not text.strip():
            raise errors.invalid_schema('the body needs "schema": the schema as a JSON string')
        return parse_avro(text)

    # -- subjects and versions ----------------------------------------------------------

    async def _root(self, request: HttpRequest, params: list[str]) -> HttpResponse:
        return _ok({})

    async def _list_subjects(self, request: HttpRequest, params: list[str]) -> HttpResponse:
        prefix = request.query.get("subjectPrefix", [""])[-1]
        subjects = self.store.subjects(include_deleted=request.flag("deleted"))
        return _ok([s for s in subjects if s.startswith(prefix)])

    async def _list_versions(self, request: HttpRequest, params: list[str]) -> HttpResponse:
        versions = self.store.versions(params[0], include_deleted=request.flag("deleted"))
        return _ok([v.version for v in versions])

    async def _get_version(self, request: HttpRequest, params: list[str]) -> HttpResponse:
        subject, version = params[0], _parse_version(params[1])
        entry = self.store.version(subject, version, include_deleted=request.flag("deleted"))
        return _ok(_version_document(entry))

    async def _get_version_schema(self, request: HttpRequest, params: list[str]) -> HttpResponse:
        subject, version = params[0], _parse_version(params[1])
        entry = self.store.version(subject, version, include_deleted=request.flag("deleted"))
        return HttpResponse(200, raw=entry.schema.text.encode())

    async def _referenced_by(self, request: HttpRequest, params: list[str]) -> HttpResponse:
        self.store.version(params[0], _parse_version(params[1]), include_deleted=True)
        return _ok([])  # no references: nothing can refer to a version

    async def _register(self, request: HttpRequest, params: list[str]) -> HttpResponse:
        subject = params[0]
        schema = self._schema_body(request)
        level = self.store.effective_compatibility(subject)
        entry = await self.store.register(
            subject, schema, lambda new, earlier: check_level(level, new, earlier)
        )
        return _ok({"id": entry.schema_id})

    async def _lookup(self, request: HttpRequest, params: list[str]) -> HttpResponse:
        subject = params[0]
        schema = self._schema_body(request)
        include_deleted = request.flag("deleted")
        self.store.versions(subject, include_deleted=include_deleted)  # 40401 first
        entry = self.store.find(subject, schema, include_deleted=include_deleted)
        if entry is None:
            raise errors.schema_not_found()
        return _ok(_version_document(entry))

    async def _delete_subject(self, request: HttpRequest, params: list[str]) -> HttpResponse:
        deleted = await self.store.delete_subject(params[0], permanent=request.flag("permanent"))
        return _ok(deleted)

    async def _delete_version(self, request: HttpRequest, params: list[str]) -> HttpResponse:
        subject, version = params[0], _parse_version(params[1])
        permanent = request.flag("permanent")
        return _ok(await self.store.delete_version(subject, version, permanent=permanent))

    # -- schemas by id ------------------------------------------------------------------

    async def _schema_types(self, request: HttpRequest, params: list[str]) -> HttpResponse:
        return _ok(list(SUPPORTED_TYPES))

    async def _get_schema(self, request: HttpRequest, params: list[str]) -> HttpResponse:
        schema = self.store.schema(_parse_schema_id(params[0]))
        return _ok({"schema": schema.text})

    async def _get_raw_schema(self, request: HttpRequest, params: list[str]) -> HttpResponse:
        schema = self.store.schema(_parse_schema_id(params[0]))
        return HttpResponse(200, raw=schema.text.encode())

    async def _get_schema_versions(self, request: HttpRequest, params: list[str]) -> HttpResponse:
        schema_id = _parse_schema_id(params[0])
        self.store.schema(schema_id)
        usages = self.store.usages(schema_id, include_deleted=request.flag("deleted"))
        return _ok([{"subject": u.subject, "version": u.version} for u in usages])

    async def _get_schema_subjects(self, request: HttpRequest, params: list[str]) -> HttpResponse:
        schema_id = _parse_schema_id(params[0])
        self.store.schema(schema_id)
        usages = self.store.usages(schema_id, include_deleted=request.flag("deleted"))
        return _ok(sorted({u.subject for u in usages}))

    # -- compatibility settings ---------------------------------------------------------

    async def _get_global_config(self, request: HttpRequest, params: list[str]) -> HttpResponse:
        level = self.store.compatibility(None) or CompatibilityLevel.BACKWARD
        return _ok({"compatibilityLevel": level.value})

    async def _put_global_config(self, request: HttpRequest, params: list[str]) -> HttpResponse:
        level = _parse_level(self._json_body(request).get("compatibility"))
        await self.store.set_compatibility(None, level)
        return _ok({"compatibility": level.value})

    async def _get_subject_config(self, request: HttpRequest, params: list[str]) -> HttpResponse:
        subject = params[0]
        level = self.store.compatibility(subject)
        if level is None:
            if not request.flag("defaultToGlobal"):
                raise errors.subject_config_not_found(subject)
            level = self.store.compatibility(None) or CompatibilityLevel.BACKWARD
        return _ok({"compatibilityLevel": level.value})

    async def _put_subject_config(self, request: HttpRequest, params: list[str]) -> HttpResponse:
        level = _parse_level(self._json_body(request).get("compatibility"))
        await self.store.set_compatibility(params[0], level)
        return _ok({"compatibility": level.value})

    async def _delete_subject_config(self, request: HttpRequest, params: list[str]) -> HttpResponse:
        subject = params[0]
        if not self.store.has_subject(subject):
            raise errors.subject_not_found(subject)
        previous = await self.store.delete_compatibility(subject)
        level = previous or self.store.compatibility(None) or CompatibilityLevel.BACKWARD
        return _ok({"compatibilityLevel": level.value})

    async def _mode(self, request: HttpRequest, params: list[str]) -> HttpResponse:
        return _ok({"mode": "READWRITE"})

    # -- compatibility checks -----------------------------------------------------------

    async def _check_one(self, request: HttpRequest, params: list[str]) -> HttpResponse:
        subject, version = params[0], _parse_version(params[1])
        schema = self._schema_body(request)
        entry = self.store.version(subject, version)
        level = self.store.effective_compatibility(subject)
        messages = check_level(level, schema, [(entry.version, entry.schema)], transitive=False)
        return self._compatibility_answer(request, messages)

    async def _check_all(self, request: HttpRequest, params: list[str]) -> HttpResponse:
        subject = params[0]
        schema = self._schema_body(request)
        try:
            earlier = [(v.version, v.schema) for v in self.store.versions(subject)]
        except RegistryError:
            earlier = []  # nothing registered yet: anything is compatible
        messages = check_level(self.store.effective_compatibility(subject), schema, earlier)
        return self._compatibility_answer(request, messages)

    @staticmethod
    def _compatibility_answer(request: HttpRequest, messages: list[str]) -> HttpResponse:
        document: dict[str, Any] = {"is_compatible": not messages}
        if request.flag("verbose"):
            document["messages"] = messages
        return _ok(document)


def _match(pattern: tuple[str, ...], segments: list[str]) -> list[str] | None:
    if len(pattern) != len(segments):
        return None
    params = []
    for expected, actual in zip(pattern, segments, strict=True):
        if expected == "*":
            params.append(actual)
        elif expected != actual:
            return None
    return params
