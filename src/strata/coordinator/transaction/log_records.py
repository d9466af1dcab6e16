"""The records of ``__transaction_state``, byte for byte as Apache Kafka writes and reads them.

Kafka's transaction coordinator keeps one record per transactional id in this compacted topic. The
layouts below are hand-encoded from apache/kafka
``transaction-coordinator/src/main/resources/common/message/TransactionLog{Key,Value}.json`` and
checked against ``TransactionLog.scala`` (3.9, ``core/.../coordinator/transaction``) and
``TransactionLog.java`` (4.x, ``transaction-coordinator/...``). Key and value each start with an int16
version.

Key, version 0 only (not flexible)::

    version int16 = 0 | TransactionalId string (int16 length + UTF-8)

Kafka reads every other key version as ``UnknownKey`` and skips the record with a warning ("It could
be a left over from an aborted upgrade"): :func:`decode_key` returns None for them.

Value, version 0 (not flexible)::

    version int16 = 0 | ProducerId int64 | ProducerEpoch int16 | TransactionTimeoutMs int32
    | TransactionStatus int8 | TransactionPartitions nullable array (int32 count, -1 = null) of
      [Topic string (int16 length) | PartitionIds array (int32 count) of int32]
    | TransactionLastUpdateTimestampMs int64 | TransactionStartTimestampMs int64

Value, version 1 (the first and only flexible version): the same fields in the same order, but
strings are compact (unsigned varint length + 1), arrays are compact (unsigned varint count + 1,
0 = null), each ``PartitionsSchema`` entry ends with its own (empty) tagged-field section, and the
value ends with a tagged-field section (unsigned varint count, then per field: tag, size, data, in
ascending tag order). A tagged field is written only when it differs from its default:

* tag 0 ``PreviousProducerId`` int64, default -1;
* tag 1 ``NextProducerId`` int64, default -1;
* tag 2 ``ClientTransactionVersion`` int16, default 0.

These three are in the 4.x schema. The 3.9 schema already has value v1 but with no tagged fields:
a 3.9 reader skips all three as unknown tags, just as this decoder skips tags it does not know
(newer Kafka trunks add more, for KIP-939 and KAFKA-20357).

Which version Kafka writes: the key is always v0. 3.9 writes value v0 unless the finalized
``transaction.version`` feature is at least 1, and that level needs metadata version 4.0-IV0,
which 3.9 does not ship as stable, so 3.9 in practice writes v0 (the default here,
:data:`VALUE_VERSION`). 4.x writes v1 once ``transaction.version`` is 1 or more
(``TransactionVersion.transactionLogValueVersion()``: level >= 1 -> 1, else 0). That is what a 4.0
cluster bootstraps with, and it sets ``ClientTransactionVersion``, so tag 2 appears for transactions
from TV2 clients. (From 2026 on, trunk also writes tags 0 and 1.) At v0 Kafka's generated writer
refuses to write a non-default tagged field (``UnsupportedVersionException``), and so does
:func:`encode_value` (``ValueError``).

``TransactionPartitions`` is null exactly when the state is ``Empty``: Kafka writes null for
``Empty`` (and refuses to write ``Empty`` with partitions). When it reads an ``Empty`` record it
ignores the partitions. A null list in any other state makes Kafka fail (NPE) while loading, so here
it is a :class:`~strata.errors.CorruptRecordError`. Kafka groups the partitions by topic in hash-map
order; we write them in the order given.

A null value is a tombstone. The coordinator writes one (key, no value) when a transactional id
expires (``transactional.id.expiration.ms``) and removes the id on load. An unknown value version
(there is no v2 yet; KIP-915 says that a bump would not be backward compatible) is an error in
Kafka (``IllegalStateException``) and a :class:`~strata.errors.CorruptRecordError` here, as are
truncated input, bad lengths, an unknown state id, a tagged field of the wrong size, and bytes left
over after the value.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from enum import IntEnum

from strata.errors import CorruptRecordError
from strata.protocol.message_fields import I16, I64, MessageReader, MessageWriter

TRANSACTION_STATE_TOPIC = "__transaction_state"

KEY_VERSION = 0
VALUE_VERSION = 0  # what Kafka 3.9 writes (transaction.version 0)
FLEXIBLE_VALUE_VERSION = 1  # what Kafka 4.x writes once transaction.version >= 1
HIGHEST_VALUE_VERSION = 1

NO_PRODUCER_ID = -1

# Tagged fields of value v1+: (tag, default).
TAG_PREVIOUS_PRODUCER_ID = 0
TAG_NEXT_PRODUCER_ID = 1
TAG_CLIENT_TRANSACTION_VERSION = 2



class TransactionState(IntEnum):
    """Kafka's ``TransactionState``: the value is the ``TransactionStatus`` id stored in the log."""

    EMPTY = 0
    ONGOING = 1
    PREPARE_COMMIT = 2
    PREPARE_ABORT = 3
    COMPLETE_COMMIT = 4
    COMPLETE_ABORT = 5
    DEAD = 6
    PREPARE_EPOCH_FENCE = 7

    @property
    def kafka_name(self) -> str:
        """The name DescribeTransactions and ListTransactions report (``"PrepareCommit"``...)."""
        return _KAFKA_NAMES[self]

    @classmethod
    def from_kafka_name(cls, name: str) -> TransactionState:
        """The state of a Kafka name, case-sensitive like Kafka's ``fromName``; ValueError if unknown.

        ListTransactions does not fail on an unknown state filter: Kafka returns its name in
        ``UnknownStateFilters``, so a handler should catch the ValueError.
        """
        try:
            return _BY_KAFKA_NAME[name]
        except KeyError:
            raise ValueError(f"unknown transaction state name {name!r}") from None


