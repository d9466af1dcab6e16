"""The KIP-932 share coordinator over the wire: FindCoordinator key type 2 and the inter-broker RPCs 83-87
(Initialize / Read / Write / Delete / ReadSummary ShareGroupState) against a real broker process.

No client library sends these (brokers do, to each other), so a raw client plays the share-partition
leader: it initializes two share-partitions, writes twice, reads the merged state back, is fenced by the
epochs, deletes one; then the broker is restarted -- cleanly and with ``kill -9`` -- and the state read back
must be exactly what was acknowledged, rebuilt from ``__share_group_state``.
"""

from __future__ import annotations

import base64
import uuid
from pathlib import Path
from typing import Any

from tests.broker.harness import BrokerProcess
from tests.broker.kafka_wire import WireClient, ensure_topic

from strata.errors import ErrorCode as E

FIND_COORDINATOR, INITIALIZE, READ, WRITE, DELETE, SUMMARY = 10, 83, 84, 85, 86, 87
GROUP = "share-g"
PROPS = {"share.coordinator.state.topic.num.partitions": "3", "num.partitions": "2",
         "share.coordinator.snapshot.update.records.per.snapshot": "2"}


def b64(topic_id: Any) -> str:
    return base64.urlsafe_b64encode(topic_id.bytes).rstrip(b"=").decode()


def codes(resp: Any) -> list[int]:
    return [int(p.error_code) for r in resp.results for p in r.partitions]


def initialize(w: WireClient, topic_id: Any, partition: int, state_epoch: int, start: int) -> int:
    resp = w.call(INITIALIZE, 0, group_id=GROUP, topics=[{"topic_id": topic_id, "partitions": [
        {"partition": partition, "state_epoch": state_epoch, "start_offset": start}]}])
    [code] = codes(resp)
    return code


def write(w: WireClient, topic_id: Any, partition: int, *, state_epoch: int, leader_epoch: int, start: int,
          batches: list[tuple[int, int, int, int]], dcc: int = -1) -> int:
    resp = w.call(WRITE, 1, group_id=GROUP, topics=[{"topic_id": topic_id, "partitions": [
        {"partition": partition, "state_epoch": state_epoch, "leader_epoch": leader_epoch, "start_offset": start,
         "delivery_complete_count": dcc,
         "state_batches": [{"first_offset": f, "last_offset": la, "delivery_state": s, "delivery_count": c}
                           for f, la, s, c in batches]}]}])
    [code] = codes(resp)
    return code


def read(w: WireClient, topic_id: Any, partition: int, leader_epoch: int) -> tuple[int, int, int, list[tuple]]:
    """(error, state epoch, start offset, batches)."""
    resp = w.call(READ, 0, group_id=GROUP, topics=[{"topic_id": topic_id, "partitions": [
        {"partition": partition, "leader_epoch": leader_epoch}]}])
    [[p]] = [r.partitions for r in resp.results]
    return (int(p.error_code), p.state_epoch, p.start_offset,
            [(b.first_offset, b.last_offset, b.delivery_state, b.delivery_count) for b in p.state_batches])


def summary(w: WireClient, topic_id: Any, partition: int) -> tuple[int, int, int, int, int]:
    """(error, state epoch, leader epoch, start offset, delivery complete count)."""
    resp = w.call(SUMMARY, 1, group_id=GROUP, topics=[{"topic_id": topic_id, "partitions": [
        {"partition": partition, "leader_epoch": 0}]}])
    [[p]] = [r.partitions for r in resp.results]
    return int(p.error_code), p.state_epoch, p.leader_epoch, p.start_offset, p.delivery_complete_count


MERGED = (E.NONE, 1, 0, [(0, 2, 2, 1), (3, 3, 0, 2), (4, 9, 0, 1)])


