"""The data source's pure parts: option rules (Spark's), pushdown, remote index views, range cover."""

from __future__ import annotations

import datetime as dt
import uuid

import pytest
from pyspark.sql.datasource import EqualTo, GreaterThan, GreaterThanOrEqual, In, LessThan, LessThanOrEqual

from strata.log.errors import CorruptIndexError
from strata.log.txn_index import AbortedTxn
from strata.spark.options import StrataOptionError, parse_sink_options, parse_source_options
from strata.spark.planning import BrokerSlice, PartitionRange, ReadSettings, RemoteSlice, _cover, pack_slices
from strata.spark.remote import OffsetIndexView, aborted_transactions
from strata.spark.source import pushdown_from_filters
from strata.tiered.api import RemoteLogSegmentId, RemoteLogSegmentMetadata, TopicIdPartition

BOOT = {"kafka.bootstrap.servers": "127.0.0.1:9092"}


@pytest.mark.parametrize(("options", "message"), [
    ({"subscribe": "t"}, "kafka.bootstrap.servers"),
    (BOOT, "exactly one of"),
    ({**BOOT, "subscribe": "t", "assign": '{"t":[0]}'}, "exactly one of"),
    ({**BOOT, "assign": "[0]"}, "must be JSON"),
    ({**BOOT, "subscribePattern": "("}, "not a valid regex"),
    ({**BOOT, "subscribe": "t", "startingOffsets": "latest"}, "can't be latest for batch"),
    ({**BOOT, "subscribe": "t", "endingOffsets": "earliest"}, "can't be earliest for batch"),
    ({**BOOT, "subscribe": "t", "startingOffsets": '{"t":{"0":"x"}}'}, "must be an integer"),
    ({**BOOT, "subscribe": "t", "startingOffsets": "{not json"}, "invalid JSON"),
    ({**BOOT, "subscribe": "t", "startingTimestamp": "yesterday"}, "timestamp in milliseconds"),
    ({**BOOT, "subscribe": "t", "includeHeaders": "yes"}, "'true' or 'false'"),
    ({**BOOT, "subscribe": "t", "maxOffsetsPerTrigger": "0"}, "must be >= 1"),
    ({**BOOT, "subscribe": "t", "isolation.level": "serializable"}, "read_committed"),
    ({**BOOT, "subscribe": "t", "kafka.group.id": "g"}, "not supported"),
])
def test_bad_options_are_refused_with_a_clear_message(options: dict[str, str], message: str) -> None:
    with pytest.raises(StrataOptionError, match=message):
        parse_source_options(options)


def test_options_follow_sparks_defaults_and_precedence() -> None:
    batch = parse_source_options({**BOOT, "subscribe": "a, b", "startingTimestamp": "5",
                                  "startingOffsets": '{"a":{"0":1}}', "IncludeHeaders": "TRUE",
                                  "rsm.config.dir": "/x", "remote.log.storage.manager.class.name": "local"})
    assert batch.topics == ("a", "b") and batch.starting.kind == "timestamp" and batch.starting.timestamp == 5
    assert batch.ending.kind == "latest" and batch.include_headers and batch.fail_on_data_loss
    assert batch.rsm_class == "local" and dict(batch.rsm_props) == {"dir": "/x"}
    stream = parse_source_options({**BOOT, "assign": '{"t":[1,0]}'}, streaming=True)
    assert stream.starting.kind == "latest" and stream.assigned == (("t", 0), ("t", 1))
    with pytest.raises(StrataOptionError, match="not supported by streaming"):
        parse_source_options({**BOOT, "subscribe": "t", "endingOffsets": "latest"}, streaming=True)
    sink = parse_sink_options({**BOOT, "topic": " ", "kafka.linger.ms": "5"})
    assert sink.topic is None and sink.producer_config["linger.ms"] == "5"


def test_pushdown_narrows_partitions_offsets_and_timestamps() -> None:
    p = pushdown_from_filters([EqualTo(("partition",), 1), GreaterThanOrEqual(("offset",), 10),
                               LessThan(("offset",), 20), LessThanOrEqual(("offset",), 30)])
    assert (p.partitions, p.min_offset, p.max_offset, p.empty) == (frozenset({1}), 10, 20, False)
    t = dt.datetime(2023, 11, 14, 22, 13, 20, 500, tzinfo=dt.UTC)  # 1_700_000_000_000 ms + 500 us
    assert pushdown_from_filters([GreaterThanOrEqual(("timestamp",), t)]).min_timestamp_ms == 1_700_000_000_001
    assert pushdown_from_filters([GreaterThan(("timestamp",), t)]).min_timestamp_ms == 1_700_000_000_001
    assert pushdown_from_filters([In(("partition",), (0, 2)), EqualTo(("partition",), 1)]).empty
    assert pushdown_from_filters([GreaterThan(("offset",), 5), LessThan(("offset",), 6)]).empty
    assert pushdown_from_filters([EqualTo(("key",), b"x")]) == pushdown_from_filters([])


