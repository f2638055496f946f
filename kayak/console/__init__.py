"""kayak's web console: pages for topics, messages, consumer groups, the schema registry and
the cluster, served at ``/`` (``/console/``) by the broker's web server.

Server-rendered HTML (standard-library escaping, :mod:`kayak.console.html`) with one small
script (:mod:`kayak.console.assets`) for action forms and the live tail. Data comes over the
wire through kayak's own client (:mod:`kayak.console.cluster`), so the pages show what any
Kafka client would see; the registry through its REST API.

The broker mounts it with :func:`mount_console`. Nothing is imported here at module level:
the broker's web package imports this one, and the console's modules import the client and
parts of the broker, so they load only when the console is mounted.
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
