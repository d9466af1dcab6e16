"""Checkpoint files must be byte-identical to Kafka's so either broker can open the other's log dir."""

from __future__ import annotations

import os
import stat
import uuid
from pathlib import Path

import pytest

from strata.common import TopicPartition
from strata.errors import KafkaStorageError
from strata.log import checkpoints
from strata.log.checkpoints import (
    CorruptCheckpointError,
    EpochEntry,
    LeaderEpochCheckpointFile,
    OffsetCheckpointFile,
    PartitionMetadataFile,
    atomic_write,
    epoch_entries_from_bytes,
    epoch_entries_to_bytes,
    topic_id_from_str,
    topic_id_to_str,
)

_B64URL = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"


def _manual_base64url(msb: int, lsb: int) -> str:
    """Kafka's Uuid.toString computed by hand from the two longs, without the base64 module."""
    bits = ((msb & (2**64 - 1)) << 64) | (lsb & (2**64 - 1))
    bits <<= 4  # 128 bits -> 22 groups of 6 bits, the last padded with 4 zero bits
    return "".join(_B64URL[(bits >> (6 * (21 - i))) & 0x3F] for i in range(22))


# -- atomic_write ------------------------------------------------------------------------------


def test_atomic_write_replaces_content_and_leaves_no_tmp(tmp_path: Path) -> None:
    target = tmp_path / "file"
    target.write_bytes(b"old content that is longer")
    atomic_write(target, b"new")
    assert target.read_bytes() == b"new"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["file"]


def test_atomic_write_fsyncs_file_and_directory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    synced: list[str] = []
    real_fsync = os.fsync

    def recording_fsync(fd: int) -> None:
        synced.append("dir" if stat.S_ISDIR(os.fstat(fd).st_mode) else "file")
        real_fsync(fd)

    monkeypatch.setattr(checkpoints.os, "fsync", recording_fsync)
    atomic_write(tmp_path / "file", b"data")
    assert synced == ["file", "dir"]  # the data before the rename, the rename itself after


def test_atomic_write_failure_raises_storage_error_naming_the_file(tmp_path: Path) -> None:
    target = tmp_path / "missing-dir" / "file"
    with pytest.raises(KafkaStorageError, match="missing-dir/file"):
        atomic_write(target, b"x")
    assert not (tmp_path / "missing-dir").exists()


# -- offset checkpoints ------------------------------------------------------------------------


def test_offset_checkpoint_exact_bytes_and_round_trip(tmp_path: Path) -> None:
    path = tmp_path / "recovery-point-offset-checkpoint"
    offsets = {TopicPartition("orders", 0): 42, TopicPartition("_internal.x-y", 12): 9_000_000_000}
    OffsetCheckpointFile(path).write(offsets)
    assert path.read_bytes() == b"0\n2\norders 0 42\n_internal.x-y 12 9000000000\n"
    assert OffsetCheckpointFile(path).read() == offsets
    assert not path.with_name(path.name + ".tmp").exists()


def test_offset_checkpoint_empty_map_is_version_and_zero(tmp_path: Path) -> None:
    path = tmp_path / "cp"
    OffsetCheckpointFile(path).write({})
    assert path.read_bytes() == b"0\n0\n"
    assert OffsetCheckpointFile(path).read() == {}


@pytest.mark.parametrize("content", [None, b"", b"0\n", b"0"])
def test_offset_checkpoint_missing_or_empty_reads_as_no_entries(
    tmp_path: Path, content: bytes | None
) -> None:
    path = tmp_path / "cp"
    if content is not None:
        path.write_bytes(content)
    assert OffsetCheckpointFile(path).read() == {}


def test_offset_checkpoint_reader_accepts_any_whitespace_and_crlf(tmp_path: Path) -> None:
    path = tmp_path / "cp"
    path.write_bytes(b"0\r\n2\r\nt\t0   5\r\nu 1\t\t7")
    assert OffsetCheckpointFile(path).read() == {TopicPartition("t", 0): 5, TopicPartition("u", 1): 7}


