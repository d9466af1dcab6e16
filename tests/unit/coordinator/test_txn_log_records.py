"""The ``__transaction_state`` record codec against byte vectors derived by hand from Kafka's schemas.

The expected bytes are spelled out field by field from apache/kafka
``transaction-coordinator/src/main/resources/common/message/TransactionLog{Key,Value}.json``: an
int16 version prefix. Key v0 is a non-flexible string (int16 length + UTF-8). Value v0 is
non-flexible: int32 array counts, -1 for the null partition list of an Empty transaction. Value v1
is flexible: unsigned-varint lengths and counts + 1 (0 = null), an empty tagged-field section after
each PartitionsSchema entry, and a final tagged-field section with PreviousProducerId (tag 0, int64),
NextProducerId (tag 1, int64) and ClientTransactionVersion (tag 2, int16), each written only when it
is not its default. The vectors are literals, not the encoder's output, so any drift in the layout
fails here.
"""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from strata.coordinator.transaction.log_records import (
    TRANSACTION_STATE_TOPIC,
    VALUE_VERSION,
    TransactionLogValue,
    TransactionState,
    decode_key,
    decode_record,
    decode_value,
    encode_key,
    encode_value,
)
from strata.errors import CorruptRecordError


def h(*fields: str) -> bytes:
    """Bytes from one hex string per field (spaces allowed), so each vector reads like the schema."""
    return bytes.fromhex("".join(fields))


T_1700000000000 = "0000018bcfe56800"  # 1_700_000_000_000 = 0x18BCFE56800
T_1699999999000 = "0000018bcfe56418"  # 1_700_000_000_000 - 1000

# -- keys ---------------------------------------------------------------------------------------

KEY_TXN_1 = h("0000",  # version 0
              "0005", "74786e2d31")  # TransactionalId "txn-1"


def test_topic_name() -> None:
    assert TRANSACTION_STATE_TOPIC == "__transaction_state"


def test_key_v0_matches_the_schema() -> None:
    assert encode_key("txn-1") == KEY_TXN_1
    assert decode_key(KEY_TXN_1) == "txn-1"


def test_key_length_counts_utf8_bytes() -> None:
    data = h("0000", "0006", "74782d c3a9 21")  # "tx-é!": five characters, six bytes
    assert encode_key("tx-é!") == data
    assert decode_key(data) == "tx-é!"
    assert encode_key("") == h("0000", "0000")


@pytest.mark.parametrize("version", ["0001", "0002", "7fff", "ffff", "8000"])
def test_unknown_key_versions_are_skipped(version: str) -> None:
    # Kafka's readTxnRecordKey yields UnknownKey for any version but 0; loading skips the record.
    assert decode_key(h(version, "0005", "74786e2d31")) is None
    assert decode_key(h(version)) is None
    assert decode_record(h(version), None) is None


@pytest.mark.parametrize("bad", [
    b"", b"\x00",                    # no version
    h("0000"), h("0000", "00"),      # no string length
    KEY_TXN_1[:-1],                  # string runs past the end
    h("0000", "ffff"),               # null transactional id
    h("0000", "0002", "c328"),       # not UTF-8
    KEY_TXN_1 + b"\x00",             # bytes left over
])
def test_malformed_keys_are_corrupt(bad: bytes) -> None:
    with pytest.raises(CorruptRecordError):
        decode_key(bad)


# -- values: fixed vectors ----------------------------------------------------------------------

ONGOING = TransactionLogValue(
    producer_id=1000, producer_epoch=5, transaction_timeout_ms=60_000, state=TransactionState.ONGOING,
    partitions=(("foo", (0, 2)),), last_update_timestamp_ms=1_700_000_000_000,
    start_timestamp_ms=1_699_999_999_000,
)
ONGOING_V0 = h(
    "0000",                          # version 0
    "00000000000003e8",              # ProducerId 1000
    "0005",                          # ProducerEpoch 5
    "0000ea60",                      # TransactionTimeoutMs 60000
    "01",                            # TransactionStatus Ongoing
    "00000001",                      # TransactionPartitions: 1 entry
    "0003", "666f6f",                #   Topic "foo"
    "00000002", "00000000", "00000002",  # PartitionIds [0, 2]
    T_1700000000000,                 # TransactionLastUpdateTimestampMs
    T_1699999999000,                 # TransactionStartTimestampMs
)
ONGOING_V1 = h(
    "0001",                          # version 1 (flexible)
    "00000000000003e8", "0005", "0000ea60", "01",
    "02",                            # compact array: 1 entry + 1
    "04", "666f6f",                  #   compact string "foo": 3 + 1
    "03", "00000000", "00000002",    #   compact array of int32: 2 + 1
    "00",                            #   PartitionsSchema tagged fields: none
    T_1700000000000, T_1699999999000,
    "00",                            # tagged fields: none (all at their defaults)
)

