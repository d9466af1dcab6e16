"""The data source's cluster client: every request goes to the current leader, and follows it when it moves.

A Spark read of a replicated topic talks to several brokers: the driver plans with Metadata,
ListOffsets and DescribeConfigs and replays ``__remote_log_metadata`` (whose partitions have
leaders of their own), and each tail slice fetches from its partition's leader. When a leader dies
or steps down (``kill -9``, a controlled shutdown, a preferred-leader election) requests fail with
a lost connection, ``NOT_LEADER_OR_FOLLOWER``, ``LEADER_NOT_AVAILABLE`` (no leader elected yet),
``FENCED_LEADER_EPOCH``/``UNKNOWN_LEADER_EPOCH`` and the like. As Kafka's consumer does,
:class:`FailoverCluster` then forgets the leaders it knew, backs off, asks the cluster again
and retries on the new leader, until ``timeout_s`` (``kafka.request.timeout.ms``) has passed
without success. A broker that still answers (a stale follower, a leader that lost its
leadership) is never trusted for more than its answer says: records are only taken from a Fetch
that succeeded, so a retry starts again at the first offset not yet returned and no record is read
twice or skipped.

Brokers learned from the metadata become bootstrap candidates too (the Java client's rule: the
bootstrap list is only where to start), so a query whose ``kafka.bootstrap.servers`` named only
the broker that died keeps going; the planner also hands the brokers it knew to the executors.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TypeVar

from strata.client.cluster import (
    RETRIABLE,
    ClusterMetadata,
    FetchedPartition,
    KafkaClientError,
    KafkaCluster,
)
from strata.client.security import ClientSecurity
from strata.client.wire import SecurityError, WireError

log = logging.getLogger(__name__)

T = TypeVar("T")

OFFSET_NOT_AVAILABLE = 78  # ListOffsets on a new leader whose high watermark is not known yet (KIP-207)
FAILOVER_CODES = frozenset(RETRIABLE | {OFFSET_NOT_AVAILABLE})
BACKOFF_MIN_S = 0.1
BACKOFF_MAX_S = 1.0


def is_failover(error: BaseException) -> bool:
    """A lost or refused connection, or an error a new leader (or a moment) resolves. A TLS or SASL
    refusal (:class:`SecurityError`: an untrusted certificate, a wrong password) is not one."""
    if isinstance(error, SecurityError):
        return False
    if isinstance(error, WireError):
        return True
    return isinstance(error, KafkaClientError) and error.code in FAILOVER_CODES


class _RetriableAnswer(KafkaClientError):
    """A Fetch answered with a partition error a new leader resolves; ``fetched`` is that answer."""

    def __init__(self, fetched: FetchedPartition, message: str) -> None:
        super().__init__(message, fetched.error_code)
        self.fetched = fetched


class FailoverCluster(KafkaCluster):
    """:class:`KafkaCluster` whose requests are retried on the current leader until ``timeout_s``."""

    def __init__(self, bootstrap: str, timeout_s: float = 30.0, client_id: str = "strata-spark",
                 known_brokers: Iterable[str] = (), security: ClientSecurity | None = None) -> None:
        super().__init__(bootstrap, timeout_s=timeout_s, client_id=client_id, security=security)
        self._add_bootstrap(known_brokers)
        self._retrying = False
        self.retries = 0  # requests retried after a failover error (for logs and tests)

    def _add_bootstrap(self, addresses: Iterable[str]) -> None:
        for address in addresses:
            if address not in self.bootstrap:
                self.bootstrap.append(address)

    def known_brokers(self) -> tuple[str, ...]:
        """``host:port`` of every broker this client has seen in the metadata."""
        return tuple(sorted(f"{host}:{port}" for host, port in self.metadata_cache.brokers.values()))

    def cached_leader(self, topic: str, partition: int) -> int | None:
        """The partition's leader as last learned from the metadata (no request); None when not known."""
        info = self.metadata_cache.topics.get(topic)
        part = info.partitions.get(partition) if info is not None else None
        return part.leader if part is not None else None

    def forget_leaders(self) -> None:
        """Ask the cluster who leads what again before the next request."""
        self.metadata_cache.topics.clear()

    def retrying(self, what: str, call: Callable[[], T]) -> T:
        """``call()``, retried after failover errors (leaders re-resolved each time) until ``timeout_s``;
        then the last error is raised, its message saying for how long it was retried.

        A request made inside another one's retries (the Metadata a ListOffsets needs to find the
        leaders) is not retried on its own: the outer loop retries both, within one deadline.
        """
        if self._retrying:
            return call()
        self._retrying = True
        try:
            deadline = time.monotonic() + self.timeout_s
            attempt = 0
            while True:
                try:
                    return call()
                except (WireError, KafkaClientError) as e:
                    if not is_failover(e):
                        raise
                    self.forget_leaders()
                    delay = min(BACKOFF_MAX_S, BACKOFF_MIN_S * 2 ** min(attempt, 10))
                    if time.monotonic() + delay > deadline:
                        if e.args:
                            e.args = (f"{e.args[0]} (still failing after retrying {what} for {self.timeout_s:g} s)",
                                      *e.args[1:])
                        raise
                    log.info("%s failed (%s); retrying on the current leader in %.1f s", what, e, delay)
                    time.sleep(delay)
                    attempt += 1
                    self.retries += 1
        finally:
            self._retrying = False

    # -- the requests, each retried --

    def metadata(self, topics: Sequence[str] | None = None) -> ClusterMetadata:
        md = self.retrying("Metadata", lambda: KafkaCluster.metadata(self, topics))
        self._add_bootstrap(f"{host}:{port}" for host, port in md.brokers.values())
        return md

    def list_offsets(self, queries: Mapping[tuple[str, int], int],
                     isolation_level: int = 0) -> dict[tuple[str, int], int]:
        return self.retrying("ListOffsets", lambda: KafkaCluster.list_offsets(self, queries, isolation_level))

    def broker_configs(self, node_id: int | None = None) -> dict[str, str | None]:
        """A broker's configs; without ``node_id``, those of the first live broker (by id) that answers."""
        if node_id is not None:
            return self.retrying("DescribeConfigs", lambda: KafkaCluster.broker_configs(self, node_id))

        def first_live() -> dict[str, str | None]:
            brokers = sorted(self.metadata([]).brokers)
            errors: list[str] = []
            for node in brokers:
                try:
                    return KafkaCluster.broker_configs(self, node)
                except SecurityError:
                    raise
                except WireError as e:  # down, not yet unregistered: ask the next one
                    errors.append(f"broker {node}: {e}")
            raise WireError("; ".join(errors) or "no broker in the cluster metadata")

        return self.retrying("DescribeConfigs", first_live)

    def fetch(self, topic: str, partition: int, offset: int, *, max_bytes: int = 8 << 20,
              isolation_level: int = 0, max_wait_ms: int = 500) -> FetchedPartition:
        """One Fetch from the partition's current leader. Partition errors that a leader change resolves
        are retried until ``timeout_s``; then (or for any other error) the answer is returned as it is."""

        def attempt() -> FetchedPartition:
            fetched = KafkaCluster.fetch(self, topic, partition, offset, max_bytes=max_bytes,
                                         isolation_level=isolation_level, max_wait_ms=max_wait_ms)
            if fetched.error_code in FAILOVER_CODES:
                raise _RetriableAnswer(fetched, f"Fetch {topic}-{partition} at {offset}: error {fetched.error_code}")
            return fetched

        try:
            return self.retrying(f"Fetch {topic}-{partition}", attempt)
        except _RetriableAnswer as e:
            return e.fetched
