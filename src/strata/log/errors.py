"""Errors raised by the log layer's own files (checkpoints, indexes, producer snapshots).

They all derive from :class:`KafkaStorageError` so a handler that catches "the log directory is
unhealthy" also catches "a file in it does not parse": Kafka treats both as KAFKA_STORAGE_ERROR and
takes the directory offline rather than serving from a file it cannot trust. None of them derives
from :class:`KafkaError` directly, so ``strata.errors.error_for`` keeps resolving codes as before.
"""

from __future__ import annotations

from strata.errors import ErrorCode, InvalidTxnStateError, KafkaStorageError


class CorruptCheckpointError(KafkaStorageError):
    """A checkpoint-like file (offsets, leader epochs, partition.metadata, producer snapshot) is
    malformed; the message names the file so an operator can inspect or remove it."""


class CorruptIndexError(KafkaStorageError):
    """An index file fails its sanity check (Kafka's CorruptIndexException); the caller rebuilds it."""


class LogStateError(KafkaStorageError, ValueError):
    """A call that would break an invariant of a log file (Kafka throws IllegalArgumentException).

    It is also a ``ValueError`` because it is a caller bug, not a disk fault; it stays a storage
    error so a produce handler maps it to a per-partition error instead of crashing the request.
    """


class IndexFullError(LogStateError):
    """An append to an index that has no free slot, or that is not open for appends; the log should
    have rolled the segment first (Kafka's IllegalArgumentException "attempt to append to a full index")."""


class InvalidOffsetError(LogStateError):
    """An offset that cannot go into an index: not above the last entry, or not relative-encodable
    to the segment's base offset (Kafka's InvalidOffsetException / IndexOffsetOverflowException)."""


class TransactionCoordinatorFencedError(InvalidTxnStateError):
    """An end-transaction marker from a coordinator older than the one already seen (Kafka's code 52)."""

    error_code = ErrorCode.TRANSACTION_COORDINATOR_FENCED


class CleaningAbortedError(Exception):
    """A log cleaning stopped on purpose (shutdown, or the log truncated, moved or deleted meanwhile):
    the log is left as it was, nothing failed."""
