"""Tests for kayak.errors: the error-code table, classification, and lookups."""

from __future__ import annotations

import inspect
import pickle
from typing import Any

import pytest

from kayak import errors
from kayak.errors import (
    ConfigError,
    CorruptRecordError,
    EncodeError,
    ErrorClass,
    ErrorCode,
    KafkaError,
    KafkaTimeoutError,
    KayakError,
    NotLeaderOrFollowerError,
    ProtocolError,
    UnknownServerError,
    classify,
    error_for_code,
    raise_for_code,
)

ERROR_CODES = [c for c in ErrorCode if c is not ErrorCode.NONE]


def _code_classes() -> list[type[KafkaError]]:
    """Every KafkaError subclass defined in kayak.errors."""
    return [
        obj
        for obj in vars(errors).values()
        if inspect.isclass(obj) and issubclass(obj, KafkaError) and obj is not KafkaError
    ]


# --- the table -------------------------------------------------------------------------------


def test_table_spans_the_protocol_guide() -> None:
    codes = sorted(int(c) for c in ErrorCode)
    assert codes[0] == -1
    assert codes[-1] == 133
    assert codes == list(range(-1, 134)), "codes must be contiguous from -1 to the last one"


def test_enum_names_unique() -> None:
    names = [c.name for c in ErrorCode]
    assert len(names) == len(set(names))
    assert len(ErrorCode.__members__) == len(list(ErrorCode)), "no aliased values"


@pytest.mark.parametrize("code", ERROR_CODES, ids=lambda c: c.name)
def test_every_code_round_trips(code: ErrorCode) -> None:
    cls = error_for_code(code)
    assert cls.code == code
    assert cls.error_name == code.name
    assert cls.__name__.endswith("Error")
    assert getattr(errors, cls.__name__) is cls, "class must be importable by name"
    assert cls.default_message.endswith(".")
    err = cls()
    assert err.code == code
    assert err.message == cls.default_message
    assert str(err) == f"{code.name} ({int(code)}): {cls.default_message}"


def test_one_class_per_code() -> None:
    classes = _code_classes()
    assert len(classes) == len(ERROR_CODES)
    assert len({c.__name__ for c in classes}) == len(classes)
    assert {c.code for c in classes} == {int(c) for c in ERROR_CODES}


@pytest.mark.parametrize(
    ("code", "name", "cls_name"),
    [
        (1, "OFFSET_OUT_OF_RANGE", "OffsetOutOfRangeError"),
        (2, "CORRUPT_MESSAGE", "CorruptRecordError"),
        (3, "UNKNOWN_TOPIC_OR_PARTITION", "UnknownTopicOrPartitionError"),
        (6, "NOT_LEADER_OR_FOLLOWER", "NotLeaderOrFollowerError"),
        (7, "REQUEST_TIMED_OUT", "RequestTimedOutError"),
        (13, "NETWORK_EXCEPTION", "NetworkError"),
        (15, "COORDINATOR_NOT_AVAILABLE", "CoordinatorNotAvailableError"),
        (16, "NOT_COORDINATOR", "NotCoordinatorError"),
        (25, "UNKNOWN_MEMBER_ID", "UnknownMemberIdError"),
        (27, "REBALANCE_IN_PROGRESS", "RebalanceInProgressError"),
        (29, "TOPIC_AUTHORIZATION_FAILED", "TopicAuthorizationFailedError"),
        (35, "UNSUPPORTED_VERSION", "UnsupportedVersionError"),
        (42, "INVALID_REQUEST", "InvalidRequestError"),
        (45, "OUT_OF_ORDER_SEQUENCE_NUMBER", "OutOfOrderSequenceNumberError"),
        (46, "DUPLICATE_SEQUENCE_NUMBER", "DuplicateSequenceNumberError"),
        (47, "INVALID_PRODUCER_EPOCH", "InvalidProducerEpochError"),
        (58, "SASL_AUTHENTICATION_FAILED", "SaslAuthenticationFailedError"),
        (59, "UNKNOWN_PRODUCER_ID", "UnknownProducerIdError"),
        (74, "FENCED_LEADER_EPOCH", "FencedLeaderEpochError"),
        (76, "UNSUPPORTED_COMPRESSION_TYPE", "UnsupportedCompressionTypeError"),
        (79, "MEMBER_ID_REQUIRED", "MemberIdRequiredError"),
        (87, "INVALID_RECORD", "InvalidRecordError"),
        (100, "UNKNOWN_TOPIC_ID", "UnknownTopicIdError"),
        (110, "FENCED_MEMBER_EPOCH", "FencedMemberEpochError"),
        (119, "INVALID_REGISTRATION", "InvalidRegistrationError"),
        (120, "TRANSACTION_ABORTABLE", "TransactionAbortableError"),
        (121, "INVALID_RECORD_STATE", "InvalidRecordStateError"),
        (122, "SHARE_SESSION_NOT_FOUND", "ShareSessionNotFoundError"),
        (133, "SHARE_SESSION_LIMIT_REACHED", "ShareSessionLimitReachedError"),
    ],
)
def test_spot_checks_against_protocol(code: int, name: str, cls_name: str) -> None:
    assert ErrorCode(code).name == name
    assert ErrorCode[name] == code
    cls = error_for_code(code)
    assert cls.__name__ == cls_name
    assert cls is getattr(errors, cls_name)
    assert cls.error_name == name


