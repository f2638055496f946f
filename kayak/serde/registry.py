"""A blocking client for the Confluent Schema Registry REST API (kayak's or Confluent's).

Only the documented API is used, so the same client works against kayak's broker-served
registry and Confluent's. Ids are immutable, so schemas by id are cached forever; the id of a
(subject, schema) registration is cached too. Thread-safe: caches sit behind one lock, and
each request is its own ``urllib`` call (the standard library: the client stays blocking and
dependency-free). Pickling keeps the URL and options only (Spark ships clients to executors),
and the caches refill there.

Settings, with the property names of Confluent's clients (the ``schema.registry.`` prefix is
optional): ``url``; ``basic.auth.credentials.source`` (``USER_INFO``: ``basic.auth.user.info``
is ``"user:password"``; ``URL``: the user and password in the URL, ``https://user:pw@host``)
and, for ``https://`` URLs, ``ssl.ca.location`` (a PEM CA bundle to trust instead of the
system's), ``ssl.certificate.location`` and ``ssl.key.location`` (a client certificate). The
host name is always checked against the certificate. Among Kafka client properties (``-X``
on the command line) the registry's are told apart as Confluent's serializers tell them:
``schema.registry.*`` and ``basic.auth.*`` (:func:`split_registry_properties`).
"""

from __future__ import annotations

import base64
import json
import ssl
import threading
import urllib.error
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote, unquote, urlsplit, urlunsplit

from kayak.errors import ConfigError, SchemaRegistryError

CONTENT_TYPE = "application/vnd.schemaregistry.v1+json"
_PREFIX = "schema.registry."
# The properties the client understands, without the optional "schema.registry." prefix.
SECURITY_PROPERTIES = frozenset(
    {"basic.auth.credentials.source", "basic.auth.user.info", "ssl.ca.location",
     "ssl.certificate.location", "ssl.key.location"}
)  # fmt: skip
# Registry properties that keep their own name among Kafka client properties (Confluent's
# serializer configs spell them so); every other one there carries the prefix.
_UNPREFIXED_IN_CLIENT_CONFIG = ("basic.auth.credentials.source", "basic.auth.user.info")


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
    """Talks to the registry at ``url`` (``http(s)://host:port``); see the module docstring.

    ``config`` takes the security properties (``basic.auth.user.info``, ...); an unknown
    property is a ``ConfigError`` rather than silently ignored. As Confluent's client, it
    may also be built from one dict holding ``url`` and the rest:
    ``SchemaRegistryClient({"url": "https://…", "basic.auth.user.info": "u:p"})``.
    """

    def __init__(
        self,
        url: str | Mapping[str, str],
        *,
        timeout_s: float = 10.0,
        config: Mapping[str, str] | None = None,
    ) -> None:
        if not isinstance(url, str):
            url, config = _url_and_config(url, config)
        self.config = dict(config or {})
        self._given_url = url  # with any credentials in it, for pickling
        self.url, self._authorization = _address_and_credentials(url.rstrip("/"), self.config)
        self.timeout_s = timeout_s
        self._ssl_context = _ssl_context(self.url, self.config)
        self._lock = threading.Lock()
        self._by_id: dict[int, Any] = {}
        self._ids: dict[tuple[str, str], int] = {}

    # -- pickling: the address and options, not the caches ------------------------------

    def __getstate__(self) -> dict[str, Any]:
        return {"url": self._given_url, "timeout_s": self.timeout_s, "config": self.config}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(  # type: ignore[misc]
            state["url"], timeout_s=state["timeout_s"], config=state.get("config")
        )

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
        headers = {"Content-Type": CONTENT_TYPE, "Accept": f"{CONTENT_TYPE}, application/json"}
        if self._authorization is not None:
            headers["Authorization"] = self._authorization
        request = urllib.request.Request(self.url + path, data=data, method=method, headers=headers)
        try:
            with urllib.request.urlopen(
                request, timeout=self.timeout_s, context=self._ssl_context
            ) as response:
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


def registry_client(
    registry: SchemaRegistryClient | str | Mapping[str, str],
) -> SchemaRegistryClient:
    """A client for ``registry``: a client as is, a URL, or Confluent's config dict."""
    if isinstance(registry, SchemaRegistryClient):
        return registry
    return SchemaRegistryClient(registry)


