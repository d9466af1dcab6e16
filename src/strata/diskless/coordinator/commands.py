"""The records of ``__diskless_metadata``: one coordinator command each, with its timestamp.

KIP-1164's topic-based coordinator appends a *command* (not its result) and every replica replays it into
its own SQLite state, so a command carries everything its replay needs, above all ``now_ms`` (the leader's
clock when it appended: a replica replaying a day later must assign the same ``committed_at`` and
LogAppendTime). The key is the command type, the value JSON: the records are small next to the data they
describe (one record per WAL object, ~60 bytes per batch), and JSON keeps a dump of the topic readable.
Batches are encoded as arrays, not objects, which halves their size.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from strata.diskless.coordinator.api import (
    AdvanceLogStartRequest,
    CommitBatchRequest,
    CommitFileRequest,
    ControlPlane,
    ControlRecordType,
    CreatePartitionsRequest,
    DeleteRecordsRequest,
    EnforceRetentionRequest,
    InitDisklessLogRequest,
    InitProducer,
    PruneBatchesRequest,
    TimestampType,
)

FORMAT_VERSION = 1


class CommandFormatError(ValueError):
    """A record of ``__diskless_metadata`` this broker cannot read (a newer format, or corrupt)."""


@dataclass(frozen=True, slots=True)
class Command:
    """One coordinator command: ``kind`` names the ControlPlane method, ``args`` its arguments."""

    kind: str
    now_ms: int
    args: Any = None

    def apply(self, plane: ControlPlane) -> Any:
        """Run the command against ``plane``; what the method returns is the command's answer."""
        return _APPLY[self.kind](plane, self)


def _batch_to_list(b: CommitBatchRequest) -> list[Any]:
    return [str(b.topic_id), b.topic_name, b.partition, b.byte_offset, b.byte_size, b.base_offset, b.last_offset,
            b.batch_max_timestamp, int(b.timestamp_type), b.magic, b.producer_id, b.producer_epoch,
            b.base_sequence, b.last_sequence, int(b.is_transactional), int(b.is_control),
            -1 if b.control_type is None else int(b.control_type), b.coordinator_epoch]


def _batch_from_list(v: list[Any]) -> CommitBatchRequest:
    return CommitBatchRequest(
        topic_id=uuid.UUID(v[0]), topic_name=v[1], partition=v[2], byte_offset=v[3], byte_size=v[4],
        base_offset=v[5], last_offset=v[6], batch_max_timestamp=v[7], timestamp_type=TimestampType(v[8]),
        magic=v[9], producer_id=v[10], producer_epoch=v[11], base_sequence=v[12], last_sequence=v[13],
        is_transactional=bool(v[14]), is_control=bool(v[15]),
        control_type=None if v[16] < 0 else ControlRecordType(v[16]), coordinator_epoch=v[17])


def _encode_args(kind: str, args: Any) -> Any:
    if kind == "commit_file":
        r: CommitFileRequest = args
        return {"key": r.object_key, "broker": r.uploader_broker_id, "size": r.file_size, "format": r.format,
                "batches": [_batch_to_list(b) for b in r.batches]}
    if kind == "create_partitions":
        return [[str(r.topic_id), r.topic_name, r.num_partitions] for r in args]
    if kind == "delete_records":
        return [[str(r.topic_id), r.partition, r.offset] for r in args]
    if kind == "enforce_retention":
        requests, max_batches = args
        return {"max": max_batches,
                "requests": [[str(r.topic_id), r.partition, r.retention_bytes, r.retention_ms] for r in requests]}
    if kind == "init_diskless_log":
        return [[str(r.topic_id), r.topic_name, r.partition, r.seal_offset, r.log_start_offset, r.leader_epoch,
                 [[p.producer_id, p.producer_epoch, p.coordinator_epoch, [list(b) for b in p.batches],
                   p.txn_first_offset] for p in r.producers]] for r in args]
    if kind == "prune_batches":
        return [[str(r.topic_id), r.partition, r.highest_tiered_offset] for r in args]
    if kind == "advance_log_start":
        return [[str(r.topic_id), r.partition, r.offset] for r in args]
    if kind == "delete_topic":
        return str(args)
    if kind == "delete_files":
        return list(args)
    if kind == "noop":
        return None
    raise CommandFormatError(f"unknown diskless coordinator command {kind!r}")


