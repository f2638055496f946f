"""The standalone schema registry: ``_schemas`` in any Kafka cluster, the REST API on its own.

``store``: :class:`~kayak.registry.cluster.store.ClusterSchemaStore`, the registry's state in
the cluster's ``_schemas`` topic through kayak's client; ``server``:
:class:`~kayak.registry.cluster.server.StandaloneRegistry`, that store behind the REST API on
its own aiohttp server (``kayak registry``). Import them from those modules: this package
imports nothing, so ``kayak.registry`` never pulls in the client.
"""
