"""``ClusterMetadataTopic``'s reads of a compacted ``__remote_log_metadata``: keys and tombstones come through,
and a read that ends past its last record (a batch the cleaner emptied) says where it ended, so the RLMM's
consumer task moves on instead of asking for the same empty batch for ever."""

from __future__ import annotations

from strata.broker.remote_metadata_topic import _decode_records, _with_position
from strata.protocol.records import BatchBuilder, parse_header
from strata.protocol.records.filtering import empty_batch


def batch(base: int, records: list[tuple[bytes | None, bytes | None]]) -> bytes:
    builder = BatchBuilder(base_offset=base)
    for key, value in records:
        builder.append(value, key=key)
    return builder.build()


def test_keys_and_tombstones_come_through():
    data = batch(5, [(b"k1", b"v1"), (b"k2", None)])
    assert _decode_records(data, 5) == ([(5, b"k1", b"v1"), (6, b"k2", None)], 7)
    assert _decode_records(data, 6) == ([(6, b"k2", None)], 7)


def test_a_read_past_its_last_record_ends_with_a_position_marker():
    emptied = empty_batch(parse_header(batch(10, [(b"a", b"1"), (b"b", b"2"), (b"c", b"3")])))
    assert _decode_records(emptied, 10) == ([(12, None, None)], 13)
    assert _decode_records(batch(8, [(b"k", b"v")]) + emptied, 8) == ([(8, b"k", b"v"), (12, None, None)], 13)
    assert _decode_records(batch(8, [(b"k", b"v")]), 8) == ([(8, b"k", b"v")], 9)  # no marker when not needed
    assert _with_position([(3, b"k", b"v")], 0, 8) == [(3, b"k", b"v"), (7, None, None)]
    assert _with_position([], 8, 8) == []