_KAFKA_NAMES: dict[TransactionState, str] = {
    TransactionState.EMPTY: "Empty",
    TransactionState.ONGOING: "Ongoing",
    TransactionState.PREPARE_COMMIT: "PrepareCommit",
    TransactionState.PREPARE_ABORT: "PrepareAbort",
    TransactionState.COMPLETE_COMMIT: "CompleteCommit",
    TransactionState.COMPLETE_ABORT: "CompleteAbort",
    TransactionState.DEAD: "Dead",
    TransactionState.PREPARE_EPOCH_FENCE: "PrepareEpochFence",
}
_BY_KAFKA_NAME: dict[str, TransactionState] = {name: state for state, name in _KAFKA_NAMES.items()}


@dataclass(frozen=True, slots=True)
class TransactionLogValue:
    producer_id: int
    producer_epoch: int
    transaction_timeout_ms: int
    state: TransactionState
    partitions: tuple[tuple[str, tuple[int, ...]], ...]  # (topic, partition ids), in the order written
    last_update_timestamp_ms: int
    start_timestamp_ms: int
    previous_producer_id: int = NO_PRODUCER_ID  # tag 0, v1+
    next_producer_id: int = NO_PRODUCER_ID  # tag 1, v1+
    client_transaction_version: int = 0  # tag 2, v1+


# -- keys -----------------------------------------------------------------------------------

def encode_key(transactional_id: str) -> bytes:
    """``TransactionLogKey`` v0, the only key version Kafka has."""
    w = MessageWriter(flexible=False)
    w.int16(KEY_VERSION)
    w.string(transactional_id)
    return bytes(w.out)


def decode_key(data: bytes | bytearray | memoryview) -> str | None:
    """The transactional id, or None for a key version Kafka skips (anything but 0)."""
    r = MessageReader(data, "TransactionLogKey")
    version = r.int16()
    if version != KEY_VERSION:
        return None
    transactional_id = r.string()
    r.done()
    return transactional_id


# -- values ---------------------------------------------------------------------------------

def encode_value(value: TransactionLogValue, version: int = VALUE_VERSION) -> bytes:
    """``TransactionLogValue`` at ``version`` (0: Kafka 3.9; 1: Kafka 4.x with transaction.version >= 1)."""
    if not 0 <= version <= HIGHEST_VALUE_VERSION:
        raise ValueError(f"TransactionLogValue has versions 0-{HIGHEST_VALUE_VERSION}, not {version}")
    state = TransactionState(value.state)
    if state is TransactionState.EMPTY and value.partitions:
        raise ValueError(f"a transaction in state Empty has no partitions, not {value.partitions!r}")
    tagged: list[tuple[int, bytes]] = []
    if value.previous_producer_id != NO_PRODUCER_ID:
        tagged.append((TAG_PREVIOUS_PRODUCER_ID, _pack(I64, value.previous_producer_id)))
    if value.next_producer_id != NO_PRODUCER_ID:
        tagged.append((TAG_NEXT_PRODUCER_ID, _pack(I64, value.next_producer_id)))
    if value.client_transaction_version != 0:
        tagged.append((TAG_CLIENT_TRANSACTION_VERSION, _pack(I16, value.client_transaction_version)))
    if tagged and version < FLEXIBLE_VALUE_VERSION:
        raise ValueError(f"TransactionLogValue v{version} cannot carry tagged fields {[t for t, _ in tagged]}")

    w = MessageWriter(flexible=version >= FLEXIBLE_VALUE_VERSION)
    try:
        w.int16(version)
        w.int64(value.producer_id)
        w.int16(value.producer_epoch)
        w.int32(value.transaction_timeout_ms)
        w.int8(state)
        if state is TransactionState.EMPTY:
            w.array_len(None)
        else:
            w.array_len(len(value.partitions))
            for topic, partition_ids in value.partitions:
                w.string(topic)
                w.array_len(len(partition_ids))
                for partition in partition_ids:
                    w.int32(partition)
                if w.flexible:
                    w.uvarint(0)  # PartitionsSchema has no tagged fields
        w.int64(value.last_update_timestamp_ms)
        w.int64(value.start_timestamp_ms)
    except struct.error as e:
        raise ValueError(f"TransactionLogValue field out of range: {e}") from None
    if w.flexible:
        w.uvarint(len(tagged))
        for tag, data in tagged:  # already in ascending tag order
            w.uvarint(tag)
            w.uvarint(len(data))
            w.out += data
    return bytes(w.out)


