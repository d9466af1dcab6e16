"""Kafka error codes and the exceptions that carry them.

Every error Strata raises for a Kafka-visible condition is a :class:`KafkaError` whose
``error_code`` is the wire code, so handlers can turn a failure into a per-partition error
field instead of failing a whole request (the pattern aiokafka and tansu use).
"""

from __future__ import annotations

from enum import IntEnum
from typing import NamedTuple


class ErrorCode(IntEnum):
    UNKNOWN_SERVER_ERROR = -1
    NONE = 0
    OFFSET_OUT_OF_RANGE = 1
    CORRUPT_MESSAGE = 2
    UNKNOWN_TOPIC_OR_PARTITION = 3
    INVALID_FETCH_SIZE = 4
    LEADER_NOT_AVAILABLE = 5
    NOT_LEADER_OR_FOLLOWER = 6
    REQUEST_TIMED_OUT = 7
    REPLICA_NOT_AVAILABLE = 9
    MESSAGE_TOO_LARGE = 10
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
    NON_EMPTY_GROUP = 68
    GROUP_ID_NOT_FOUND = 69
    FETCH_SESSION_ID_NOT_FOUND = 70
    INVALID_FETCH_SESSION_EPOCH = 71
    TOPIC_DELETION_DISABLED = 73
    FENCED_LEADER_EPOCH = 74
    UNKNOWN_LEADER_EPOCH = 75
    UNSUPPORTED_COMPRESSION_TYPE = 76
    OFFSET_NOT_AVAILABLE = 78
    MEMBER_ID_REQUIRED = 79
    GROUP_MAX_SIZE_REACHED = 81
    FENCED_INSTANCE_ID = 82
    PREFERRED_LEADER_NOT_AVAILABLE = 80
    ELIGIBLE_LEADERS_NOT_AVAILABLE = 83
    ELECTION_NOT_NEEDED = 84
    NO_REASSIGNMENT_IN_PROGRESS = 85
    INVALID_RECORD = 87
    RESOURCE_NOT_FOUND = 91
    DUPLICATE_RESOURCE = 92
    UNACCEPTABLE_CREDENTIAL = 93
    UNSTABLE_OFFSET_COMMIT = 88
    PRODUCER_FENCED = 90
    UNKNOWN_TOPIC_ID = 100
    INCONSISTENT_TOPIC_ID = 103
    TRANSACTIONAL_ID_NOT_FOUND = 105
    FETCH_SESSION_TOPIC_ID_ERROR = 106
    OFFSET_MOVED_TO_TIERED_STORAGE = 109
    FENCED_MEMBER_EPOCH = 110
    UNRELEASED_INSTANCE_ID = 111
    UNSUPPORTED_ASSIGNOR = 112
    STALE_MEMBER_EPOCH = 113
    INVALID_RECORD_STATE = 121
    SHARE_SESSION_NOT_FOUND = 122
    INVALID_SHARE_SESSION_EPOCH = 123
    FENCED_STATE_EPOCH = 124
    INVALID_REGULAR_EXPRESSION = 128
    SHARE_SESSION_LIMIT_REACHED = 133


class KafkaError(Exception):
    """Base of every error that maps to a Kafka error code."""

    error_code: ErrorCode = ErrorCode.UNKNOWN_SERVER_ERROR
    retriable: bool = False


class CorruptRecordError(KafkaError):
    """Bytes that do not form a valid record batch (bad size, bad CRC, bad varint)."""

    error_code = ErrorCode.CORRUPT_MESSAGE
    retriable = True  # Kafka marks CorruptRecordException retriable: the client may resend.

    def __init__(self, message: str, position: int | None = None) -> None:
        super().__init__(message if position is None else f"{message} (at byte {position})")
        self.position = position


class TruncatedBatchError(CorruptRecordError):
    """The buffer ends inside a batch: a torn write on disk, a short read on the wire."""


class InvalidRecordError(KafkaError):
    error_code = ErrorCode.INVALID_RECORD


class RecordError(NamedTuple):
    """One rejected record: its index within its batch and why (Kafka's ``ProduceResponse.RecordError``)."""

    batch_index: int
    message: str | None = None

    def __str__(self) -> str:  # Kafka's RecordError.toString, which its exception messages embed
        return f"RecordError(batchIndex={self.batch_index}, message=" + \
            ("null" if self.message is None else f"'{self.message}'") + ")"


