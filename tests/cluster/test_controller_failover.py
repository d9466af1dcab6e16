"""The controller: killed in the middle of its work, and raced for (replication reference 2.1 "Controller
election and zombie fencing"). Real ZooKeeper; the first test with broker processes and real clients.

* A burst of topic creations while the controller is killed: the creations and the elections its death
  causes are finished by its successor; every topic ends with a leader and a full ISR once it returns.
* Two controllers (two ZooKeeper sessions in one process) racing for ``/controller``: exactly one wins,
  every write of the other is refused, and a controller whose session expired cannot write a partition
  state any more: its fenced write fails at the ``/controller_epoch`` check (op 0 of the transaction).
* What the controller must know to act on broker changes (in one process, on a real ZooKeeper): a
  bounced broker (same id, new broker epoch) is a failure followed by a startup, as in Kafka; and ISR
  changes that leaders write themselves are seen, so a replica back in an ISR leaves it when it dies.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import pytest
from confluent_kafka import KafkaError, KafkaException, Producer
from confluent_kafka.admin import AdminClient, NewTopic
from tests.cluster.harness import running_cluster, wait_until

from strata.cluster.controller import ControllerMovedError, KafkaController
from strata.cluster.metadata import MetadataListener
from strata.cluster.node import ClusterNode
from strata.cluster.registration import register_broker
from strata.cluster.zk import AsyncZk, MultiError, Op, SessionState, ZkBadVersionError
from strata.cluster.znodes import (
    PERSISTENT_PATHS,
    BrokerIdZNode,
    BrokerRegistration,
    ControllerEpochZNode,
    ControllerZNode,
    Endpoint,
    LeaderAndIsr,
    TopicPartitionStateZNode,
    TopicZNode,
)
from strata.common import TopicPartition
from strata.config.broker_config import BrokerConfig


def test_controller_killed_during_a_burst_of_topic_creations(zk_connect: str, tmp_path: Path) -> None:
    with running_cluster(zk_connect, tmp_path) as cluster:
        admin = cluster.admin()  # the one client creating every topic
        controller = admin.describe_cluster().result(10).controller.id
        assert controller in cluster.brokers
        names = [f"burst-{i:02d}" for i in range(20)]

        def new_topic(name: str) -> NewTopic:
            return NewTopic(name, 2, 3, config={"min.insync.replicas": "2"})

        futures = {}
        for name in names:  # sent at once, to the controller (where the client sends CreateTopics)
            futures.update(admin.create_topics([new_topic(name)], request_timeout=30))
        wait_until(lambda: sum(f.done() for f in futures.values()) >= 3, 30, "the first topics created")
        cluster.brokers[controller].kill()  # mid-burst: creations in flight, elections to come
        # watched through another client: this one waits for the controller it knows
        others = AdminClient({"bootstrap.servers": ",".join(
            b.bootstrap for i, b in cluster.brokers.items() if i != controller)})
        wait_until(lambda: others.list_topics(timeout=5).controller_id not in (-1, controller), 30,
                   "a new controller")
        cluster.brokers[controller].start()
        failed = []
        for name, f in futures.items():
            try:
                f.result(60)
            except KafkaException as e:  # in flight to the killed broker: the client says so, and is retried
                failed.append((name, e.args[0]))
        def create_again(name: str) -> bool:
            try:
                admin.create_topics([new_topic(name)], request_timeout=30)[name].result(60)
            except KafkaException as e:
                if e.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
                    raise
            return True

        for name, _ in failed:  # the client's retry
            wait_until(lambda name=name: create_again(name), 60, f"{name} created")

        def all_complete() -> bool:
            topics = others.list_topics(timeout=10).topics
            return all(name in topics and len(topics[name].partitions) == 2 and all(
                p.leader in cluster.brokers and sorted(p.isrs) == sorted(p.replicas) == [1, 2, 3]
                for p in topics[name].partitions.values()) for name in names)

        wait_until(all_complete, 60, "every topic with a leader and a full ISR")
        acked: list[str] = []  # and every topic takes acks=all writes
        producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all", "enable.idempotence": True})
        for name in names:
            producer.produce(name, b"after the failover", on_delivery=lambda err, msg: acked.append(
                msg.topic()) if err is None else None)
        assert producer.flush(30) == 0
        assert sorted(acked) == names
        for b in cluster.brokers.values():
            assert "Traceback" not in b.log_path.read_text(errors="replace"), b.log_path


async def _until(cond: Callable[[], bool], timeout_s: float, what: str) -> None:
    try:
        async with asyncio.timeout(timeout_s):
            while not cond():
                await asyncio.sleep(0.02)
    except TimeoutError:
        raise AssertionError(f"timed out after {timeout_s}s waiting for {what}") from None


async def _expire(zk: AsyncZk, connect: str) -> None:
    """Expire ``zk``'s session from the server side: another client with the same session id and
    password closes it (ZooKeeper's way to force an expiry; see tests/cluster/test_zk.py)."""
    from kazoo.client import KazooClient

    sid, pwd = zk._zk.client_id  # type: ignore[union-attr]
    other = KazooClient(hosts=connect, client_id=(sid, pwd))
    loop = asyncio.get_running_loop()
    await loop.run_in_executor(None, other.start, 10)
    await loop.run_in_executor(None, other.stop)
    other.close()


def test_two_controllers_race_and_an_expired_one_is_fenced(zk_connect: str) -> None:
    config = BrokerConfig.from_props({"zookeeper.connect": zk_connect, "zookeeper.session.timeout.ms": "2000",
                                      "auto.leader.rebalance.enable": "false"}).cluster
    state_path = TopicPartitionStateZNode.path("t", 0)

    async def main() -> None:
        zks = {i: AsyncZk(zk_connect, session_timeout_ms=2000, connection_timeout_ms=10_000) for i in (1, 2)}
        for zk in zks.values():
            await zk.start()
        controllers: dict[int, KafkaController] = {}
        try:
            for path in PERSISTENT_PATHS:
                await zks[1].ensure_path(path)
            for i, zk in zks.items():  # both brokers registered, on their own sessions
                await register_broker(zk, BrokerRegistration(i, (Endpoint("PLAINTEXT", "127.0.0.1", 9000 + i),)),
                                      wait_s=5)
            await zks[1].create(TopicZNode.path("t"), TopicZNode.encode(uuid.uuid4(), {0: [1, 2]}))
            await zks[1].create(state_path, TopicPartitionStateZNode.encode(LeaderAndIsr.initial(1, [1, 2], 0)),
                                makepath=True)

            controllers = {i: KafkaController(zk, i, config) for i, zk in zks.items()}
            await asyncio.gather(*(c.start() for c in controllers.values()))  # both elect at once
            await _until(lambda: any(c.active for c in controllers.values()), 10, "a controller")
            winner = next(c for c in controllers.values() if c.active)
            loser = next(c for c in controllers.values() if c is not winner)
            assert not loser.active
            data, _ = await zks[1].get(ControllerZNode.PATH)
            assert ControllerZNode.decode(data).broker_id == winner.broker_id
            epoch_data, epoch_stat = await zks[1].get(ControllerEpochZNode.PATH)
            assert ControllerEpochZNode.decode(epoch_data) == winner.epoch == 1
            assert epoch_stat.version == winner.epoch_zk_version

            async def write_leader(c: KafkaController, leader: int) -> None:
                raw, stat = await c.zk.get(state_path)
                state = TopicPartitionStateZNode.decode(raw, stat.version)
                await c._fenced([Op.set(state_path, TopicPartitionStateZNode.encode(
                    state.new_leader(leader).with_controller_epoch(c.epoch)), stat.version)])

            # the loser never won: none of its writes may land, whatever version it names
            with pytest.raises(ControllerMovedError):
                await write_leader(loser, loser.broker_id)
            await write_leader(winner, winner.broker_id)  # the winner's do

            # the winner's session expires (a long pause): the loser takes over with the next epoch
            states: list[SessionState] = []
            winner.zk.add_state_listener(states.append)
            old_epoch, old_version = winner.epoch, winner.epoch_zk_version
            # Back on a new session, the expired controller could win the next round before the other's watch
            # fires (Kafka's election is a race too; on a loaded machine it happens): it stops taking part in
            # elections (its event task), while still resigning on the lost session, so the other takes over.
            assert winner._task is not None
            winner._task.cancel()
            await asyncio.gather(winner._task, return_exceptions=True)
            await _expire(winner.zk, zk_connect)
            await _until(lambda: loser.active, 20, "the other controller elected")
            assert loser.epoch == old_epoch + 1
            await _until(lambda: SessionState.LOST in states and states[-1] == SessionState.CONNECTED, 20,
                         "the expired controller on a new session")
            assert not winner.active  # it resigned when it learned its session was gone
            before = await zks[loser.broker_id].get(state_path)
            # a zombie that has not noticed yet still holds its old epoch version: its write is refused
            # by the /controller_epoch check -- op 0 of the transaction -- and changes nothing
            winner.active, winner.epoch, winner.epoch_zk_version = True, old_epoch, old_version
            with pytest.raises(ControllerMovedError):
                await write_leader(winner, winner.broker_id)
            with pytest.raises(MultiError) as e:
                await winner.zk.multi([Op.check(ControllerEpochZNode.PATH, old_version),
                                       Op.set(state_path, b"{}", before[1].version)])
            assert e.value.index == 0 and isinstance(e.value.cause, ZkBadVersionError)
            winner.active = False
            assert await zks[loser.broker_id].get(state_path) == before
            await write_leader(loser, loser.broker_id)  # the new controller writes
        finally:
            for c in controllers.values():
                await c.stop()
            for zk in zks.values():
                await zk.close()

    asyncio.run(main())


def test_a_bounced_broker_loses_its_leadership_and_its_place_in_the_isr(zk_connect: str) -> None:
    """A broker that registered again without its failure having been handled (same id, new broker epoch,
    seen in one change) may have come back with less than it had -- a fast restart on an empty disk: as
    Kafka's controller does, handle it as a failure followed by a startup, so that it neither keeps leading
    nor counts as in sync (it rejoins the ISR once it has caught up)."""
    config = BrokerConfig.from_props({"zookeeper.connect": zk_connect, "zookeeper.session.timeout.ms": "2000",
                                      "auto.leader.rebalance.enable": "false"}).cluster
    state_path = TopicPartitionStateZNode.path("t", 0)

    async def main() -> None:
        zks = {i: AsyncZk(zk_connect, session_timeout_ms=2000, connection_timeout_ms=10_000) for i in (1, 2, 9)}
        for zk in zks.values():
            await zk.start()
        controller = KafkaController(zks[9], 9, config)
        try:
            for path in PERSISTENT_PATHS:
                await zks[9].ensure_path(path)
            registrations = {i: BrokerRegistration(i, (Endpoint("PLAINTEXT", "127.0.0.1", 9000 + i),)) for i in (1, 2)}
            for i, reg in registrations.items():
                await register_broker(zks[i], reg, wait_s=5)
            await zks[9].create(TopicZNode.path("t"), TopicZNode.encode(uuid.uuid4(), {0: [2, 1]}))
            await zks[9].create(state_path, TopicPartitionStateZNode.encode(LeaderAndIsr.initial(2, [2, 1], 0)),
                                makepath=True)
            await controller.start()
            await _until(lambda: controller.active, 10, "the controller")

            async def state() -> LeaderAndIsr:
                raw, stat = await zks[9].get(state_path)
                return TopicPartitionStateZNode.decode(raw, stat.version)

            assert (await state()).leader == 2
            _, before = await zks[2].get(BrokerIdZNode.path(2))
            # broker 2 gone and back in one step: one change of /brokers/ids, same children, new broker epoch
            await zks[2].multi([Op.delete(BrokerIdZNode.path(2)), Op.create(
                BrokerIdZNode.path(2), BrokerIdZNode.encode(registrations[2], timestamp_ms=1), ephemeral=True)])
            _, after = await zks[2].get(BrokerIdZNode.path(2))
            assert after.czxid != before.czxid

            moved: list[LeaderAndIsr] = []

            async def poll() -> None:
                while not moved:
                    s = await state()
                    if s.leader == 1:
                        moved.append(s)
                    await asyncio.sleep(0.02)

            async with asyncio.timeout(10):
                await poll()
            assert moved[0].isr == (1,), moved[0]  # broker 2 must catch up again to rejoin
        finally:
            await controller.stop()
            for zk in zks.values():
                await zk.close()

    asyncio.run(main())


def test_a_new_controller_handles_a_bounce_it_never_saw(zk_connect: str) -> None:
    """A broker that was the controller and a leader, killed and restarted at once: its successor is
    elected only after the old session expired, by which time the restarted broker may have registered
    again - the successor never sees it go. The state znodes still name it leader from before its new
    registration, which it refuses to take up (its log may be shorter than what followers acknowledged).
    The successor must handle the bounce at failover as the broker-change handler would: a failure, then
    a startup. Where another in-sync replica is live it leads, and the bounced broker must catch up to
    rejoin; where the bounced broker is the only live in-sync replica, it leads again under a state
    written after its new registration (a new leader epoch), which it then takes up."""
    config = BrokerConfig.from_props({"zookeeper.connect": zk_connect, "zookeeper.session.timeout.ms": "2000",
                                      "auto.leader.rebalance.enable": "false"}).cluster

    async def main() -> None:
        zks = {i: AsyncZk(zk_connect, session_timeout_ms=2000, connection_timeout_ms=10_000)
               for i in (1, 2, 3, 9)}
        for zk in zks.values():
            await zk.start()
        controller = KafkaController(zks[9], 9, config)
        try:
            for path in PERSISTENT_PATHS:
                await zks[9].ensure_path(path)
            registrations = {i: BrokerRegistration(i, (Endpoint("PLAINTEXT", "127.0.0.1", 9000 + i),))
                             for i in (1, 2, 3)}
            for i, reg in registrations.items():
                await register_broker(zks[i], reg, wait_s=5)
            # t-0: another in-sync replica (1) is live and was not bounced; t-1: the other one (4) is dead;
            # t-2: both in-sync replicas bounced (2 and 3), the leader listed last: it is the one kept
            await zks[9].create(TopicZNode.path("t"), TopicZNode.encode(uuid.uuid4(), {0: [2, 1], 1: [2, 4],
                                                                                      2: [3, 2]}))
            paths = {p: TopicPartitionStateZNode.path("t", p) for p in (0, 1, 2)}
            for p, (leader, isr) in {0: (2, [2, 1]), 1: (2, [2, 4]), 2: (2, [3, 2])}.items():
                await zks[9].create(paths[p], TopicPartitionStateZNode.encode(LeaderAndIsr.initial(leader, isr, 0)),
                                    makepath=True)
            # brokers 2 and 3 restart before any controller runs: new registrations, new broker epochs
            for i in (2, 3):
                await zks[i].multi([Op.delete(BrokerIdZNode.path(i)), Op.create(
                    BrokerIdZNode.path(i), BrokerIdZNode.encode(registrations[i], timestamp_ms=1), ephemeral=True)])
            epochs = {i: (await zks[i].get(BrokerIdZNode.path(i)))[1].czxid for i in (1, 2, 3)}

            await controller.start()
            await _until(lambda: controller.active, 10, "the controller")

            async def settled() -> dict[int, tuple[LeaderAndIsr, int]]:
                out = {}
                for p, path in paths.items():
                    raw, stat = await zks[9].get(path)
                    out[p] = (TopicPartitionStateZNode.decode(raw, stat.version), stat.mzxid)
                return out

            async def until_settled() -> dict[int, tuple[LeaderAndIsr, int]]:
                while True:
                    states = await settled()
                    if all(s.has_leader and mzxid > epochs[s.leader] for s, mzxid in states.values()):
                        return states
                    await asyncio.sleep(0.05)

            async with asyncio.timeout(10):
                states = await until_settled()
            assert (states[0][0].leader, states[0][0].isr) == (1, (1,)), states[0]  # 2 must catch up again
            assert (states[1][0].leader, states[1][0].isr) == (2, (2,)), states[1]  # the only choice
            assert states[1][0].leader_epoch > 0
            assert (states[2][0].leader, states[2][0].isr) == (2, (2,)), states[2]  # the old leader stays
        finally:
            await controller.stop()
            for zk in zks.values():
                await zk.close()

    asyncio.run(main())


def test_a_replica_taken_back_into_the_isr_by_its_leader_leaves_it_when_it_dies(zk_connect: str) -> None:
    """Leaders change ISRs themselves; the controller must still know, so that a replica that died, came
    back, was taken back into the ISR by its leader and died again is taken out again at once -- not only
    after the leader's replica.lag.time.max.ms, with acks=all waiting for a dead replica meanwhile."""
    config = BrokerConfig.from_props({"zookeeper.connect": zk_connect, "zookeeper.session.timeout.ms": "2000",
                                      "auto.leader.rebalance.enable": "false"}).cluster
    state_path = TopicPartitionStateZNode.path("t", 0)

    async def main() -> None:
        # the controller's broker: session, mirror, controller
        node = ClusterNode(config, 9, [Endpoint("PLAINTEXT", "127.0.0.1", 9009)])
        await node.connect(None)
        await node.start_metadata(MetadataListener())
        await node.register()
        zks: dict[int, AsyncZk] = {}
        try:
            await _until(lambda: node.controller.active, 10, "the controller")

            async def register(i: int) -> None:
                zks[i] = AsyncZk(zk_connect, session_timeout_ms=2000, connection_timeout_ms=10_000)
                await zks[i].start()
                await register_broker(zks[i], BrokerRegistration(i, (Endpoint("PLAINTEXT", "127.0.0.1", 9000 + i),)),
                                      wait_s=5)

            async def state() -> LeaderAndIsr:
                raw, stat = await node.zk.get(state_path)
                return TopicPartitionStateZNode.decode(raw, stat.version)

            async def until_isr(isr: tuple[int, ...], what: str) -> LeaderAndIsr:
                try:
                    async with asyncio.timeout(10):
                        while (s := await state()).isr != isr:
                            await asyncio.sleep(0.02)
                except TimeoutError:
                    raise AssertionError(f"timed out waiting for {what}: {await state()}") from None
                return s

            for i in (1, 2, 3):
                await register(i)
            await node.zk.create(TopicZNode.path("t"), TopicZNode.encode(uuid.uuid4(), {0: [1, 2, 3]}))
            async with asyncio.timeout(10):
                while await node.zk.exists(state_path) is None:
                    await asyncio.sleep(0.02)
            assert (await state()).isr == (1, 2, 3)
            await zks.pop(3).close()  # broker 3 dies: the controller takes it out of the ISR
            s = await until_isr((1, 2), "broker 3 out of the ISR")
            await register(3)  # back, caught up: its leader (1) takes it back in, writing the state itself
            await node.zk.set(state_path, TopicPartitionStateZNode.encode(replace(s, isr=(1, 2, 3))),
                              s.partition_epoch)
            await _until(lambda: node.controller.states[TopicPartition("t", 0)].isr == (1, 2, 3), 10,
                         "the controller seeing the leader's ISR change")
            await zks.pop(3).close()  # and dies again
            s = await until_isr((1, 2), "broker 3 out of the ISR again")
            assert s.leader == 1
        finally:
            await node.close()
            for zk in zks.values():
                await zk.close()

    asyncio.run(main())
