"""Request handlers: one module per API family, each a thin router from request to storage.

A handler is ``async (RequestContext, request) -> response`` (None only for acks=0 Produce).
Per-partition problems become per-partition error codes inside the handler; a
``KafkaError`` that escapes a handler is answered with a top-level error code when the
response has one.

Produce, the request a broker sees most, also has a form that runs without a task:
``(RequestContext, request, loop) -> Future[response]``, doing its work before it returns and
setting the future once the answer is ready (``ANSWERED_NOW``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

from kayak.broker.context import RequestContext
from kayak.broker.handlers import (
    acls,
    api_versions,
    cluster,
    configs,
    consumer_protocol,
    fetch,
    groups,
    offsets,
    produce,
    quotas,
    sasl,
    scram_credentials,
    topics,
    transactions,
)
from kayak.protocol.message import Message
from kayak.protocol.messages import API_MESSAGES, ApiKey, response_class

Handler = Callable[[RequestContext, Any], Awaitable[Message | None]]
ImmediateHandler = Callable[
    [RequestContext, Any, asyncio.AbstractEventLoop], "asyncio.Future[Any]"
]

HANDLERS: dict[int, Handler] = {
    ApiKey.API_VERSIONS: api_versions.handle_api_versions,
    ApiKey.METADATA: cluster.handle_metadata,
    ApiKey.DESCRIBE_CLUSTER: cluster.handle_describe_cluster,
    ApiKey.FIND_COORDINATOR: cluster.handle_find_coordinator,
    ApiKey.PRODUCE: produce.handle_produce,
    ApiKey.INIT_PRODUCER_ID: produce.handle_init_producer_id,
    ApiKey.FETCH: fetch.handle_fetch,
    ApiKey.LIST_OFFSETS: offsets.handle_list_offsets,
    ApiKey.DELETE_RECORDS: offsets.handle_delete_records,
    ApiKey.OFFSET_FOR_LEADER_EPOCH: offsets.handle_offset_for_leader_epoch,
    ApiKey.CREATE_TOPICS: topics.handle_create_topics,
    ApiKey.DELETE_TOPICS: topics.handle_delete_topics,
    ApiKey.CREATE_PARTITIONS: topics.handle_create_partitions,
    ApiKey.DESCRIBE_CONFIGS: configs.handle_describe_configs,
    ApiKey.ALTER_CONFIGS: configs.handle_alter_configs,
    ApiKey.INCREMENTAL_ALTER_CONFIGS: configs.handle_incremental_alter_configs,
    **groups.GROUP_HANDLERS,
    ApiKey.SASL_HANDSHAKE: sasl.handle_sasl_handshake,
    ApiKey.SASL_AUTHENTICATE: sasl.handle_sasl_authenticate,
    ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS: scram_credentials.handle_describe_scram_credentials,
    ApiKey.ALTER_USER_SCRAM_CREDENTIALS: scram_credentials.handle_alter_scram_credentials,
    ApiKey.DESCRIBE_CLIENT_QUOTAS: quotas.handle_describe_client_quotas,
    ApiKey.CREATE_ACLS: acls.handle_create_acls,
    ApiKey.DESCRIBE_ACLS: acls.handle_describe_acls,
    ApiKey.DELETE_ACLS: acls.handle_delete_acls,
    ApiKey.ADD_PARTITIONS_TO_TXN: transactions.handle_add_partitions_to_txn,
    ApiKey.ADD_OFFSETS_TO_TXN: transactions.handle_add_offsets_to_txn,
    ApiKey.END_TXN: transactions.handle_end_txn,
    ApiKey.TXN_OFFSET_COMMIT: transactions.handle_txn_offset_commit,
    ApiKey.WRITE_TXN_MARKERS: transactions.handle_write_txn_markers,
    ApiKey.DESCRIBE_TRANSACTIONS: transactions.handle_describe_transactions,
    ApiKey.LIST_TRANSACTIONS: transactions.handle_list_transactions,
    ApiKey.DESCRIBE_PRODUCERS: transactions.handle_describe_producers,
    ApiKey.CONSUMER_GROUP_HEARTBEAT: consumer_protocol.handle_consumer_group_heartbeat,
    ApiKey.CONSUMER_GROUP_DESCRIBE: consumer_protocol.handle_consumer_group_describe,
}

ANSWERED_NOW: dict[int, ImmediateHandler] = {
    ApiKey.PRODUCE: produce.answer_produce,
}


def error_response(api_key: int, version: int, code: int) -> Message | None:
    """A response carrying ``code`` at top level, if this API's response has such a field."""
    if api_key not in API_MESSAGES:
        return None
    cls = response_class(api_key)
    if not cls.MIN_VERSION <= version <= cls.MAX_VERSION:
        return None
    response = cls()
    if not hasattr(response, "error_code"):
        return None
    response.error_code = code
    return response


def unsupported_version_response(api_key: int, version: int) -> Message | None:
    """UNSUPPORTED_VERSION for an API or version the broker does not serve.

    ApiVersions is answered at v0 with the broker's table so the client can renegotiate.
    """
    if api_key == ApiKey.API_VERSIONS:
        return api_versions.supported_versions_response(error_code=35)
    return error_response(api_key, version, 35)
