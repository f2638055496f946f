"""Topic and cluster administration: CreateTopics, DeleteTopics, CreatePartitions (sent to the
controller), Metadata and DescribeCluster (any broker).

A controller acknowledges a new topic (or new partitions) once it has recorded them; in a KRaft
Apache Kafka the brokers learn of it from the metadata log a moment later, and until then
answer that the topic does not exist. So creating topics or partitions returns once the
broker's metadata shows them, and the next call (list_offsets, describe_configs, a producer)
finds them; deleting topics returns once metadata no longer lists them: read your own writes.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Collection, Mapping
from functools import partial

from kayak.client.admin._core import TOPIC_RETRY, AdminCore, Outcome, Target, item_error
from kayak.client.admin._routes import controller, describe_cluster_response
from kayak.client.admin.models import (
    BrokerDescription,
    ClusterDescription,
    CreatedTopic,
    NewTopic,
    PartitionDescription,
    TopicDescription,
)
from kayak.client.backoff import Deadline
from kayak.client.cluster import METADATA_MAX_VERSION
from kayak.client.connection import BrokerConnection
from kayak.errors import ErrorCode, KayakError, UnsupportedVersionError, raise_for_code
from kayak.protocol.messages import (
    CreatePartitionsRequest,
    CreateTopicsRequest,
    DeleteTopicsRequest,
    MetadataRequest,
)
from kayak.protocol.messages.create_partitions_request import CreatePartitionsTopic
from kayak.protocol.messages.create_partitions_response import CreatePartitionsResponse
from kayak.protocol.messages.create_topics_request import CreatableTopic, CreatableTopicConfig
from kayak.protocol.messages.create_topics_response import (
    CreatableTopicResult,
    CreateTopicsResponse,
)
from kayak.protocol.messages.delete_topics_request import DeleteTopicState
from kayak.protocol.messages.delete_topics_response import DeleteTopicsResponse
from kayak.protocol.messages.metadata_request import MetadataRequestTopic
from kayak.protocol.messages.metadata_response import MetadataResponse, MetadataResponseTopic
from kayak.protocol.primitives import ZERO_UUID

log = logging.getLogger(__name__)

_LEGAL_TOPIC = re.compile(r"[a-zA-Z0-9._-]+")
_MAX_TOPIC_LENGTH = 249
_DEFAULTS_VERSION = 4  # CreateTopics v4+ takes -1 for "the broker's default"
_DELETE_BY_STATE = 6  # DeleteTopics v6+ names topics in `topics`, not `topic_names`


def topic_name_problem(name: str) -> str | None:
    """Why ``name`` cannot be a Kafka topic name, or None if it can."""
    if not name:
        return "a topic name cannot be empty"
    if name in (".", ".."):
        return f"{name!r} is not allowed as a topic name"
    if len(name) > _MAX_TOPIC_LENGTH:
        return f"a topic name is at most {_MAX_TOPIC_LENGTH} characters, not {len(name)}"
    if not _LEGAL_TOPIC.fullmatch(name):
        return f"{name!r} has characters other than ASCII letters, digits, '.', '_' and '-'"
    return None


def _timeout_ms(core: AdminCore, deadline: Deadline) -> int:
    """The server-side timeout a request carries: what is left of the client's patience."""
    return int(core.request_timeout(deadline) * 1000)


async def _to_controller(
    core: AdminCore, items: list[str], deadline: Deadline
) -> dict[str, Target]:
    node = await controller(core, deadline)
    return dict.fromkeys(items, node)


# -- CreateTopics ------------------------------------------------------------------------


async def create_topics(
    core: AdminCore, topics: Collection[NewTopic], validate_only: bool, deadline: Deadline
) -> Outcome[str, CreatedTopic]:
    wanted = {t.name: t for t in topics}
    outcome: Outcome[str, CreatedTopic] = {}
    for name in wanted:
        problem = topic_name_problem(name)
        if problem is not None:
            outcome[name] = item_error(ErrorCode.INVALID_TOPIC_EXCEPTION, name, problem)
    valid = [name for name in wanted if name not in outcome]
    outcome.update(
        await core.run(
            valid,
            route=partial(_to_controller, core, deadline=deadline),
            send=partial(_send_create_topics, core, wanted, validate_only),
            retry=TOPIC_RETRY,
            deadline=deadline,
            what="create topics",
        )
    )
    if not validate_only:
        created = {n: r.num_partitions for n, r in outcome.items() if isinstance(r, CreatedTopic)}
        await await_partitions(core, created, deadline)
    return {name: outcome[name] for name in wanted}


# Metadata errors of a topic the broker has not caught up with yet.
_NOT_YET = frozenset({ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, ErrorCode.LEADER_NOT_AVAILABLE})


