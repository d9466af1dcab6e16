"""Compacted topics refuse keyless records, as Kafka's ``LogValidator.validateKey`` does.

The validator walks only the key lengths of a compacted topic's leader appends; a batch with a
keyless record raises :class:`RecordValidationError` naming every keyless record by its index in
the batch, and nothing of the batch is appended. Other topics, and replication, never walk records.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from strata.common import TopicPartition
from strata.config import LogConfig
from strata.errors import (
    CorruptRecordError,
    ErrorCode,
    InvalidRecordError,
    RecordError,
    RecordValidationError,
    error_for,
)
from strata.log.producer_state import AppendOrigin
from strata.log.validator import (
    analyze_and_validate,
    fast_plain_append,
    keyless_record_indexes,
    validate_keys,
)
from strata.protocol.records import (
    CompressionType,
    build_batch,
    decode_batch,
    iter_batches,
    parse_header,
    reseal_crc,
)

NOW = 1_700_000_000_000
TP = TopicPartition("orders", 3)
COMPACT = LogConfig(cleanup_policy=("compact",))
COMPACT_DELETE = LogConfig(cleanup_policy=("compact", "delete"))
DELETE = LogConfig()
MESSAGE = "Compacted topic cannot accept message without key in topic partition orders-3"

MIXED = [(b"k0", b"v0"), (None, b"v1"), (b"k2", b"v2"), (None, b"v3"), (b"", b"v4"), (None, None)]


def indexes_of(raw: bytes) -> list[int]:
    return keyless_record_indexes(raw, 0, parse_header(raw, 0))


@pytest.mark.parametrize("codec", list(CompressionType))
def test_keyless_indexes_in_every_codec(codec):
    raw = build_batch(MIXED, timestamp=NOW, compression=codec)
    assert indexes_of(raw) == [1, 3, 5]  # an empty key (index 4) is a key; a null value is fine


@settings(max_examples=100, deadline=None)
@given(
    items=st.lists(st.tuples(st.none() | st.binary(max_size=200), st.none() | st.binary(max_size=300)),
                   min_size=1, max_size=40),
    codec=st.sampled_from(list(CompressionType)),
    lead=st.binary(max_size=3),
)
def test_walk_agrees_with_full_decoding(items, codec, lead):
    """Large keys and values (multi-byte varints) and a batch not at offset 0 of the buffer."""
    raw = build_batch([(k, v) for k, v in items], timestamp=NOW, compression=codec)
    buf = lead + raw
    expected = [i for i, r in enumerate(decode_batch(raw).records) if r.key is None]
    assert keyless_record_indexes(buf, len(lead), parse_header(buf, len(lead))) == expected


def test_validate_keys_raises_one_record_error_per_keyless_record():
    raw = build_batch(MIXED, timestamp=NOW)
    with pytest.raises(RecordValidationError) as e:
        validate_keys(raw, 0, parse_header(raw, 0), TP)
    err = e.value
    assert err.error_code == ErrorCode.INVALID_RECORD
    assert isinstance(err, InvalidRecordError)
    assert err.record_errors == [RecordError(1, MESSAGE), RecordError(3, MESSAGE), RecordError(5, MESSAGE)]
    # Kafka's processRecordErrors wording (the partition's error_message in a ProduceResponse)
    assert str(err) == (
        "One or more records have been rejected due to 3 record errors in total, and only showing the first "
        f"three errors at most: [RecordError(batchIndex=1, message='{MESSAGE}'), "
        f"RecordError(batchIndex=3, message='{MESSAGE}'), RecordError(batchIndex=5, message='{MESSAGE}')]"
    )


def test_record_validation_error_shows_at_most_three_and_keeps_all():
    errors = [RecordError(i, "m") for i in range(5)] + [RecordError(7)]
    err = RecordValidationError(errors)
    assert err.record_errors == errors
    assert "6 record errors in total" in str(err) and "batchIndex=3" not in str(err)
    assert str(RecordError(7)) == "RecordError(batchIndex=7, message=null)"
    assert RecordValidationError([RecordError(0)], ErrorCode.INVALID_TIMESTAMP).error_code == \
        ErrorCode.INVALID_TIMESTAMP
    with pytest.raises(ValueError):
        RecordValidationError([])
    assert error_for(ErrorCode.INVALID_RECORD) is InvalidRecordError  # the new subclass does not shadow it


def test_keyed_batch_passes_on_a_compacted_topic():
    raw = build_batch([(b"a", b"1"), (b"b", None)], timestamp=NOW, compression=CompressionType.LZ4)
    validate_keys(raw, 0, parse_header(raw, 0), TP)
    assert len(analyze_and_validate(raw, COMPACT, AppendOrigin.CLIENT, NOW, TP)) == 1


@pytest.mark.parametrize("config", [COMPACT, COMPACT_DELETE], ids=["compact", "compact,delete"])
@pytest.mark.parametrize("origin", [AppendOrigin.CLIENT, AppendOrigin.COORDINATOR])
def test_compacted_topics_refuse_keyless_leader_appends(config, origin):
    raw = build_batch(MIXED, timestamp=NOW, compression=CompressionType.ZSTD)
    assert fast_plain_append(raw, 0, 0, config, NOW) is None  # the fast path leaves it to the key check
    with pytest.raises(RecordValidationError) as e:
        analyze_and_validate(raw, config, origin, NOW, TP)
    assert [r.batch_index for r in e.value.record_errors] == [1, 3, 5]


def test_delete_topics_and_replication_do_not_walk_records():
    raw = build_batch([(None, b"v")], timestamp=NOW)
    assert fast_plain_append(raw, 0, 0, DELETE, NOW) is not None
    assert len(analyze_and_validate(raw, DELETE, AppendOrigin.CLIENT, NOW, TP)) == 1
    assert len(analyze_and_validate(raw, COMPACT, AppendOrigin.REPLICATION, NOW, TP)) == 1


def test_second_batch_errors_are_indexed_within_that_batch():
    first = build_batch([(b"a", b"1"), (b"b", b"2")], timestamp=NOW)
    second = build_batch([(b"c", b"3"), (None, b"4")], timestamp=NOW, compression=CompressionType.GZIP)
    with pytest.raises(RecordValidationError) as e:
        analyze_and_validate(first + second, COMPACT, AppendOrigin.CLIENT, NOW, TP)
    assert [r.batch_index for r in e.value.record_errors] == [1]


def _with_count(raw: bytes, count: int) -> bytes:
    out = bytearray(raw)
    out[57:61] = count.to_bytes(4, "big")
    reseal_crc(out, 0, len(out))
    return bytes(out)


@pytest.mark.parametrize("codec", [CompressionType.NONE, CompressionType.SNAPPY])
@pytest.mark.parametrize("delta", [-1, 1])
def test_a_count_that_does_not_match_the_records_is_corrupt(codec, delta):
    raw = build_batch([(b"a", b"1"), (b"b", b"2"), (b"c", b"3")], timestamp=NOW, compression=codec)
    bad = _with_count(raw, 3 + delta)
    ((_, header),) = list(iter_batches(bad))
    with pytest.raises(CorruptRecordError):
        keyless_record_indexes(bad, 0, header)


def test_a_record_length_past_the_batch_is_corrupt():
    raw = bytearray(build_batch([(b"a", b"1")], timestamp=NOW))
    raw[61] = 0x7E  # record length varint: 63, far past the batch's end
    reseal_crc(raw, 0, len(raw))
    with pytest.raises(CorruptRecordError):
        keyless_record_indexes(bytes(raw), 0, parse_header(raw, 0))


def test_partition_log_appends_nothing_of_a_refused_batch(open_log, clock):
    plog = open_log(COMPACT)
    now = clock.milliseconds()
    plog.append_as_leader(build_batch([(b"k", b"v")], timestamp=now), leader_epoch=0)
    with pytest.raises(RecordValidationError) as e:
        plog.append_as_leader(build_batch([(b"k", b"v"), (None, b"v")], timestamp=now), leader_epoch=0)
    assert e.value.record_errors == [
        RecordError(1, "Compacted topic cannot accept message without key in topic partition t-0")]
    assert plog.log_end_offset == 1
    plog.append_as_leader(build_batch([(b"k2", b"v")], timestamp=now), leader_epoch=0)
    assert plog.log_end_offset == 2