class RecordValidationError(InvalidRecordError):
    """Some records of a batch were rejected, so none of the batch is appended (Kafka's
    ``RecordValidationException``). ``record_errors`` name the records by their index in the batch;
    a Produce answers them in ``record_errors`` and librdkafka fails exactly those records with this
    error code, and the others of the batch with ``_INVALID_DIFFERENT_RECORD``.

    The code is INVALID_RECORD, or INVALID_TIMESTAMP when a timestamp is among the causes; the
    message is Kafka's ``processRecordErrors`` wording, which Kafka sends as the partition's
    ``error_message``.
    """

    def __init__(self, record_errors: list[RecordError], code: ErrorCode = ErrorCode.INVALID_RECORD) -> None:
        if not record_errors:
            raise ValueError("a RecordValidationError needs at least one record error")
        if code == ErrorCode.INVALID_TIMESTAMP:
            message = "One or more records have been rejected due to invalid timestamp"
        else:
            shown = ", ".join(str(e) for e in record_errors[:3])
            message = (f"One or more records have been rejected due to {len(record_errors)} record errors in total, "
                       f"and only showing the first three errors at most: [{shown}]")
        super().__init__(message)
        self.error_code = code
        self.record_errors = list(record_errors)


class UnsupportedForMessageFormatError(KafkaError):
    """Magic v0/v1 message sets: Kafka 4 dropped them (KIP-724) and so do we."""

    error_code = ErrorCode.UNSUPPORTED_FOR_MESSAGE_FORMAT


class UnsupportedCompressionTypeError(KafkaError):
    error_code = ErrorCode.UNSUPPORTED_COMPRESSION_TYPE


class RecordTooLargeError(KafkaError):
    error_code = ErrorCode.MESSAGE_TOO_LARGE


class RecordBatchTooLargeError(KafkaError):
    error_code = ErrorCode.RECORD_LIST_TOO_LARGE


class InvalidTimestampError(KafkaError):
    error_code = ErrorCode.INVALID_TIMESTAMP


class OffsetOutOfRangeError(KafkaError):
    error_code = ErrorCode.OFFSET_OUT_OF_RANGE


class KafkaStorageError(KafkaError):
    """An I/O failure in a log directory (full disk, EIO): Kafka's KafkaStorageException."""

    error_code = ErrorCode.KAFKA_STORAGE_ERROR
    retriable = True


class InvalidConfigError(KafkaError):
    """A config key with a value out of range or of the wrong type; the message names the key."""

    error_code = ErrorCode.INVALID_CONFIG


class OutOfOrderSequenceError(KafkaError):
    error_code = ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER


class DuplicateSequenceError(KafkaError):
    error_code = ErrorCode.DUPLICATE_SEQUENCE_NUMBER


class InvalidProducerEpochError(KafkaError):
    error_code = ErrorCode.INVALID_PRODUCER_EPOCH


class UnknownProducerIdError(KafkaError):
    error_code = ErrorCode.UNKNOWN_PRODUCER_ID


class InvalidTxnStateError(KafkaError):
    error_code = ErrorCode.INVALID_TXN_STATE


class ApiError(KafkaError):
    """An error a request handler answers with; the code is picked where it is raised."""

    def __init__(self, code: ErrorCode, message: str = "") -> None:
        super().__init__(message or code.name)
        self.error_code = code


def _all_subclasses(cls: type[KafkaError]) -> list[type[KafkaError]]:
    out = []
    for sub in cls.__subclasses__():
        out.append(sub)
        out.extend(_all_subclasses(sub))
    return out


def error_for(code: int) -> type[KafkaError]:
    """The most general exception class for a wire error code (KafkaError if none is defined)."""
    for cls in _all_subclasses(KafkaError):
        if cls is not ApiError and cls.error_code == code and KafkaError in cls.__bases__:
            return cls
    return KafkaError


class ClusterError(Exception):
    """Cluster mode cannot start or go on: ZooKeeper unreachable, this broker id taken, a cluster id
    that differs from the one in ``meta.properties``."""