EMPTY = TransactionLogValue(
    producer_id=42, producer_epoch=0, transaction_timeout_ms=60_000, state=TransactionState.EMPTY,
    partitions=(), last_update_timestamp_ms=1_700_000_000_000, start_timestamp_ms=1_700_000_000_000,
)
EMPTY_V0 = h("0000", "000000000000002a", "0000", "0000ea60",
             "00",                   # Empty
             "ffffffff",             # null TransactionPartitions: Kafka writes null for Empty
             T_1700000000000, T_1700000000000)
EMPTY_V1 = h("0001", "000000000000002a", "0000", "0000ea60", "00",
             "00",                   # null compact array
             T_1700000000000, T_1700000000000, "00")

COMPLETE_COMMIT = TransactionLogValue(
    producer_id=1000, producer_epoch=6, transaction_timeout_ms=60_000, state=TransactionState.COMPLETE_COMMIT,
    partitions=(), last_update_timestamp_ms=1_700_000_000_000, start_timestamp_ms=1_699_999_999_000,
)
COMPLETE_COMMIT_V0 = h("0000", "00000000000003e8", "0006", "0000ea60",
                       "04",         # CompleteCommit
                       "00000000",   # an empty (not null) list: only Empty is null
                       T_1700000000000, T_1699999999000)
COMPLETE_COMMIT_V1 = h("0001", "00000000000003e8", "0006", "0000ea60", "04",
                       "01",         # empty compact array: 0 + 1
                       T_1700000000000, T_1699999999000, "00")

PREPARE_COMMIT_TAGGED = TransactionLogValue(
    producer_id=1000, producer_epoch=32767, transaction_timeout_ms=900_000, state=TransactionState.PREPARE_COMMIT,
    partitions=(("foo", (0, 2)), ("bar", (7,))), last_update_timestamp_ms=1_700_000_000_000,
    start_timestamp_ms=1_699_999_999_000, previous_producer_id=999, next_producer_id=1001,
    client_transaction_version=2,
)
PREPARE_COMMIT_TAGGED_V1 = h(
    "0001", "00000000000003e8",
    "7fff",                          # ProducerEpoch 32767
    "000dbba0",                      # TransactionTimeoutMs 900000
    "02",                            # PrepareCommit
    "03",                            # 2 entries + 1
    "04", "666f6f", "03", "00000000", "00000002", "00",
    "04", "626172", "02", "00000007", "00",   # "bar" [7]
    T_1700000000000, T_1699999999000,
    "03",                            # three tagged fields, in ascending tag order:
    "00", "08", "00000000000003e7",  #   tag 0 PreviousProducerId, 8 bytes, 999
    "01", "08", "00000000000003e9",  #   tag 1 NextProducerId, 8 bytes, 1001
    "02", "02", "0002",              #   tag 2 ClientTransactionVersion, 2 bytes, 2
)

# What Kafka 4.0 writes for a transactional id of a TV2 client: only ClientTransactionVersion is set.
TV2_ONGOING = TransactionLogValue(
    producer_id=1000, producer_epoch=5, transaction_timeout_ms=60_000, state=TransactionState.ONGOING,
    partitions=(("foo", (0, 2)),), last_update_timestamp_ms=1_700_000_000_000,
    start_timestamp_ms=1_699_999_999_000, client_transaction_version=2,
)
TV2_ONGOING_V1 = ONGOING_V1[:-1] + h("01", "02", "02", "0002")

GOLDEN = [
    (ONGOING, 0, ONGOING_V0),
    (ONGOING, 1, ONGOING_V1),
    (EMPTY, 0, EMPTY_V0),
    (EMPTY, 1, EMPTY_V1),
    (COMPLETE_COMMIT, 0, COMPLETE_COMMIT_V0),
    (COMPLETE_COMMIT, 1, COMPLETE_COMMIT_V1),
    (PREPARE_COMMIT_TAGGED, 1, PREPARE_COMMIT_TAGGED_V1),
    (TV2_ONGOING, 1, TV2_ONGOING_V1),
]
GOLDEN_IDS = ["ongoing-v0", "ongoing-v1", "empty-v0", "empty-v1", "complete-commit-v0", "complete-commit-v1",
              "tagged-v1", "tv2-client-v1"]