def test_skeleton_names_keep_their_meaning() -> None:
    assert issubclass(ProtocolError, KayakError)
    assert issubclass(EncodeError, ProtocolError)
    assert issubclass(EncodeError, ValueError)
    assert issubclass(errors.MalformedMessageError, ProtocolError)
    assert issubclass(errors.FrameTooLargeError, ProtocolError)
    assert issubclass(KafkaError, KayakError)
    assert not issubclass(ProtocolError, KafkaError)
    assert CorruptRecordError.code == 2
    assert CorruptRecordError.error_name == "CORRUPT_MESSAGE"
    assert CorruptRecordError.error_class is ErrorClass.RETRIABLE
    assert errors.UnsupportedVersionError.code == 35
    assert errors.UnsupportedVersionError.error_class is ErrorClass.FATAL


# --- classification --------------------------------------------------------------------------

MUST_REFRESH = [
    ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
    ErrorCode.LEADER_NOT_AVAILABLE,
    ErrorCode.NOT_LEADER_OR_FOLLOWER,
    ErrorCode.FENCED_LEADER_EPOCH,
    ErrorCode.UNKNOWN_LEADER_EPOCH,
    ErrorCode.NOT_COORDINATOR,
    ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.UNKNOWN_TOPIC_ID,
    ErrorCode.INCONSISTENT_TOPIC_ID,
    ErrorCode.KAFKA_STORAGE_ERROR,
    ErrorCode.REPLICA_NOT_AVAILABLE,
    ErrorCode.NOT_ENOUGH_REPLICAS,
]
MUST_RETRY = [
    ErrorCode.NETWORK_EXCEPTION,
    ErrorCode.REQUEST_TIMED_OUT,
    ErrorCode.CORRUPT_MESSAGE,
    ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
    ErrorCode.CONCURRENT_TRANSACTIONS,
]
MUST_FAIL = [
    ErrorCode.UNKNOWN_SERVER_ERROR,
    ErrorCode.SASL_AUTHENTICATION_FAILED,
    ErrorCode.TOPIC_AUTHORIZATION_FAILED,
    ErrorCode.GROUP_AUTHORIZATION_FAILED,
    ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
    ErrorCode.UNSUPPORTED_VERSION,
    ErrorCode.INVALID_REQUEST,
    ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER,
    ErrorCode.INVALID_PRODUCER_EPOCH,
    ErrorCode.PRODUCER_FENCED,
    ErrorCode.MESSAGE_TOO_LARGE,
]


