"""Transactional offset commits in the group coordinator (KIP-98 TxnOffsetCommit, KIP-447 member checks).

What Kafka's classic coordinator does, checked on the state machine with a writer that hands out log
offsets: a TxnOffsetCommit is pending for its producer (invisible to OffsetFetch, UNSTABLE_OFFSET_COMMIT
for ``require_stable``) until the producer's marker; a commit applies it unless a plain commit was
appended after it; an abort drops it. Replay is checked the way the broker does it -- every batch and
marker the live manager saw, replayed in log order into a fresh manager, must give the same state --
and once more through the coordinator on a real partition log, with a real transactional batch, a
real marker, and the log fencing a stale producer epoch.
"""

from __future__ import annotations

from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

import pytest
from test_group_state_machine import Harness

from strata.common import TopicPartition
from strata.config import LogConfig
from strata.coordinator.group.classic import GroupState
from strata.coordinator.group.coordinator import GroupCoordinator
from strata.coordinator.group.manager import (
    NO_APPEND_OFFSET,
    CommitRequest,
    GroupMetadataManager,
    Record,
    TxnCommitRequest,
    TxnProducer,
    txn_offset_append_error,
)
from strata.coordinator.group.records import (
    OffsetCommitKey,
    decode_key,
    decode_offset_commit_value,
)
from strata.errors import ErrorCode, InvalidProducerEpochError, KafkaError, KafkaStorageError, RecordTooLargeError
from strata.log.partition_log import FetchIsolation, PartitionLog
from strata.log.producer_state import AppendOrigin
from strata.protocol.records import NO_SEQUENCE, ControlRecordType, build_control_batch, iter_batches

DAY_MS = 24 * 3600 * 1000
PID, EPOCH = 4000, 3
ALL: Callable[[str], bool] = lambda group_id: True  # noqa: E731  (every group is in the marker's partition)

Written = tuple[str, list[Record], TxnProducer | None, int]
Marker = tuple[int, bool, int]  # producer id, commit, offset


class TxnHarness(Harness):
    """The state-machine harness with a log: every write and marker takes offsets, in order."""

    def __init__(self, **config: Any) -> None:
        super().__init__(**config)
        self.log: list[Written | Marker] = []
        self.next_offset = 100

    def _write(self, group_id: str, records: list[Record], producer: TxnProducer | None = None) -> int:
        if self.fail_with is not None:
            raise self.fail_with
        self.written.append((group_id, records))
        offset = self.next_offset
        self.next_offset += len(records)
        self.log.append((group_id, records, producer, offset))
        return offset

    def marker(self, producer_id: int, commit: bool, which: Callable[[str], bool] = ALL) -> int:
        """What the marker path does: the marker is appended, then the coordinator is told."""
        self.log.append((producer_id, commit, self.next_offset))
        self.next_offset += 1
        return self.m.complete_txn_offset_commits(producer_id, commit, which)

    def reload(self) -> GroupMetadataManager:
        """A fresh manager fed the log as the coordinator's loader feeds it."""
        fresh = GroupMetadataManager(self.m.config, self.timer, self.clock, lambda g, r, p=None: None)
        for entry in self.log:
            if len(entry) == 3:
                producer_id, commit, _ = entry  # type: ignore[misc]
                fresh.replay_txn_marker(producer_id, commit, ALL)
                continue
            _, records, producer, offset = entry  # type: ignore[misc]
            for key, value in records:
                fresh.replay(key, value, offset, producer[0] if producer is not None else -1)
        fresh.on_loaded()
        return fresh


def txn_commit(h: Harness, group: str = "g", *, pid: int = PID, epoch: int = EPOCH, member: str = "",
               generation: int = -1, instance: str | None = None,
               parts: list[tuple[str, int, int, int, str | None]] | None = None) -> dict[tuple[str, int], int]:
    codes, _ = h.m.commit_txn_offsets(TxnCommitRequest(group, "txn-id", pid, epoch, member, instance, generation,
                                                       parts if parts is not None else [("t", 0, 10, 2, "meta")]))
    return codes


def plain_commit(h: Harness, offset: int, group: str = "g", partition: int = 0) -> None:
    assert h.m.commit_offsets(CommitRequest(group, "", None, -1, -1, 8, [("t", partition, offset, -1, None)])) \
        == {("t", partition): ErrorCode.NONE}