def test_offset_index_view_finds_batch_starts_and_cuts_whole_batches() -> None:
    entries = [(9, 0), (19, 1000), (29, 2000), (39, 3000), (0, 0), (0, 0)]  # preallocated zero tail
    view = OffsetIndexView(100, b"".join(r.to_bytes(4, "big") + p.to_bytes(4, "big") for r, p in entries))
    assert view.offsets == [109, 119, 129, 139]
    assert [view.position_for(o) for o in (50, 109, 118, 119, 200)] == [0, 0, 0, 1000, 3000]
    assert view.split_positions(0, 4000, 1500) == [2000]
    assert view.split_positions(1000, 3000, 900) == [2000]


def test_remote_txn_index_entries_and_corruption() -> None:
    data = AbortedTxn(7, 10, 20, 21).to_bytes() + AbortedTxn(8, 15, 30, 31).to_bytes() + b"\x00\x00"
    assert aborted_transactions(data) == [(7, 10, 20), (8, 15, 30)]
    with pytest.raises(CorruptIndexError, match="version 5"):
        aborted_transactions(b"\x00\x05" + data[2:34])


def _segment(start: int, end: int) -> RemoteLogSegmentMetadata:
    tp = TopicIdPartition(uuid.uuid4(), "t", 0)
    return RemoteLogSegmentMetadata(RemoteLogSegmentId(tp, uuid.uuid4()), start, end, 0, 0, 0, 100, {0: start})


def test_cover_reads_remote_segments_and_sends_holes_and_tail_to_the_broker() -> None:
    chain = [_segment(0, 99), _segment(50, 149), _segment(300, 399)]  # an overlap, then a hole
    segments, holes = _cover(PartitionRange("t", 0, None, 20, 500, 0, 500), chain)
    assert [(s.start, s.end) for s in segments] == [(20, 100), (100, 150), (300, 400)]
    assert holes == [(150, 300), (400, 500)]
    segments, holes = _cover(PartitionRange("t", 0, None, 120, 130, 0, 500), chain)
    assert [(s.start, s.end) for s in segments] == [(120, 130)] and holes == []


SETTINGS = ReadSettings("127.0.0.1:9092", False, True, 0, 50 << 20, 30.0, "local")


def _remote(partition: int, start: int, end: int, size: int) -> RemoteSlice:
    tp = TopicIdPartition(uuid.uuid4(), "t", partition)
    md = RemoteLogSegmentMetadata(RemoteLogSegmentId(tp, uuid.uuid4()), start, end - 1, 0, 0, 0, size, {0: start})
    return RemoteSlice("t", partition, md, start, end, 0, None, None, SETTINGS)


def test_small_remote_segments_are_packed_per_partition_up_to_max_bytes() -> None:
    p0 = [_remote(0, i * 10, i * 10 + 10, 40) for i in range(5)]
    tail0 = BrokerSlice("t", 0, 50, 60, SETTINGS)
    p1 = [_remote(1, i * 10, i * 10 + 10, 40) for i in range(2)]
    inputs = pack_slices([*p0, tail0, *p1], max_bytes=100)
    assert [(type(i).__name__, i.start_offset, i.end_offset) for i in inputs] == [
        ("SliceGroup", 0, 20), ("SliceGroup", 20, 40), ("RemoteSlice", 40, 50), ("BrokerSlice", 50, 60),
        ("SliceGroup", 0, 20)]
    assert inputs[4].partition == 1 and all(s.partition == 1 for s in inputs[4].slices)  # type: ignore[union-attr]
    assert [s for i in inputs for s in getattr(i, "slices", (i,))] == [*p0, tail0, *p1]  # nothing lost or reordered


def test_packing_leaves_big_segments_and_min_partitions_alone() -> None:
    big = [_remote(0, i * 10, i * 10 + 10, 1000) for i in range(3)]
    assert pack_slices(big, max_bytes=1000) == big
    small = [_remote(0, i * 10, i * 10 + 10, 40) for i in range(8)]
    assert len(pack_slices(small, max_bytes=1 << 30)) == 1
    assert len(pack_slices(small, max_bytes=1 << 30, min_partitions=4)) == 4
    assert pack_slices(small, max_bytes=1 << 30, min_partitions=100) == small
    assert pack_slices([], max_bytes=100) == []