@pytest.mark.parametrize("code", MUST_REFRESH, ids=lambda c: c.name)
def test_stale_metadata_errors_refresh(code: ErrorCode) -> None:
    assert classify(code) is ErrorClass.REFRESH_METADATA
    err = error_for_code(code)()
    assert err.error_class is ErrorClass.REFRESH_METADATA
    assert err.retriable
    assert err.invalid_metadata


@pytest.mark.parametrize("code", MUST_RETRY, ids=lambda c: c.name)
def test_transient_errors_retry(code: ErrorCode) -> None:
    assert classify(code) is ErrorClass.RETRIABLE
    err = error_for_code(code)()
    assert err.retriable
    assert not err.invalid_metadata


@pytest.mark.parametrize("code", MUST_FAIL, ids=lambda c: c.name)
def test_fatal_errors(code: ErrorCode) -> None:
    assert classify(code) is ErrorClass.FATAL
    err = error_for_code(code)()
    assert not err.retriable
    assert not err.invalid_metadata


def test_protocol_retriable_flag_decides_outside_metadata_group() -> None:
    # Outside the stale-metadata group, RETRIABLE is exactly the protocol guide's flag.
    for code in ERROR_CODES:
        if classify(code) is ErrorClass.REFRESH_METADATA:
            continue
        expected = ErrorClass.RETRIABLE if code in errors._PROTOCOL_RETRIABLE else ErrorClass.FATAL
        assert classify(code) is expected, code.name


def test_only_deliberate_deviation_from_protocol_flag() -> None:
    # Every REFRESH_METADATA code is retriable in the guide, except REBOOTSTRAP_REQUIRED.
    refresh = {c for c in ERROR_CODES if classify(c) is ErrorClass.REFRESH_METADATA}
    assert refresh - errors._PROTOCOL_RETRIABLE == {ErrorCode.REBOOTSTRAP_REQUIRED}


def test_classify_matches_class_attribute() -> None:
    for code in ERROR_CODES:
        assert error_for_code(code).error_class is classify(code)


def test_classify_none_and_unknown() -> None:
    with pytest.raises(ValueError):
        classify(0)
    assert classify(9999) is ErrorClass.FATAL


# --- lookups ---------------------------------------------------------------------------------


def test_unknown_code_keeps_its_number() -> None:
    cls = error_for_code(9999)
    assert issubclass(cls, UnknownServerError)
    assert cls.code == 9999
    assert cls.__name__.endswith("Error")
    assert error_for_code(9999) is cls, "one class per unknown code"
    with pytest.raises(UnknownServerError) as info:
        raise_for_code(9999, "from the future")
    err = info.value
    assert err.code == 9999
    assert err.message == "from the future"
    assert not err.retriable
    assert "9999" in str(err)


def test_unknown_negative_code() -> None:
    err = error_for_code(-42)()
    assert err.code == -42
    assert isinstance(err, UnknownServerError)
    assert "-42" in str(err)


def test_error_for_code_none_is_not_an_error() -> None:
    with pytest.raises(ValueError):
        error_for_code(0)


def test_raise_for_code_zero_is_a_no_op() -> None:
    raise_for_code(0)
    raise_for_code(ErrorCode.NONE, "ignored")


def test_raise_for_code_not_leader() -> None:
    with pytest.raises(NotLeaderOrFollowerError) as info:
        raise_for_code(6)
    err = info.value
    assert err.retriable is True
    assert err.invalid_metadata is True
    assert err.code == 6
    assert str(err).startswith("NOT_LEADER_OR_FOLLOWER (6): ")


def test_message_override_and_default() -> None:
    err = NotLeaderOrFollowerError("leader is broker 2")
    assert err.message == "leader is broker 2"
    assert str(err) == "NOT_LEADER_OR_FOLLOWER (6): leader is broker 2"
    assert NotLeaderOrFollowerError().message == NotLeaderOrFollowerError.default_message


