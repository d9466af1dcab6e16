"""TxnOffsetCommit against a real broker, over the wire, inside real transactions.

A TxnOffsetCommit is written to ``__consumer_offsets`` as a transactional batch of the producer and
stays pending until its transaction's marker: OffsetFetch keeps showing the previous commit, and a
read_committed consumer (``require_stable``) is told UNSTABLE_OFFSET_COMMIT. EndTxn's marker then
applies (commit) or drops (abort) them. Also: the error codes (unknown topic or partition, group
membership, a fenced producer epoch, a partition not added with AddOffsetsToTxn), and that a restart
replays the open transaction's offsets as pending, not as committed.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from tests.broker.harness import BrokerProcess
from tests.broker.kafka_wire import WireClient
from tests.cluster.harness import wait_until

TOPIC = "txn-src"
TXN_OFFSET_COMMIT, OFFSET_COMMIT, OFFSET_FETCH, JOIN_GROUP, SYNC_GROUP, CREATE_TOPICS = 28, 8, 9, 11, 14, 19
NONE, UNKNOWN_TOPIC_OR_PARTITION, ILLEGAL_GENERATION, UNKNOWN_MEMBER_ID = 0, 3, 22, 25
INVALID_PRODUCER_EPOCH, INVALID_TXN_STATE, UNSTABLE_OFFSET_COMMIT = 47, 48, 88
FIND_COORDINATOR, INIT_PRODUCER_ID, ADD_OFFSETS_TO_TXN, END_TXN = 10, 22, 25, 26
TXN_ID = "txn-wire"


def begin(c: WireClient, *groups: str, txn_id: str = TXN_ID) -> tuple[int, int]:
    """InitProducerId for ``txn_id`` (its coordinator found first), then AddOffsetsToTxn for each group:
    (producer id, epoch)."""
    wait_until(lambda: int(c.call(FIND_COORDINATOR, 3, key=txn_id, key_type=1).error_code) == NONE, 15,
               "the transaction coordinator")
    def init() -> Any:  # CONCURRENT_TRANSACTIONS while an open transaction of the id is being aborted
        r = c.call(INIT_PRODUCER_ID, 4, transactional_id=txn_id, transaction_timeout=60_000, producer_id=-1,
                   producer_epoch=-1)
        return r if int(r.error_code) == NONE else None
    r = wait_until(init, 15, f"InitProducerId for {txn_id}")
    for group in groups:
        added = c.call(ADD_OFFSETS_TO_TXN, 3, transactional_id=txn_id, producer_id=r.producer_id,
                       producer_epoch=r.producer_epoch, group_id=group)
        assert int(added.error_code) == NONE, added
    return r.producer_id, r.producer_epoch


def end(c: WireClient, pid: int, epoch: int, commit: bool, txn_id: str = TXN_ID) -> None:
    r = c.call(END_TXN, 3, transactional_id=txn_id, producer_id=pid, producer_epoch=epoch, committed=commit)
    assert int(r.error_code) == NONE, r


@pytest.fixture(scope="module")
def txn_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    b = BrokerProcess(tmp_path_factory.mktemp("txn-offsets")).start()
    try:
        with WireClient(b.bootstrap) as c:
            create_topic(c)
        yield b
    finally:
        b.stop()


def create_topic(c: WireClient) -> None:
    r = c.call(CREATE_TOPICS, 5, timeout=15_000, validate_only=False, topics=[
        {"name": TOPIC, "num_partitions": 2, "replication_factor": 1, "assignments": [], "configs": []}])
    assert int(r.topics[0].error_code) == NONE, r


def txn_commit(c: WireClient, group: str, pid: int, epoch: int, offsets: dict[tuple[str, int], int], *,
               version: int = 3, generation: int = -1, member: str = "", txn_id: str = TXN_ID
               ) -> dict[tuple[str, int], int]:
    """(topic, partition) -> error code."""
    by_topic: dict[str, list[dict[str, Any]]] = {}
    for (topic, partition), offset in offsets.items():
        by_topic.setdefault(topic, []).append({"partition_index": partition, "committed_offset": offset,
                                               "committed_leader_epoch": -1, "committed_metadata": "txn"})
    fields: dict[str, Any] = {"transactional_id": txn_id, "group_id": group, "producer_id": pid,
                              "producer_epoch": epoch,
                              "topics": [{"name": t, "partitions": ps} for t, ps in by_topic.items()]}
    if version >= 3:
        fields.update(generation_id=generation, member_id=member, group_instance_id=None)
    r = c.call(TXN_OFFSET_COMMIT, version, **fields)
    return {(t.name, p.partition_index): int(p.error_code) for t in r.topics for p in t.partitions}


def plain_commit(c: WireClient, group: str, partition: int, offset: int) -> None:
    r = c.call(OFFSET_COMMIT, 8, group_id=group, generation_id_or_member_epoch=-1, member_id="",
               group_instance_id=None, retention_time_ms=-1, topics=[{"name": TOPIC, "partitions": [
                   {"partition_index": partition, "committed_offset": offset, "committed_leader_epoch": -1,
                    "committed_metadata": ""}]}])
    assert int(r.topics[0].partitions[0].error_code) == NONE, r


def fetch(c: WireClient, group: str, *, stable: bool, version: int = 7) -> dict[int, tuple[int, int]]:
    """partition -> (committed offset, error code) for both partitions of TOPIC."""
    topics = [{"name": TOPIC, "partition_indexes": [0, 1]}]
    if version >= 8:
        r = c.call(OFFSET_FETCH, version, require_stable=stable, groups=[{"group_id": group, "topics": topics}])
        [g] = r.groups
        assert int(g.error_code) == NONE, r
        parts = g.topics[0].partitions
    else:
        r = c.call(OFFSET_FETCH, version, group_id=group, require_stable=stable, topics=topics)
        assert int(r.error_code) == NONE, r
        parts = r.topics[0].partitions
    return {p.partition_index: (p.committed_offset, int(p.error_code)) for p in parts}


def test_txn_offsets_are_pending_until_their_transaction_ends(txn_broker: BrokerProcess) -> None:
    with WireClient(txn_broker.bootstrap) as c:
        pid, epoch = begin(c, "pending", "pending-v0")
        plain_commit(c, "pending", 0, 5)
        plain_commit(c, "pending", 1, 6)
        assert txn_commit(c, "pending", pid, epoch, {(TOPIC, 0): 10}) == {(TOPIC, 0): NONE}
        assert fetch(c, "pending", stable=False) == {0: (5, NONE), 1: (6, NONE)}
        assert fetch(c, "pending", stable=True) == {0: (-1, UNSTABLE_OFFSET_COMMIT), 1: (6, NONE)}
        assert fetch(c, "pending", stable=True, version=8) == {0: (-1, UNSTABLE_OFFSET_COMMIT), 1: (6, NONE)}
        # v0 carries no member fields; it commits into a brand-new (simple) group just the same.
        assert txn_commit(c, "pending-v0", pid, epoch, {(TOPIC, 1): 3}, version=0) == {(TOPIC, 1): NONE}
        assert fetch(c, "pending-v0", stable=True) == {0: (-1, NONE), 1: (-1, UNSTABLE_OFFSET_COMMIT)}
        end(c, pid, epoch, commit=True)  # the markers apply them
        wait_until(lambda: fetch(c, "pending", stable=True) == {0: (10, NONE), 1: (6, NONE)}, 10, "the commit")
        assert fetch(c, "pending-v0", stable=True) == {0: (-1, NONE), 1: (3, NONE)}


def test_aborted_txn_offsets_are_dropped(txn_broker: BrokerProcess) -> None:
    with WireClient(txn_broker.bootstrap) as c:
        pid, epoch = begin(c, "dropped", txn_id="txn-abort")
        plain_commit(c, "dropped", 0, 5)
        assert txn_commit(c, "dropped", pid, epoch, {(TOPIC, 0): 10}, txn_id="txn-abort") == {(TOPIC, 0): NONE}
        end(c, pid, epoch, commit=False, txn_id="txn-abort")
        wait_until(lambda: fetch(c, "dropped", stable=True) == {0: (5, NONE), 1: (-1, NONE)}, 10, "the abort")


def test_a_group_not_added_to_the_transaction_is_refused(txn_broker: BrokerProcess) -> None:
    """KIP-890: without AddOffsetsToTxn the group's partition is not in the transaction."""
    with WireClient(txn_broker.bootstrap) as c:
        pid, epoch = begin(c, txn_id="txn-no-add")
        assert txn_commit(c, "not-added", pid, epoch, {(TOPIC, 0): 1}, txn_id="txn-no-add") \
            == {(TOPIC, 0): INVALID_TXN_STATE}
        assert fetch(c, "not-added", stable=True) == {0: (-1, NONE), 1: (-1, NONE)}


