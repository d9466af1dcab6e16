"""Transactions across both tiers (single node, ``local`` RSM, tiny segments, ``local.retention.bytes=1``).

Segments leave the local disk once uploaded, so consumers read most offsets from remote storage:
read_committed must still skip every aborted record there (the remote ``.txnindex`` files answer the
aborted transactions of a remote range), also for an abort whose data is remote while its marker is
still in the local active segment. An open transaction holds uploads back at the LSO.
"""

from __future__ import annotations

import time
from pathlib import Path

from confluent_kafka import Producer
from tests.tiered.harness import TieredBroker, wait_until
from tests.transactions.clients import READERS

TOPIC = "tiered-txn"


def _send(p: Producer, values: list[bytes]) -> None:
    for v in values:  # one batch each: segments roll every few batches
        p.produce(TOPIC, v, partition=0)
        assert p.flush(10) == 0


def _uploaded_end(tb: TieredBroker) -> int:
    return max((e["end_offset"] for e in tb.events("COPY_SEGMENT", TOPIC, 0)), default=-1)


def test_read_committed_across_both_tiers_and_uploads_held_at_the_lso(tmp_path: Path) -> None:
    tb = TieredBroker(tmp_path, **{"transaction.state.log.num.partitions": "3"}).start()
    try:
        tb.create_topic(TOPIC, 1, max_batches_per_segment=3)
        txn = Producer({"bootstrap.servers": tb.bootstrap, "transactional.id": "tiered", "linger.ms": 0})
        txn.init_transactions(30)
        plain = Producer({"bootstrap.servers": tb.bootstrap, "linger.ms": 0})
        committed: list[bytes] = []
        everything: list[bytes] = []
        for round_ in range(4):
            commit = round_ % 2 == 0
            txn.begin_transaction()
            values = [f"{'c' if commit else 'a'}{round_}-0-{i}".encode() for i in range(5)]
            _send(txn, values)
            extra = [f"p{round_}-0".encode()]
            _send(plain, extra)  # inside the open transaction's range
            everything += values + extra
            committed += (values if commit else []) + extra
            if commit:
                txn.commit_transaction(30)
            else:
                txn.abort_transaction(30)

        # An open transaction holds uploads back: segments roll behind it, none at or above it is copied.
        txn.begin_transaction()
        held = [b"held-0-0"]
        _send(txn, held)
        held_at = tb.list_offsets(TOPIC, 0, -1)[0] - 1
        behind = [f"behind-0-{i}".encode() for i in range(9)]
        _send(plain, behind)
        wait_until("the segments below the open transaction uploaded", lambda: _uploaded_end(tb) >= held_at - 3)
        observed_until = time.monotonic() + 1.5  # a bounded look (7 upload cycles): nothing passes the LSO
        while time.monotonic() < observed_until:
            assert _uploaded_end(tb) < held_at, (_uploaded_end(tb), held_at)
            time.sleep(0.1)
        txn.commit_transaction(30)
        everything += held + behind
        committed += held + behind
        wait_until("the segments above the old LSO uploaded", lambda: _uploaded_end(tb) > held_at + 3)
        wait_until("the early segments gone from the local disk", lambda: tb.earliest_local_offset(TOPIC, 0) > 10)

        for name, read in READERS.items():
            assert read(tb.bootstrap, TOPIC, 1, "read_committed") == committed, name
            assert read(tb.bootstrap, TOPIC, 1, "read_uncommitted") == everything, name
        assert tb.fetch_count(TOPIC, 0) > 0  # remote segments were read
    finally:
        tb.stop()


def test_an_abort_with_its_data_remote_and_its_marker_local(tmp_path: Path) -> None:
    """The aborted transaction's batches roll into segments that are uploaded (and deleted locally) once
    the abort moves the LSO; the ABORT marker stays in the local active segment. A read_committed read
    from offset 0 is served from remote storage and must still drop the aborted records."""
    tb = TieredBroker(tmp_path, **{"transaction.state.log.num.partitions": "3"}).start()
    try:
        tb.create_topic(TOPIC, 1, max_batches_per_segment=3)
        txn = Producer({"bootstrap.servers": tb.bootstrap, "transactional.id": "split", "linger.ms": 0})
        txn.init_transactions(30)
        plain = Producer({"bootstrap.servers": tb.bootstrap, "linger.ms": 0})
        _send(plain, [b"first-0"])
        txn.begin_transaction()
        aborted = [f"a-0-{i}".encode() for i in range(8)]
        _send(txn, aborted)
        txn.abort_transaction(30)
        end = tb.list_offsets(TOPIC, 0, -1)[0]
        wait_until("the aborted data uploaded and gone locally", lambda: tb.earliest_local_offset(TOPIC, 0) >= 6)
        assert tb.earliest_local_offset(TOPIC, 0) < end  # the marker's segment is still local
        for name, read in READERS.items():
            assert read(tb.bootstrap, TOPIC, 1, "read_committed") == [b"first-0"], name
            assert read(tb.bootstrap, TOPIC, 1, "read_uncommitted") == [b"first-0", *aborted], name
    finally:
        tb.stop()