@pytest.mark.parametrize(
    "content",
    [
        b"1\n0\n",  # unknown version
        b"x\n0\n",  # unparsable version
        b"0\n2\nt 0 5\n",  # count says 2, one entry
        b"0\n1\nt 0 5\nt 1 6\n",  # count says 1, two entries
        b"0\n1\nt zero 5\n",  # unparsable partition
        b"0\n1\nt 0 5x\n",  # unparsable offset
        b"0\n1\nt 0\n",  # missing field
        b"0\n1\nt 0 5 6\n",  # extra field
        b"0\n1\nt 0 1_0\n",  # Python int() would accept this, Java's parseLong does not
        b"0\n1\nt 2147483648 5\n",  # partition out of int32 range
        b"0\n1\n\n",  # empty entry line
        b"\xff\n",  # not UTF-8
    ],
)
def test_offset_checkpoint_malformed_raises_naming_the_file(tmp_path: Path, content: bytes) -> None:
    path = tmp_path / "replication-offset-checkpoint"
    path.write_bytes(content)
    with pytest.raises(CorruptCheckpointError, match="replication-offset-checkpoint"):
        OffsetCheckpointFile(path).read()


def test_corrupt_checkpoint_error_is_a_storage_error() -> None:
    assert issubclass(CorruptCheckpointError, KafkaStorageError)


def test_offset_checkpoint_refuses_topic_with_whitespace(tmp_path: Path) -> None:
    with pytest.raises(ValueError):
        OffsetCheckpointFile(tmp_path / "cp").write({TopicPartition("bad topic", 0): 1})


# -- leader-epoch-checkpoint -------------------------------------------------------------------


def test_epoch_entries_to_bytes_matches_kafka_test_vector() -> None:
    # Kafka's testEpochEntriesAsByteBuffer: [(0, 1)] -> "0\n1\n0 1\n"
    assert epoch_entries_to_bytes([EpochEntry(0, 1)]) == b"0\n1\n0 1\n"
    assert epoch_entries_to_bytes([]) == b"0\n0\n"


def test_leader_epoch_checkpoint_exact_bytes_and_round_trip(tmp_path: Path) -> None:
    path = tmp_path / "leader-epoch-checkpoint"
    entries = [EpochEntry(0, 0), EpochEntry(3, 120), EpochEntry(7, 9_999_999_999)]
    LeaderEpochCheckpointFile(path).write(entries)
    assert path.read_bytes() == b"0\n3\n0 0\n3 120\n7 9999999999\n"
    assert LeaderEpochCheckpointFile(path).read() == entries


def test_leader_epoch_checkpoint_missing_file_is_empty(tmp_path: Path) -> None:
    assert LeaderEpochCheckpointFile(tmp_path / "leader-epoch-checkpoint").read() == []


def test_leader_epoch_checkpoint_reader_accepts_any_whitespace(tmp_path: Path) -> None:
    path = tmp_path / "leader-epoch-checkpoint"
    path.write_bytes(b"0\n2\n1\t5\n2    9\n")
    assert LeaderEpochCheckpointFile(path).read() == [EpochEntry(1, 5), EpochEntry(2, 9)]


@pytest.mark.parametrize("content", [b"2\n0\n", b"0\n1\n", b"0\n1\n1 5 6\n", b"0\n1\na 5\n"])
def test_leader_epoch_checkpoint_malformed(tmp_path: Path, content: bytes) -> None:
    path = tmp_path / "leader-epoch-checkpoint"
    path.write_bytes(content)
    with pytest.raises(CorruptCheckpointError, match="leader-epoch-checkpoint"):
        LeaderEpochCheckpointFile(path).read()


def test_epoch_entries_from_bytes_round_trip_and_corruption() -> None:
    entries = [EpochEntry(2, 10), EpochEntry(5, 20)]
    assert epoch_entries_from_bytes(epoch_entries_to_bytes(entries)) == entries
    with pytest.raises(CorruptCheckpointError, match="remote-index"):
        epoch_entries_from_bytes(b"0\n3\n2 10\n", source="remote-index")


