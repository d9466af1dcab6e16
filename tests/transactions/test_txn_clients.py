"""Transactions with real clients on a single node: commit, abort, zombies, timeouts, restarts.

confluent-kafka (librdkafka) and aiokafka open transactions; confluent-kafka, kafka-python and aiokafka
read them back. read_committed must see exactly the committed records and the non-transactional ones,
read_uncommitted everything, in log order.
"""

from __future__ import annotations

import asyncio

import pytest
from confluent_kafka import KafkaError, KafkaException, Producer
from confluent_kafka.admin import AdminClient, NewTopic
from tests.broker.harness import BrokerProcess
from tests.cluster.harness import wait_until
from tests.transactions.clients import READERS, until_end_confluent

TOPIC = "txn-topic"
PARTITIONS = 3


def _topic(bootstrap: str, name: str = TOPIC, partitions: int = PARTITIONS) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})  # kept alive until the creation completes
    admin.create_topics([NewTopic(name, partitions, 1)])[name].result(15)


def _txn_producer(bootstrap: str, txn_id: str, **extra: object) -> Producer:
    p = Producer({"bootstrap.servers": bootstrap, "transactional.id": txn_id, "linger.ms": 5, **extra})
    p.init_transactions(30)
    return p


def _by_partition(values: list[bytes]) -> dict[int, list[bytes]]:
    out: dict[int, list[bytes]] = {}
    for v in values:
        out.setdefault(int(v.split(b"-")[1]), []).append(v)
    return out


def test_commit_and_abort_interleaved_with_plain_writes(txn_broker: BrokerProcess) -> None:
    bootstrap = txn_broker.bootstrap
    _topic(bootstrap)
    txn = _txn_producer(bootstrap, "interleaved")
    plain = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    committed: list[bytes] = []
    everything: list[bytes] = []
    for round_ in range(6):
        commit = round_ % 2 == 0
        txn.begin_transaction()
        for i in range(20):
            p = i % PARTITIONS
            v = f"{'c' if commit else 'a'}{round_}-{p}-{i}".encode()
            txn.produce(TOPIC, v, partition=p)
            everything.append(v)
            if commit:
                committed.append(v)
            if i % 5 == 0:  # a plain write lands inside the open transaction
                w = f"p{round_}-{p}-{i}".encode()
                plain.produce(TOPIC, w, partition=p)
                plain.flush(10)
                txn.flush(10)
                everything.append(w)
                committed.append(w)
        txn.flush(10)  # abort_transaction purges what is not sent yet: read_uncommitted must see it all
        if commit:
            txn.commit_transaction(30)
        else:
            txn.abort_transaction(30)
    assert plain.flush(10) == 0

    want_committed = _by_partition(committed)
    want_all = _by_partition(everything)
    for name, read in READERS.items():
        got = _by_partition(read(bootstrap, TOPIC, PARTITIONS, "read_committed"))
        assert {p: sorted(v) for p, v in got.items()} == {p: sorted(v) for p, v in want_committed.items()}, name
        got_all = _by_partition(read(bootstrap, TOPIC, PARTITIONS, "read_uncommitted"))
        assert {p: sorted(v) for p, v in got_all.items()} == {p: sorted(v) for p, v in want_all.items()}, name


def test_aiokafka_transactional_producer(txn_broker: BrokerProcess) -> None:
    from aiokafka import AIOKafkaProducer

    bootstrap = txn_broker.bootstrap
    _topic(bootstrap, "aio", 2)

    async def run() -> None:
        p = AIOKafkaProducer(bootstrap_servers=bootstrap, transactional_id="aio-txn")
        await p.start()
        try:
            async with p.transaction():
                for i in range(10):
                    await p.send("aio", f"c-{i % 2}-{i}".encode(), partition=i % 2)
            await p.begin_transaction()
            for i in range(10):
                await p.send("aio", f"a-{i % 2}-{i}".encode(), partition=i % 2)
            await p.abort_transaction()
        finally:
            await p.stop()

    asyncio.run(run())
    got = until_end_confluent(bootstrap, "aio", 2, "read_committed")
    assert sorted(got) == sorted(f"c-{i % 2}-{i}".encode() for i in range(10))
    assert len(until_end_confluent(bootstrap, "aio", 2, "read_uncommitted")) == 20


def test_zombie_producer_is_fenced_and_its_writes_never_show(txn_broker: BrokerProcess) -> None:
    bootstrap = txn_broker.bootstrap
    _topic(bootstrap, "zombie", 1)
    old = _txn_producer(bootstrap, "shared-id")
    old.begin_transaction()
    old.produce("zombie", b"old-0-before", partition=0)
    old.flush(10)
    new = _txn_producer(bootstrap, "shared-id")  # aborts the old one's open transaction, bumps the epoch
    new.begin_transaction()
    new.produce("zombie", b"new-0-1", partition=0)
    new.commit_transaction(30)

    # the old producer is fenced: its next transactional operation fails for good
    with pytest.raises(KafkaException) as raised:
        old.produce("zombie", b"old-0-after", partition=0)
        old.commit_transaction(15)
    err = raised.value.args[0]
    assert err.code() in (KafkaError._FENCED, KafkaError.PRODUCER_FENCED, KafkaError.INVALID_PRODUCER_EPOCH) \
        or err.fatal(), err
    assert until_end_confluent(bootstrap, "zombie", 1, "read_committed") == [b"new-0-1"]


def test_a_transaction_left_open_is_aborted_at_its_timeout_and_the_lso_moves(txn_broker: BrokerProcess) -> None:
    bootstrap = txn_broker.bootstrap
    _topic(bootstrap, "stuck", 1)
    stuck = _txn_producer(bootstrap, "forgetful", **{"transaction.timeout.ms": 5000})
    stuck.begin_transaction()
    stuck.produce("stuck", b"open-0", partition=0)
    stuck.flush(10)
    plain = Producer({"bootstrap.servers": bootstrap})
    plain.produce("stuck", b"after-0", partition=0)
    plain.flush(10)
    # the open transaction holds the LSO at its first offset: read_committed sees nothing yet ...
    assert until_end_confluent(bootstrap, "stuck", 1, "read_committed") == []
    # ... until the coordinator aborts it at its timeout: then the plain record, not the aborted one
    wait_until(lambda: until_end_confluent(bootstrap, "stuck", 1, "read_committed") == [b"after-0"], 30,
               "the timed-out transaction aborted")
    assert until_end_confluent(bootstrap, "stuck", 1, "read_uncommitted") == [b"open-0", b"after-0"]
    with pytest.raises(KafkaException):  # its producer was fenced by the abort
        stuck.commit_transaction(10)


def test_transactions_survive_a_restart(txn_broker: BrokerProcess) -> None:
    """The coordinator reloads ``__transaction_state``: an open transaction is aborted when its id is
    initialised again after the restart, a committed one stays committed."""
    bootstrap = txn_broker.bootstrap
    _topic(bootstrap, "restart", 1)
    p = _txn_producer(bootstrap, "survivor")
    p.begin_transaction()
    p.produce("restart", b"committed-0", partition=0)
    p.commit_transaction(30)
    p.begin_transaction()
    p.produce("restart", b"open-0", partition=0)
    p.flush(10)
    txn_broker.kill()
    txn_broker.start()
    again = _txn_producer(txn_broker.bootstrap, "survivor")  # aborts the open one
    again.begin_transaction()
    again.produce("restart", b"after-0", partition=0)
    again.commit_transaction(30)
    assert until_end_confluent(txn_broker.bootstrap, "restart", 1, "read_committed") == [b"committed-0", b"after-0"]
