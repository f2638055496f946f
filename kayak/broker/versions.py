"""Which APIs and versions the broker advertises through ApiVersions.

The ranges follow a Kafka 3.9 broker so that clients that infer the broker's release from
them (kafka-python) land on a real one. Produce keeps min version 0 because librdkafka checks
it before compressing, although v0-2 requests are answered UNSUPPORTED_FOR_MESSAGE_FORMAT
(kayak stores magic 2 batches only). Fetch starts at 4, the first version that reads magic 2.
"""

from __future__ import annotations

from kayak.protocol.messages import ApiKey

SUPPORTED_VERSIONS: dict[int, tuple[int, int]] = {
    ApiKey.PRODUCE: (0, 11),
    ApiKey.FETCH: (4, 17),
    ApiKey.LIST_OFFSETS: (0, 9),  # v8/v9: EARLIEST_LOCAL/LATEST_TIERED (nothing is tiered)
    ApiKey.METADATA: (0, 12),
    ApiKey.OFFSET_COMMIT: (0, 9),
    ApiKey.OFFSET_FETCH: (0, 9),
    ApiKey.FIND_COORDINATOR: (0, 4),
    ApiKey.JOIN_GROUP: (0, 9),
    ApiKey.HEARTBEAT: (0, 4),
    ApiKey.LEAVE_GROUP: (0, 5),
    ApiKey.SYNC_GROUP: (0, 5),
    ApiKey.DESCRIBE_GROUPS: (0, 5),
    ApiKey.LIST_GROUPS: (0, 4),
    ApiKey.API_VERSIONS: (0, 4),
    ApiKey.CREATE_TOPICS: (0, 7),
    ApiKey.DELETE_TOPICS: (0, 6),
    ApiKey.DELETE_RECORDS: (0, 2),
    ApiKey.INIT_PRODUCER_ID: (0, 5),
    ApiKey.OFFSET_FOR_LEADER_EPOCH: (0, 4),
    ApiKey.DESCRIBE_CONFIGS: (0, 4),
    ApiKey.ALTER_CONFIGS: (0, 2),
    ApiKey.CREATE_PARTITIONS: (0, 3),
    ApiKey.DELETE_GROUPS: (0, 2),
    ApiKey.INCREMENTAL_ALTER_CONFIGS: (0, 1),
    ApiKey.OFFSET_DELETE: (0, 0),
    ApiKey.DESCRIBE_CLUSTER: (0, 1),
    ApiKey.SASL_HANDSHAKE: (0, 1),  # v0 is answered UNSUPPORTED_VERSION (unframed tokens)
    ApiKey.SASL_AUTHENTICATE: (0, 2),
    ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS: (0, 0),
    ApiKey.ALTER_USER_SCRAM_CREDENTIALS: (0, 0),
    ApiKey.DESCRIBE_CLIENT_QUOTAS: (0, 1),  # always empty: no quotas (handlers/quotas.py)
    ApiKey.DESCRIBE_ACLS: (0, 3),
    ApiKey.CREATE_ACLS: (0, 3),
    ApiKey.DELETE_ACLS: (0, 3),
    # Advertised, and answered UNSUPPORTED_VERSION as a Kafka broker without the new group
    # protocol answers (see handlers/consumer_protocol.py): a consumer with
    # group.protocol=consumer then fails at once instead of waiting in silence. v1 because
    # librdkafka sends nothing to a broker without it (Kafka 4.0 advertises 0-1).
    # Transactions as Kafka 3.9 serves them. AddPartitionsToTxn v4+ is broker to broker
    # (KIP-890 verification); EndTxn v5 and Produce v12 belong to transaction.version 2, which
    # kayak does not advertise (see kayak/broker/txn/coordinator.py).
    ApiKey.ADD_PARTITIONS_TO_TXN: (0, 5),
    ApiKey.ADD_OFFSETS_TO_TXN: (0, 4),
    ApiKey.END_TXN: (0, 4),
    ApiKey.WRITE_TXN_MARKERS: (0, 1),
    ApiKey.TXN_OFFSET_COMMIT: (0, 4),
    ApiKey.DESCRIBE_PRODUCERS: (0, 0),
    ApiKey.DESCRIBE_TRANSACTIONS: (0, 0),
    ApiKey.LIST_TRANSACTIONS: (0, 1),
    ApiKey.CONSUMER_GROUP_HEARTBEAT: (0, 1),
    ApiKey.CONSUMER_GROUP_DESCRIBE: (0, 0),
}


def is_supported(api_key: int, version: int) -> bool:
    """Whether the broker answers ``api_key`` at ``version``."""
    bounds = SUPPORTED_VERSIONS.get(api_key)
    return bounds is not None and bounds[0] <= version <= bounds[1]