async def await_partitions(core: AdminCore, counts: Mapping[str, int], deadline: Deadline) -> None:
    """Wait until the broker's metadata shows each topic with at least ``counts[topic]``
    partitions (-1: any), each with a leader (see the module docstring).

    Never fails: the topics were created whatever the broker says now. Waiting stops at the
    deadline, or for a topic whose metadata error waiting will not clear (not authorized).
    """
    await _await_metadata(core, counts, lambda t: _shows(t, counts[t.name or ""]), deadline)


async def await_deleted(core: AdminCore, names: Collection[str], deadline: Deadline) -> None:
    """Wait until the broker's metadata no longer shows the deleted ``names`` (the other half
    of read-your-writes: a list_topics right after delete_topics must not list them).

    Never fails, like :func:`await_partitions`: the topics are deleted whatever metadata says.
    """
    await _await_metadata(core, names, _gone, deadline)


async def _await_metadata(
    core: AdminCore,
    names: Collection[str],
    settled: Callable[[MetadataResponseTopic], bool],
    deadline: Deadline,
) -> None:
    """Ask for ``names``' metadata until each topic is ``settled``, or the deadline passes."""
    waiting = set(names)
    attempt = 0
    while waiting and not deadline.expired:
        try:
            response = await metadata(core, sorted(waiting), deadline)
        except KayakError as exc:
            log.debug("not waiting for metadata of %s: %s", sorted(waiting), exc)
            return
        waiting -= {t.name for t in response.topics if t.name in waiting and settled(t)}
        if waiting:
            await core.pause(attempt, deadline)
            attempt += 1
    if waiting:
        log.debug("the broker's metadata has not caught up with %s", sorted(waiting))


def _shows(topic: MetadataResponseTopic, count: int) -> bool:
    """True if ``topic`` is there with ``count`` partitions (or an error waiting won't fix)."""
    if topic.error_code:
        return topic.error_code not in _NOT_YET
    led = [p for p in topic.partitions if p.leader_id >= 0 and p.error_code not in _NOT_YET]
    return len(led) == len(topic.partitions) and len(led) >= max(count, 1)


async def _send_create_topics(
    core: AdminCore,
    wanted: Mapping[str, NewTopic],
    validate_only: bool,
    connection: BrokerConnection,
    names: list[str],
    deadline: Deadline,
) -> Outcome[str, CreatedTopic]:
    version = connection.version_for(CreateTopicsRequest)
    outcome: Outcome[str, CreatedTopic] = {}
    creatable = []
    for name in names:
        topic = wanted[name]
        if version < _DEFAULTS_VERSION and -1 in (topic.num_partitions, topic.replication_factor):
            outcome[name] = UnsupportedVersionError(
                f"{name}: the broker needs explicit partitions and replication factor "
                "(CreateTopics before v4 has no broker defaults)"
            )
            continue
        creatable.append(_creatable(topic))
    if not creatable:
        return outcome
    request = CreateTopicsRequest(
        topics=creatable, timeout_ms=_timeout_ms(core, deadline), validate_only=validate_only
    )
    response: CreateTopicsResponse = await core.request(connection, request, deadline, version)
    for result in response.topics:
        outcome[result.name] = _created(result)
    return outcome


def _creatable(topic: NewTopic) -> CreatableTopic:
    return CreatableTopic(
        name=topic.name,
        num_partitions=topic.num_partitions,
        replication_factor=topic.replication_factor,
        configs=[CreatableTopicConfig(k, str(v)) for k, v in topic.configs.items()],
    )


def _created(result: CreatableTopicResult) -> CreatedTopic | KayakError:
    if result.error_code:
        return item_error(result.error_code, result.name, result.error_message)
    return CreatedTopic(
        result.name, result.topic_id, result.num_partitions, result.replication_factor
    )


# -- DeleteTopics ------------------------------------------------------------------------


async def delete_topics(
    core: AdminCore, names: Collection[str], deadline: Deadline
) -> Outcome[str, None]:
    outcome = await core.run(
        names,
        route=partial(_to_controller, core, deadline=deadline),
        send=partial(_send_delete_topics, core),
        retry=TOPIC_RETRY,
        deadline=deadline,
        what="delete topics",
    )
    deleted = [name for name, result in outcome.items() if result is None]
    await await_deleted(core, deleted, deadline)
    return outcome


def _gone(topic: MetadataResponseTopic) -> bool:
    return topic.error_code not in (0, ErrorCode.LEADER_NOT_AVAILABLE)


async def _send_delete_topics(
    core: AdminCore, connection: BrokerConnection, names: list[str], deadline: Deadline
) -> Outcome[str, None]:
    version = connection.version_for(DeleteTopicsRequest)
    request = DeleteTopicsRequest(timeout_ms=_timeout_ms(core, deadline))
    if version >= _DELETE_BY_STATE:
        request.topics = [DeleteTopicState(name=name) for name in names]
    else:
        request.topic_names = list(names)
    response: DeleteTopicsResponse = await core.request(connection, request, deadline, version)
    outcome: Outcome[str, None] = {}
    for result in response.responses:
        if result.name is None:
            continue
        outcome[result.name] = (
            topic_error(result.error_code, result.name, result.error_message)
            if result.error_code
            else None
        )
    return outcome