def fetched(m: GroupMetadataManager, group: str = "g", partitions: tuple[int, ...] = (0,), *,
            stable: bool = False) -> dict[int, tuple[int, int]]:
    """partition -> (committed offset, error code)."""
    [(_, parts)] = m.fetch_offsets(group, [("t", list(partitions))], stable)
    return {p["partition_index"]: (p["committed_offset"], p["error_code"]) for p in parts}


UNSTABLE = (-1, ErrorCode.UNSTABLE_OFFSET_COMMIT)
# The coordinator stamps records with the wall clock; the log's clock is a manual one.
LOG_CONFIG = LogConfig(message_timestamp_after_max_ms=2**62)


# -- pending until the marker ---------------------------------------------------------------------

def test_txn_commit_is_one_transactional_batch_and_stays_pending() -> None:
    h = TxnHarness()
    plain_commit(h, 5)
    plain_commit(h, 7, partition=1)
    assert txn_commit(h, parts=[("t", 0, 10, 2, "meta"), ("t", 2, 20, -1, None)]) == {("t", 0): 0, ("t", 2): 0}
    gid, records, producer, _ = h.log[-1]  # type: ignore[misc]
    assert gid == "g" and producer == (PID, EPOCH) and len(records) == 2
    assert [decode_key(k) for k, _ in records] == [OffsetCommitKey("g", "t", 0), OffsetCommitKey("g", "t", 2)]
    value = records[0][1]
    assert value is not None and value[:2] == b"\x00\x03"  # value v3, no expiry: as Kafka writes it
    stored = decode_offset_commit_value(value)
    assert (stored.offset, stored.leader_epoch, stored.metadata) == (10, 2, "meta")
    # The last completed commit is what OffsetFetch shows; require_stable says "not yet" for pending ones.
    assert fetched(h.m, partitions=(0, 1, 2)) == {0: (5, 0), 1: (7, 0), 2: (-1, 0)}
    assert fetched(h.m, partitions=(0, 1, 2), stable=True) == {0: UNSTABLE, 1: (7, 0), 2: UNSTABLE}
    [(_, every)] = h.m.fetch_offsets("g", None, True)  # all partitions: the committed ones, unstable or not
    assert [(p["partition_index"], p["error_code"]) for p in every] == [(0, ErrorCode.UNSTABLE_OFFSET_COMMIT),
                                                                        (1, ErrorCode.NONE)]


def test_commit_marker_makes_the_pending_offsets_committed() -> None:
    h = TxnHarness()
    plain_commit(h, 5)
    txn_commit(h, parts=[("t", 0, 10, 2, "meta"), ("t", 2, 20, -1, None)])
    assert h.marker(PID, commit=True) == 1
    assert fetched(h.m, partitions=(0, 2), stable=True) == {0: (10, 0), 2: (20, 0)}
    assert h.m.offsets["g"][("t", 0)].metadata == "meta" and not h.m.has_pending_txn_offsets("g")
    assert h.m.open_groups_for_producer == {}
    assert h.marker(PID, commit=True) == 0  # a second marker finds nothing to do


def test_abort_marker_drops_the_pending_offsets() -> None:
    h = TxnHarness()
    plain_commit(h, 5)
    txn_commit(h)
    h.marker(PID, commit=False)
    assert fetched(h.m, stable=True) == {0: (5, 0)}
    assert h.m.pending_txn_offsets == {} and h.m.open_groups_for_producer == {}


def test_plain_commit_appended_after_the_txn_commit_wins_at_commit() -> None:
    """Kafka's completePendingTxnOffsetCommit: the log order decides, not the completion order."""
    h = TxnHarness()
    txn_commit(h)  # 10, appended first
    plain_commit(h, 7)  # appended after it
    assert fetched(h.m, stable=True) == {0: UNSTABLE}
    h.marker(PID, commit=True)
    assert fetched(h.m, stable=True) == {0: (7, 0)}


def test_txn_commit_appended_after_a_plain_commit_wins_at_commit() -> None:
    h = TxnHarness()
    plain_commit(h, 7)
    txn_commit(h)
    h.marker(PID, commit=True)
    assert fetched(h.m) == {0: (10, 0)}


