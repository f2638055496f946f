"""The blocking ``Admin``: :class:`kayak.client.admin.Admin` on the shared loop."""

from __future__ import annotations

from collections.abc import Mapping

from kayak.client.admin import Admin as AsyncAdmin
from kayak.client.config import AdminConfig
from kayak.client.sync.facade import SyncFacade
from kayak.client.sync.forwarding import blocking, on_loop

__all__ = ["Admin"]


class Admin(SyncFacade[AsyncAdmin]):
    """Blocking ``kayak.client.admin.Admin``, connected when constructed: same methods and
    arguments, results returned."""

    def __init__(
        self, config: AdminConfig | Mapping[str, object] | None = None, /, **kwargs: object
    ) -> None:
        super().__init__(lambda: AsyncAdmin(config, **kwargs), start=True)

    create_topics = blocking(AsyncAdmin.create_topics)
    delete_topics = blocking(AsyncAdmin.delete_topics)
    create_partitions = blocking(AsyncAdmin.create_partitions)
    list_topics = blocking(AsyncAdmin.list_topics)
    describe_topics = blocking(AsyncAdmin.describe_topics)
    describe_cluster = blocking(AsyncAdmin.describe_cluster)
    list_groups = blocking(AsyncAdmin.list_groups)
    describe_groups = blocking(AsyncAdmin.describe_groups)
    delete_groups = blocking(AsyncAdmin.delete_groups)
    list_group_offsets = blocking(AsyncAdmin.list_group_offsets)
    group_lag = blocking(AsyncAdmin.group_lag)
    list_offsets = blocking(AsyncAdmin.list_offsets)
    delete_records = blocking(AsyncAdmin.delete_records)
    describe_configs = blocking(AsyncAdmin.describe_configs)
    alter_configs = blocking(AsyncAdmin.alter_configs)
    statistics = on_loop(AsyncAdmin.statistics)
