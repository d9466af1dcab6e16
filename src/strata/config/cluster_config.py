"""Cluster mode: ZooKeeper and replication keys of ``server.properties`` (Kafka's names and defaults).

``zookeeper.connect`` turns cluster mode on; without it Strata is the single node it always was
and none of these keys matter. Defaults are Kafka 3.9's (ZooKeeper mode), so a Kafka
``server.properties`` behaves the same here.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from strata.config.defs import ConfigKey, at_least
from strata.errors import InvalidConfigError

CLUSTER_KEYS = [
    ConfigKey("zookeeper.connect", "string", None, None,
              "HOST:PORT[,HOST:PORT...][/chroot] of the ZooKeeper ensemble; set, it turns cluster mode on"),
    ConfigKey("zookeeper.session.timeout.ms", "int", 18_000, at_least(1),
              "ZooKeeper session timeout: how long a frozen or dead broker keeps its registration"),
    ConfigKey("zookeeper.connection.timeout.ms", "int", None, at_least(1),
              "How long startup waits for ZooKeeper before giving up (default: the session timeout)"),
    ConfigKey("broker.rack", "string", None, None, "Rack of this broker (reported in Metadata)"),
    ConfigKey("replica.lag.time.max.ms", "long", 30_000, at_least(1),
              "A follower that has not caught up for this long is removed from the ISR"),
    ConfigKey("replica.fetch.wait.max.ms", "int", 500, at_least(0), "Follower fetch long-poll time"),
    ConfigKey("replica.fetch.min.bytes", "int", 1, at_least(1), "Follower fetch min bytes"),
    ConfigKey("replica.fetch.max.bytes", "int", 1_048_576, at_least(0), "Follower fetch bytes per partition"),
    ConfigKey("replica.fetch.response.max.bytes", "int", 10_485_760, at_least(0),
              "Follower fetch bytes per response"),
    ConfigKey("replica.fetch.backoff.ms", "int", 1000, at_least(0), "Pause after a failed follower fetch"),
    ConfigKey("replica.socket.timeout.ms", "int", 30_000, at_least(1), "Follower request timeout"),
    ConfigKey("num.replica.fetchers", "int", 1, at_least(1),
              "Fetchers (task and connection each) per source broker; dynamic"),
    ConfigKey("replication.quota.window.num", "int", 11, at_least(1),
              "The number of samples the replication throttles' rates are measured over"),
    ConfigKey("replication.quota.window.size.seconds", "int", 1, at_least(1),
              "The time span of each replication throttle sample"),
    ConfigKey("follower.fetch.last.tiered.offset.enable", "bool", False, None,
              "KIP-1023: an empty follower of a tiered partition starts at the last tiered offset + 1 instead of "
              "the leader's local log start (it copies even less; reads below move to remote storage)"),
    ConfigKey("replica.high.watermark.checkpoint.interval.ms", "long", 5000, at_least(1),
              "How often the high watermarks are checkpointed"),
    ConfigKey("unclean.leader.election.enable", "bool", False, None,
              "Elect a replica outside the ISR when no ISR member is alive (loses acknowledged records)"),
    ConfigKey("controlled.shutdown.enable", "bool", True, None, "Move leadership away before shutting down"),
    ConfigKey("controlled.shutdown.max.retries", "int", 3, at_least(0), ""),
    ConfigKey("controlled.shutdown.retry.backoff.ms", "long", 5000, at_least(0), ""),
    ConfigKey("auto.leader.rebalance.enable", "bool", True, None,
              "Move leadership back to preferred replicas when the imbalance is too high"),
    ConfigKey("leader.imbalance.check.interval.seconds", "long", 300, at_least(1), ""),
    ConfigKey("leader.imbalance.per.broker.percentage", "int", 10, at_least(0), ""),
]


@dataclass(frozen=True, slots=True)
class ClusterConfig:
    zookeeper_connect: str | None
    zookeeper_session_timeout_ms: int
    zookeeper_connection_timeout_ms: int
    broker_rack: str | None
    replica_lag_time_max_ms: int
    replica_fetch_wait_max_ms: int
    replica_fetch_min_bytes: int
    replica_fetch_max_bytes: int
    replica_fetch_response_max_bytes: int
    replica_fetch_backoff_ms: int
    replica_socket_timeout_ms: int
    num_replica_fetchers: int
    replication_quota_window_num: int
    replication_quota_window_size_seconds: int
    follower_fetch_last_tiered_offset_enable: bool
    replica_high_watermark_checkpoint_interval_ms: int
    unclean_leader_election_enable: bool
    controlled_shutdown_enable: bool
    controlled_shutdown_max_retries: int
    controlled_shutdown_retry_backoff_ms: int
    auto_leader_rebalance_enable: bool
    leader_imbalance_check_interval_ms: int
    leader_imbalance_per_broker_percentage: int

    @property
    def enabled(self) -> bool:
        return self.zookeeper_connect is not None

    @classmethod
    def from_parsed(cls, p: Mapping[str, Any]) -> ClusterConfig:
        connect = p["zookeeper.connect"]
        if connect is not None:
            connect = connect.strip()
            hosts = connect.split("/", 1)[0]
            if not connect or not all(h.rpartition(":")[2].isdigit() for h in hosts.split(",")):
                raise InvalidConfigError(f"Invalid value {p['zookeeper.connect']!r} for configuration "
                                         "zookeeper.connect: expected HOST:PORT[,HOST:PORT...][/chroot]")
        session = p["zookeeper.session.timeout.ms"]
        return cls(
            zookeeper_connect=connect,
            zookeeper_session_timeout_ms=session,
            zookeeper_connection_timeout_ms=p["zookeeper.connection.timeout.ms"] or session,
            broker_rack=p["broker.rack"],
            replica_lag_time_max_ms=p["replica.lag.time.max.ms"],
            replica_fetch_wait_max_ms=p["replica.fetch.wait.max.ms"],
            replica_fetch_min_bytes=p["replica.fetch.min.bytes"],
            replica_fetch_max_bytes=p["replica.fetch.max.bytes"],
            replica_fetch_response_max_bytes=p["replica.fetch.response.max.bytes"],
            replica_fetch_backoff_ms=p["replica.fetch.backoff.ms"],
            replica_socket_timeout_ms=p["replica.socket.timeout.ms"],
            num_replica_fetchers=p["num.replica.fetchers"],
            replication_quota_window_num=p["replication.quota.window.num"],
            replication_quota_window_size_seconds=p["replication.quota.window.size.seconds"],
            follower_fetch_last_tiered_offset_enable=p["follower.fetch.last.tiered.offset.enable"],
            replica_high_watermark_checkpoint_interval_ms=p["replica.high.watermark.checkpoint.interval.ms"],
            unclean_leader_election_enable=p["unclean.leader.election.enable"],
            controlled_shutdown_enable=p["controlled.shutdown.enable"],
            controlled_shutdown_max_retries=p["controlled.shutdown.max.retries"],
            controlled_shutdown_retry_backoff_ms=p["controlled.shutdown.retry.backoff.ms"],
            auto_leader_rebalance_enable=p["auto.leader.rebalance.enable"],
            leader_imbalance_check_interval_ms=p["leader.imbalance.check.interval.seconds"] * 1000,
            leader_imbalance_per_broker_percentage=p["leader.imbalance.per.broker.percentage"],
        )
