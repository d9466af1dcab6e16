"""Acceptance: every .log Strata writes is Kafka's format, read back by kafka-python's own parser,
and every index entry is exactly where Kafka's rules put it."""

from __future__ import annotations

import random
import struct
from pathlib import Path

from kafka.record.default_records import DefaultRecordBatch

from strata.config import LogConfig
from strata.protocol.records import BatchBuilder, CompressionType, iter_batches

CODECS = list(CompressionType)


def _produce(plog, clock, n_batches: int, rng: random.Random) -> list[tuple]:
    """Append batches of mixed codecs; returns the expected records (offset, ts, key, value, headers)."""
    expected = []
    sequences = {1000: 0, 1001: 0, 1002: 0}
    for i in range(n_batches):
        pid = 1000 + i % 4  # three idempotent producers and one plain one (pid 1003 -> none)
        idempotent = pid in sequences
        n = rng.randint(1, 12)
        builder = BatchBuilder(compression=CODECS[i % len(CODECS)], producer_id=pid if idempotent else -1,
                               producer_epoch=0 if idempotent else -1,
                               base_sequence=sequences[pid] if idempotent else -1)
        if idempotent:
            sequences[pid] += n
        for j in range(n):
            key = None if j % 4 == 3 else f"key-{i}-{j}".encode()
            value = None if j % 7 == 6 else rng.randbytes(rng.randint(0, 600))
            headers = [(f"h{k}", None if k == 2 else f"v{k}".encode()) for k in range(j % 4)]
            builder.append(value, key=key, headers=headers, timestamp=clock.milliseconds() + rng.randint(-50, 50))
        # The client never knows offsets; the log assigns them. Sequences only for the first batches.
        info = plog.append_as_leader(builder.build(), leader_epoch=i // 20)
        expected.append((info.first_offset, builder))
        clock.advance(rng.randint(0, 5))
    return expected


def _kafka_python_records(path: Path) -> list[tuple]:
    data = path.read_bytes()
    position = 0
    out = []
    while position < len(data):
        (length,) = struct.unpack_from(">i", data, position + 8)
        batch = DefaultRecordBatch(data[position : position + 12 + length])
        assert batch.validate_crc(), f"kafka-python rejects the CRC of the batch at {position} in {path.name}"
        for record in batch:
            out.append((record.offset, record.timestamp, record.key, record.value,
                        [(k, v) for k, v in record.headers]))
        position += 12 + length
    assert position == len(data)
    return out


def test_every_log_file_reads_back_with_kafka_python(open_log, clock, tmp_path):
    rng = random.Random(42)
    plog = open_log(LogConfig(segment_bytes=16 * 1024, index_interval_bytes=1024))
    _produce(plog, clock, 120, rng)
    plog.update_high_watermark(plog.log_end_offset)
    ours = []
    for segment in plog.segments:
        fetch = plog.read(segment.base_offset, segment.size + 1)
        assert fetch.records is not None
        from strata.protocol.records import decode_batch

        data = fetch.records.read()
        for pos, _ in iter_batches(data):
            for r in decode_batch(data, pos).records:
                ours.append((r.offset, r.timestamp, r.key, r.value, [(k, v) for k, v in r.headers]))
    plog.close()
    logs = sorted((tmp_path / "t-0").glob("*.log"))
    assert len(logs) > 5, "the test should span several segments"
    theirs = [rec for path in logs for rec in _kafka_python_records(path)]
    assert [r[0] for r in theirs] == list(range(len(theirs))), "offsets must be dense from 0"
    assert theirs == ours


def _batches_of(log_path: Path) -> list[tuple[int, object]]:
    return list(iter_batches(log_path.read_bytes()))


def test_offset_index_entries_point_at_the_batch_holding_the_offset(open_log, clock, tmp_path):
    rng = random.Random(7)
    config = LogConfig(segment_bytes=64 * 1024, index_interval_bytes=2000)
    plog = open_log(config)
    _produce(plog, clock, 150, rng)
    plog.close()
    checked = 0
    for index_path in sorted((tmp_path / "t-0").glob("*.index")):
        base = int(index_path.name.split(".")[0])
        batches = _batches_of(index_path.with_suffix(".log"))
        starts = dict(batches)
        data = index_path.read_bytes()
        assert len(data) % 8 == 0
        entries = [struct.unpack_from(">ii", data, i) for i in range(0, len(data), 8)]
        for rel, position in entries:
            header = starts.get(position)
            assert header is not None, f"{index_path.name}: position {position} is not a batch start"
            assert header.base_offset <= base + rel <= header.last_offset
            assert base + rel == header.last_offset, "Kafka 4 indexes a batch by its last offset"
            checked += 1
        # Kafka's rule: an entry once more than index.interval.bytes were written since the last one.
        expected, since = [], 0
        for pos, h in batches:
            if since > config.index_interval_bytes:
                expected.append((h.last_offset - base, pos))
                since = 0
            since += h.size
        assert entries == expected
    assert checked > 10


def test_time_index_is_monotonic_and_correct(open_log, clock, tmp_path):
    rng = random.Random(3)
    plog = open_log(LogConfig(segment_bytes=32 * 1024, index_interval_bytes=1500))
    _produce(plog, clock, 100, rng)
    plog.close()
    for tindex in sorted((tmp_path / "t-0").glob("*.timeindex")):
        base = int(tindex.name.split(".")[0])
        batches = _batches_of(tindex.with_suffix(".log"))
        data = tindex.read_bytes()
        assert len(data) % 12 == 0
        entries = [struct.unpack_from(">qi", data, i) for i in range(0, len(data), 12)]
        assert entries, "every closed segment ends with a time-index entry"
        timestamps = [ts for ts, _ in entries]
        assert timestamps == sorted(timestamps) and len(set(timestamps)) == len(timestamps)
        for ts, rel in entries:
            # the entry's timestamp is the max timestamp of all batches up to and including the
            # batch whose last offset it names
            upto = [h for _, h in batches if h.base_offset <= base + rel]
            assert upto[-1].last_offset == base + rel
            assert ts == max(h.max_timestamp for h in upto)
        assert entries[-1][0] == max(h.max_timestamp for _, h in batches)


def test_index_files_are_preallocated_while_active_and_trimmed_on_roll(open_log, clock, tmp_path, scheduler):
    config = LogConfig(segment_bytes=4096, segment_index_bytes=1003, index_interval_bytes=100)
    plog = open_log(config)
    d = tmp_path / "t-0"
    plog.append_as_leader(BatchBuilder().build() if False else _one_batch(clock), leader_epoch=0)
    assert (d / "00000000000000000000.index").stat().st_size == 1000  # rounded down to 8-byte entries
    assert (d / "00000000000000000000.timeindex").stat().st_size == 996  # rounded down to 12
    while len(plog.segments) < 2:
        plog.append_as_leader(_one_batch(clock), leader_epoch=0)
    first = d / "00000000000000000000.index"
    # the roll left cutting the file to the segment's flush on the scheduler's thread; reads meanwhile use
    # the entries kept in memory
    rolled = plog.segments[0].offset_index
    assert first.stat().st_size == 1000 and 0 < rolled.entries < 1000 // 8
    assert scheduler.run_pending() >= 1
    assert first.stat().st_size == rolled.entries * 8
    assert (d / "00000000000000000000.timeindex").stat().st_size % 12 == 0
    plog.close()
    for path in d.glob("*.index"):
        assert path.stat().st_size < 1000, "clean close trims the active index too"


def _one_batch(clock, size: int = 300) -> bytes:
    b = BatchBuilder()
    b.append(b"x" * size, key=b"k", timestamp=clock.milliseconds())
    return b.build()
