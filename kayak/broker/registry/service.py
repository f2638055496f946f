"""The schema registry as a broker extension: the store on ``_schemas`` behind HTTP(S)."""

from __future__ import annotations

import logging
from collections.abc import Sequence

from kayak.broker.catalog import TopicCatalog
from kayak.broker.config import BrokerConfig
from kayak.broker.log import LogWriter
from kayak.broker.registry.store import SchemaStore
from kayak.broker.security.credentials import CredentialStore
from kayak.broker.security.login_limiter import LoginLimiter
from kayak.broker.web import PasswordVerifier, WebMount, WebServer, broker_web_server
from kayak.registry.api import CONTENT_TYPE, REQUEST_MEDIA_TYPES, SchemaRegistryApi

log = logging.getLogger(__name__)


class SchemaRegistry:
    """Replays ``_schemas`` and serves the REST API on ``host:port`` (0: an ephemeral port).

    Changes are written through the broker's ``writer``, waiting for the disk whatever
    ``--flush`` says: a registration is answered only once it is on disk and readable.

    ``config`` says how it is secured (``schema_registry_tls``, ``registry_auth_required``,
    ``schema_registry_writers``, ``super_users``); ``credentials`` are the broker's SASL
    users, against which HTTP basic authentication is checked (when not given and
    authentication is on, the store of ``config.data_dir`` is opened); ``limiter`` is the
    broker's failed-login limiter, so that HTTP is no way around the SASL one;
    ``web_mounts`` add what else its web server serves (the CLI's web console).
    """

    def __init__(
        self,
        catalog: TopicCatalog,
        writer: LogWriter,
        host: str,
        port: int,
        *,
        config: BrokerConfig | None = None,
        credentials: PasswordVerifier | None = None,
        limiter: LoginLimiter | None = None,
        web_mounts: Sequence[WebMount] = (),
    ) -> None:
        self._catalog = catalog
        self._web_mounts = tuple(web_mounts)
        self._host = host
        self._port = port
        self._config = config or BrokerConfig()
        self._credentials = credentials
        self._limiter = limiter
        self._writer = writer
        self._web: WebServer | None = None
        self.store: SchemaStore | None = None

    async def start(self) -> None:
        try:
            self.store = SchemaStore.open(self._catalog, self._writer)
            await self.store.secure_ids()  # before the log cleaner may drop an id's last trace
            credentials = self._credentials
            if credentials is None and self._config.registry_auth_required:
                credentials = CredentialStore.open(self._config.data_dir)
            web = broker_web_server(
                self._config, self._host, self._port, credentials,
                body_media_types=REQUEST_MEDIA_TYPES, error_content_type=CONTENT_TYPE,
                limiter=self._limiter, mounts=self._web_mounts,
            )  # fmt: skip
            web.add_routes(SchemaRegistryApi(self.store).routes())
            await web.start()
            self._web = web
        except BaseException:
            self._web = None
            raise

    async def stop(self) -> None:
        if self._web is not None:
            await self._web.stop()
            self._web = None

    @property
    def url(self) -> str:
        """``http://host:port``, or ``https://`` when served with TLS."""
        assert self._web is not None, "the schema registry is not running"
        return self._web.url