@pytest.mark.parametrize("value, version, data", GOLDEN, ids=GOLDEN_IDS)
def test_value_matches_the_schema(value: TransactionLogValue, version: int, data: bytes) -> None:
    assert encode_value(value, version) == data
    assert decode_value(data) == value


def test_default_value_version_is_what_kafka_3_9_writes() -> None:
    assert VALUE_VERSION == 0
    assert encode_value(ONGOING) == ONGOING_V0


def test_multi_byte_compact_lengths() -> None:
    topic = "t" * 200  # compact length 201 = 0xc9 0x01
    ids = tuple(range(130))  # compact count 131 = 0x83 0x01
    v = TransactionLogValue(1, 0, 1000, TransactionState.ONGOING, ((topic, ids),), 0, 0)
    data = encode_value(v, 1)
    head = h("0001", "0000000000000001", "0000", "000003e8", "01", "02", "c901")
    assert data[:len(head)] == head
    rest = data[len(head) + 200:]
    assert rest[:2] == h("8301")
    assert rest[2:6] == h("00000000") and rest[2 + 4 * 129:2 + 4 * 130] == h("00000081")
    assert rest[2 + 4 * 130:] == h("00", "0000000000000000", "0000000000000000", "00")
    assert decode_value(data) == v
    head_v0 = h("0000", "0000000000000001", "0000", "000003e8", "01", "00000001", "00c8")
    assert encode_value(v, 0)[:len(head_v0)] == head_v0


def test_unknown_tagged_fields_are_skipped_and_order_is_free() -> None:
    # A newer Kafka adds tags (e.g. NextProducerEpoch); Kafka's reader keeps them as unknown.
    tags = h("04", "05", "02", "7ffe",        # tag 5, 2 bytes: unknown
             "02", "02", "0002",              # tag 2 before tag 0: accepted
             "00", "08", "00000000000003e7",
             "01", "08", "00000000000003e9")
    assert decode_value(ONGOING_V1[:-1] + tags) == TransactionLogValue(
        **{**_fields(ONGOING), "previous_producer_id": 999, "next_producer_id": 1001, "client_transaction_version": 2})
    # an unknown tag inside a PartitionsSchema entry is skipped too
    entry_tagged = ONGOING_V1.replace(h("00000002", "00"), h("00000002", "01", "09", "01", "ff"), 1)
    assert decode_value(entry_tagged) == ONGOING


def _fields(v: TransactionLogValue) -> dict[str, object]:
    return {name: getattr(v, name) for name in TransactionLogValue.__slots__}


def test_partitions_of_an_empty_transaction_are_ignored_like_kafka() -> None:
    # Kafka never writes them, and readTxnRecordValue ignores them for Empty.
    data = h("0000", "000000000000002a", "0000", "0000ea60", "00",
             "00000001", "0003", "666f6f", "00000001", "00000000", T_1700000000000, T_1700000000000)
    assert decode_value(data) == EMPTY


def test_decode_record_handles_tombstones_and_values() -> None:
    assert decode_record(KEY_TXN_1, None) == ("txn-1", None)  # an expired transactional id
    assert decode_record(KEY_TXN_1, ONGOING_V0) == ("txn-1", ONGOING)
    assert decode_record(h("0001", "0000"), ONGOING_V0) is None


# -- values: what the encoder refuses ----------------------------------------------------------

@pytest.mark.parametrize("value, version", [
    (TransactionLogValue(**{**_fields(ONGOING), "client_transaction_version": 2}), 0),
    (TransactionLogValue(**{**_fields(ONGOING), "previous_producer_id": 5}), 0),
    (TransactionLogValue(**{**_fields(ONGOING), "next_producer_id": 5}), 0),
    (TransactionLogValue(**{**_fields(EMPTY), "partitions": (("foo", (0,)),)}), 0),
    (TransactionLogValue(**{**_fields(EMPTY), "partitions": (("foo", (0,)),)}), 1),
    (ONGOING, 2),
    (ONGOING, -1),
    (TransactionLogValue(**{**_fields(ONGOING), "producer_epoch": 32768}), 1),
    (TransactionLogValue(**{**_fields(ONGOING), "partitions": (("foo", (2**31,)),)}), 0),
    (TransactionLogValue(**{**_fields(ONGOING), "client_transaction_version": 2**15}), 1),
    (TransactionLogValue(**{**_fields(ONGOING), "partitions": (("x" * 0x8000, (0,)),)}), 1),
], ids=["v0-client-version", "v0-previous-id", "v0-next-id", "empty-with-partitions-v0",
        "empty-with-partitions-v1", "version-2", "version-negative", "epoch-overflow", "partition-overflow",
        "client-version-overflow", "topic-too-long"])
