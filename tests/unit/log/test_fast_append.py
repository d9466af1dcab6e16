"""The single-batch produce fast path must be indistinguishable from the general path.

``fast_plain_append`` re-states the validator's rules for the commonest batch in one pass; these
tests pin that it accepts exactly what the general path accepts for such batches (same offsets,
same bytes on disk, same summary) and hands everything else back (``None``) so the general path
raises its precise error.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from strata.config import LogConfig
from strata.errors import (
    CorruptRecordError,
    InvalidRecordError,
    InvalidTimestampError,
    RecordTooLargeError,
    TruncatedBatchError,
)
from strata.log.producer_state import AppendOrigin
from strata.log.validator import analyze_and_validate, assign_offsets, fast_plain_append
from strata.protocol.records import CompressionType, TimestampType, build_batch

NOW = 1_700_000_000_000
CONFIG = LogConfig()


def joined(chunks) -> bytes:
    return b"".join(bytes(c) for c in chunks)


def general(records, next_offset: int, epoch: int, config: LogConfig = CONFIG):
    batches = analyze_and_validate(records, config, AppendOrigin.CLIENT, NOW)
    return assign_offsets(records, batches, next_offset, epoch, config, NOW)


@settings(max_examples=150, deadline=None)
@given(
    values=st.lists(st.binary(max_size=300), min_size=1, max_size=20),
    codec=st.sampled_from(list(CompressionType)),
    next_offset=st.integers(0, 2**40),
    epoch=st.integers(-1, 1000),
    skew=st.integers(-3_600_000, 3_600_000),
    mutable=st.booleans(),
)
def test_fast_path_equals_general_path(values, codec, next_offset, epoch, skew, mutable):
    raw = build_batch(values, timestamp=NOW + skew, compression=codec)
    slow = general(bytearray(raw) if mutable else raw, next_offset, epoch)
    fast = fast_plain_append(bytearray(raw) if mutable else raw, next_offset, epoch, CONFIG, NOW)
    assert fast is not None
    assert joined(fast.chunks) == joined(slow.chunks)
    for name in ("first_offset", "last_offset", "max_timestamp", "offset_of_max_timestamp", "valid_bytes",
                 "log_append_time", "batches"):
        assert getattr(fast, name) == getattr(slow, name), name


BAD_PLAIN = {
    "idempotent": {"producer_id": 5, "producer_epoch": 0, "base_sequence": 0},
    "transactional": {"producer_id": 5, "producer_epoch": 0, "base_sequence": 0, "transactional": True},
    "log append time": {"timestamp_type": TimestampType.LOG_APPEND_TIME, "log_append_time": NOW},
    "nonzero base offset": {"base_offset": 7},
}


@pytest.mark.parametrize("kwargs", BAD_PLAIN.values(), ids=BAD_PLAIN.keys())
def test_unusual_batches_go_to_the_general_path(kwargs):
    raw = build_batch([b"a", b"b"], timestamp=NOW, **kwargs)
    assert fast_plain_append(raw, 0, 0, CONFIG, NOW) is None


def test_two_batches_go_to_the_general_path():
    raw = build_batch([b"a"], timestamp=NOW) + build_batch([b"b"], timestamp=NOW)
    assert fast_plain_append(raw, 0, 0, CONFIG, NOW) is None
    assert general(raw, 0, 0).last_offset == 1


@pytest.mark.parametrize("case", ["crc", "too large", "too old", "too new", "log append time topic", "short"])
def test_rule_breakers_are_left_to_the_general_path_which_raises(case):
    raw = bytearray(build_batch([b"x" * 100], timestamp=NOW))
    config = CONFIG
    expected: type[Exception] = InvalidRecordError
    if case == "crc":
        raw[-1] ^= 0x01
        expected = CorruptRecordError
    elif case == "too large":
        config = LogConfig(max_message_bytes=len(raw) - 1)
        expected = RecordTooLargeError, TruncatedBatchError
    elif case == "too old":
        config = LogConfig(message_timestamp_before_max_ms=1000)
        raw = bytearray(build_batch([b"x"], timestamp=NOW - 1001))
        expected = InvalidTimestampError
    elif case == "too new":
        raw = bytearray(build_batch([b"x"], timestamp=NOW + CONFIG.message_timestamp_after_max_ms + 1))
        expected = InvalidTimestampError
    elif case == "log append time topic":
        config = LogConfig(message_timestamp_type="LogAppendTime")
        assert fast_plain_append(bytes(raw), 0, 0, config, NOW) is None
        assert general(bytes(raw), 0, 0, config).log_append_time == NOW
        return
    else:
        raw = raw[:40]
        expected = TruncatedBatchError
    assert fast_plain_append(bytes(raw), 0, 0, config, NOW) is None
    with pytest.raises(expected):
        general(bytes(raw), 0, 0, config)


def test_partition_log_takes_the_fast_path_and_state_matches(open_log, clock):
    """Plain batches through PartitionLog: offsets, epochs, indexes and reads as for any batch."""
    plog = open_log(LogConfig(segment_bytes=4096, index_interval_bytes=256))
    for i in range(50):
        info = plog.append_as_leader(build_batch([f"v{i}".encode() * 30] * 3, timestamp=clock.milliseconds()),
                                     leader_epoch=i // 20)
        assert (info.first_offset, info.last_offset) == (3 * i, 3 * i + 2)
    assert plog.log_end_offset == 150
    assert len(plog.segments) > 3
    assert [e.epoch for e in plog.leader_epoch_cache.epoch_entries()] == [0, 1, 2]
    plog.update_high_watermark(150)
    assert plog.read(100, 10_000).records.read()[:8] == (99).to_bytes(8, "big")