def test_a_later_txn_commit_of_the_same_producer_replaces_its_pending_offset() -> None:
    h = TxnHarness()
    txn_commit(h, parts=[("t", 0, 10, -1, None)])
    txn_commit(h, parts=[("t", 0, 12, -1, None)])
    h.marker(PID, commit=True)
    assert fetched(h.m) == {0: (12, 0)}


def test_marker_completes_only_its_producer_and_only_the_groups_of_its_partition() -> None:
    h = TxnHarness()
    txn_commit(h, group="a", pid=1, parts=[("t", 0, 10, -1, None)])
    txn_commit(h, group="b", pid=1, parts=[("t", 0, 11, -1, None)])
    txn_commit(h, group="a", pid=2, parts=[("t", 1, 12, -1, None)])
    assert h.m.open_groups_for_producer == {1: {"a", "b"}, 2: {"a"}}
    assert h.marker(1, commit=True, which=lambda g: g == "a") == 1  # b is on another partition
    assert fetched(h.m, "a", (0, 1), stable=True) == {0: (10, 0), 1: UNSTABLE}
    assert fetched(h.m, "b", stable=True) == {0: UNSTABLE}
    assert h.m.open_groups_for_producer == {1: {"b"}, 2: {"a"}}
    h.marker(1, commit=False, which=lambda g: g == "b")
    h.marker(2, commit=True, which=lambda g: g == "a")
    assert fetched(h.m, "a", (0, 1), stable=True) == {0: (10, 0), 1: (12, 0)}
    assert fetched(h.m, "b", stable=True) == {0: (-1, 0)}


@pytest.mark.parametrize("pid", [-1, -7])
def test_a_commit_without_producer_id_is_a_plain_commit(pid: int) -> None:
    """Kafka's storeOffsets: no producer id, no transaction (and no transaction a marker could end)."""
    h = TxnHarness()
    assert txn_commit(h, pid=pid, epoch=-1) == {("t", 0): 0}
    assert h.log[-1][2] is None  # written as a plain batch
    assert fetched(h.m, stable=True) == {0: (10, 0)}


# -- validation and errors --------------------------------------------------------------------------

def test_missing_group_is_created_as_a_simple_group_only_for_generation_minus_one() -> None:
    h = TxnHarness()
    assert txn_commit(h, member="m", generation=3) == {("t", 0): ErrorCode.UNKNOWN_MEMBER_ID}
    assert "g" not in h.m.groups and h.log == []
    assert txn_commit(h, member="whoever") == {("t", 0): ErrorCode.NONE}  # generation -1: no member check
    group = h.group()
    assert group.state is GroupState.EMPTY and group.protocol_type is None


def test_member_checks_from_v3() -> None:
    h = TxnHarness()
    [a] = h.stable_group(1)
    gen = h.group().generation
    assert txn_commit(h, member=a, generation=gen) == {("t", 0): ErrorCode.NONE}
    assert txn_commit(h, member=a, generation=gen + 1) == {("t", 0): ErrorCode.ILLEGAL_GENERATION}
    assert txn_commit(h, member="stranger", generation=gen) == {("t", 0): ErrorCode.UNKNOWN_MEMBER_ID}
    assert txn_commit(h, member=a, generation=-1) == {("t", 0): ErrorCode.ILLEGAL_GENERATION}
    # Before v3 there are no member fields: unlike a plain commit, allowed into a group with members.
    assert txn_commit(h) == {("t", 0): ErrorCode.NONE}
    assert h.m.commit_offsets(CommitRequest("g", "", None, -1, -1, 8, [("t", 0, 1, -1, None)])) \
        == {("t", 0): ErrorCode.UNKNOWN_MEMBER_ID}


def test_static_member_with_a_stale_member_id_is_fenced() -> None:
    h = TxnHarness()
    box = h.join(instance="i-1")
    h.timer.advance(0)
    old, gen = box.answer["member_id"], box.answer["generation_id"]
    h.sync(old, gen, {old: b"A"})
    new = h.join(instance="i-1").answer["member_id"]  # the instance restarted with a new member id
    assert txn_commit(h, member=old, generation=gen, instance="i-1") == {("t", 0): ErrorCode.FENCED_INSTANCE_ID}
    assert txn_commit(h, member=new, generation=gen, instance="i-2") == {("t", 0): ErrorCode.UNKNOWN_MEMBER_ID}
    assert txn_commit(h, member=new, generation=gen, instance="i-1") == {("t", 0): ErrorCode.NONE}


