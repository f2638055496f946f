"""kayak's web console: pages for topics, messages, consumer groups, the schema registry and
the cluster, served at ``/`` (``/console/``) by the broker's web server.

Server-rendered HTML (standard-library escaping, :mod:`kayak.console.html`) with one small
script (:mod:`kayak.console.assets`) for action forms and the live tail. Data comes over the
wire through kayak's own client (:mod:`kayak.console.cluster`), so the pages show what any
Kafka client would see; the registry through its REST API.

``kayak broker`` mounts it with :func:`mount_console` (handed to the broker as one of its
``web_mounts``: the broker never imports the console, which sits above it and the client).
Nothing is imported here at module level, so the pages load only when the console is mounted.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from kayak.broker.config import BrokerConfig
    from kayak.broker.web.server import WebServer


def mount_console(server: WebServer, config: BrokerConfig) -> None:
    """Serve the console from the broker's web ``server`` (before it starts): ``/`` leads to
    ``/console/``. It reaches the broker of ``config`` on one of its own listeners."""
    from kayak.console.app import mount_for_broker

    mount_for_broker(server, config)


__all__ = ["mount_console"]
