"""Replication throttles (KIP-73): Kafka's ``ReplicationQuotaManager``, one for each side of a broker.

``kafka-reassign-partitions --throttle`` sets two things. A byte rate per broker: the dynamic broker configs
``leader.replication.throttled.rate`` (what this broker sends to followers) and
``follower.replication.throttled.rate`` (what it fetches from leaders), per broker id or cluster-wide, Kafka's
``BrokerConfigHandler`` taking the broker's own value, else the cluster default, else unbounded. And, per
topic, which replicas the rates apply to: ``leader.replication.throttled.replicas`` and
``follower.replication.throttled.replicas``, lists of ``partition:brokerId`` or ``*`` for every replica. A
broker reads a list for itself only (Kafka's ``TopicConfigHandler.parseThrottledPartitions`` keeps the entries
naming its id), so the tool's lists - the current replicas of each moving partition as leaders, the new
ones as followers - throttle a reassignment's copy and nothing else.

How the rate is held (Kafka's ``ReplicaFetcherThread``/``RemoteLeaderEndPoint`` and ``ReplicaManager``): the
bytes of every throttled partition are recorded, in-sync replicas' too, so that the sum of replication
traffic stays under the rate; once the rate is over the bound, a throttled replica *out of the ISR* is held
back - the follower leaves it out of its fetch, the leader answers it with no records - while in-sync
replicas are never held back (they would fall out of the ISR and thrash). The rate is Kafka's
``SimpleRate`` over ``replication.quota.window.num`` windows of ``replication.quota.window.size.seconds``
(11 of 1 s): its span grows from one window, so a first burst counts at once, and "exceeded" is Kafka's
``checkQuotas``: the rate is above the bound.

Which partitions are throttled is read from the topic's effective config when asked (parsed once per
config value), rather than pushed on every config change as Kafka's ``markThrottled`` is: the topic
registry is already the one place a topic's config lives, however it changed (a ZooKeeper watch, a
restart, a deletion). Everything runs on the event loop.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence

from strata.common import TopicPartition
from strata.config import LogConfig
from strata.quota.rate import SimpleRate

UNBOUNDED = 2**63 - 1  # Long.MAX_VALUE, QuotaConfigs.QUOTA_BYTES_PER_SECOND_DEFAULT: no throttle
LEADER_RATE = "leader.replication.throttled.rate"
FOLLOWER_RATE = "follower.replication.throttled.rate"
LEADER_REPLICATION = "LeaderReplication"  # Kafka's QuotaType names: the metric group of the byte-rate
FOLLOWER_REPLICATION = "FollowerReplication"
_PARSED_CACHE_LIMIT = 100_000


def throttled_partitions(entries: Sequence[str], broker_id: int) -> frozenset[int] | None:
    """Kafka's ``parseThrottledPartitions``: the partitions a throttled-replicas list names for ``broker_id``
    (None: ``*``, every partition of the topic). Entries that are not ``partition:broker`` are skipped (the
    topic config validator refuses them)."""
    items = [e.strip() for e in entries if e.strip()]
    if items == ["*"]:
        return None
    out = set()
    for item in items:
        partition, _, broker = item.partition(":")
        try:
            if int(broker) == broker_id:
                out.add(int(partition))
        except ValueError:
            continue
    return frozenset(out)


def dynamic_rate(per_broker: Mapping[str, str], default: Mapping[str, str], key: str) -> int:
    """``BrokerConfigHandler.getOrDefault``: this broker's dynamic value, else the cluster-wide one, else none."""
    for level in (per_broker, default):
        raw = level.get(key)
        if raw is not None:
            try:
                return int(raw.strip())
            except ValueError:  # validated when set; a hand-edited znode must not stop the broker
                continue
    return UNBOUNDED