def test_completing_rebalance_does_not_ask_a_txn_commit_to_wait() -> None:
    """doTxnCommitOffsets has no REBALANCE_IN_PROGRESS check (and extends no session)."""
    h = TxnHarness()
    [a] = h.stable_group(1)
    h.join_new()
    gen = h.join(a).answer["generation_id"]
    assert h.group().state is GroupState.COMPLETING_REBALANCE
    assert txn_commit(h, member=a, generation=gen) == {("t", 0): ErrorCode.NONE}


def test_empty_group_id_and_oversized_metadata() -> None:
    h = TxnHarness(offset_metadata_max_bytes=4)
    assert txn_commit(h, group="") == {("t", 0): ErrorCode.INVALID_GROUP_ID}
    assert txn_commit(h, parts=[("t", 0, 1, -1, "too long"), ("t", 1, 2, -1, "ok")]) \
        == {("t", 0): ErrorCode.OFFSET_METADATA_TOO_LARGE, ("t", 1): ErrorCode.NONE}
    assert fetched(h.m, partitions=(0, 1), stable=True) == {0: (-1, 0), 1: UNSTABLE}
    n = len(h.log)
    assert txn_commit(h, parts=[("t", 0, 1, -1, "too long")]) == {("t", 0): ErrorCode.OFFSET_METADATA_TOO_LARGE}
    assert len(h.log) == n  # nothing to write


@pytest.mark.parametrize("error, code", [
    (InvalidProducerEpochError("fenced"), ErrorCode.INVALID_PRODUCER_EPOCH),
    (KafkaStorageError("eio"), ErrorCode.NOT_COORDINATOR),
    (RecordTooLargeError("big"), ErrorCode.INVALID_COMMIT_OFFSET_SIZE),
])
def test_refused_append_is_answered_and_nothing_is_pending(error: KafkaError, code: int) -> None:
    h = TxnHarness()
    h.fail_with = error
    assert txn_commit(h) == {("t", 0): code}
    assert not h.m.has_pending_txn_offsets("g") and h.m.open_groups_for_producer == {}


@pytest.mark.parametrize("code, expected", [
    (ErrorCode.PRODUCER_FENCED, ErrorCode.INVALID_PRODUCER_EPOCH),
    (ErrorCode.INVALID_PRODUCER_EPOCH, ErrorCode.INVALID_PRODUCER_EPOCH),
    (ErrorCode.INVALID_TXN_STATE, ErrorCode.INVALID_TXN_STATE),
    (ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND, ErrorCode.COORDINATOR_NOT_AVAILABLE),
    (ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.NOT_COORDINATOR),
    (ErrorCode.REQUEST_TIMED_OUT, ErrorCode.REQUEST_TIMED_OUT),
    (ErrorCode.NETWORK_EXCEPTION, ErrorCode.COORDINATOR_LOAD_IN_PROGRESS),
])
def test_append_errors_map_as_kafkas_maybe_convert_offset_commit_error(code: int, expected: int) -> None:
    assert txn_offset_append_error(code) == expected


def test_a_commit_that_did_not_replicate_is_no_longer_pending() -> None:
    """Kafka's failPendingTxnOffsetCommit, for that batch only: a newer one of the producer stays."""
    h = TxnHarness()
    _, first = h.m.commit_txn_offsets(TxnCommitRequest("g", "x", PID, EPOCH, "", None, -1, [("t", 0, 1, -1, None)]))
    _, second = h.m.commit_txn_offsets(TxnCommitRequest("g", "x", PID, EPOCH, "", None, -1,
                                                        [("t", 1, 2, -1, None)]))
    assert first != NO_APPEND_OFFSET and second > first
    h.m.fail_txn_offset_commit("g", PID, first)
    assert fetched(h.m, partitions=(0, 1), stable=True) == {0: (-1, 0), 1: UNSTABLE}
    h.m.fail_txn_offset_commit("g", PID, second)
    assert h.m.pending_txn_offsets == {} and h.m.open_groups_for_producer == {}


# -- groups and offsets going away -----------------------------------------------------------------

