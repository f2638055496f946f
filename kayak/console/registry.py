"""The schema registry as the console sees it: its documented REST API, over HTTP.

The console asks the registry on its own web server (or any Confluent-compatible registry
URL) with the user's own ``Authorization`` header, so the registry's authentication and
roles decide what the user sees. Schemas by id never change: they are cached for good.
"""

from __future__ import annotations

import json
import logging
import ssl
from collections.abc import Callable
from typing import Any
from urllib.parse import quote

import aiohttp

from kayak.errors import KayakError

log = logging.getLogger(__name__)

TIMEOUT_S = 10.0
MAX_CACHED_SCHEMAS = 4096


class RegistryUnavailableError(KayakError):
    """The registry could not be asked, or refused (its status and message)."""

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


class RegistryAccess:
    """GETs against the registry at ``base_url()`` (a callable: the web server's own URL is
    known only once it is listening)."""

    def __init__(
        self, base_url: Callable[[], str | None], ssl_context: ssl.SSLContext | None = None
    ) -> None:
        self._base_url = base_url
        self._ssl: ssl.SSLContext | bool = ssl_context if ssl_context is not None else True
        self._session: aiohttp.ClientSession | None = None
        self._schemas: dict[int, Any] = {}

    @property
    def available(self) -> bool:
        return self._base_url() is not None

    async def get(self, path: str, authorization: str | None) -> Any:
        """The JSON answer to ``GET path``; RegistryUnavailableError otherwise."""
        base = self._base_url()
        if base is None:
            raise RegistryUnavailableError("this broker serves no schema registry")
        if self._session is None:
            self._session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=TIMEOUT_S))
        headers = {"Accept": "application/vnd.schemaregistry.v1+json, application/json"}
        if authorization:
            headers["Authorization"] = authorization
        try:
            async with self._session.get(base + path, headers=headers, ssl=self._ssl) as answer:
                text = await answer.text()
                status = answer.status
        except (aiohttp.ClientError, TimeoutError) as exc:
            raise RegistryUnavailableError(f"the schema registry at {base}: {exc}") from exc
        try:
            document = json.loads(text)
        except ValueError:
            document = None
        if status >= 400:
            message = document.get("message") if isinstance(document, dict) else None
            raise RegistryUnavailableError(str(message or f"HTTP {status}"), status)
        return document

    async def subjects(self, authorization: str | None) -> list[str]:
        return sorted(await self.get("/subjects", authorization))

    async def versions(self, subject: str, authorization: str | None) -> list[int]:
        return sorted(await self.get(f"/subjects/{_segment(subject)}/versions", authorization))

    async def version(self, subject: str, version: int, authorization: str | None) -> Any:
        return await self.get(f"/subjects/{_segment(subject)}/versions/{version}", authorization)

    async def compatibility(self, subject: str | None, authorization: str | None) -> str:
        """The subject's level (the global one when it has none), or the global level."""
        path = "/config" if subject is None else f"/config/{_segment(subject)}?defaultToGlobal=true"
        document = await self.get(path, authorization)
        return str(document.get("compatibilityLevel") or document.get("compatibility") or "?")

    async def schema_by_id(self, schema_id: int, authorization: str | None) -> Any:
        """The schema (parsed JSON) registered under ``schema_id``."""
        cached = self._schemas.get(schema_id)
        if cached is not None:
            return cached
        document = await self.get(f"/schemas/ids/{schema_id}", authorization)
        schema = json.loads(document["schema"])
        if len(self._schemas) >= MAX_CACHED_SCHEMAS:
            self._schemas.clear()
        self._schemas[schema_id] = schema
        return schema

    async def close(self) -> None:
        if self._session is not None:
            session, self._session = self._session, None
            await session.close()


def _segment(value: str) -> str:
    return quote(value, safe="")
