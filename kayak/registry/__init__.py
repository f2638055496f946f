"""The Confluent-compatible schema registry (AVRO schemas), wherever its state is kept.

``schema``: validation and identity; ``compatibility``: Avro schema resolution and the
compatibility levels; ``errors``: Confluent's error answers; ``store``: the state and the
``_schemas`` records it is made of; ``api``: the REST routes. The broker serves them with its
own log as the store (:mod:`kayak.broker.registry`); :mod:`kayak.registry.cluster` runs them
on their own against any Kafka cluster (``kayak registry``).
"""