def _pack(s: struct.Struct, v: int) -> bytes:
    try:
        return s.pack(v)
    except struct.error as e:
        raise ValueError(f"TransactionLogValue tagged field out of range: {e}") from None


def decode_value(data: bytes | bytearray | memoryview) -> TransactionLogValue:
    """A non-null value (a null value is a tombstone: the caller drops the transactional id)."""
    r = MessageReader(data, "TransactionLogValue")
    version = r.int16()
    if not 0 <= version <= HIGHEST_VALUE_VERSION:
        raise CorruptRecordError(f"TransactionLogValue: unknown version {version}")
    r.flexible = version >= FLEXIBLE_VALUE_VERSION
    producer_id = r.int64()
    producer_epoch = r.int16()
    timeout_ms = r.int32()
    state_id = r.int8()
    try:
        state = TransactionState(state_id)
    except ValueError:
        raise CorruptRecordError(f"TransactionLogValue: unknown transaction state id {state_id}", r.pos - 1) from None
    partitions: list[tuple[str, tuple[int, ...]]] = []
    # An entry is at least a one-byte compact string and a one-byte compact array (flexible),
    # or a two-byte string and a four-byte count.
    count = r.nullable_array_len(3 if r.flexible else 6)
    if count is None:
        if state is not TransactionState.EMPTY:
            raise CorruptRecordError(f"TransactionLogValue: null partitions in state {state.kafka_name}", r.pos)
    else:
        for _ in range(count):
            topic = r.string()
            n = r.nullable_array_len(4)
            if n is None:
                raise CorruptRecordError("TransactionLogValue: null partition ids", r.pos)
            ids = struct.unpack(f">{n}i", r.take(4 * n))
            if r.flexible:
                r.skip_tags()
            partitions.append((topic, tuple(int(i) for i in ids)))
    last_update = r.int64()
    start = r.int64()
    previous_producer_id = next_producer_id = NO_PRODUCER_ID
    client_transaction_version = 0
    if r.flexible:
        for _ in range(r.tag_count()):
            tag = r.uvarint()
            size = r.uvarint()
            field = r.take(size)
            if tag in (TAG_PREVIOUS_PRODUCER_ID, TAG_NEXT_PRODUCER_ID):
                if size != 8:
                    raise CorruptRecordError(f"TransactionLogValue: tagged int64 {tag} of {size} bytes", r.pos)
                if tag == TAG_PREVIOUS_PRODUCER_ID:
                    previous_producer_id = int(I64.unpack(field)[0])
                else:
                    next_producer_id = int(I64.unpack(field)[0])
            elif tag == TAG_CLIENT_TRANSACTION_VERSION:
                if size != 2:
                    raise CorruptRecordError(f"TransactionLogValue: tagged int16 {tag} of {size} bytes", r.pos)
                client_transaction_version = int(I16.unpack(field)[0])
            # any other tag is a field from a newer Kafka: skipped, as Kafka's reader does
    r.done()
    if state is TransactionState.EMPTY:
        partitions = []  # Kafka ignores the partitions of an Empty transaction
    return TransactionLogValue(
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        transaction_timeout_ms=timeout_ms,
        state=state,
        partitions=tuple(partitions),
        last_update_timestamp_ms=last_update,
        start_timestamp_ms=start,
        previous_producer_id=previous_producer_id,
        next_producer_id=next_producer_id,
        client_transaction_version=client_transaction_version,
    )


def decode_record(key: bytes | bytearray | memoryview,
                  value: bytes | bytearray | memoryview | None) -> tuple[str, TransactionLogValue | None] | None:
    """One record as the coordinator loads it.

    None: a key version to skip. ``(transactional_id, None)``: a tombstone, so forget the id.
    ``(transactional_id, value)``: the id's latest state.
    """
    transactional_id = decode_key(key)
    if transactional_id is None:
        return None
    return transactional_id, None if value is None else decode_value(value)