def test_encoder_refuses_what_kafka_would_not_write(value: TransactionLogValue, version: int) -> None:
    with pytest.raises(ValueError):
        encode_value(value, version)


# -- values: corrupt input ----------------------------------------------------------------------

@pytest.mark.parametrize("data", [d for _, _, d in GOLDEN], ids=GOLDEN_IDS)
def test_every_truncation_is_corrupt(data: bytes) -> None:
    for end in range(len(data)):
        with pytest.raises(CorruptRecordError):
            decode_value(data[:end])


@pytest.mark.parametrize("bad", [
    h("0002") + ONGOING_V1[2:],                          # no value version 2 (yet)
    h("ffff") + ONGOING_V0[2:],                          # negative version
    ONGOING_V0[:16] + h("08") + ONGOING_V0[17:],         # state id 8 does not exist
    ONGOING_V0[:16] + h("ff") + ONGOING_V0[17:],         # state id -1
    COMPLETE_COMMIT_V0.replace(h("04", "00000000"), h("04", "ffffffff")),  # null partitions, not Empty
    COMPLETE_COMMIT_V1.replace(h("04", "01"), h("04", "00")),              # same, flexible
    ONGOING_V0.replace(h("00000002", "00000000"), h("ffffffff", "00000000")),  # null partition ids
    ONGOING_V0.replace(h("00000001", "0003"), h("7fffffff", "0003")),      # count beyond the bytes
    ONGOING_V1.replace(h("01", "02", "04"), h("01", "ffffffff0f", "04")),  # compact count beyond the bytes
    ONGOING_V0.replace(h("0003", "666f6f"), h("ffff", "666f6f")),          # null topic
    ONGOING_V0.replace(h("0003", "666f6f"), h("0003", "66c328")),          # topic not UTF-8
    ONGOING_V1.replace(h("04", "666f6f"), h("ffff03", "666f6f")),          # compact string over 0x7fff
    ONGOING_V1.replace(h("04", "666f6f"), h("8080808080", "666f6f")),      # uvarint over five bytes
    ONGOING_V1[:-1] + h("01", "00", "04", "00000001"),                     # tag 0 of 4 bytes, not 8
    ONGOING_V1[:-1] + h("01", "02", "08", "0000000000000002"),             # tag 2 of 8 bytes, not 2
    ONGOING_V1[:-1] + h("01", "07", "05", "0000"),                         # unknown tag runs past the end
    ONGOING_V1[:-1] + h("ffffffff0f"),                                     # tag count beyond the bytes
    ONGOING_V0 + h("00"),                                                  # bytes left over
    ONGOING_V1 + h("00"),
], ids=["version-2", "version-negative", "state-8", "state-negative", "null-partitions-v0", "null-partitions-v1",
        "null-partition-ids", "huge-count", "huge-compact-count", "null-topic", "bad-utf8", "long-compact-string",
        "long-uvarint", "short-tag-0", "long-tag-2", "truncated-unknown-tag", "huge-tag-count", "trailing-v0",
        "trailing-v1"])
def test_malformed_values_are_corrupt(bad: bytes) -> None:
    with pytest.raises(CorruptRecordError):
        decode_value(bad)


def test_a_string_longer_than_kafka_allows_is_corrupt_even_when_the_bytes_are_there() -> None:
    # Kafka's compact-string reader rejects lengths over 0x7fff; uvarint 32768 + 1 = 81 80 02.
    long_topic = ONGOING_V1.replace(h("04", "666f6f"), h("818002") + b"x" * 0x8000)
    with pytest.raises(CorruptRecordError):
        decode_value(long_topic)
    just_fits = ONGOING_V1.replace(h("04", "666f6f"), h("808002") + b"x" * 0x7FFF)  # 32767 + 1
    assert decode_value(just_fits).partitions == (("x" * 0x7FFF, (0, 2)),)


# -- round trips and fuzzing --------------------------------------------------------------------

