"""The schema registry as a broker extension: the store on ``_schemas`` behind HTTP."""

from __future__ import annotations

import logging

from kayak.broker.catalog import TopicCatalog
from kayak.broker.log import FlushMode, GroupCommit
from kayak.broker.registry.api import SchemaRegistryApi
from kayak.broker.registry.http import HttpServer
from kayak.broker.registry.store import SchemaStore

log = logging.getLogger(__name__)


class SchemaRegistry:
    """Replays ``_schemas`` and serves the REST API on ``host:port`` (0: an ephemeral port)."""

    def __init__(self, catalog: TopicCatalog, host: str, port: int) -> None:
        self._catalog = catalog
        self._host = host
        self._port = port
        # Its own group commit, always fsyncing: a registration is answered only once it is
        # on disk, whatever --flush says about produced records.
        self._commit = GroupCommit(FlushMode.GROUP)
        self._http: HttpServer | None = None
        self.store: SchemaStore | None = None

    async def start(self) -> None:
        try:
            self.store = SchemaStore.open(self._catalog, self._commit)
            self._http = HttpServer(SchemaRegistryApi(self.store).handle, self._host, self._port)
            await self._http.start()
        except BaseException:
            self._http = None
            self._commit.close()
            raise

    async def stop(self) -> None:
        if self._http is not None:
            await self._http.stop()
            self._http = None
        self._commit.close()

    @property
    def url(self) -> str:
        assert self._http is not None, "the schema registry is not running"
        return f"http://{self._http.host}:{self._http.port}"