def test_deleting_the_group_drops_its_pending_offsets() -> None:
    h = TxnHarness()
    plain_commit(h, 5)
    txn_commit(h, parts=[("t", 0, 10, -1, None), ("t", 1, 11, -1, None)])
    assert h.m.delete_groups(["g"]) == [("g", ErrorCode.NONE)]
    assert h.m.pending_txn_offsets == {} and h.m.open_groups_for_producer == {}
    assert h.marker(PID, commit=True) == 0
    assert "g" not in h.m.groups and fetched(h.m, partitions=(0, 1), stable=True) == {0: (-1, 0), 1: (-1, 0)}


def test_expiry_keeps_an_empty_group_while_a_transaction_may_still_commit_its_offsets() -> None:
    """Kafka's cleanupGroupMetadata: an Empty group is only removed once it has no offsets, pending included."""
    h = TxnHarness(offsets_retention_ms=DAY_MS)
    plain_commit(h, 5)
    txn_commit(h, parts=[("t", 1, 11, -1, None)])
    h.clock.advance(DAY_MS)
    assert h.m.expire_offsets() == 1  # the committed offset expires as it would have
    assert "g" in h.m.groups and fetched(h.m, partitions=(1,), stable=True) == {1: UNSTABLE}
    h.marker(PID, commit=False)
    h.m.expire_offsets()
    assert "g" not in h.m.groups


def test_offset_delete_and_topic_deletion_reach_pending_offsets() -> None:
    h = TxnHarness()
    txn_commit(h, parts=[("t", 0, 10, -1, None), ("t", 1, 11, -1, None), ("u", 0, 12, -1, None)])
    assert h.m.delete_offsets("g", [("t", [0])]) == (ErrorCode.NONE, [("t", [(0, ErrorCode.NONE)])])
    h.m.on_topic_deleted("u")
    h.marker(PID, commit=True)
    assert {k: om.offset for k, om in h.m.offsets["g"].items()} == {("t", 1): 11}


def test_unloading_forgets_pending_offsets_and_their_producers() -> None:
    h = TxnHarness()
    txn_commit(h, group="a")
    txn_commit(h, group="b")
    assert h.m.unload_groups(lambda g: g == "a") == 1
    assert set(h.m.pending_txn_offsets) == {"b"} and h.m.open_groups_for_producer == {PID: {"b"}}
    h.m.unload()
    assert h.m.pending_txn_offsets == {} and h.m.open_groups_for_producer == {}


# -- replay ---------------------------------------------------------------------------------------

def state(m: GroupMetadataManager) -> tuple[Any, ...]:
    offsets = {g: {k: (om.offset, om.metadata, om.append_offset) for k, om in o.items()} for g, o in m.offsets.items()
               if o}
    pending = {g: {p: {k: (om.offset, om.append_offset) for k, om in o.items()} for p, o in by.items() if o}
               for g, by in m.pending_txn_offsets.items() if any(by.values())}
    return offsets, pending, m.open_groups_for_producer, sorted(m.groups)


def test_replay_gives_the_live_state_commit_abort_and_ordering() -> None:
    h = TxnHarness()
    plain_commit(h, 1, group="committed")
    txn_commit(h, group="committed", pid=1, parts=[("t", 0, 10, -1, None)])
    h.marker(1, commit=True)
    txn_commit(h, group="aborted", pid=2, parts=[("t", 0, 20, -1, None)])
    h.marker(2, commit=False)
    txn_commit(h, group="overtaken", pid=3, parts=[("t", 0, 30, -1, None)])
    plain_commit(h, 31, group="overtaken")
    h.marker(3, commit=True)
    live = state(h.m)
    assert live[0]["committed"][("t", 0)][0] == 10 and live[0]["overtaken"][("t", 0)][0] == 31
    assert "aborted" not in live[0] and live[1] == {}
    assert state(h.reload()) == live


def test_replay_keeps_an_open_transaction_pending_for_its_marker() -> None:
    h = TxnHarness()
    plain_commit(h, 5)
    txn_commit(h, parts=[("t", 0, 10, -1, None)])
    plain_commit(h, 6, partition=1)
    fresh = h.reload()
    assert state(fresh) == state(h.m)
    assert fetched(fresh, partitions=(0, 1), stable=True) == {0: UNSTABLE, 1: (6, 0)}
    assert fetched(fresh, partitions=(0, 1)) == {0: (5, 0), 1: (6, 0)}
    assert fresh.complete_txn_offset_commits(PID, True, ALL) == 1  # the marker, after the restart
    assert fetched(fresh, stable=True) == {0: (10, 0)}