class ReplicationQuotaManager:
    """One side's quota: the bound, the rate of throttled bytes, and which partitions are throttled here.

    ``throttled_replicas(topic)`` is the topic's list for this side (its effective config's
    ``leader/follower.replication.throttled.replicas``). ``on_update`` callbacks run after the bound changes
    (a follower fetcher waiting for the rate to fall re-checks at once).
    """

    def __init__(self, replication_type: str, broker_id: int, throttled_replicas: Callable[[str], Sequence[str]],
                 samples: int = 11, window_s: float = 1.0, clock: Callable[[], float] = time.monotonic) -> None:
        self.replication_type = replication_type
        self.broker_id = broker_id
        self._throttled_replicas = throttled_replicas
        self._clock = clock
        self._rate = SimpleRate(samples, window_s)
        self._window_s = window_s
        self._bound = UNBOUNDED
        self._parsed: dict[str, tuple[Sequence[str], frozenset[int] | None]] = {}
        self.on_update: list[Callable[[], None]] = []

    @property
    def upper_bound(self) -> int:
        """The bound in bytes per second (``UNBOUNDED``: no throttle)."""
        return self._bound

    @property
    def bounded(self) -> bool:
        return self._bound < UNBOUNDED

    def update_quota(self, bytes_per_s: int) -> None:
        """Kafka's ``updateQuota``: the new bound applies to the rate measured so far."""
        if bytes_per_s == self._bound:
            return
        self._bound = bytes_per_s
        for fn in self.on_update:
            fn()

    def is_throttled(self, tp: TopicPartition) -> bool:
        """Whether the topic's throttled-replicas list for this side names (partition, this broker) or is ``*``."""
        value = self._throttled_replicas(tp.topic)
        if not value:
            return False
        cached = self._parsed.get(tp.topic)
        if cached is None or cached[0] is not value:
            if len(self._parsed) >= _PARSED_CACHE_LIMIT:
                self._parsed.clear()
            cached = self._parsed[tp.topic] = (value, throttled_partitions(value, self.broker_id))
        partitions = cached[1]
        return partitions is None or tp.partition in partitions

    def record(self, value: int) -> None:
        """Bytes of throttled partitions replicated (Kafka records them whether or not the quota is exceeded)."""
        self._rate.record(value, self._clock())

    def measure(self) -> float:
        """Bytes per second of throttled partitions (Kafka's ``byte-rate`` metric of the quota)."""
        return self._rate.measure(self._clock())

    def is_quota_exceeded(self) -> bool:
        """Kafka's ``checkQuotas``: the rate is above the bound (never without a bound)."""
        if self._bound >= UNBOUNDED:
            return False
        return self._rate.measure(self._clock()) > self._bound

    def throttle_s(self) -> float:
        """How long until the rate is back at the bound (0: it is within). A bound of 0 has no such time:
        the quota is checked again after a window."""
        if self._bound >= UNBOUNDED:
            return 0.0
        if self._bound <= 0:
            return self._window_s if self.is_quota_exceeded() else 0.0
        return self._rate.time_to_bound(self._bound, self._clock())


class ReplicationQuotas:
    """Kafka's ``QuotaManagers.leader`` and ``.follower`` of one broker, sized from its replication quota
    window configs; ``topic_config(topic)`` gives a topic's effective config (the throttled-replicas lists)."""

    def __init__(self, broker_id: int, topic_config: Callable[[str], LogConfig], samples: int = 11,
                 window_s: float = 1.0, clock: Callable[[], float] = time.monotonic) -> None:
        self.leader = ReplicationQuotaManager(
            LEADER_REPLICATION, broker_id, lambda topic: topic_config(topic).leader_replication_throttled_replicas,
            samples, window_s, clock)
        self.follower = ReplicationQuotaManager(
            FOLLOWER_REPLICATION, broker_id,
            lambda topic: topic_config(topic).follower_replication_throttled_replicas, samples, window_s, clock)

    def update(self, per_broker: Mapping[str, str], default: Mapping[str, str]) -> None:
        """Kafka's ``BrokerConfigHandler.processConfigChanges``: both bounds from the dynamic broker configs."""
        self.leader.update_quota(dynamic_rate(per_broker, default, LEADER_RATE))
        self.follower.update_quota(dynamic_rate(per_broker, default, FOLLOWER_RATE))