def test_unknown_topics_and_partitions_are_refused_per_partition(txn_broker: BrokerProcess) -> None:
    with WireClient(txn_broker.bootstrap) as c:
        pid, epoch = begin(c, "unknowns", txn_id="txn-unknowns")
        codes = txn_commit(c, "unknowns", pid, epoch, {("no-such-topic", 0): 1, (TOPIC, 7): 1, (TOPIC, 1): 1},
                           txn_id="txn-unknowns")
        assert codes == {("no-such-topic", 0): UNKNOWN_TOPIC_OR_PARTITION, (TOPIC, 7): UNKNOWN_TOPIC_OR_PARTITION,
                         (TOPIC, 1): NONE}
        assert fetch(c, "unknowns", stable=True) == {0: (-1, NONE), 1: (-1, UNSTABLE_OFFSET_COMMIT)}


def join_and_sync(c: WireClient, group: str) -> tuple[str, int]:
    """A one-member classic group, joined and synced over the wire: (member id, generation)."""
    join = {"group_id": group, "session_timeout": 30_000, "rebalance_timeout": 30_000, "group_instance_id": None,
            "protocol_type": "consumer", "protocols": [{"name": "range", "metadata": b""}]}
    first = c.call(JOIN_GROUP, 5, member_id="", **join)
    assert int(first.error_code) == 79, first  # MEMBER_ID_REQUIRED (KIP-394)
    joined = c.call(JOIN_GROUP, 5, member_id=first.member_id, **join)
    assert int(joined.error_code) == NONE, joined
    synced = c.call(SYNC_GROUP, 3, group_id=group, generation_id=joined.generation_id, member_id=joined.member_id,
                    group_instance_id=None, assignments=[{"member_id": joined.member_id, "assignment": b""}])
    assert int(synced.error_code) == NONE, synced
    return joined.member_id, joined.generation_id


