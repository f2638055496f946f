"""The Confluent Schema Registry REST API: routes, request bodies, response documents.

Documents have Confluent's shapes (``{"id": 1}``, ``{"subject", "version", "id",
"schema"}``, ``{"compatibilityLevel": ...}``, ``{"is_compatible": ...}``) so Confluent's own
clients and serializers work unchanged. Only AVRO schemas are served. The routes are aiohttp
routes (:meth:`SchemaRegistryApi.routes`), served by the broker's web server or by the
standalone registry (:mod:`kayak.registry.cluster`).
"""

from __future__ import annotations

import functools
import json
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web

from kayak.registry import errors
from kayak.registry.compatibility import CompatibilityLevel, check_level
from kayak.registry.errors import RegistryError
from kayak.registry.schema import SUPPORTED_TYPES, AvroSchema, parse_avro
from kayak.registry.store import RegistryStore, SubjectVersion

CONTENT_TYPE = "application/vnd.schemaregistry.v1+json"
# The request bodies the registry reads (Confluent's two types and plain JSON); anything else
# is 415, which also stops a web page from posting a form to it.
REQUEST_MEDIA_TYPES = (CONTENT_TYPE, "application/vnd.schemaregistry+json", "application/json")

Route = Callable[[web.Request], Awaitable[web.Response]]


def _ok(document: Any) -> web.Response:
    return _answer(200, json.dumps(document, separators=(",", ":")).encode())


def _answer(status: int, body: bytes) -> web.Response:
    return web.Response(status=status, body=body, content_type=CONTENT_TYPE)


def _error(exc: RegistryError) -> web.Response:
    return _answer(exc.http_status, json.dumps(exc.body(), separators=(",", ":")).encode())


def _flag(request: web.Request, name: str) -> bool:
    """A boolean query parameter (``?deleted=true``); the last one counts."""
    values = request.query.getall(name, [])
    return bool(values) and values[-1].lower() == "true"


def _param(request: web.Request, name: str) -> str:
    """A path segment, percent-decoded (``a%2Fb`` is the subject ``a/b``)."""
    return request.match_info[name]


def _subject_version(request: web.Request) -> tuple[str, int | None]:
    """The subject and version a ``.../subjects/{subject}/versions/{version}`` path names."""
    return _param(request, "subject"), _parse_version(_param(request, "version"))


