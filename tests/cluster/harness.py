"""A real cluster for tests: N broker processes on 127.0.0.1 sharing one ZooKeeper chroot.

Timeouts are the replication reference's test defaults (1.10): a 2 s ZooKeeper session (a killed
broker's registration is gone ~2.4 s later), ISR shrink after 3 s, follower long polls of 200 ms.
Every wait is on a condition with a deadline; brokers are stopped by their pids.
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

from confluent_kafka.admin import AdminClient
from tests.broker import harness as broker_harness
from tests.broker.harness import BrokerProcess

from strata.tools.zookeeper import free_port

T = TypeVar("T")

CLUSTER_DEFAULTS = {
    "zookeeper.session.timeout.ms": "2000",
    "zookeeper.connection.timeout.ms": "10000",
    "replica.lag.time.max.ms": "3000",
    "replica.fetch.wait.max.ms": "200",
    "replica.fetch.backoff.ms": "200",
    "leader.imbalance.check.interval.seconds": "3600",
    "offsets.topic.replication.factor": "3",
}


class _VerboseSubprocess:
    """``subprocess`` as :class:`BrokerProcess` sees it, with ``strata serve -v``: INFO lines too."""

    def __getattr__(self, name: str) -> Any:
        return getattr(subprocess, name)

    @staticmethod
    def Popen(args: list[str], *rest: Any, **kwargs: Any) -> subprocess.Popen[bytes]:  # noqa: N802
        if "serve" in args:  # after a namespace's ``ip netns exec NAME`` prefix, if any
            i = args.index("serve") + 1
            args = [*args[:i], "-v", *args[i:]]
        return subprocess.Popen(args, *rest, **kwargs)


class VerboseBrokerProcess(BrokerProcess):
    """A broker logging at INFO (``strata serve -v``), for tests that read what it did in its log
    (a truncation, a re-registration) and for the log tails shown when a test fails."""

    def launch(self) -> BrokerProcess:
        real = broker_harness.subprocess
        broker_harness.subprocess = _VerboseSubprocess()  # type: ignore[assignment]
        try:
            return super().launch()
        finally:
            broker_harness.subprocess = real


class Cluster:
    def __init__(self, zk_connect: str, base: Path, size: int = 3, props: dict[str, str] | None = None,
                 verbose: bool = False, listeners: dict[str, str] | None = None,
                 placement: Callable[[int], tuple[str, tuple[str, ...]]] | None = None) -> None:
        """``placement``: broker id -> (address, command prefix), for brokers in network namespaces
        (the nemesis suite); default 127.0.0.1 in this namespace."""
        self.zk_connect = zk_connect
        self._admin: AdminClient | None = None
        self.brokers: dict[int, BrokerProcess] = {}
        process = VerboseBrokerProcess if verbose else BrokerProcess
        for broker_id in range(1, size + 1):
            b = process(base / f"broker-{broker_id}", {
                **CLUSTER_DEFAULTS, "zookeeper.connect": zk_connect, "broker.id": str(broker_id), **(props or {})},
                listeners=listeners, **(dict(zip(("host", "wrap"), placement(broker_id), strict=True))
                                        if placement else {}))
            b.port = free_port()  # fixed ports: a restarted broker comes back at the same address
            self.brokers[broker_id] = b

    def start(self) -> Cluster:
        # every process first, then the waits: the brokers' start-up overlaps (a second or more per cluster)
        launched = []
        try:
            for b in self.brokers.values():
                launched.append(b.launch())
            for b in launched:
                b.wait_ready()
        except BaseException:
            self.stop()
            raise
        # and a controller elected and known: an admin request sent before librdkafka knows the controller waits
        # for a metadata refresh that came too late once (CreateTopics timed out at 30 s on a loaded machine)
        wait_until(lambda: (lambda md: len(md.brokers) == len(self.brokers) and md.controller_id >= 0)(
            self.admin().list_topics(timeout=5)), 30, "every broker registered and a controller known")
        return self

    def stop(self) -> None:
        for b in self.brokers.values():
            try:
                b.kill()
            except Exception:  # noqa: BLE001
                pass

    @property
    def bootstrap(self) -> str:
        """Every broker's fixed address: clients skip the ones that are down."""
        return ",".join(f"{b.host}:{b.port}" for b in self.brokers.values())

    def admin(self) -> AdminClient:
        """One admin client kept for the cluster's life (a dropped client cancels its futures)."""
        if self._admin is None:
            self._admin = AdminClient({"bootstrap.servers": self.bootstrap})
        return self._admin

    def metadata(self, topic: str) -> Any:
        return self.admin().list_topics(topic=topic, timeout=10).topics[topic]

    def leader_of(self, topic: str, partition: int) -> int:
        return self.metadata(topic).partitions[partition].leader

    def leader_epoch(self, topic: str, partition: int) -> int:
        """The partition's leader epoch in a live broker's Metadata answer (confluent-kafka does not show it)."""
        from tests.broker.kafka_wire import WireClient

        last: Exception | None = None
        for b in self.brokers.values():
            try:
                with WireClient(b.bootstrap) as w:
                    meta = w.call(3, 12, topics=[{"name": topic, "topic_id": None}],
                                  allow_auto_topic_creation=False, include_topic_authorized_operations=False)
            except OSError as e:  # that broker is down: ask the next
                last = e
                continue
            (t,) = meta.topics
            return next(p.leader_epoch for p in t.partitions if p.partition_index == partition)
        raise AssertionError(f"no broker answered Metadata for {topic}: {last!r}")

    def wait_rejoined(self, topic: str, partition: int, epoch_before: int, timeout_s: float = 30.0) -> None:
        """After a replica was bounced: the controller has handled the bounce (a leader epoch past
        ``epoch_before``) and every replica is in the ISR again. Full ISR alone is no proof: until the
        controller notices the death, the other brokers still show the old, full ISR."""
        wait_until(lambda: self.leader_epoch(topic, partition) > epoch_before, timeout_s,
                   f"{topic}-{partition} past leader epoch {epoch_before}")
        self.wait_full_isr(topic, timeout_s)

    def wait_full_isr(self, topic: str, timeout_s: float = 30.0) -> None:
        def full() -> bool:
            t = self.metadata(topic)
            return bool(t.partitions) and all(p.leader >= 0 and sorted(p.isrs) == sorted(p.replicas)
                                              for p in t.partitions.values())
        wait_until(full, timeout_s, f"full ISR of {topic}")


def wait_until(cond: Callable[[], T], timeout_s: float, what: str, interval_s: float = 0.1) -> T:
    deadline = time.monotonic() + timeout_s
    last_error: Exception | None = None
    while time.monotonic() < deadline:
        try:
            value = cond()
            if value:
                return value
        except Exception as e:  # noqa: BLE001 - a broker restarting: ask again
            last_error = e
        time.sleep(interval_s)
    suffix = f" (last error: {last_error!r})" if last_error else ""
    raise AssertionError(f"timed out after {timeout_s}s waiting for {what}{suffix}")


@contextmanager
def running_cluster(zk_connect: str, base: Path, size: int = 3, props: dict[str, str] | None = None,
                    verbose: bool = False, listeners: dict[str, str] | None = None) -> Iterator[Cluster]:
    """``listeners``: named listeners beside PLAINTEXT (name -> protocol), as :class:`BrokerProcess` takes them."""
    cluster = Cluster(zk_connect, base, size, props, verbose, listeners)
    try:
        yield cluster.start()
    except BaseException:
        for broker_id, b in cluster.brokers.items():  # shown by pytest with the failure
            print(f"---- broker {broker_id} ({b.log_path}) ----\n{b.tail(6000)}")
        raise
    finally:
        cluster.stop()