def test_replayed_marker_completes_only_the_partitions_groups() -> None:
    h = TxnHarness()
    m = GroupMetadataManager(h.m.config, h.timer, h.clock, lambda g, r, p=None: None)
    txn_commit(h, group="here", parts=[("t", 0, 1, -1, None)])
    txn_commit(h, group="there", parts=[("t", 0, 2, -1, None)])
    for _, records, producer, offset in h.log:  # type: ignore[misc]
        for key, value in records:
            m.replay(key, value, offset, producer[0])
    m.replay_txn_marker(PID, True, lambda g: g == "here")
    assert fetched(m, "here", stable=True) == {0: (1, 0)}
    assert fetched(m, "there", stable=True) == {0: UNSTABLE}


def test_replayed_offsets_of_a_deleted_group_come_back_with_their_commit_as_kafkas_loader_does() -> None:
    """A group tombstone read between the transactional batch and its COMMIT does not stop the commit:
    Kafka's loader keeps pending offsets per producer and builds the group for them at the end."""
    h = TxnHarness()
    txn_commit(h, parts=[("t", 0, 10, -1, None)])
    m = GroupMetadataManager(h.m.config, h.timer, h.clock, lambda g, r, p=None: None)
    _, records, _, offset = h.log[0]  # type: ignore[misc]
    m.replay(records[0][0], records[0][1], offset, PID)
    m.replay(b"\x00\x02\x00\x01g", None)  # GroupMetadataKey("g") tombstone
    assert "g" not in m.groups
    m.replay_txn_marker(PID, True, ALL)
    assert "g" in m.groups and fetched(m) == {0: (10, 0)}


# -- through the coordinator, on a real log --------------------------------------------------------

class _Replicas:
    """The broker's ReplicaManager for one local partition, as a single node appends (HW = log end)."""

    def __init__(self, plog: PartitionLog) -> None:
        self.plog = plog

    def append(self, tp: TopicPartition, records: bytes, origin: AppendOrigin, required_acks: int = 1) -> Any:
        info = self.plog.append_as_leader(records, 0, origin)
        self.plog.update_high_watermark(self.plog.log_end_offset)
        return info


def coordinator_on(plog: PartitionLog, clock: Any) -> GroupCoordinator:
    broker: Any = SimpleNamespace(config=SimpleNamespace(offsets_topic_num_partitions=1), clustered=False,
                                  replicas=_Replicas(plog), clock=clock)
    coordinator = GroupCoordinator(broker)
    coordinator.manager = fresh_manager(coordinator)
    return coordinator


def fresh_manager(coordinator: GroupCoordinator) -> GroupMetadataManager:
    h = Harness()
    return GroupMetadataManager(h.m.config, h.timer, h.clock, coordinator._write)


def append_marker(plog: PartitionLog, producer_id: int, epoch: int, commit: bool) -> None:
    marker = ControlRecordType.COMMIT if commit else ControlRecordType.ABORT
    plog.append_as_leader(build_control_batch(marker, producer_id=producer_id, producer_epoch=epoch), 0,
                          AppendOrigin.COORDINATOR)
    plog.update_high_watermark(plog.log_end_offset)


def commit_via(m: GroupMetadataManager, offset: int, partition: int = 0, pid: int = PID,
               epoch: int = EPOCH) -> dict[tuple[str, int], int]:
    codes, _ = m.commit_txn_offsets(TxnCommitRequest("g", "x", pid, epoch, "", None, -1,
                                                     [("t", partition, offset, -1, None)]))
    return codes


def replayed(coordinator: GroupCoordinator, plog: PartitionLog) -> GroupMetadataManager:
    m = fresh_manager(coordinator)
    coordinator._replay_log(m, TopicPartition("__consumer_offsets", 0), plog, plog.log_end_offset)
    return m