# -- partition.metadata ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("msb", "lsb", "expected"),
    [
        (0, 1, "AAAAAAAAAAAAAAAAAAAAAQ"),  # Kafka's Uuid.METADATA_TOPIC_ID
        (-1, -1, "_____________________w"),  # URL-safe alphabet, not '/'
        (0x0123456789ABCDEF, -0x0123456789ABCDF0, None),
    ],
)
def test_topic_id_to_str_is_kafka_uuid_to_string(msb: int, lsb: int, expected: str | None) -> None:
    topic_id = uuid.UUID(int=((msb & (2**64 - 1)) << 64) | (lsb & (2**64 - 1)))
    text = topic_id_to_str(topic_id)
    assert text == _manual_base64url(msb, lsb)
    if expected is not None:
        assert text == expected
    assert len(text) == 22
    assert topic_id_from_str(text) == topic_id


def test_topic_id_from_str_accepts_padding_and_rejects_garbage() -> None:
    assert topic_id_from_str("AAAAAAAAAAAAAAAAAAAAAQ==") == uuid.UUID(int=1)
    for bad in ["AAAAAAAAAAAAAAAAAAAAA", "AAAAAAAAAAAAAAAAAAAA+Q", "AAAAAAAAAAAAAAAAAAAA/Q", "", "A" * 23]:
        with pytest.raises(ValueError):
            topic_id_from_str(bad)


def test_partition_metadata_exact_bytes_no_trailing_newline(tmp_path: Path) -> None:
    path = tmp_path / "partition.metadata"
    topic_id = uuid.UUID(int=((0x0123456789ABCDEF) << 64) | 0xFEDCBA9876543210)
    PartitionMetadataFile(path).write(topic_id)
    expected = "version: 0\ntopic_id: " + _manual_base64url(0x0123456789ABCDEF, 0xFEDCBA9876543210)
    assert path.read_bytes() == expected.encode()
    assert not path.read_bytes().endswith(b"\n")
    assert PartitionMetadataFile(path).read() == topic_id
    assert [p.name for p in tmp_path.iterdir()] == ["partition.metadata"]


def test_partition_metadata_known_kafka_content(tmp_path: Path) -> None:
    path = tmp_path / "partition.metadata"
    PartitionMetadataFile(path).write(uuid.UUID(int=1))
    assert path.read_bytes() == b"version: 0\ntopic_id: AAAAAAAAAAAAAAAAAAAAAQ"


def test_partition_metadata_missing_is_none_and_trailing_newline_tolerated(tmp_path: Path) -> None:
    path = tmp_path / "partition.metadata"
    assert PartitionMetadataFile(path).read() is None
    assert not PartitionMetadataFile(path).exists()
    path.write_bytes(b"version: 0\ntopic_id: AAAAAAAAAAAAAAAAAAAAAQ\n")
    assert PartitionMetadataFile(path).read() == uuid.UUID(int=1)


@pytest.mark.parametrize(
    "content",
    [
        b"",
        b"version: 0\n",
        b"version: -1\ntopic_id: AAAAAAAAAAAAAAAAAAAAAQ",
        b"version: x\ntopic_id: AAAAAAAAAAAAAAAAAAAAAQ",
        b"version 0\ntopic_id: AAAAAAAAAAAAAAAAAAAAAQ",
        b"version: 0\ntopic: AAAAAAAAAAAAAAAAAAAAAQ",
        b"version: 0\ntopic_id: not-a-uuid",
        b"version: 0\ntopic_id: AAAAAAAAAAAAAAAAAAAAAA",  # the zero UUID is reserved
    ],
)
def test_partition_metadata_malformed(tmp_path: Path, content: bytes) -> None:
    path = tmp_path / "partition.metadata"
    path.write_bytes(content)
    with pytest.raises(CorruptCheckpointError, match="partition.metadata"):
        PartitionMetadataFile(path).read()