def test_share_state_rpcs_and_their_state_across_restarts(tmp_path: Path) -> None:
    broker = BrokerProcess(tmp_path / "b", PROPS).start()
    try:
        host, port = broker.bootstrap.rsplit(":", 1)
        with WireClient(broker.bootstrap) as w:
            topic_id = ensure_topic(w, "shared").topic_id
            key = f"{GROUP}:{b64(topic_id)}:0"

            # FindCoordinator: this node, for v6 share keys only, and only for well-formed ones
            found = w.call(FIND_COORDINATOR, 6, key_type=2, coordinator_keys=[key, "no-colons", f"g:{b64(topic_id)}:x"])
            assert [(c.key, int(c.error_code)) for c in found.coordinators] == \
                [(key, 0), ("no-colons", E.INVALID_REQUEST), (f"g:{b64(topic_id)}:x", E.INVALID_REQUEST)]
            assert (found.coordinators[0].host, found.coordinators[0].port) == (host, int(port))
            old = w.call(FIND_COORDINATOR, 4, key_type=2, coordinator_keys=[key])
            assert int(old.coordinators[0].error_code) == E.INVALID_REQUEST

            # nothing to write to before Initialize; an unknown topic cannot be initialized
            assert write(w, topic_id, 0, state_epoch=1, leader_epoch=0, start=0, batches=[]) == E.INVALID_REQUEST
            assert initialize(w, uuid.UUID(int=12345), 0, 1, 0) == E.UNKNOWN_TOPIC_OR_PARTITION
            assert initialize(w, topic_id, 0, 1, 0) == E.NONE
            assert initialize(w, topic_id, 1, 1, 5) == E.NONE
            assert initialize(w, topic_id, 0, 0, 0) == E.FENCED_STATE_EPOCH

            # a share-partition leader at epoch 3 reads, then writes twice; the reads merge the writes
            assert read(w, topic_id, 0, 3) == (E.NONE, 1, 0, [])
            assert write(w, topic_id, 0, state_epoch=1, leader_epoch=3, start=0, batches=[(0, 9, 0, 1)], dcc=0) == 0
            assert write(w, topic_id, 0, state_epoch=1, leader_epoch=3, start=0,
                         batches=[(0, 2, 2, 1), (3, 3, 0, 2)], dcc=3) == 0
            assert read(w, topic_id, 0, 3) == MERGED
            assert summary(w, topic_id, 0) == (E.NONE, 1, 3, 0, 3)
            assert summary(w, topic_id, 1) == (E.NONE, 1, 0, 5, 0)

            # fencing: an older leader, an older state epoch
            assert read(w, topic_id, 0, 2)[0] == E.FENCED_LEADER_EPOCH
            assert write(w, topic_id, 0, state_epoch=1, leader_epoch=2, start=0, batches=[]) == E.FENCED_LEADER_EPOCH
            assert write(w, topic_id, 0, state_epoch=0, leader_epoch=3, start=0, batches=[]) == E.FENCED_STATE_EPOCH

            # delete partition 1's state: it reads as uninitialized afterwards
            resp = w.call(DELETE, 0, group_id=GROUP, topics=[{"topic_id": topic_id, "partitions": [{"partition": 1}]}])
            assert codes(resp) == [0]
            assert summary(w, topic_id, 1) == (E.NONE, 0, 0, -1, -1)
            assert read(w, topic_id, 1, 0)[0] == E.INVALID_REQUEST

            # several partitions in one request are answered one by one; an empty group gets no results
            resp = w.call(SUMMARY, 1, group_id=GROUP, topics=[{"topic_id": topic_id, "partitions": [
                {"partition": 0, "leader_epoch": 0}, {"partition": 7, "leader_epoch": 0}]}])
            assert codes(resp) == [E.NONE, E.UNKNOWN_TOPIC_OR_PARTITION]
            assert w.call(READ, 0, group_id="", topics=[{"topic_id": topic_id, "partitions": [
                {"partition": 0, "leader_epoch": 3}]}]).results == ()

        expected = MERGED
        for hard in (False, True):
            broker.restart(hard=hard)
            with WireClient(broker.bootstrap) as w:
                assert read(w, topic_id, 0, 3) == expected, f"after {'kill -9' if hard else 'SIGTERM'}"
                assert summary(w, topic_id, 0) == (E.NONE, 1, 3, 0, 3)
                assert summary(w, topic_id, 1) == (E.NONE, 0, 0, -1, -1)
                assert read(w, topic_id, 0, 2)[0] == E.FENCED_LEADER_EPOCH  # the leader epoch survived too
                # acknowledged just before the next restart (the kill -9 the second time round): it must survive
                assert write(w, topic_id, 0, state_epoch=1, leader_epoch=3, start=0, batches=[(9, 9, 4, 3)],
                             dcc=3) == E.NONE
                expected = (E.NONE, 1, 0, [(0, 2, 2, 1), (3, 3, 0, 2), (4, 8, 0, 1), (9, 9, 4, 3)])
                assert read(w, topic_id, 0, 3) == expected
        broker.restart(hard=True)
        with WireClient(broker.bootstrap) as w:
            assert read(w, topic_id, 0, 3) == expected
    finally:
        broker.stop()
