"""kayak's embedded single-node broker.

``async with Broker(data_dir, port=0) as broker: broker.bootstrap_servers``

- :mod:`kayak.broker.log`: segmented partition logs, knowing nothing of the network.
- :mod:`kayak.broker.group`: the group coordinator, knowing nothing of sockets either.
- :mod:`kayak.broker.handlers`: one module per API family, request in, response out.
- :mod:`kayak.broker.connection`: one client connection (ordered responses, sendfile).
- :mod:`kayak.broker.server`: :class:`Broker`, which ties them together.

``Broker`` and ``BrokerConfig`` load on first use: whoever reads a log (``kayak log dump``,
the pipeline's tools) imports :mod:`kayak.broker.log` without the network half.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from kayak.broker.config import BrokerConfig
    from kayak.broker.server import Broker

__all__ = ["Broker", "BrokerConfig"]


def __getattr__(name: str) -> Any:
    if name == "Broker":
        from kayak.broker.server import Broker

        return Broker
    if name == "BrokerConfig":
        from kayak.broker.config import BrokerConfig

        return BrokerConfig
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