def _decode_args(kind: str, v: Any) -> Any:
    if kind == "commit_file":
        return CommitFileRequest(object_key=v["key"], uploader_broker_id=v["broker"], file_size=v["size"],
                                 batches=tuple(_batch_from_list(b) for b in v["batches"]), format=v["format"])
    if kind == "create_partitions":
        return [CreatePartitionsRequest(uuid.UUID(t), name, n) for t, name, n in v]
    if kind == "delete_records":
        return [DeleteRecordsRequest(uuid.UUID(t), p, o) for t, p, o in v]
    if kind == "enforce_retention":
        return ([EnforceRetentionRequest(uuid.UUID(t), p, b, ms) for t, p, b, ms in v["requests"]], v["max"])
    if kind == "init_diskless_log":
        return [InitDisklessLogRequest(uuid.UUID(t), name, p, seal, start, epoch, tuple(
            InitProducer(pid, pe, ce, tuple(tuple(b) for b in batches), first)
            for pid, pe, ce, batches, first in producers)) for t, name, p, seal, start, epoch, producers in v]
    if kind == "prune_batches":
        return [PruneBatchesRequest(uuid.UUID(t), p, o) for t, p, o in v]
    if kind == "advance_log_start":
        return [AdvanceLogStartRequest(uuid.UUID(t), p, o) for t, p, o in v]
    if kind == "delete_topic":
        return uuid.UUID(v)
    if kind == "delete_files":
        return list(v)
    if kind == "noop":
        return None
    raise CommandFormatError(f"unknown diskless coordinator command {kind!r}")


def encode(command: Command) -> tuple[bytes, bytes]:
    """(key, value) of the record holding ``command``."""
    value = {"v": FORMAT_VERSION, "now": command.now_ms, "args": _encode_args(command.kind, command.args)}
    return command.kind.encode(), json.dumps(value, separators=(",", ":")).encode()


def decode(key: bytes | None, value: bytes | None) -> Command:
    if not key or value is None:
        raise CommandFormatError("a __diskless_metadata record without a key or value")
    kind = key.decode()
    try:
        body = json.loads(value)
        if body.get("v") != FORMAT_VERSION:
            raise CommandFormatError(f"__diskless_metadata record format {body.get('v')!r}: this broker reads "
                                     f"{FORMAT_VERSION}")
        return Command(kind, int(body["now"]), _decode_args(kind, body["args"]))
    except (ValueError, KeyError, TypeError, IndexError) as e:
        if isinstance(e, CommandFormatError):
            raise
        raise CommandFormatError(f"a corrupt {kind!r} record in __diskless_metadata: {e}") from e


_APPLY: dict[str, Callable[[ControlPlane, Command], Any]] = {
    "commit_file": lambda p, c: p.commit_file(c.args, now_ms=c.now_ms),
    "create_partitions": lambda p, c: p.create_partitions(c.args, now_ms=c.now_ms),
    "delete_records": lambda p, c: p.delete_records(c.args, now_ms=c.now_ms),
    "enforce_retention": lambda p, c: p.enforce_retention(c.args[0], now_ms=c.now_ms,
                                                          max_batches_per_partition=c.args[1]),
    "init_diskless_log": lambda p, c: p.init_diskless_log(c.args, now_ms=c.now_ms),
    "prune_batches": lambda p, c: p.prune_batches_below_highest_tiered_offset(c.args, now_ms=c.now_ms),
    "advance_log_start": lambda p, c: p.advance_cross_tier_log_start(c.args, now_ms=c.now_ms),
    "delete_topic": lambda p, c: p.delete_topic(c.args, now_ms=c.now_ms),
    "delete_files": lambda p, c: p.delete_files(c.args, now_ms=c.now_ms),
    "noop": lambda p, c: None,
}

KINDS: Sequence[str] = tuple(_APPLY)
