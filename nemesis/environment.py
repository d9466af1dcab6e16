"""The system under test: a ZooKeeper ensemble and a Strata cluster, every process in a network namespace.

Clients (the workloads, the final read) run in the root namespace and reach every broker over the lab's
bridge; faults between namespaces (``nemesis.net``) cut real connections. Brokers are stopped by their pids
(``kill -9`` and SIGSTOP faults act on the same pids), ZooKeeper servers likewise.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path
from typing import Any

from tests.cluster.harness import CLUSTER_DEFAULTS, Cluster, wait_until

from nemesis import net
from strata.tools.zookeeper import ZooKeeperEnsemble

TOPIC = "nemesis"
S3 = "s3"  # the object store's namespace


class Environment:
    """``brokers`` Strata brokers on a ``zookeepers``-node ensemble; :meth:`start` / :meth:`stop`."""

    def __init__(self, base: Path, *, brokers: int = 3, zookeepers: int = 3, partitions: int = 3,
                 unclean_election: bool = False, tiered: bool = True, props: dict[str, str] | None = None) -> None:
        """``tiered``: a SeaweedFS S3 server in a namespace of its own (``s3``), the topic tiered to it with
        small segments, so uploads are under way through every fault and the store itself can be cut off."""
        self.base = base
        self.zk_names = [f"zk{i}" for i in range(1, zookeepers + 1)]
        self.broker_names = {i: f"b{i}" for i in range(1, brokers + 1)}
        self.partitions = partitions
        self.unclean_election = unclean_election
        self.tiered = tiered
        self.lab = net.Lab([*self.zk_names, *self.broker_names.values(), *([S3] if tiered else [])])
        self.s3: Any = None
        self._saved_env: dict[str, str | None] = {}
        self.props = {
            **CLUSTER_DEFAULTS,
            "zookeeper.session.timeout.ms": "4000",  # past 2-3 s stalls of a loaded 2-core machine
            # A follower's fetch lost in a partition waits this long before it reconnects: at Kafka's 30 s the
            # leader's partitions stayed unavailable up to 30 s after the network healed (TCP's retransmission
            # backoff outlasts the fault). Kafka's advice for fast failover: a few times the fetch wait.
            "replica.socket.timeout.ms": "3000",
            "unclean.leader.election.enable": str(unclean_election).lower(),
            "offsets.topic.num.partitions": "3",
            "transaction.state.log.num.partitions": "3",
            "transaction.state.log.replication.factor": "3",
            "transaction.state.log.min.isr": "2",
            **(props or {}),
        }
        self.ensemble: ZooKeeperEnsemble | None = None
        self.cluster: Cluster | None = None

    # -- lifecycle ---------------------------------------------------------------------------------------

    def start(self) -> Environment:
        self.lab.start()
        try:
            if self.tiered:
                self._start_store()
            self.ensemble = ZooKeeperEnsemble(self.base / "zk", size=len(self.zk_names),
                                              hosts=[self.lab.address(z) for z in self.zk_names],
                                              wraps=[tuple(self.lab.command(z, [])) for z in self.zk_names])
            self.ensemble.start().wait_ready(90)
            self.cluster = Cluster(f"{self.ensemble.connect}/strata", self.base, size=len(self.broker_names),
                                   props=self.props, verbose=True, placement=lambda i: (
                                       self.lab.address(self.broker_names[i]),
                                       tuple(self.lab.command(self.broker_names[i], []))))
            self.cluster.start()
            self.create_topic()
        except BaseException:
            self.stop()
            raise
        return self

    def create_topic(self) -> None:
        from confluent_kafka.admin import NewTopic

        assert self.cluster is not None
        config = {"min.insync.replicas": "2"}
        if self.tiered:  # a segment every few seconds at the workloads' rate; most of the log only remote
            config.update({"remote.storage.enable": "true", "segment.bytes": "32768",
                           "local.retention.bytes": "65536", "retention.ms": "-1"})
        self.cluster.admin().create_topics([NewTopic(TOPIC, self.partitions, len(self.broker_names),
                                                     config=config)])[TOPIC].result(30)
        self.cluster.wait_full_isr(TOPIC, timeout_s=60)

    def stop(self) -> None:
        self.lab.heal()
        if self.cluster is not None:
            for b in self.cluster.brokers.values():
                self.thaw(b.pid())
            self.cluster.stop()
        if self.ensemble is not None:
            for s in self.ensemble.servers:
                s.thaw()
            self.ensemble.stop()
        if self.s3 is not None:
            self.s3.close()
        for key, value in self._saved_env.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        self.lab.close()

    def _start_store(self) -> None:
        from tests.support.seaweedfs import SeaweedFS

        self.s3 = SeaweedFS(self.base / "s3", host=self.lab.address(S3), wrap=tuple(self.lab.command(S3, [])))
        self.s3.start()
        # the brokers' default AWS credential chain (environment first) finds the server's keys
        for key, value in self.s3.client_env().items():
            self._saved_env.setdefault(key, os.environ.get(key))
            os.environ[key] = value
        rsm = {f"rsm.config.{k}": str(v) for k, v in self.s3.rsm_config().items() if k != "broker.id"}
        self.props.update({
            "remote.log.storage.system.enable": "true", "remote.log.storage.manager.class.name": "s3", **rsm,
            "rsm.config.s3.api.call.timeout.ms": "5000", "rsm.config.s3.api.call.attempt.timeout.ms": "2000",
            "remote.log.manager.task.interval.ms": "500", "remote.log.manager.task.retry.backoff.ms": "500",
            "remote.log.manager.task.retry.backoff.max.ms": "2000",
            "rlmm.config.remote.log.metadata.topic.replication.factor": "3",
            "rlmm.config.remote.log.metadata.topic.num.partitions": "3",
            "log.retention.check.interval.ms": "1000", "log.initial.task.delay.ms": "1000",
        })

    def __enter__(self) -> Environment:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- what the nemesis and the workloads need -------------------------------------------------------------

    @property
    def bootstrap(self) -> str:
        assert self.cluster is not None
        return self.cluster.bootstrap

    def leaders(self) -> dict[str, int | None]:
        """``{"nemesis-0": broker, ...}`` as the cluster's metadata has them (None: no leader)."""
        assert self.cluster is not None
        try:
            meta = self.cluster.metadata(TOPIC)
        except Exception:  # noqa: BLE001 - no metadata now: the availability check then skips the window
            return {}
        return {f"{TOPIC}-{p}": (m.leader if m.leader >= 0 else None) for p, m in meta.partitions.items()}

    def broker_process(self, broker_id: int) -> Any:
        assert self.cluster is not None
        return self.cluster.brokers[broker_id]

    @staticmethod
    def thaw(pid: int | None) -> None:
        if pid is not None:
            try:
                os.kill(pid, signal.SIGCONT)
            except ProcessLookupError:
                pass

    def wait_healthy(self, timeout_s: float = 120.0) -> None:
        """Every broker running and every partition with its full ISR (after the last fault healed)."""
        assert self.cluster is not None
        for b in self.cluster.brokers.values():
            if b.proc is None:
                b.start()
        self.cluster.wait_full_isr(TOPIC, timeout_s=timeout_s)
        wait_until(lambda: len(self.cluster.admin().list_topics(timeout=5).brokers) == len(self.broker_names),
                   timeout_s, "every broker registered")
