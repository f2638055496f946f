"""kayak's embedded single-node broker.

``async with Broker(data_dir, port=0) as broker: broker.bootstrap_servers``

- :mod:`kayak.broker.log`: segmented partition logs, knowing nothing of the network.
- :mod:`kayak.broker.group`: the group coordinator, knowing nothing of sockets either.
- :mod:`kayak.broker.handlers`: one module per API family, request in, response out.
- :mod:`kayak.broker.connection`: one client connection (ordered responses, sendfile).
- :mod:`kayak.broker.server`: :class:`Broker`, which ties them together.
"""

from __future__ import annotations

from kayak.broker.config import BrokerConfig
from kayak.broker.server import Broker

__all__ = ["Broker", "BrokerConfig"]