int16 = st.integers(-(2**15), 2**15 - 1)
int32 = st.integers(-(2**31), 2**31 - 1)
int64 = st.integers(-(2**63), 2**63 - 1)
names = st.text(st.characters(codec="utf-8"), max_size=30)
partition_lists = st.lists(st.tuples(names, st.lists(int32, max_size=5).map(tuple)), max_size=4).map(tuple)


@st.composite
def log_values(draw: st.DrawFn, version: int) -> TransactionLogValue:
    state = draw(st.sampled_from(TransactionState))
    tagged = version >= 1
    return TransactionLogValue(
        producer_id=draw(int64),
        producer_epoch=draw(int16),
        transaction_timeout_ms=draw(int32),
        state=state,
        partitions=() if state is TransactionState.EMPTY else draw(partition_lists),
        last_update_timestamp_ms=draw(int64),
        start_timestamp_ms=draw(int64),
        previous_producer_id=draw(int64) if tagged else -1,
        next_producer_id=draw(int64) if tagged else -1,
        client_transaction_version=draw(int16) if tagged else 0,
    )


@given(st.data(), st.sampled_from([0, 1]))
def test_value_round_trip(data: st.DataObject, version: int) -> None:
    value = data.draw(log_values(version))
    encoded = encode_value(value, version)
    assert encoded[:2] == version.to_bytes(2, "big")
    assert decode_value(encoded) == value


@given(log_values(0))
def test_v0_and_v1_carry_the_same_value_without_tags(value: TransactionLogValue) -> None:
    assert decode_value(encode_value(value, 0)) == decode_value(encode_value(value, 1)) == value


@given(names)
def test_key_round_trip(transactional_id: str) -> None:
    assert decode_key(encode_key(transactional_id)) == transactional_id


def _decodes_or_is_corrupt(data: bytes) -> None:
    try:
        value = decode_value(data)
    except CorruptRecordError:
        return
    assert isinstance(value, TransactionLogValue)
    assert isinstance(value.state, TransactionState)


@given(st.binary(max_size=200))
def test_any_bytes_decode_or_are_corrupt(data: bytes) -> None:
    _decodes_or_is_corrupt(data)
    try:
        key = decode_key(data)
    except CorruptRecordError:
        return
    assert key is None or isinstance(key, str)


@given(st.sampled_from([b"\x00\x00", b"\x00\x01"]), st.binary(max_size=120))
def test_any_body_of_a_known_version_decodes_or_is_corrupt(prefix: bytes, body: bytes) -> None:
    _decodes_or_is_corrupt(prefix + body)


@given(st.data())
def test_garbled_valid_values_decode_or_are_corrupt(data: st.DataObject) -> None:
    version = data.draw(st.sampled_from([0, 1]))
    encoded = bytearray(encode_value(data.draw(log_values(version)), version))
    for _ in range(data.draw(st.integers(1, 4))):
        i = data.draw(st.integers(0, len(encoded) - 1))
        encoded[i] = data.draw(st.integers(0, 255))
    _decodes_or_is_corrupt(bytes(encoded))


# -- states ---------------------------------------------------------------------------------------

KAFKA_STATES = [(0, "EMPTY", "Empty"), (1, "ONGOING", "Ongoing"), (2, "PREPARE_COMMIT", "PrepareCommit"),
                (3, "PREPARE_ABORT", "PrepareAbort"), (4, "COMPLETE_COMMIT", "CompleteCommit"),
                (5, "COMPLETE_ABORT", "CompleteAbort"), (6, "DEAD", "Dead"),
                (7, "PREPARE_EPOCH_FENCE", "PrepareEpochFence")]


def test_states_match_kafka_ids_and_names() -> None:
    assert [(s.value, s.name, s.kafka_name) for s in TransactionState] == KAFKA_STATES
    for state_id, _, kafka_name in KAFKA_STATES:
        assert TransactionState.from_kafka_name(kafka_name) is TransactionState(state_id)


@pytest.mark.parametrize("name", ["", "ongoing", "ONGOING", "Unknown", "Prepare_Commit", " Empty"])
def test_unknown_state_names_raise(name: str) -> None:
    with pytest.raises(ValueError):
        TransactionState.from_kafka_name(name)


@pytest.mark.parametrize("state", list(TransactionState))
def test_state_is_the_status_byte(state: TransactionState) -> None:
    v = TransactionLogValue(**{**_fields(COMPLETE_COMMIT), "state": state})
    assert encode_value(v, 0)[16] == state.value
    assert decode_value(encode_value(v, 1)).state is state
