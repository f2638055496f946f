"""kayak's one exception hierarchy.

::

    KayakError                      root of everything kayak raises
    ├── ProtocolError               local encode/decode failures; never sent on the wire
    │   ├── EncodeError             (also a ValueError)
    │   ├── MalformedMessageError
    │   └── FrameTooLargeError
    ├── ConfigError                 bad client/broker configuration (also a ValueError)
    ├── KafkaTimeoutError           a client-side deadline passed (retriable)
    ├── SslAuthenticationError      the TLS handshake with a broker failed (not retriable)
    ├── SchemaRegistryError         a schema registry refused a request or cannot be reached
    ├── SerializationError          bytes that are not a value of their schema, or vice versa
    ├── TransactionAbortRequiredError  the transaction failed: abort_transaction(), then retry
    ├── TransactionAbortedError     a record's transaction was aborted before it was stored
    └── KafkaError                  an error that has a Kafka error code
        ├── UnknownServerError      UNKNOWN_SERVER_ERROR (-1); also the base of the classes
        │                           made on the fly for codes this module does not know
        ├── OffsetOutOfRangeError   OFFSET_OUT_OF_RANGE (1)
        └── ...                     one class per code up to SHARE_SESSION_LIMIT_REACHED (133)

Every ``KafkaError`` subclass carries ``code``, ``error_name`` (the protocol's UPPER_CASE
name), ``error_class`` (how a client should react: ``RETRIABLE``, ``REFRESH_METADATA`` or
``FATAL``) and ``default_message``. ``ErrorCode`` is the table of codes and names,
``error_for_code`` / ``raise_for_code`` go from a code on the wire to an exception, and the
``code`` attribute of an exception goes back.

Class names are Java's exception names with ``Exception`` turned into ``Error``, except that the
authorization and authentication failures keep the protocol's ``...FailedError`` wording, the
sequence-number errors keep ``SequenceNumber``, and REQUEST_TIMED_OUT is ``RequestTimedOutError``
(Java's ``TimeoutException`` would read like the client-side ``KafkaTimeoutError``).
"""

from __future__ import annotations

import functools
from enum import Enum, IntEnum
from typing import Any, ClassVar


class KayakError(Exception):
    """Root of every exception kayak raises."""


class ProtocolError(KayakError):
    """Bytes that cannot be turned into messages, or messages that cannot be turned into bytes."""


class EncodeError(ProtocolError, ValueError):
    """A message or value cannot be encoded (out of range, null where not nullable, ...)."""


class MalformedMessageError(ProtocolError):
    """A request or response body is truncated or self-contradictory."""


class FrameTooLargeError(ProtocolError):
    """A frame's size prefix exceeds the configured limit (checked before buffering)."""


class ConfigError(KayakError, ValueError):
    """A client or broker configuration property has a value kayak cannot use."""

    def __init__(self, name: str, message: str) -> None:
        super().__init__(name, message)
        self.name = name
        self.message = message

    def __str__(self) -> str:
        return f"invalid configuration {self.name!r}: {self.message}"


class KafkaTimeoutError(KayakError):
    """A client-side deadline passed (waiting for metadata, an ack, a buffer slot, ...).

    Like Java's ``TimeoutException`` this is retriable: nothing is known to have failed.
    """

    retriable: ClassVar[bool] = True
    invalid_metadata: ClassVar[bool] = False


class SslAuthenticationError(KayakError):
    """The TLS handshake with a broker failed: its certificate is not trusted or not for
    the host name connected to, ours was refused, or the broker does not speak TLS there.

    Like Java's ``SslAuthenticationException`` this is not retriable: connecting again gives
    the same answer. The message names the broker and the reason.
    """

    retriable: ClassVar[bool] = False
    invalid_metadata: ClassVar[bool] = False


class SchemaRegistryError(KayakError):
    """A schema registry answered with an error, or could not be reached at all.

    ``http_status`` and ``error_code`` are the registry's (Confluent's codes, e.g. 40401
    subject not found, 409 incompatible); both are None when no answer arrived.
    """

    def __init__(
        self, message: str, *, http_status: int | None = None, error_code: int | None = None
    ) -> None:
        super().__init__(message)
        self.message = message
        self.http_status = http_status
        self.error_code = error_code

    def __str__(self) -> str:
        if self.error_code is None:
            return self.message
        return f"{self.message} (error code {self.error_code}, HTTP {self.http_status})"

    def __reduce__(self) -> tuple[Any, ...]:
        # Keyword-only fields are not in ``args``: pickle them explicitly (Spark ships errors).
        return (_rebuild_registry_error, (self.message, self.http_status, self.error_code))


def _rebuild_registry_error(
    message: str, http_status: int | None, error_code: int | None
) -> SchemaRegistryError:
    return SchemaRegistryError(message, http_status=http_status, error_code=error_code)