def test_coordinator_appends_one_transactional_batch_of_the_producer(open_log: Any, clock: Any) -> None:
    plog = open_log(LOG_CONFIG)
    coordinator = coordinator_on(plog, clock)
    assert coordinator.manager is not None
    codes, append_offset = coordinator.manager.commit_txn_offsets(TxnCommitRequest(
        "g", "x", PID, EPOCH, "", None, -1, [("t", 0, 10, -1, None), ("t", 1, 11, -1, None)]))
    assert codes == {("t", 0): 0, ("t", 1): 0} and append_offset == 0
    buf = plog.read(0, 1 << 20, FetchIsolation.LOG_END).records.read()  # type: ignore[union-attr]
    [(_, header)] = list(iter_batches(buf))
    assert (header.producer_id, header.producer_epoch, header.base_sequence) == (PID, EPOCH, NO_SEQUENCE)
    assert header.is_transactional and not header.is_control and header.records_count == 2
    # The log now has an open transaction of that producer: the last stable offset stays before it.
    assert plog.producer_state.first_unstable_offset() == 0


def test_coordinator_completes_on_the_marker_and_replays_the_same(open_log: Any, clock: Any) -> None:
    plog = open_log(LOG_CONFIG)
    coordinator = coordinator_on(plog, clock)
    m = coordinator.manager
    assert m is not None
    plain_offsets = m.commit_offsets(CommitRequest("g", "", None, -1, -1, 8, [("t", 0, 5, -1, None)]))
    assert plain_offsets == {("t", 0): 0}
    assert commit_via(m, 10) == {("t", 0): 0}
    append_marker(plog, PID, EPOCH, commit=True)
    coordinator.complete_transaction(0, PID, commit=True)
    assert fetched(m, stable=True) == {0: (10, 0)}
    assert commit_via(m, 20, pid=PID + 1) == {("t", 0): 0}  # another producer, aborted
    append_marker(plog, PID + 1, EPOCH, commit=False)
    coordinator.complete_transaction(0, PID + 1, commit=False)
    assert commit_via(m, 30, partition=1) == {("t", 1): 0}  # the next transaction, still open
    assert fetched(m, partitions=(0, 1), stable=True) == {0: (10, 0), 1: UNSTABLE}
    fresh = replayed(coordinator, plog)
    assert state(fresh) == state(m)
    assert fetched(fresh, partitions=(0, 1), stable=True) == {0: (10, 0), 1: UNSTABLE}


def test_coordinator_replay_orders_a_plain_commit_after_the_txn_batch(open_log: Any, clock: Any) -> None:
    plog = open_log(LOG_CONFIG)
    coordinator = coordinator_on(plog, clock)
    m = coordinator.manager
    assert m is not None
    commit_via(m, 10)
    m.commit_offsets(CommitRequest("g", "", None, -1, -1, 8, [("t", 0, 7, -1, None)]))
    append_marker(plog, PID, EPOCH, commit=True)
    coordinator.complete_transaction(0, PID, commit=True)
    assert fetched(m) == {0: (7, 0)}
    assert fetched(replayed(coordinator, plog)) == {0: (7, 0)}


def test_the_log_fences_a_stale_producer_epoch(open_log: Any, clock: Any) -> None:
    plog = open_log(LOG_CONFIG)
    coordinator = coordinator_on(plog, clock)
    m = coordinator.manager
    assert m is not None
    assert commit_via(m, 10, epoch=EPOCH) == {("t", 0): 0}
    assert commit_via(m, 11, partition=1, epoch=EPOCH - 1) == {("t", 1): ErrorCode.INVALID_PRODUCER_EPOCH}
    assert fetched(m, partitions=(0, 1), stable=True) == {0: UNSTABLE, 1: (-1, 0)}


def test_complete_transaction_skips_a_partition_not_coordinated_here(open_log: Any, clock: Any) -> None:
    plog = open_log(LOG_CONFIG)
    coordinator = coordinator_on(plog, clock)
    m = coordinator.manager
    assert m is not None
    commit_via(m, 10)
    coordinator.clustered = True  # a cluster member that does not lead (has not loaded) partition 0
    coordinator.complete_transaction(0, PID, commit=True)
    assert fetched(m, stable=True) == {0: UNSTABLE}
    coordinator.loaded.add(0)
    coordinator.complete_transaction(0, PID, commit=True)
    assert fetched(m, stable=True) == {0: (10, 0)}