def split_registry_properties(
    properties: Mapping[str, str],
) -> tuple[dict[str, str], dict[str, str]]:
    """(the schema registry's properties, the rest) of Kafka client ``properties``.

    The registry's are ``schema.registry.*`` (``schema.registry.url``,
    ``schema.registry.ssl.ca.location``, ...) and ``basic.auth.credentials.source`` /
    ``basic.auth.user.info``, as Confluent's serializer configs name them; they are returned
    without the prefix (``url``, ``ssl.ca.location``, ...). An unprefixed ``ssl.*`` stays a
    Kafka property: it configures the connection to the brokers.
    """
    registry: dict[str, str] = {}
    rest: dict[str, str] = {}
    for name, value in properties.items():
        if name.startswith(_PREFIX):
            registry[name.removeprefix(_PREFIX)] = value
        elif name in _UNPREFIXED_IN_CLIENT_CONFIG:
            registry[name] = value
        else:
            rest[name] = value
    return registry, rest


def _url_and_config(
    settings: Mapping[str, str], config: Mapping[str, str] | None
) -> tuple[str, dict[str, str]]:
    merged = {name.removeprefix(_PREFIX): value for name, value in settings.items()}
    merged.update(config or {})
    url = merged.pop("url", None)
    if not url:
        raise ConfigError("url", "the schema registry settings name no url (schema.registry.url)")
    if "," in url:
        # Confluent's clients take several URLs and use the first that answers; kayak's one.
        raise ConfigError("url", f"{url!r}: give one schema registry URL")
    return url, merged


def _setting(config: Mapping[str, str], name: str) -> str | None:
    """A property, spelled with or without the ``schema.registry.`` prefix."""
    value = config.get(name)
    return config.get(_PREFIX + name) if value is None else value


def _address_and_credentials(url: str, config: Mapping[str, str]) -> tuple[str, str | None]:
    """The URL without credentials, and the ``Authorization`` header value (or None)."""
    for key in config:
        if key.removeprefix(_PREFIX) not in SECURITY_PROPERTIES:
            raise ConfigError(key, "not a schema registry client property; known: "
                              + ", ".join(sorted(SECURITY_PROPERTIES)))  # fmt: skip
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ConfigError("url", f"{url!r} is not an http:// or https:// URL")
    in_url = None
    if parts.username is not None:
        in_url = f"{unquote(parts.username)}:{unquote(parts.password or '')}"
        url = urlunsplit(parts._replace(netloc=parts.netloc.rpartition("@")[2]))
    user_info = _setting(config, "basic.auth.user.info")
    default_source = "USER_INFO" if user_info is not None else "URL"
    source = (_setting(config, "basic.auth.credentials.source") or default_source).upper()
    if source == "USER_INFO":
        if user_info is None or ":" not in user_info:
            raise ConfigError(
                "basic.auth.user.info", "must be 'user:password' with credentials source USER_INFO"
            )
        credentials: str | None = user_info
    elif source == "URL":
        credentials = in_url
    else:
        raise ConfigError("basic.auth.credentials.source", f"{source!r} is not USER_INFO or URL")
    if credentials is None:
        return url, None
    return url, "Basic " + base64.b64encode(credentials.encode()).decode("ascii")


def _ssl_context(url: str, config: Mapping[str, str]) -> ssl.SSLContext | None:
    """For https: the system's trust store, or only ``ssl.ca.location``'s CAs when set; and
    a client certificate when ``ssl.certificate.location`` (and ``ssl.key.location``) name one."""
    ca = _setting(config, "ssl.ca.location")
    certificate = _setting(config, "ssl.certificate.location")
    key = _setting(config, "ssl.key.location")
    if not url.startswith("https://"):
        return None
    try:
        context = ssl.create_default_context(cafile=ca)
    except (OSError, ssl.SSLError) as exc:
        raise ConfigError("ssl.ca.location", f"cannot load {ca}: {exc}") from None
    if certificate is not None:
        try:
            context.load_cert_chain(certificate, key)
        except (OSError, ssl.SSLError) as exc:
            raise ConfigError(
                "ssl.certificate.location", f"cannot load {certificate} (key {key}): {exc}"
            ) from None
    elif key is not None:
        raise ConfigError("ssl.key.location", "needs ssl.certificate.location")
    return context


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