class SerializationError(KayakError, ValueError):
    """A value cannot be encoded with its schema, or bytes cannot be decoded (no magic byte,
    truncated, unknown schema id, a body that does not match the writer schema)."""


class TransactionAbortRequiredError(KayakError):
    """The producer's current transaction cannot commit: call ``abort_transaction()``, then
    begin a new one (Kafka's *abortable* errors; confluent-kafka's ``txn_requires_abort()``).

    ``cause`` (also ``__cause__``) is what went wrong: a record that could not be delivered
    (``TopicAuthorizationFailedError``, a ``KafkaTimeoutError`` past ``delivery.timeout.ms``,
    ...), a partition or group the coordinator would not add, a group that moved on under
    ``send_offsets_to_transaction``, or the broker's TRANSACTION_ABORTABLE (120). Every
    transactional call but ``abort_transaction()`` raises it again until the abort.

    Errors a transactional producer cannot recover from (Kafka's *fatal* errors) are raised as
    themselves instead, every call after them raising the same: ``ProducerFencedError`` (another
    producer took the transactional id), ``TransactionalIdAuthorizationFailedError``,
    ``UnsupportedVersionError``/``UnsupportedForMessageFormatError``, ``InvalidTxnStateError``
    from the coordinator: close the producer.
    """

    def __init__(self, message: str, cause: BaseException | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.cause = cause
        self.__cause__ = cause

    def __reduce__(self) -> tuple[Any, ...]:
        return (TransactionAbortRequiredError, (self.message, self.cause))


class TransactionAbortedError(KayakError):
    """A record's future: its transaction was aborted (or failed) before the record was
    stored, so it was never sent (Java's ``TransactionAbortedException``)."""


class ErrorClass(Enum):
    """How a client should react to an error."""

    RETRIABLE = "retriable"
    REFRESH_METADATA = "refresh_metadata"
    FATAL = "fatal"


class ErrorCode(IntEnum):
    """Every error code of the Kafka protocol guide (Kafka 4.1), with the guide's names."""

    UNKNOWN_SERVER_ERROR = -1
    NONE = 0
    OFFSET_OUT_OF_RANGE = 1
    CORRUPT_MESSAGE = 2
    UNKNOWN_TOPIC_OR_PARTITION = 3
    INVALID_FETCH_SIZE = 4
    LEADER_NOT_AVAILABLE = 5
    NOT_LEADER_OR_FOLLOWER = 6
    REQUEST_TIMED_OUT = 7
    BROKER_NOT_AVAILABLE = 8
    REPLICA_NOT_AVAILABLE = 9
    MESSAGE_TOO_LARGE = 10
    STALE_CONTROLLER_EPOCH = 11
    OFFSET_METADATA_TOO_LARGE = 12
    NETWORK_EXCEPTION = 13
    COORDINATOR_LOAD_IN_PROGRESS = 14
    COORDINATOR_NOT_AVAILABLE = 15
    NOT_COORDINATOR = 16
    INVALID_TOPIC_EXCEPTION = 17
    RECORD_LIST_TOO_LARGE = 18
    NOT_ENOUGH_REPLICAS = 19
    NOT_ENOUGH_REPLICAS_AFTER_APPEND = 20
    INVALID_REQUIRED_ACKS = 21
    ILLEGAL_GENERATION = 22
    INCONSISTENT_GROUP_PROTOCOL = 23
    INVALID_GROUP_ID = 24
    UNKNOWN_MEMBER_ID = 25
    INVALID_SESSION_TIMEOUT = 26
    REBALANCE_IN_PROGRESS = 27
    INVALID_COMMIT_OFFSET_SIZE = 28
    TOPIC_AUTHORIZATION_FAILED = 29
    GROUP_AUTHORIZATION_FAILED = 30
    CLUSTER_AUTHORIZATION_FAILED = 31
    INVALID_TIMESTAMP = 32
    UNSUPPORTED_SASL_MECHANISM = 33
    ILLEGAL_SASL_STATE = 34
    UNSUPPORTED_VERSION = 35
    TOPIC_ALREADY_EXISTS = 36
    INVALID_PARTITIONS = 37
    INVALID_REPLICATION_FACTOR = 38
    INVALID_REPLICA_ASSIGNMENT = 39
    INVALID_CONFIG = 40
    NOT_CONTROLLER = 41
    INVALID_REQUEST = 42
    UNSUPPORTED_FOR_MESSAGE_FORMAT = 43
    POLICY_VIOLATION = 44
    OUT_OF_ORDER_SEQUENCE_NUMBER = 45
    DUPLICATE_SEQUENCE_NUMBER = 46
    INVALID_PRODUCER_EPOCH = 47
    INVALID_TXN_STATE = 48
    INVALID_PRODUCER_ID_MAPPING = 49
    INVALID_TRANSACTION_TIMEOUT = 50
    CONCURRENT_TRANSACTIONS = 51
    TRANSACTION_COORDINATOR_FENCED = 52
    TRANSACTIONAL_ID_AUTHORIZATION_FAILED = 53
    SECURITY_DISABLED = 54
    OPERATION_NOT_ATTEMPTED = 55
    KAFKA_STORAGE_ERROR = 56
    LOG_DIR_NOT_FOUND = 57
    SASL_AUTHENTICATION_FAILED = 58
    UNKNOWN_PRODUCER_ID = 59
    REASSIGNMENT_IN_PROGRESS = 60
    DELEGATION_TOKEN_AUTH_DISABLED = 61
    DELEGATION_TOKEN_NOT_FOUND = 62
    DELEGATION_TOKEN_OWNER_MISMATCH = 63
    DELEGATION_TOKEN_REQUEST_NOT_ALLOWED = 64
    DELEGATION_TOKEN_AUTHORIZATION_FAILED = 65
    DELEGATION_TOKEN_EXPIRED = 66
    INVALID_PRINCIPAL_TYPE = 67
    NON_EMPTY_GROUP = 68
    GROUP_ID_NOT_FOUND = 69
    FETCH_SESSION_ID_NOT_FOUND = 70
    INVALID_FETCH_SESSION_EPOCH = 71
    LISTENER_NOT_FOUND = 72
    TOPIC_DELETION_DISABLED = 73
    FENCED_LEADER_EPOCH = 74
    UNKNOWN_LEADER_EPOCH = 75
    UNSUPPORTED_COMPRESSION_TYPE = 76
    STALE_BROKER_EPOCH = 77
    OFFSET_NOT_AVAILABLE = 78
    MEMBER_ID_REQUIRED = 79
    PREFERRED_LEADER_NOT_AVAILABLE = 80
    GROUP_MAX_SIZE_REACHED = 81
    FENCED_INSTANCE_ID = 82
    ELIGIBLE_LEADERS_NOT_AVAILABLE = 83
    ELECTION_NOT_NEEDED = 84
    NO_REASSIGNMENT_IN_PROGRESS = 85
    GROUP_SUBSCRIBED_TO_TOPIC = 86
    INVALID_RECORD = 87
    UNSTABLE_OFFSET_COMMIT = 88
    THROTTLING_QUOTA_EXCEEDED = 89
    PRODUCER_FENCED = 90
    RESOURCE_NOT_FOUND = 91
    DUPLICATE_RESOURCE = 92
    UNACCEPTABLE_CREDENTIAL = 93
    INCONSISTENT_VOTER_SET = 94
    INVALID_UPDATE_VERSION = 95
    FEATURE_UPDATE_FAILED = 96
    PRINCIPAL_DESERIALIZATION_FAILURE = 97
    SNAPSHOT_NOT_FOUND = 98
    POSITION_OUT_OF_RANGE = 99
    UNKNOWN_TOPIC_ID = 100
    DUPLICATE_BROKER_REGISTRATION = 101
    BROKER_ID_NOT_REGISTERED = 102
    INCONSISTENT_TOPIC_ID = 103
    INCONSISTENT_CLUSTER_ID = 104
    TRANSACTIONAL_ID_NOT_FOUND = 105
    FETCH_SESSION_TOPIC_ID_ERROR = 106
    INELIGIBLE_REPLICA = 107
    NEW_LEADER_ELECTED = 108
    OFFSET_MOVED_TO_TIERED_STORAGE = 109
    FENCED_MEMBER_EPOCH = 110
    UNRELEASED_INSTANCE_ID = 111
    UNSUPPORTED_ASSIGNOR = 112
    STALE_MEMBER_EPOCH = 113
    MISMATCHED_ENDPOINT_TYPE = 114
    UNSUPPORTED_ENDPOINT_TYPE = 115
    UNKNOWN_CONTROLLER_ID = 116
    UNKNOWN_SUBSCRIPTION_ID = 117
    TELEMETRY_TOO_LARGE = 118
    INVALID_REGISTRATION = 119
    TRANSACTION_ABORTABLE = 120
    INVALID_RECORD_STATE = 121
    SHARE_SESSION_NOT_FOUND = 122
    INVALID_SHARE_SESSION_EPOCH = 123
    FENCED_STATE_EPOCH = 124
    INVALID_VOTER_KEY = 125
    DUPLICATE_VOTER = 126
    VOTER_NOT_FOUND = 127
    INVALID_REGULAR_EXPRESSION = 128
    REBOOTSTRAP_REQUIRED = 129
    STREAMS_INVALID_TOPOLOGY = 130
    STREAMS_INVALID_TOPOLOGY_EPOCH = 131
    STREAMS_TOPOLOGY_FENCED = 132
    SHARE_SESSION_LIMIT_REACHED = 133


_E = ErrorCode

# The codes the protocol guide marks "Retriable: True". This decides RETRIABLE versus FATAL for
# every code that is not in _STALE_METADATA below.
_PROTOCOL_RETRIABLE: frozenset[int] = frozenset({
    _E.CORRUPT_MESSAGE, _E.UNKNOWN_TOPIC_OR_PARTITION, _E.LEADER_NOT_AVAILABLE,
    _E.NOT_LEADER_OR_FOLLOWER, _E.REQUEST_TIMED_OUT, _E.REPLICA_NOT_AVAILABLE,
    _E.NETWORK_EXCEPTION, _E.COORDINATOR_LOAD_IN_PROGRESS, _E.COORDINATOR_NOT_AVAILABLE,
    _E.NOT_COORDINATOR, _E.NOT_ENOUGH_REPLICAS, _E.NOT_ENOUGH_REPLICAS_AFTER_APPEND,
    _E.NOT_CONTROLLER, _E.CONCURRENT_TRANSACTIONS, _E.KAFKA_STORAGE_ERROR,
    _E.FETCH_SESSION_ID_NOT_FOUND, _E.INVALID_FETCH_SESSION_EPOCH, _E.LISTENER_NOT_FOUND,
    _E.FENCED_LEADER_EPOCH, _E.UNKNOWN_LEADER_EPOCH, _E.OFFSET_NOT_AVAILABLE,
    _E.PREFERRED_LEADER_NOT_AVAILABLE, _E.ELIGIBLE_LEADERS_NOT_AVAILABLE,
    _E.ELECTION_NOT_NEEDED, _E.UNSTABLE_OFFSET_COMMIT, _E.THROTTLING_QUOTA_EXCEEDED,
    _E.UNKNOWN_TOPIC_ID, _E.INCONSISTENT_TOPIC_ID, _E.FETCH_SESSION_TOPIC_ID_ERROR,
    _E.SHARE_SESSION_NOT_FOUND, _E.INVALID_SHARE_SESSION_EPOCH, _E.SHARE_SESSION_LIMIT_REACHED,
})  # fmt: skip

# Codes meaning the client's picture of the cluster is out of date: retrying is right, but
# only after refreshing metadata (or re-finding the coordinator), or the retry hits the same
# wall. Java marks most of them InvalidMetadataException.
_STALE_METADATA: frozenset[int] = frozenset({
    # The partition's leader moved, is being elected, or this broker no longer hosts the
    # replica (a failed log directory moves leadership too): Metadata names the new leader.
    _E.UNKNOWN_TOPIC_OR_PARTITION, _E.LEADER_NOT_AVAILABLE, _E.NOT_LEADER_OR_FOLLOWER,
    _E.REPLICA_NOT_AVAILABLE, _E.KAFKA_STORAGE_ERROR, _E.LISTENER_NOT_FOUND,
    _E.PREFERRED_LEADER_NOT_AVAILABLE, _E.ELIGIBLE_LEADERS_NOT_AVAILABLE,
    _E.ELECTION_NOT_NEEDED,
    # The leader epoch we sent is older or newer than the broker's: our cached epoch is stale.
    _E.FENCED_LEADER_EPOCH, _E.UNKNOWN_LEADER_EPOCH,
    # The ISR Metadata reported is below min.insync.replicas; refresh to see when it recovers
    # or leadership moves instead of hammering the same broker with the same view.
    _E.NOT_ENOUGH_REPLICAS, _E.NOT_ENOUGH_REPLICAS_AFTER_APPEND,
    # The topic was deleted or recreated under us: the topic id we hold is no longer valid.
    _E.UNKNOWN_TOPIC_ID, _E.INCONSISTENT_TOPIC_ID,
    # The group/transaction coordinator or the controller moved: find it again.
    _E.COORDINATOR_NOT_AVAILABLE, _E.NOT_COORDINATOR, _E.NOT_CONTROLLER,
    # The broker says outright that our metadata is stale and must be fetched again from the
    # bootstrap servers (KIP-1102). The guide marks it non-retriable because old clients cannot
    # act on it; a client that rebootstraps can, so this is the one deliberate deviation.
    _E.REBOOTSTRAP_REQUIRED,
})  # fmt: skip


def classify(code: int) -> ErrorClass:
    """Return how a client should react to the error ``code``.

    Unknown codes (say, from a newer broker) are ``FATAL``, as in the Java client. Code 0
    (NONE) is success, not an error, and raises ``ValueError``.
    """
    if code == ErrorCode.NONE:
        raise ValueError("error code 0 (NONE) means success; there is nothing to classify")
    if code in _STALE_METADATA:
        return ErrorClass.REFRESH_METADATA
    if code in _PROTOCOL_RETRIABLE:
        return ErrorClass.RETRIABLE
    return ErrorClass.FATAL


_BY_CODE: dict[int, type[KafkaError]] = {}


class KafkaError(KayakError):
    """An error with a Kafka error code.

    Subclasses that stand for a code declare it as a class keyword, ``class X(KafkaError,
    code=6)``, and set ``default_message``; ``error_name`` and ``error_class`` then follow from
    ``ErrorCode`` and ``classify``, and the class is registered for ``error_for_code``.
    """

    code: ClassVar[int] = -1
    error_name: ClassVar[str] = "UNKNOWN_SERVER_ERROR"
    error_class: ClassVar[ErrorClass] = ErrorClass.FATAL
    default_message: ClassVar[str] = "The server hit an unexpected error processing the request."

    def __init_subclass__(cls, *, code: int | None = None, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if code is None:  # a refinement of an existing class: inherit everything
            return
        known = ErrorCode(code)  # ValueError for a code the protocol does not define
        if known is ErrorCode.NONE:
            raise TypeError(f"{cls.__name__}: code 0 (NONE) is not an error")
        if known in _BY_CODE:
            raise TypeError(f"{cls.__name__}: code {code} already has {_BY_CODE[known].__name__}")
        if "default_message" not in cls.__dict__:
            raise TypeError(f"{cls.__name__} must set default_message")
        cls.code = int(known)
        cls.error_name = known.name
        cls.error_class = classify(known)
        if cls.__doc__ is None:
            cls.__doc__ = f"{known.name} ({int(known)}): {cls.default_message}"
        _BY_CODE[known] = cls

    def __init__(self, message: str | None = None) -> None:
        self.message: str = self.default_message if message is None else message
        super().__init__(self.message)

    def __str__(self) -> str:
        return f"{self.error_name} ({self.code}): {self.message}"

    @property
    def retriable(self) -> bool:
        """True if the request may succeed when sent again (possibly after a metadata refresh)."""
        return self.error_class is not ErrorClass.FATAL

    @property
    def invalid_metadata(self) -> bool:
        """True if the client must refresh its metadata (or coordinator) before retrying."""
        return self.error_class is ErrorClass.REFRESH_METADATA


# One class per code, in code order. Messages paraphrase the protocol guide's descriptions.


class UnknownServerError(KafkaError, code=-1):
    default_message = "The server hit an unexpected error processing the request."


class OffsetOutOfRangeError(KafkaError, code=1):
    default_message = "The requested offset is outside the range of offsets the server holds."


class CorruptRecordError(KafkaError, code=2):
    default_message = "The message failed its CRC, exceeds the valid size, or is otherwise corrupt."


class UnknownTopicOrPartitionError(KafkaError, code=3):
    default_message = "This server does not host this topic-partition."


class InvalidFetchSizeError(KafkaError, code=4):
    default_message = "The requested fetch size is invalid."


class LeaderNotAvailableError(KafkaError, code=5):
    default_message = "The partition has no leader because a leader election is in progress."


class NotLeaderOrFollowerError(KafkaError, code=6):
    default_message = "This broker is not the partition's leader (or not one of its replicas)."


class RequestTimedOutError(KafkaError, code=7):
    default_message = "The request timed out on the broker."


class BrokerNotAvailableError(KafkaError, code=8):
    default_message = "The broker is not available."


class ReplicaNotAvailableError(KafkaError, code=9):
    default_message = "The replica is not available for the requested topic-partition."


class RecordTooLargeError(KafkaError, code=10):
    default_message = "The request included a message larger than the server accepts."


class ControllerMovedError(KafkaError, code=11):
    default_message = "The controller moved to another broker."


class OffsetMetadataTooLargeError(KafkaError, code=12):
    default_message = "The metadata attached to the committed offset is too large."


class NetworkError(KafkaError, code=13):
    default_message = "The server disconnected before a response was received."


class CoordinatorLoadInProgressError(KafkaError, code=14):
    default_message = "The coordinator is still loading its state and cannot serve requests yet."


class CoordinatorNotAvailableError(KafkaError, code=15):
    default_message = "The coordinator is not available."


class NotCoordinatorError(KafkaError, code=16):
    default_message = "This broker is not the coordinator for the group or transaction."


class InvalidTopicError(KafkaError, code=17):
    default_message = "The request tried to operate on an invalid topic."


class RecordBatchTooLargeError(KafkaError, code=18):
    default_message = "The record batch is larger than the server's configured segment size."


class NotEnoughReplicasError(KafkaError, code=19):
    default_message = "The write was rejected: fewer in-sync replicas than required."


class NotEnoughReplicasAfterAppendError(KafkaError, code=20):
    default_message = "The write was appended, but to fewer in-sync replicas than required."


class InvalidRequiredAcksError(KafkaError, code=21):
    default_message = "The produce request asked for an invalid number of acks."


class IllegalGenerationError(KafkaError, code=22):
    default_message = "The group generation id is not valid."


class InconsistentGroupProtocolError(KafkaError, code=23):
    default_message = "The member's protocols are incompatible with the group's (or empty)."


class InvalidGroupIdError(KafkaError, code=24):
    default_message = "The group id is invalid."


class UnknownMemberIdError(KafkaError, code=25):
    default_message = "The coordinator does not know this member."


class InvalidSessionTimeoutError(KafkaError, code=26):
    default_message = "The session timeout is outside the range the broker allows."


class RebalanceInProgressError(KafkaError, code=27):
    default_message = "The group is rebalancing, so the member must rejoin."


class InvalidCommitOffsetSizeError(KafkaError, code=28):
    default_message = "The size of the committed offset data is not valid."


class TopicAuthorizationFailedError(KafkaError, code=29):
    default_message = "Not authorized to access the topic."


class GroupAuthorizationFailedError(KafkaError, code=30):
    default_message = "Not authorized to access the group."


class ClusterAuthorizationFailedError(KafkaError, code=31):
    default_message = "Not authorized to perform the cluster operation."


class InvalidTimestampError(KafkaError, code=32):
    default_message = "The message timestamp is outside the acceptable range."


class UnsupportedSaslMechanismError(KafkaError, code=33):
    default_message = "The broker does not support the requested SASL mechanism."


class IllegalSaslStateError(KafkaError, code=34):
    default_message = "The request is not valid in the current SASL state."


class UnsupportedVersionError(KafkaError, code=35):
    default_message = "The API version is not supported."


class TopicExistsError(KafkaError, code=36):
    default_message = "A topic with this name already exists."


class InvalidPartitionsError(KafkaError, code=37):
    default_message = "The number of partitions is invalid (below 1)."


class InvalidReplicationFactorError(KafkaError, code=38):
    default_message = "The replication factor is below 1 or above the number of live brokers."


class InvalidReplicaAssignmentError(KafkaError, code=39):
    default_message = "The replica assignment is invalid."


class InvalidConfigurationError(KafkaError, code=40):
    default_message = "The configuration sent to the broker is invalid."


class NotControllerError(KafkaError, code=41):
    default_message = "This broker is not the cluster's active controller."


class InvalidRequestError(KafkaError, code=42):
    default_message = "The request is malformed or was sent to an incompatible broker."


class UnsupportedForMessageFormatError(KafkaError, code=43):
    default_message = "The broker's message format version does not support the request."


class PolicyViolationError(KafkaError, code=44):
    default_message = "The request parameters violate the configured policy."


class OutOfOrderSequenceNumberError(KafkaError, code=45):
    default_message = "The broker received an out-of-order sequence number from the producer."


class DuplicateSequenceNumberError(KafkaError, code=46):
    default_message = "The broker received a duplicate sequence number from the producer."


class InvalidProducerEpochError(KafkaError, code=47):
    default_message = "The producer used an epoch older than the current one."


class InvalidTxnStateError(KafkaError, code=48):
    default_message = "The producer attempted a transactional operation in an invalid state."


class InvalidPidMappingError(KafkaError, code=49):
    default_message = "The producer id is not currently assigned to this transactional id."


class InvalidTxnTimeoutError(KafkaError, code=50):
    default_message = "The transaction timeout exceeds the broker's transaction.max.timeout.ms."


class ConcurrentTransactionsError(KafkaError, code=51):
    default_message = "Another operation on the same transaction is still in progress."


class TransactionCoordinatorFencedError(KafkaError, code=52):
    default_message = "The transaction coordinator sending markers is no longer the current one."


class TransactionalIdAuthorizationFailedError(KafkaError, code=53):
    default_message = "Not authorized to use the transactional id."


class SecurityDisabledError(KafkaError, code=54):
    default_message = "Security features are disabled on the broker."


class OperationNotAttemptedError(KafkaError, code=55):
    default_message = "The broker did not attempt this operation because another one failed."


class KafkaStorageError(KafkaError, code=56):
    default_message = "The broker hit a disk error accessing the log."


class LogDirNotFoundError(KafkaError, code=57):
    default_message = "The requested log directory is not in the broker's configuration."


class SaslAuthenticationFailedError(KafkaError, code=58):
    default_message = "SASL authentication failed."


class UnknownProducerIdError(KafkaError, code=59):
    default_message = "The broker has no state for this producer id (it may have expired)."


class ReassignmentInProgressError(KafkaError, code=60):
    default_message = "A partition reassignment is in progress."


class DelegationTokenDisabledError(KafkaError, code=61):
    default_message = "Delegation tokens are not enabled."


class DelegationTokenNotFoundError(KafkaError, code=62):
    default_message = "The delegation token was not found on the server."


class DelegationTokenOwnerMismatchError(KafkaError, code=63):
    default_message = "The principal is not a valid owner or renewer of the delegation token."


class UnsupportedByAuthenticationError(KafkaError, code=64):
    default_message = "Delegation token requests are not allowed over this kind of channel."


class DelegationTokenAuthorizationFailedError(KafkaError, code=65):
    default_message = "Not authorized to use the delegation token."


class DelegationTokenExpiredError(KafkaError, code=66):
    default_message = "The delegation token has expired."


class InvalidPrincipalTypeError(KafkaError, code=67):
    default_message = "The principal type is not supported."


class GroupNotEmptyError(KafkaError, code=68):
    default_message = "The group is not empty."


class GroupIdNotFoundError(KafkaError, code=69):
    default_message = "The group id does not exist."


class FetchSessionIdNotFoundError(KafkaError, code=70):
    default_message = "The fetch session id was not found."


class InvalidFetchSessionEpochError(KafkaError, code=71):
    default_message = "The fetch session epoch is invalid."


class ListenerNotFoundError(KafkaError, code=72):
    default_message = "The leader has no listener matching the one the metadata request used."


class TopicDeletionDisabledError(KafkaError, code=73):
    default_message = "Topic deletion is disabled."


class FencedLeaderEpochError(KafkaError, code=74):
    default_message = "The leader epoch in the request is older than the broker's."


class UnknownLeaderEpochError(KafkaError, code=75):
    default_message = "The leader epoch in the request is newer than the broker's."


class UnsupportedCompressionTypeError(KafkaError, code=76):
    default_message = "The client does not support the partition's compression type."


class StaleBrokerEpochError(KafkaError, code=77):
    default_message = "The broker epoch has changed."


class OffsetNotAvailableError(KafkaError, code=78):
    default_message = "The new leader's high watermark has not caught up, so offsets may regress."


class MemberIdRequiredError(KafkaError, code=79):
    default_message = "The member must rejoin with the member id it was given."


class PreferredLeaderNotAvailableError(KafkaError, code=80):
    default_message = "The preferred leader is not available."


class GroupMaxSizeReachedError(KafkaError, code=81):
    default_message = "The group has reached its maximum size."


class FencedInstanceIdError(KafkaError, code=82):
    default_message = "Another member registered the same group.instance.id."


class EligibleLeadersNotAvailableError(KafkaError, code=83):
    default_message = "No eligible leader is available for the partition."


class ElectionNotNeededError(KafkaError, code=84):
    default_message = "No leader election is needed for the partition."


class NoReassignmentInProgressError(KafkaError, code=85):
    default_message = "No partition reassignment is in progress."


class GroupSubscribedToTopicError(KafkaError, code=86):
    default_message = "Cannot delete the offsets of a topic the group is subscribed to."


class InvalidRecordError(KafkaError, code=87):
    default_message = "The broker's validation rejected the record."


class UnstableOffsetCommitError(KafkaError, code=88):
    default_message = "There are pending transactional offsets that must be resolved first."


class ThrottlingQuotaExceededError(KafkaError, code=89):
    default_message = "The throttling quota has been exceeded."


class ProducerFencedError(KafkaError, code=90):
    default_message = "A newer producer with the same transactional id has fenced this one."


class ResourceNotFoundError(KafkaError, code=91):
    default_message = "The request referred to a resource that does not exist."


class DuplicateResourceError(KafkaError, code=92):
    default_message = "The request referred to the same resource twice."


class UnacceptableCredentialError(KafkaError, code=93):
    default_message = "The requested credential does not meet the acceptance criteria."


class InconsistentVoterSetError(KafkaError, code=94):
    default_message = "The sender or receiver of a voter-only request is not an expected voter."


class InvalidUpdateVersionError(KafkaError, code=95):
    default_message = "The update version is invalid."


class FeatureUpdateFailedError(KafkaError, code=96):
    default_message = "Finalized features could not be updated because of a server error."


class PrincipalDeserializationError(KafkaError, code=97):
    default_message = "The request principal could not be deserialized while forwarding."


class SnapshotNotFoundError(KafkaError, code=98):
    default_message = "The requested snapshot was not found."


class PositionOutOfRangeError(KafkaError, code=99):
    default_message = "The requested position is negative or beyond the end of the snapshot."


class UnknownTopicIdError(KafkaError, code=100):
    default_message = "This server does not host this topic id."


class DuplicateBrokerRegistrationError(KafkaError, code=101):
    default_message = "This broker id is already in use."


class BrokerIdNotRegisteredError(KafkaError, code=102):
    default_message = "The broker id is not registered."


class InconsistentTopicIdError(KafkaError, code=103):
    default_message = "The log's topic id does not match the topic id in the request."


class InconsistentClusterIdError(KafkaError, code=104):
    default_message = "The cluster id in the request does not match the server's."


class TransactionalIdNotFoundError(KafkaError, code=105):
    default_message = "The transactional id was not found."


class FetchSessionTopicIdError(KafkaError, code=106):
    default_message = "The fetch session used topic ids inconsistently."


class IneligibleReplicaError(KafkaError, code=107):
    default_message = "The new ISR contains at least one ineligible replica."


class NewLeaderElectedError(KafkaError, code=108):
    default_message = "The partition state was updated, but the leader has changed."


class OffsetMovedToTieredStorageError(KafkaError, code=109):
    default_message = "The requested offset has moved to tiered storage."


class FencedMemberEpochError(KafkaError, code=110):
    default_message = "The member epoch is fenced; the member must drop its partitions and rejoin."


class UnreleasedInstanceIdError(KafkaError, code=111):
    default_message = "The instance id is still held by another member, which must leave first."


class UnsupportedAssignorError(KafkaError, code=112):
    default_message = "The group does not support the assignor or its version range."


class StaleMemberEpochError(KafkaError, code=113):
    default_message = "The member epoch is stale; retry after the next heartbeat updates it."


class MismatchedEndpointTypeError(KafkaError, code=114):
    default_message = "The request was sent to an endpoint of the wrong type."


class UnsupportedEndpointTypeError(KafkaError, code=115):
    default_message = "This endpoint type is not supported yet."


class UnknownControllerIdError(KafkaError, code=116):
    default_message = "The controller id is not known."


class UnknownSubscriptionIdError(KafkaError, code=117):
    default_message = "The telemetry push used an invalid or outdated subscription id."


class TelemetryTooLargeError(KafkaError, code=118):
    default_message = "The telemetry push is larger than the broker accepts."


class InvalidRegistrationError(KafkaError, code=119):
    default_message = "The controller considers the broker registration invalid."


class TransactionAbortableError(KafkaError, code=120):
    default_message = "The transaction hit an error; abort it to keep using the transactional id."


class InvalidRecordStateError(KafkaError, code=121):
    default_message = "The record state is invalid, so the delivery could not be acknowledged."


class ShareSessionNotFoundError(KafkaError, code=122):
    default_message = "The share session was not found."


class InvalidShareSessionEpochError(KafkaError, code=123):
    default_message = "The share session epoch is invalid."


class FencedStateEpochError(KafkaError, code=124):
    default_message = "The share-group state epoch did not match the share coordinator's."


class InvalidVoterKeyError(KafkaError, code=125):
    default_message = "The voter key does not match the receiving replica's key."


class DuplicateVoterError(KafkaError, code=126):
    default_message = "The voter is already in the voter set."


class VoterNotFoundError(KafkaError, code=127):
    default_message = "The voter is not in the voter set."


class InvalidRegularExpressionError(KafkaError, code=128):
    default_message = "The regular expression is not valid."


class RebootstrapRequiredError(KafkaError, code=129):
    default_message = "The client's metadata is stale; it must rebootstrap to get fresh metadata."


class StreamsInvalidTopologyError(KafkaError, code=130):
    default_message = "The supplied Streams topology is invalid."


class StreamsInvalidTopologyEpochError(KafkaError, code=131):
    default_message = "The supplied Streams topology epoch is invalid."


class StreamsTopologyFencedError(KafkaError, code=132):
    default_message = "The supplied Streams topology epoch is outdated."


class ShareSessionLimitReachedError(KafkaError, code=133):
    default_message = "The broker's limit on share sessions has been reached."


def _rebuild_unknown(code: int, message: str) -> KafkaError:
    return error_for_code(code)(message)


def _reduce_unknown(self: KafkaError) -> tuple[Any, ...]:
    # Classes made on the fly cannot be found by name, so pickle by code instead.
    return (_rebuild_unknown, (self.code, self.message))


@functools.lru_cache(maxsize=256)
def _unknown_code_class(code: int) -> type[KafkaError]:
    name = f"UnknownCode{code}Error".replace("-", "Minus")
    namespace: dict[str, Any] = {
        "__module__": __name__,
        "__doc__": f"Error code {code}, which this version of kayak does not know.",
        "__reduce__": _reduce_unknown,
        "code": code,
        "error_name": f"UNKNOWN_CODE_{code}".replace("-", "MINUS_"),
        "error_class": classify(code),
        "default_message": (
            f"The broker answered with error code {code}, which this version of kayak does"
            " not know (the broker may be newer)."
        ),
    }
    cls: type[KafkaError] = type(name, (UnknownServerError,), namespace)
    return cls


def error_for_code(code: int) -> type[KafkaError]:
    """Return the exception class for the Kafka error ``code``.

    A code this module does not know (from a newer broker, say) gets a subclass of
    ``UnknownServerError`` made on the fly whose ``code`` is that number, so nothing is lost
    and ``except UnknownServerError`` still catches it. Code 0 (NONE) raises ``ValueError``.
    """
    if code == ErrorCode.NONE:
        raise ValueError("error code 0 (NONE) means success and has no exception class")
    known = _BY_CODE.get(code)
    return known if known is not None else _unknown_code_class(int(code))


def raise_for_code(code: int, message: str | None = None) -> None:
    """Raise the exception for the Kafka error ``code``; do nothing for 0 (NONE).

    ``message`` (for instance a response's ``error_message`` field) replaces the class's
    default message when it is not None.
    """
    if code == ErrorCode.NONE:
        return
    raise error_for_code(code)(message)