# -- CreatePartitions --------------------------------------------------------------------


async def create_partitions(
    core: AdminCore, totals: Mapping[str, int], validate_only: bool, deadline: Deadline
) -> Outcome[str, None]:
    outcome: Outcome[str, None] = await core.run(
        totals,
        route=partial(_to_controller, core, deadline=deadline),
        send=partial(_send_create_partitions, core, totals, validate_only),
        retry=TOPIC_RETRY,
        deadline=deadline,
        what="create partitions",
    )
    if not validate_only:
        grown = {name: totals[name] for name, error in outcome.items() if error is None}
        await await_partitions(core, grown, deadline)
    return outcome


async def _send_create_partitions(
    core: AdminCore,
    totals: Mapping[str, int],
    validate_only: bool,
    connection: BrokerConnection,
    names: list[str],
    deadline: Deadline,
) -> Outcome[str, None]:
    request = CreatePartitionsRequest(
        topics=[CreatePartitionsTopic(name=n, count=totals[n], assignments=None) for n in names],
        timeout_ms=_timeout_ms(core, deadline),
        validate_only=validate_only,
    )
    response: CreatePartitionsResponse = await core.request(connection, request, deadline)
    return {
        r.name: topic_error(r.error_code, r.name, r.error_message) if r.error_code else None
        for r in response.results
    }


# -- Metadata: list and describe topics --------------------------------------------------


async def metadata(
    core: AdminCore, names: list[str] | None, deadline: Deadline
) -> MetadataResponse:
    """A Metadata answer for ``names`` (None: every topic) from any broker, with retries."""

    async def send(connection: BrokerConnection, deadline: Deadline) -> MetadataResponse:
        version = connection.version_for(MetadataRequest, METADATA_MAX_VERSION)
        topics = None if names is None else [MetadataRequestTopic(name=n) for n in names]
        if topics is None and version == 0:
            topics = []  # v0: an empty list means every topic
        request = MetadataRequest(topics=topics, allow_auto_topic_creation=False)
        response: MetadataResponse = await core.request(connection, request, deadline, version)
        return response

    return await core.single(send, deadline, "fetch metadata")


def no_such_topic(name: str) -> KayakError:
    return item_error(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, name, "topic does not exist")


def topic_error(code: int, name: str, message: str | None) -> KayakError:
    """A per-topic error; UNKNOWN_TOPIC_OR_PARTITION without a message says so plainly."""
    if code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION and not message:
        return no_such_topic(name)
    return item_error(code, name, message)


def describe_topic(topic: MetadataResponseTopic) -> TopicDescription | KayakError:
    """A TopicDescription from one topic of a Metadata response (or its error)."""
    name = topic.name or str(topic.topic_id)
    if topic.error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION:
        return no_such_topic(name)
    if topic.error_code:
        return item_error(topic.error_code, name)
    partitions = tuple(
        PartitionDescription(
            partition=p.partition_index,
            leader=p.leader_id,
            leader_epoch=p.leader_epoch,
            replicas=tuple(p.replica_nodes),
            isr=tuple(p.isr_nodes),
            offline_replicas=tuple(p.offline_replicas),
        )
        for p in sorted(topic.partitions, key=lambda p: p.partition_index)
    )
    topic_id = topic.topic_id if topic.topic_id is not None else ZERO_UUID
    return TopicDescription(name, topic_id, topic.is_internal, partitions)


async def describe_cluster(core: AdminCore, deadline: Deadline) -> ClusterDescription:
    """DescribeCluster where the broker has it, else the same from Metadata."""

    async def send(connection: BrokerConnection, deadline: Deadline) -> ClusterDescription:
        response = await describe_cluster_response(core, connection, deadline)
        if response is None:
            return await _cluster_from_metadata(core, connection, deadline)
        raise_for_code(response.error_code, response.error_message)
        brokers = tuple(
            BrokerDescription(b.broker_id, b.host, b.port, b.rack) for b in response.brokers
        )
        return ClusterDescription(response.cluster_id, response.controller_id, brokers)

    description = await core.single(send, deadline, "describe cluster")
    core.controller_id = description.controller_id
    return description


async def _cluster_from_metadata(
    core: AdminCore, connection: BrokerConnection, deadline: Deadline
) -> ClusterDescription:
    version = connection.version_for(MetadataRequest, METADATA_MAX_VERSION)
    # v1+: an empty list asks for no topics; v0 has no way but to name one that is not there.
    none = [MetadataRequestTopic(name="__kayak_none__")] if version == 0 else []
    request = MetadataRequest(topics=none, allow_auto_topic_creation=False)
    response: MetadataResponse = await core.request(connection, request, deadline, version)
    brokers = tuple(BrokerDescription(b.node_id, b.host, b.port, b.rack) for b in response.brokers)
    return ClusterDescription(response.cluster_id, response.controller_id, brokers)