def _guarded(route: Route) -> Route:
    """Every failure of a route becomes a Confluent-shaped error answer."""

    @functools.wraps(route)
    async def guarded(request: web.Request) -> web.Response:
        try:
            return await route(request)
        except RegistryError as exc:
            return _error(exc)
        except RecursionError:  # a schema nested deeper than Python recurses
            return _error(errors.invalid_schema("nested too deeply"))

    return guarded


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

    def __init__(self, store: RegistryStore) -> None:
        self.store = store

    def routes(self) -> list[web.RouteDef]:
        """The registry's routes, for an aiohttp application.

        Every GET route answers HEAD too; a known path with another method is 405 with
        ``Allow``, an unknown one 404.
        """
        subject = "/subjects/{subject}"
        version = subject + "/versions/{version}"
        schema_id = "/schemas/ids/{id}"
        table: list[tuple[str, str, Route]] = [
            ("GET", "/", self._root),
            ("GET", "/subjects", self._list_subjects),
            ("POST", subject, self._lookup),
            ("DELETE", subject, self._delete_subject),
            ("GET", subject + "/versions", self._list_versions),
            ("POST", subject + "/versions", self._register),
            ("GET", version, self._get_version),
            ("DELETE", version, self._delete_version),
            ("GET", version + "/schema", self._get_version_schema),
            ("GET", version + "/referencedby", self._referenced_by),
            ("GET", "/schemas/types", self._schema_types),
            ("GET", schema_id, self._get_schema),
            ("GET", schema_id + "/schema", self._get_raw_schema),
            ("GET", schema_id + "/versions", self._get_schema_versions),
            ("GET", schema_id + "/subjects", self._get_schema_subjects),
            ("GET", "/config", self._get_global_config),
            ("PUT", "/config", self._put_global_config),
            ("GET", "/config/{subject}", self._get_subject_config),
            ("PUT", "/config/{subject}", self._put_subject_config),
            ("DELETE", "/config/{subject}", self._delete_subject_config),
            ("POST", "/compatibility" + version, self._check_one),
            ("POST", "/compatibility" + subject + "/versions", self._check_all),
            ("GET", "/mode", self._mode),
        ]
        return [web.route(method, path, _guarded(route)) for method, path, route in table]

    # -- request bodies -----------------------------------------------------------------

    @staticmethod
    async def _json_body(request: web.Request) -> dict[str, Any]:
        # The Content-Type was checked by the web server (REQUEST_MEDIA_TYPES); the body is
        # read here, within the server's size limit (413 beyond it).
        body = await request.read()
        try:
            document = json.loads(body)
        except (ValueError, RecursionError) as exc:
            raise errors.bad_request(f"Malformed JSON body: {exc}") from None
        if not isinstance(document, dict):
            raise RegistryError(422, 422, "the request body must be a JSON object")
        return document

    async def _schema_body(self, request: web.Request) -> AvroSchema:
        document = await self._json_body(request)
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

    async def _root(self, request: web.Request) -> web.Response:
        return _ok({})

    async def _list_subjects(self, request: web.Request) -> web.Response:
        prefix = (request.query.getall("subjectPrefix", []) or [""])[-1]
        subjects = self.store.subjects(include_deleted=_flag(request, "deleted"))
        return _ok([s for s in subjects if s.startswith(prefix)])

    async def _list_versions(self, request: web.Request) -> web.Response:
        versions = self.store.versions(
            _param(request, "subject"), include_deleted=_flag(request, "deleted")
        )
        return _ok([v.version for v in versions])

    async def _get_version(self, request: web.Request) -> web.Response:
        subject, version = _subject_version(request)
        entry = self.store.version(subject, version, include_deleted=_flag(request, "deleted"))
        return _ok(_version_document(entry))

    async def _get_version_schema(self, request: web.Request) -> web.Response:
        subject, version = _subject_version(request)
        entry = self.store.version(subject, version, include_deleted=_flag(request, "deleted"))
        return _answer(200, entry.schema.text.encode())

    async def _referenced_by(self, request: web.Request) -> web.Response:
        subject, version = _subject_version(request)
        self.store.version(subject, version, include_deleted=True)
        return _ok([])  # no references: nothing can refer to a version

    async def _register(self, request: web.Request) -> web.Response:
        subject = _param(request, "subject")
        schema = await self._schema_body(request)
        # The level is read when the store decides, on the state it decides on (a standalone
        # registry reads what others wrote first).
        store = self.store
        entry = await store.register(
            subject,
            schema,
            lambda new, earlier: check_level(store.effective_compatibility(subject), new, earlier),
        )
        return _ok({"id": entry.schema_id})

    async def _lookup(self, request: web.Request) -> web.Response:
        subject = _param(request, "subject")
        schema = await self._schema_body(request)
        include_deleted = _flag(request, "deleted")
        self.store.versions(subject, include_deleted=include_deleted)  # 40401 first
        entry = self.store.find(subject, schema, include_deleted=include_deleted)
        if entry is None:
            raise errors.schema_not_found()
        return _ok(_version_document(entry))

    async def _delete_subject(self, request: web.Request) -> web.Response:
        deleted = await self.store.delete_subject(
            _param(request, "subject"), permanent=_flag(request, "permanent")
        )
        return _ok(deleted)

    async def _delete_version(self, request: web.Request) -> web.Response:
        subject, version = _subject_version(request)
        permanent = _flag(request, "permanent")
        return _ok(await self.store.delete_version(subject, version, permanent=permanent))

    # -- schemas by id ------------------------------------------------------------------

    async def _schema_types(self, request: web.Request) -> web.Response:
        return _ok(list(SUPPORTED_TYPES))

    async def _get_schema(self, request: web.Request) -> web.Response:
        schema = self.store.schema(_parse_schema_id(_param(request, "id")))
        return _ok({"schema": schema.text})

    async def _get_raw_schema(self, request: web.Request) -> web.Response:
        schema = self.store.schema(_parse_schema_id(_param(request, "id")))
        return _answer(200, schema.text.encode())

    async def _get_schema_versions(self, request: web.Request) -> web.Response:
        schema_id = _parse_schema_id(_param(request, "id"))
        self.store.schema(schema_id)
        usages = self.store.usages(schema_id, include_deleted=_flag(request, "deleted"))
        return _ok([{"subject": u.subject, "version": u.version} for u in usages])

    async def _get_schema_subjects(self, request: web.Request) -> web.Response:
        schema_id = _parse_schema_id(_param(request, "id"))
        self.store.schema(schema_id)
        usages = self.store.usages(schema_id, include_deleted=_flag(request, "deleted"))
        return _ok(sorted({u.subject for u in usages}))

    # -- compatibility settings ---------------------------------------------------------

    async def _get_global_config(self, request: web.Request) -> web.Response:
        level = self.store.compatibility(None) or CompatibilityLevel.BACKWARD
        return _ok({"compatibilityLevel": level.value})

    async def _put_global_config(self, request: web.Request) -> web.Response:
        level = _parse_level((await self._json_body(request)).get("compatibility"))
        await self.store.set_compatibility(None, level)
        return _ok({"compatibility": level.value})

    async def _get_subject_config(self, request: web.Request) -> web.Response:
        subject = _param(request, "subject")
        level = self.store.compatibility(subject)
        if level is None:
            if not _flag(request, "defaultToGlobal"):
                raise errors.subject_config_not_found(subject)
            level = self.store.compatibility(None) or CompatibilityLevel.BACKWARD
        return _ok({"compatibilityLevel": level.value})

    async def _put_subject_config(self, request: web.Request) -> web.Response:
        level = _parse_level((await self._json_body(request)).get("compatibility"))
        await self.store.set_compatibility(_param(request, "subject"), level)
        return _ok({"compatibility": level.value})

    async def _delete_subject_config(self, request: web.Request) -> web.Response:
        subject = _param(request, "subject")
        if not self.store.has_subject(subject):
            raise errors.subject_not_found(subject)
        previous = await self.store.delete_compatibility(subject)
        level = previous or self.store.compatibility(None) or CompatibilityLevel.BACKWARD
        return _ok({"compatibilityLevel": level.value})

    async def _mode(self, request: web.Request) -> web.Response:
        return _ok({"mode": "READWRITE"})

    # -- compatibility checks -----------------------------------------------------------

    async def _check_one(self, request: web.Request) -> web.Response:
        subject, version = _subject_version(request)
        schema = await self._schema_body(request)
        entry = self.store.version(subject, version)
        level = self.store.effective_compatibility(subject)
        messages = check_level(level, schema, [(entry.version, entry.schema)], transitive=False)
        return self._compatibility_answer(request, messages)

    async def _check_all(self, request: web.Request) -> web.Response:
        subject = _param(request, "subject")
        schema = await self._schema_body(request)
        try:
            earlier = [(v.version, v.schema) for v in self.store.versions(subject)]
        except RegistryError:
            earlier = []  # nothing registered yet: anything is compatible
        messages = check_level(self.store.effective_compatibility(subject), schema, earlier)
        return self._compatibility_answer(request, messages)

    @staticmethod
    def _compatibility_answer(request: web.Request, messages: list[str]) -> web.Response:
        document: dict[str, Any] = {"is_compatible": not messages}
        if _flag(request, "verbose"):
            document["messages"] = messages
        return _ok(document)
