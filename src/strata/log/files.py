"""Kafka's file names (``LogFileUtils``): 20-digit zero-padded base offsets plus a suffix."""

from __future__ import annotations

from pathlib import Path

LOG_SUFFIX = ".log"
INDEX_SUFFIX = ".index"
TIME_INDEX_SUFFIX = ".timeindex"
TXN_INDEX_SUFFIX = ".txnindex"
SNAPSHOT_SUFFIX = ".snapshot"
DELETED_SUFFIX = ".deleted"
CLEANED_SUFFIX = ".cleaned"
SWAP_SUFFIX = ".swap"

LEADER_EPOCH_CHECKPOINT = "leader-epoch-checkpoint"
PARTITION_METADATA = "partition.metadata"
RECOVERY_POINT_CHECKPOINT = "recovery-point-offset-checkpoint"
LOG_START_OFFSET_CHECKPOINT = "log-start-offset-checkpoint"
REPLICATION_OFFSET_CHECKPOINT = "replication-offset-checkpoint"
CLEAN_SHUTDOWN_MARKER = ".kafka_cleanshutdown"


def offset_file_name(offset: int, suffix: str = "") -> str:
    return f"{offset:020d}{suffix}"


def offset_from_file_name(name: str) -> int:
    """The base offset a segment or snapshot file is named after (digits before the first dot)."""
    return int(Path(name).name.split(".", 1)[0])


def segment_paths(directory: Path, base_offset: int) -> dict[str, Path]:
    stem = offset_file_name(base_offset)
    return {
        suffix: directory / f"{stem}{suffix}"
        for suffix in (LOG_SUFFIX, INDEX_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX)
    }