def test_member_and_generation_are_checked_from_v3(txn_broker: BrokerProcess) -> None:
    with WireClient(txn_broker.bootstrap) as c:
        pid, epoch = begin(c, "members", "no-such-group", txn_id="txn-members")
        member, generation = join_and_sync(c, "members")
        offsets = {(TOPIC, 0): 42}
        t = "txn-members"
        assert txn_commit(c, "members", pid, epoch, offsets, generation=generation + 1, member=member, txn_id=t) \
            == {(TOPIC, 0): ILLEGAL_GENERATION}
        assert txn_commit(c, "members", pid, epoch, offsets, generation=generation, member="stranger", txn_id=t) \
            == {(TOPIC, 0): UNKNOWN_MEMBER_ID}
        assert txn_commit(c, "no-such-group", pid, epoch, offsets, generation=3, member="m", txn_id=t) \
            == {(TOPIC, 0): UNKNOWN_MEMBER_ID}
        assert fetch(c, "members", stable=True) == {0: (-1, NONE), 1: (-1, NONE)}  # nothing was written
        assert txn_commit(c, "members", pid, epoch, offsets, generation=generation, member=member, txn_id=t) \
            == {(TOPIC, 0): NONE}
        assert fetch(c, "members", stable=True)[0] == (-1, UNSTABLE_OFFSET_COMMIT)


def test_a_stale_producer_epoch_is_fenced(txn_broker: BrokerProcess) -> None:
    with WireClient(txn_broker.bootstrap) as c:
        old_pid, old_epoch = begin(c, "fenced", txn_id="txn-fenced")
        pid, epoch = begin(c, "fenced", txn_id="txn-fenced")  # a new producer of the id aborts the old one's
        assert pid == old_pid and epoch > old_epoch
        assert txn_commit(c, "fenced", pid, epoch, {(TOPIC, 0): 1}, txn_id="txn-fenced") == {(TOPIC, 0): NONE}
        assert txn_commit(c, "fenced", pid, old_epoch, {(TOPIC, 1): 2}, txn_id="txn-fenced") \
            == {(TOPIC, 1): INVALID_PRODUCER_EPOCH}
        assert fetch(c, "fenced", stable=True) == {0: (-1, UNSTABLE_OFFSET_COMMIT), 1: (-1, NONE)}


@pytest.mark.parametrize("hard", [False, True], ids=["sigterm", "kill-9"])
def test_restart_replays_an_open_transactions_offsets_as_pending(tmp_path: Path, hard: bool) -> None:
    broker = BrokerProcess(tmp_path / "b").start()
    try:
        with WireClient(broker.bootstrap) as c:
            create_topic(c)
            begin(c, txn_id="txn-restart")
            pid, epoch = begin(c, "restart", txn_id="txn-restart")  # epoch 1
            plain_commit(c, "restart", 0, 5)
            assert txn_commit(c, "restart", pid, epoch, {(TOPIC, 0): 10, (TOPIC, 1): 11}, txn_id="txn-restart") \
                == {(TOPIC, 0): NONE, (TOPIC, 1): NONE}
            plain_commit(c, "restart", 1, 7)  # appended after the transactional batch
        broker.restart(hard=hard)
        with WireClient(broker.bootstrap) as c:
            assert fetch(c, "restart", stable=False) == {0: (5, NONE), 1: (7, NONE)}
            assert fetch(c, "restart", stable=True) == {0: (-1, UNSTABLE_OFFSET_COMMIT),
                                                        1: (-1, UNSTABLE_OFFSET_COMMIT)}
            # The producer's epoch was recovered with the logs: it still fences the older one.
            assert txn_commit(c, "restart", pid, epoch - 1, {(TOPIC, 0): 12}, txn_id="txn-restart") \
                == {(TOPIC, 0): INVALID_PRODUCER_EPOCH}
            assert txn_commit(c, "restart", pid, epoch, {(TOPIC, 0): 12}, txn_id="txn-restart") == {(TOPIC, 0): NONE}
            assert fetch(c, "restart", stable=False) == {0: (5, NONE), 1: (7, NONE)}
            end(c, pid, epoch, commit=True, txn_id="txn-restart")
            wait_until(lambda: fetch(c, "restart", stable=True) == {0: (12, NONE), 1: (7, NONE)}, 10,
                       "the commit after the restart (the plain commit of partition 1 came later and wins)")
    finally:
        broker.stop()