@pytest.mark.parametrize("code", [6, 35, 9999, -7])
def test_errors_pickle(code: int) -> None:
    err = error_for_code(code)("boom")
    copy = pickle.loads(pickle.dumps(err))
    assert type(copy) is type(err)
    assert copy.code == code
    assert str(copy) == str(err)


def test_subclass_without_code_inherits() -> None:
    class LocalNotLeader(NotLeaderOrFollowerError):
        pass

    assert LocalNotLeader.code == 6
    assert LocalNotLeader().invalid_metadata
    assert error_for_code(6) is NotLeaderOrFollowerError, "refinements do not re-register"


def test_duplicate_or_bogus_code_rejected() -> None:
    with pytest.raises(TypeError):

        class Again(KafkaError, code=6):
            default_message = "dup."

    with pytest.raises(TypeError):

        class Success(KafkaError, code=0):
            default_message = "no."

    with pytest.raises(ValueError):

        class Bogus(KafkaError, code=5000):
            default_message = "no."

    assert error_for_code(6) is NotLeaderOrFollowerError


# --- non-wire errors -------------------------------------------------------------------------


def test_config_error_names_the_property() -> None:
    err = ConfigError("acks", "must be -1, 0 or 1, not 2")
    assert isinstance(err, KayakError)
    assert isinstance(err, ValueError)
    assert err.name == "acks"
    assert "acks" in str(err)
    assert "must be -1, 0 or 1" in str(err)
    copy = pickle.loads(pickle.dumps(err))
    assert str(copy) == str(err)


def test_kafka_timeout_error_is_retriable_client_side() -> None:
    err = KafkaTimeoutError("metadata not ready after 60s")
    assert isinstance(err, KayakError)
    assert not isinstance(err, KafkaError)
    assert err.retriable
    assert not err.invalid_metadata


# --- cross-check against kafka-python --------------------------------------------------------

# kafka-python still uses a few names the protocol guide has since renamed.
KAFKA_PYTHON_OLD_NAMES = {
    -1: "UNKNOWN",
    6: "NOT_LEADER_FOR_PARTITION",
    10: "MESSAGE_SIZE_TOO_LARGE",
    17: "INVALID_TOPIC",
    39: "INVALID_REPLICATION_ASSIGNMENT",
}
# Retriable flags where kayak deliberately differs from kafka-python (kayak follows the guide).
KAFKA_PYTHON_RETRIABLE_DISAGREEMENTS = {
    2,  # CORRUPT_MESSAGE: retriable in the protocol guide, not in kafka-python
}


def _kafka_python_table() -> dict[int, Any]:
    """kafka-python's broker error classes by code (its ``message`` is the UPPER_CASE name)."""
    kerrors = pytest.importorskip("kafka.errors")
    table: dict[int, Any] = {}
    for obj in vars(kerrors).values():
        errno = getattr(obj, "errno", None)
        is_broker_error = inspect.isclass(obj) and issubclass(obj, kerrors.BrokerResponseError)
        if is_broker_error and isinstance(errno, int) and errno != 0:
            table.setdefault(errno, obj)
    return table


def test_kafka_python_names_line_up() -> None:
    theirs = _kafka_python_table()
    shared = sorted(set(theirs) & {int(c) for c in ERROR_CODES})
    assert len(shared) > 100, "kafka-python should know most codes"
    for code in shared:
        expected = KAFKA_PYTHON_OLD_NAMES.get(code, ErrorCode(code).name)
        assert theirs[code].message == expected, code


def test_kafka_python_retriable_flags() -> None:
    theirs = _kafka_python_table()
    disagree = {
        code
        for code, cls in theirs.items()
        if code in ErrorCode.__members__.values()
        and bool(cls.retriable) != error_for_code(code)().retriable
    }
    assert disagree <= KAFKA_PYTHON_RETRIABLE_DISAGREEMENTS, sorted(disagree)
