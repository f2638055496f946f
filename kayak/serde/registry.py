"""A blocking client for the Confluent Schema Registry REST API (kayak's or Confluent's).

Only the documented API is used, so the same client works against kayak's broker-served
registry and Confluent's. Ids are immutable, so schemas by id are cached forever; the id of a
(subject, schema) registration is cached too. Thread-safe: caches sit behind one lock, and
each request is its own ``urllib`` call. Pickling keeps the URL and options only (Spark ships
clients to executors), and the caches refill there.
"""

from __future__ import annotations

import json
import threading
import urllib.error
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

from kayak.errors import SchemaRegistryError

CONTENT_TYPE = "application/vnd.schemaregistry.v1+json"


@dataclass(frozen=True, slots=True)
class RegisteredSchema:
    """One version of a subject: which schema (by id and as parsed JSON) it is."""

    subject: str
    version: int
    schema_id: int
    schema: Any  # the Avro schema, parsed JSON


def schema_text(schema: str | Mapping[str, Any] | list[Any]) -> str:
    """The schema as the JSON text the registry takes (a str is passed through)."""
    if isinstance(schema, str):
        return schema
    return json.dumps(schema, separators=(",", ":"))


class SchemaRegistryClient:
    """Talks to the registry at ``url`` (``http://host:port``); see the module docstring."""

    def __init__(self, url: str, *, timeout_s: float = 10.0) -> None:
        self.url = url.rstrip("/")
        self.timeout_s = timeout_s
        self._lock = threading.Lock()
        self._by_id: dict[int, Any] = {}
        self._ids: dict[tuple[str, str], int] = {}

    # -- pickling: the address, not the caches ------------------------------------------

    def __getstate__(self) -> dict[str, Any]:
        return {"url": self.url, "timeout_s": self.timeout_s}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["url"], timeout_s=state["timeout_s"])  # type: ignore[misc]

    def __repr__(self) -> str:
        return f"SchemaRegistryClient({self.url!r})"

    # -- schemas ------------------------------------------------------------------------

    def register(self, subject: str, schema: str | Mapping[str, Any]) -> int:
        """Register ``schema`` under ``subject`` (idempotent); return its global id."""
        text = schema_text(schema)
        with self._lock:
            cached = self._ids.get((subject, text))
        if cached is not None:
            return cached
        answer = self._request("POST", f"/subjects/{_segment(subject)}/versions", {"schema": text})
        schema_id = int(answer["id"])
        with self._lock:
            self._ids[(subject, text)] = schema_id
        return schema_id

    def lookup(self, subject: str, schema: str | Mapping[str, Any]) -> RegisteredSchema:
        """The version of ``subject`` holding ``schema`` (40403 if none does)."""
        text = schema_text(schema)
        answer = self._request("POST", f"/subjects/{_segment(subject)}", {"schema": text})
        registered = self._registered(answer)
        with self._lock:
            self._ids[(subject, text)] = registered.schema_id
        return registered

    def schema_by_id(self, schema_id: int) -> Any:
        """The Avro schema (parsed JSON) with this id; cached forever, ids never change."""
        with self._lock:
            if schema_id in self._by_id:
                return self._by_id[schema_id]
        answer = self._request("GET", f"/schemas/ids/{int(schema_id)}")
        schema = _parse_schema(answer)
        with self._lock:
            self._by_id[schema_id] = schema
        return schema

    def latest_version(self, subject: str) -> RegisteredSchema:
        return self.version(subject, "latest")

    def version(self, subject: str, version: int | str) -> RegisteredSchema:
        """One version of ``subject`` (a number or ``"latest"``)."""
        path = f"/subjects/{_segment(subject)}/versions/{_segment(str(version))}"
        return self._registered(self._request("GET", path))

    def versions(self, subject: str) -> list[int]:
        return [int(v) for v in self._request("GET", f"/subjects/{_segment(subject)}/versions")]

    def subjects(self) -> list[str]:
        return [str(s) for s in self._request("GET", "/subjects")]

    def delete_subject(self, subject: str, permanent: bool = False) -> list[int]:
        """Soft delete a subject (``permanent``: hard delete a soft-deleted one)."""
        query = "?permanent=true" if permanent else ""
        deleted = self._request("DELETE", f"/subjects/{_segment(subject)}{query}")
        with self._lock:
            for key in [k for k in self._ids if k[0] == subject]:
                del self._ids[key]
        return [int(v) for v in deleted]

    # -- compatibility ------------------------------------------------------------------

    def check_compatibility(
        self, subject: str, schema: str | Mapping[str, Any], version: int | str = "latest"
    ) -> bool:
        """Whether ``schema`` may follow ``version`` of ``subject`` at its compatibility level.

        A subject with no versions yet accepts anything.
        """
        path = f"/compatibility/subjects/{_segment(subject)}/versions/{_segment(str(version))}"
        try:
            answer = self._request("POST", path, {"schema": schema_text(schema)})
        except SchemaRegistryError as exc:
            if exc.error_code == 40401:
                return True
            raise
        return bool(answer["is_compatible"])

    def set_compatibility(self, level: str, subject: str | None = None) -> str:
        """Set the level of ``subject`` (None: the global default); returns it."""
        path = "/config" if subject is None else f"/config/{_segment(subject)}"
        answer = self._request("PUT", path, {"compatibility": level.upper()})
        return str(answer["compatibility"])

    def get_compatibility(self, subject: str | None = None) -> str:
        """The level in force for ``subject`` (its own, else the global one)."""
        path = "/config" if subject is None else f"/config/{_segment(subject)}?defaultToGlobal=true"
        return str(self._request("GET", path)["compatibilityLevel"])

    # -- HTTP ---------------------------------------------------------------------------

    def _registered(self, answer: Any) -> RegisteredSchema:
        schema = _parse_schema(answer)
        schema_id = int(answer["id"])
        with self._lock:
            self._by_id.setdefault(schema_id, schema)
        return RegisteredSchema(str(answer["subject"]), int(answer["version"]), schema_id, schema)

    def _request(self, method: str, path: str, body: Any = None) -> Any:
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(
            self.url + path,
            data=data,
            method=method,
            headers={"Content-Type": CONTENT_TYPE, "Accept": f"{CONTENT_TYPE}, application/json"},
        )
        try:
            with urllib.request.urlopen(request, timeout=self.timeout_s) as response:
                payload = response.read()
        except urllib.error.HTTPError as exc:
            raise _error_from(exc, method, path) from None
        except (urllib.error.URLError, OSError) as exc:
            reason = getattr(exc, "reason", exc)
            raise SchemaRegistryError(
                f"cannot reach the schema registry at {self.url}: {reason}"
            ) from exc
        try:
            return json.loads(payload)
        except ValueError as exc:
            raise SchemaRegistryError(
                f"the schema registry at {self.url} answered {method} {path} with non-JSON: {exc}"
            ) from None


def _segment(value: str) -> str:
    return quote(value, safe="")


def _parse_schema(answer: Any) -> Any:
    try:
        return json.loads(answer["schema"])
    except (KeyError, TypeError, ValueError) as exc:
        raise SchemaRegistryError(f"the registry sent no usable schema: {exc}") from None


def _error_from(exc: urllib.error.HTTPError, method: str, path: str) -> SchemaRegistryError:
    try:
        document = json.loads(exc.read())
        message = str(document["message"])
        error_code = int(document["error_code"])
    except (ValueError, KeyError, TypeError, OSError):
        message, error_code = f"{method} {path}: HTTP {exc.code} {exc.reason}", exc.code
    return SchemaRegistryError(message, http_status=exc.code, error_code=error_code)
