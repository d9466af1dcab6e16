"""Follower fetchers: Kafka's ``ReplicaFetcherThread`` as one asyncio task per source broker.

A partition joins a fetcher when this broker becomes its follower and is fetched at once from its log end,
with the epoch of its last batch (``last_fetched_epoch``). The leader checks that epoch against its own
history (KIP-320's truncation on fetch, Kafka's path since 2.7): if our log holds a tail written under an
older leader that this one lacks, the answer carries no records but a *diverging epoch* (the largest epoch the
leader has up to ours and where it ends), and we truncate there (Kafka's ``getOffsetTruncationState``) and
fetch again, so nothing new is appended on top of a divergent tail and no OffsetForLeaderEpoch round trip
precedes the first fetch. Then the leader's batches are appended as they are (their offsets and leader
epochs kept, no record decoded), and its high watermark and log start offset taken from each response.

Each fetcher keeps an incremental fetch session (KIP-227, :mod:`strata.client.fetch_session`) with its
leader: after the first full fetch only the partitions whose fetch offset moved are sent, and only those with
news come back, so the idle partitions a leader leads (most of ``__consumer_offsets`` and
``__share_group_state``) cost nothing per round trip on either side.

Errors, as Kafka handles them: OFFSET_OUT_OF_RANGE -> the leader's end below ours truncates to it,
its start above our end restarts the log there; OFFSET_MOVED_TO_TIERED_STORAGE -> the local log
restarts at the leader's local log start (the offsets below live in the remote tier); an epoch or
leadership error parks the partition until the next state; a lost connection backs off for
``replica.fetch.backoff.ms``.

``num.replica.fetchers`` fetchers per leader, each its own task, connection and fetch loop (Kafka's
``ReplicaFetcherThread-<fetcher id>-<leader id>``): a partition goes to fetcher
``abs(31 * topic.hashCode + partition) % num.replica.fetchers`` (Kafka's ``getFetcherId``, with Java's
string hash), so the fetches of a leader's partitions run as that many requests in flight at once and one
partition's large response or long poll does not hold the others. A dynamic change re-spreads every
partition over the new count, their fetch state kept (Kafka's ``resizeThreadPool``); fetchers left without
partitions stop and close their connection (``shutdownIdleFetcherThreads``).

Replication throttles (KIP-73, :mod:`strata.quota.replication`): the bytes appended for a partition this
broker's ``follower.replication.throttled.replicas`` names are recorded against the follower quota; while
that quota is exceeded, a throttled partition that is not caught up (its lag after the last fetch is not
0) is left out of the fetch (Kafka's ``shouldFollowerThrottle``). When that leaves nothing to fetch, the
fetcher waits until the quota's rate is back at its bound (at most ``replica.fetch.backoff.ms``, Kafka's
wait there) or the bound changes.
"""

from __future__ import annotations

import asyncio
import logging
import struct
import uuid
from collections.abc import Awaitable, Callable, Iterable, Iterator
from dataclasses import dataclass, replace
from datetime import timedelta
from typing import Any, Protocol

from strata.client.async_wire import AsyncBrokerConnection
from strata.client.fetch_session import SESSION_ERRORS, FetchSessionHandler
from strata.client.security import ClientSecurity
from strata.client.wire import WireError
from strata.common import TopicPartition
from strata.common.metrics import Meter, Registry, TopicMeter, prometheus_name
from strata.config.cluster_config import ClusterConfig
from strata.errors import ErrorCode, KafkaError
from strata.log.partition_log import PartitionLog
from strata.quota.replication import ReplicationQuotaManager
from strata.replication.replica_manager import ReplicaManager
from strata.replication.truncation import offset_truncation_state

log = logging.getLogger(__name__)

FETCH, LIST_OFFSETS, OFFSET_FOR_LEADER_EPOCH = 1, 2, 23  # the last: the rebuild from remote storage only
FETCH_VERSION, LIST_OFFSETS_VERSION, OFFSET_FOR_LEADER_EPOCH_VERSION = 12, 8, 4
EARLIEST, LATEST, EARLIEST_LOCAL, LATEST_TIERED = -2, -1, -4, -5
_BATCH_HEAD = struct.Struct(">qi")  # base offset, batch length
AUX_STATE_WARNING_INTERVAL_S = 30.0  # a replica waiting on remote storage warns this often (DEBUG between)
MIN_THROTTLE_WAIT_S = 0.001  # a throttle time that rounds to nothing still yields to the loop once
FETCHER_REQUESTS = prometheus_name("kafka.server:type=FetcherStats,name=RequestsPerSec")
FETCHER_BYTES = prometheus_name("kafka.server:type=FetcherStats,name=BytesPerSec")


@dataclass(slots=True)
class FetchState:
    tp: TopicPartition
    leader_epoch: int
    delayed_until: float = 0.0  # loop time before which the partition is not fetched
    leader_high_watermark: int = -1
    aux_warned_at: float | None = None  # loop time of the last warning about rebuilding from remote storage
    # the leader's high watermark minus our log end after the last fetch that appended (or the first one):
    # None until then. 0 is Kafka's ``isReplicaInSync``, which exempts the partition from the follower throttle.
    lag: int | None = None


def java_string_hash(s: str) -> int:
    """Java's ``String.hashCode`` (over UTF-16 code units, 32-bit signed)."""
    h = 0
    data = s.encode("utf-16-be")
    for i in range(0, len(data), 2):
        h = (31 * h + ((data[i] << 8) | data[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h >= 1 << 31 else h


def fetcher_id(tp: TopicPartition, num_fetchers: int) -> int:
    """Kafka's ``AbstractFetcherManager.getFetcherId``: ``Utils.abs(31 * topic.hashCode + partition) % n`` in
    Java's int arithmetic (``Utils.abs`` maps Integer.MIN_VALUE to 0), so a partition goes to the fetcher
    with the same id as on a Kafka broker."""
    n = (31 * java_string_hash(tp.topic) + tp.partition) & 0xFFFFFFFF
    n = n - (1 << 32) if n >= 1 << 31 else n
    return (0 if n == -(1 << 31) else abs(n)) % num_fetchers


def fetcher_name(fetcher: int, source_id: int) -> str:
    """Kafka's fetcher thread name, the ``clientId`` of its lag and FetcherStats metrics."""
    return f"ReplicaFetcherThread-{fetcher}-{source_id}"


@dataclass(slots=True)
class FetcherStats:
    """Kafka's ``FetcherStats`` of one fetcher: fetch requests sent and record bytes appended; and the
    broker's ``ReplicationBytesInPerSec``, which the appended bytes also count towards (per topic)."""

    requests: Meter
    bytes: Meter
    replication_bytes_in: TopicMeter | None = None


def whole_batches(records: bytes | memoryview) -> memoryview:
    """The complete batches at the front of ``records`` (a size-bounded read may end mid-batch)."""
    view = memoryview(records)
    pos = 0
    while pos + 12 <= len(view):
        _, length = _BATCH_HEAD.unpack_from(view, pos)
        if pos + 12 + length > len(view):
            break
        pos += 12 + length
    return view[:pos]


def truncation_offset(plog: PartitionLog, leader_epoch: int, leader_end_offset: int) -> tuple[int, bool]:
    """Kafka's ``getOffsetTruncationState``: (offset to truncate to, whether truncation is complete).

    The leader said where ``leader_epoch`` (the largest epoch it has that is <= ours) ends. If we
    know that epoch, we diverge at the smaller of both ends; if we do not, we cut back to the end of
    our largest epoch below it and ask again with that epoch (:mod:`strata.replication.truncation`).
    """
    state = offset_truncation_state(leader_epoch, leader_end_offset, epochs=plog.leader_epoch_cache,
                                    log_end_offset=plog.log_end_offset, fetch_offset=plog.high_watermark)
    return state.offset, state.truncation_completed


class RemoteAuxStateLike(Protocol):
    next_offset: int
    epochs: list[tuple[int, int]]
    producer_snapshot: bytes


RemoteAuxStateBuilder = Callable[[TopicPartition, uuid.UUID, int, int], Awaitable[RemoteAuxStateLike]]
"""(partition, topic id, target epoch, offset) -> the remote segment holding ``offset``'s aux state
(``RemoteLogManager.remote_aux_state``); None when this broker does not tier."""


class ReplicaFetcher:
    """Fetches the partitions this broker follows whose leader is ``source_id`` and whose fetcher id is
    ``fetcher_id`` (all of them with one fetcher per leader)."""

    def __init__(self, source_id: int, local_id: int, endpoint: Callable[[int], tuple[str, int] | None],
                 replicas: ReplicaManager, config: ClusterConfig,
                 remote_aux_state: RemoteAuxStateBuilder | None = None, remote_storage_enabled: bool = False,
                 fetcher_id: int = 0, quota: ReplicationQuotaManager | None = None,
                 stats: FetcherStats | None = None) -> None:
        self.remote_aux_state = remote_aux_state
        self.remote_storage_enabled = remote_storage_enabled
        self.source_id = source_id
        self.fetcher_id = fetcher_id
        self.name = fetcher_name(fetcher_id, source_id)
        self.quota = quota  # the follower replication quota (None: never throttled)
        self.stats = stats
        self.local_id = local_id
        self.endpoint = endpoint
        self.security: ClientSecurity | None = None  # the inter-broker listener's TLS/SASL (set by the manager)
        self.replicas = replicas
        self.config = config
        self.partitions: dict[TopicPartition, FetchState] = {}
        self._changed = asyncio.Event()
        self._conn: AsyncBrokerConnection | None = None
        self._task: asyncio.Task[None] | None = None
        self.fetched_bytes = 0
        self._failing = False
        self.session = FetchSessionHandler()  # KIP-227: an idle partition costs the leader nothing to answer

    def add(self, tp: TopicPartition, leader_epoch: int) -> None:
        self.partitions[tp] = FetchState(tp, leader_epoch)
        self._changed.set()

    def adopt(self, state: FetchState) -> None:
        """A partition moved here from another fetcher (a resize), its state as it was: a copy, so that the
        old fetcher's in-flight request can no longer touch it."""
        self.partitions[state.tp] = replace(state)
        self._changed.set()

    def remove(self, tp: TopicPartition) -> None:
        if self.partitions.pop(tp, None) is not None:
            self._changed.set()

    def remove_all(self) -> list[FetchState]:
        states = list(self.partitions.values())
        self.partitions.clear()
        self._changed.set()
        return states

    def wake(self) -> None:
        """Look at the partitions again now (the follower quota changed)."""
        self._changed.set()

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run(), name=self.name)

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        if self._conn is not None:
            self._conn.close()

    # -- the loop ---------------------------------------------------------------------------------

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        backoff = self.config.replica_fetch_backoff_ms / 1000
        while True:
            now = loop.time()
            ready = [s for s in self.partitions.values() if s.delayed_until <= now]
            if not ready:
                self._changed.clear()
                wake = min((s.delayed_until for s in self.partitions.values()), default=None)
                timeout = None if wake is None else max(0.0, wake - now)
                try:
                    await asyncio.wait_for(self._changed.wait(), timeout)
                except TimeoutError:
                    pass
                continue
            try:
                conn = await self._connection()
                fetching = [s for s in ready if s.tp in self.partitions]
                sendable = self._not_throttled(fetching)
                if sendable:
                    # partitions held back resume once the quota allows: the others' long poll ends by then
                    held_s = self._quota_wait_s() if len(sendable) < len(fetching) else None
                    await self._fetch(conn, sendable, held_s)
                elif fetching:
                    await self._wait_for_quota()
                if self._failing:
                    log.info("replica fetcher for broker %d: connected again", self.source_id)
                    self._failing = False
            except WireError as e:
                # One WARNING per outage (a dead leader is normal until the controller moves its partitions)
                if not self._failing:
                    log.warning("replica fetcher for broker %d (%s): %s; retrying every %.1fs", self.source_id,
                                self.name, e, backoff)
                else:
                    log.debug("replica fetcher for broker %d (%s): %s", self.source_id, self.name, e)
                self._failing = True
                self._drop_connection()
                await asyncio.sleep(backoff)
                continue
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("replica fetcher for broker %d failed; retrying in %.1fs", self.source_id, backoff)
                self._drop_connection()
                await asyncio.sleep(backoff)

    async def _connection(self) -> AsyncBrokerConnection:
        if self._conn is not None and self._conn.connected:
            return self._conn
        address = self.endpoint(self.source_id)
        if address is None:
            raise WireError(f"broker {self.source_id} is not registered")
        # Kafka's client id of a fetcher's connection: the leader tells the fetchers of one follower apart by it
        self._conn = AsyncBrokerConnection(address[0], address[1],
                                           client_id=f"broker-{self.local_id}-fetcher-{self.fetcher_id}",
                                           timeout_s=self.config.replica_socket_timeout_ms / 1000,
                                           security=self.security)
        await self._conn.connect()
        return self._conn

    def _drop_connection(self) -> None:
        self.session.reset()
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def _delay(self, state: FetchState) -> None:
        state.delayed_until = asyncio.get_running_loop().time() + self.config.replica_fetch_backoff_ms / 1000

    def _log_of(self, state: FetchState) -> PartitionLog | None:
        """The follower log of a partition still fetched at the epoch it was added with."""
        if self.partitions.get(state.tp) is not state:
            return None
        part = self.replicas.partitions.get(state.tp)
        if part is None or part.is_leader or part.leader != self.source_id or part.leader_epoch != state.leader_epoch:
            return None
        return part.log

    def _answered(self, topics: Iterable[tuple[str, Any]], index_field: str
                  ) -> Iterator[tuple[FetchState, PartitionLog, Any]]:
        """The partitions of a response that this fetcher still follows at the epoch it asked with."""
        for topic, partitions in topics:
            for p in partitions:
                state = self.partitions.get(TopicPartition(topic, getattr(p, index_field)))
                plog = self._log_of(state) if state is not None else None
                if state is not None and plog is not None:
                    yield state, plog, p

    # -- fetch --------------------------------------------------------------------------------------

    def _not_throttled(self, states: list[FetchState]) -> list[FetchState]:
        """Kafka's ``shouldFollowerThrottle``: with the follower quota exceeded, the throttled partitions that
        are not in sync stay out of this fetch (in-sync ones never do: they would drop out of the ISR)."""
        quota = self.quota
        if quota is None or not quota.bounded or not states:
            return states
        held = [s for s in states if s.lag != 0 and quota.is_throttled(s.tp)]
        if not held or not quota.is_quota_exceeded():
            return states
        held_ids = {id(s) for s in held}
        return [s for s in states if id(s) not in held_ids]

    def _quota_wait_s(self) -> float:
        """How long partitions held back by the follower quota wait: until its rate is back at the bound, at
        most ``replica.fetch.backoff.ms`` (what Kafka waits when nothing is left to fetch)."""
        assert self.quota is not None
        return min(self.config.replica_fetch_backoff_ms / 1000, max(self.quota.throttle_s(), MIN_THROTTLE_WAIT_S))

    async def _wait_for_quota(self) -> None:
        """Every partition ready to fetch is held back by the follower quota: wait for it (or until a
        partition or the bound changes)."""
        wait = self._quota_wait_s()
        self._changed.clear()
        try:
            await asyncio.wait_for(self._changed.wait(), wait)
        except TimeoutError:
            pass

    async def _fetch(self, conn: AsyncBrokerConnection, states: list[FetchState], held_s: float | None = None) -> None:
        """One Fetch of ``states``. ``held_s``: throttled partitions were left out and may be fetched again in
        that many seconds, so the leader is asked to long-poll no longer than that (Kafka long-polls the full
        ``replica.fetch.wait.max.ms``, which makes a throttled copy run below its rate when other partitions
        share the fetcher)."""
        wanted: dict[tuple[str, int], dict[str, int]] = {}
        max_bytes = self.config.replica_fetch_max_bytes
        for s in states:
            plog = self._log_of(s)
            if plog is None:
                continue
            latest = plog.leader_epoch_cache.latest_epoch
            wanted[(s.tp.topic, s.tp.partition)] = {
                "partition": s.tp.partition, "current_leader_epoch": s.leader_epoch,
                "fetch_offset": plog.log_end_offset, "last_fetched_epoch": latest if latest is not None else -1,
                "log_start_offset": plog.log_start_offset, "partition_max_bytes": max_bytes}
        if not wanted:
            return
        session_id, session_epoch, topics, forgotten = self.session.build(wanted)
        wait_ms = self.config.replica_fetch_wait_max_ms
        if held_s is not None:
            wait_ms = min(wait_ms, max(1, int(held_s * 1000)))
        if self.stats is not None:
            self.stats.requests.mark()
        response = await conn.call(
            FETCH, FETCH_VERSION, timeout_s=self.config.replica_socket_timeout_ms / 1000 + wait_ms / 1000,
            replica_id=self.local_id, max_wait=timedelta(milliseconds=wait_ms),
            min_bytes=self.config.replica_fetch_min_bytes, max_bytes=self.config.replica_fetch_response_max_bytes,
            isolation_level=0, session_id=session_id, session_epoch=session_epoch, topics=topics,
            forgotten_topics_data=forgotten, rack_id="")
        self.session.handle_response(int(response.error_code), int(response.session_id))
        if response.error_code in SESSION_ERRORS:
            log.info("replica fetcher for broker %d: fetch session %d %s; starting a new one", self.source_id,
                     session_id, ErrorCode(int(response.error_code)).name)
            return
        if response.error_code:
            raise WireError(f"fetch answered error {int(response.error_code)}")
        for state, plog, p in self._answered(((t.topic, t.partitions) for t in response.responses),
                                             "partition_index"):
            if p.error_code:
                await self._fetch_error(conn, state, plog, int(p.error_code))
                continue
            diverging = p.diverging_epoch
            if diverging is not None and diverging.epoch >= 0 and diverging.end_offset >= 0:
                self._truncate_on_fetch(state, plog, int(diverging.epoch), int(diverging.end_offset))
                continue
            self._append(state, plog, p.records, p.high_watermark, p.log_start_offset)

    def _truncate_on_fetch(self, state: FetchState, plog: PartitionLog, leader_epoch: int, leader_end: int) -> None:
        """The leader answered a diverging epoch: its history up to our last epoch ends at ``leader_end`` under
        ``leader_epoch``. Truncate where the logs diverge (Kafka's ``truncateOnFetchResponse``); the next fetch
        carries our new last epoch, and the leader checks again (an epoch we do not know cuts back to our
        largest one below it and asks again with that, one fetch each)."""
        offset, _ = truncation_offset(plog, leader_epoch, leader_end)
        before = (plog.log_end_offset, plog.leader_epoch_cache.latest_epoch)
        if offset < plog.log_end_offset:  # records written under an older leader that this one lacks
            log.warning("%s: truncating to %d (leader %d: epoch %d ends at %d; our end %d)", state.tp, offset,
                        self.source_id, leader_epoch, leader_end, plog.log_end_offset)
        plog.truncate_to(offset)  # also drops an epoch this replica led without writing (at the end)
        if (plog.log_end_offset, plog.leader_epoch_cache.latest_epoch) == before:
            # nothing moved, so the same fetch would be answered the same way: not in a tight loop
            log.warning("%s: leader %d answered diverging epoch %d ending at %d, which truncates nothing here "
                        "(our end %d)", state.tp, self.source_id, leader_epoch, leader_end, plog.log_end_offset)
            self._delay(state)

    def _append(self, state: FetchState, plog: PartitionLog, records: bytes | None, leader_hw: int,
                leader_log_start: int) -> None:
        appended = 0
        if records:
            batches = whole_batches(records)
            if len(batches):
                try:
                    plog.append_as_follower(batches)
                except KafkaError as e:
                    log.error("%s: cannot append the leader's batches: %s", state.tp, e)
                    self._delay(state)
                    return
                appended = len(batches)
                self.fetched_bytes += appended
                if self.stats is not None:
                    self.stats.bytes.mark(appended)
                    if self.stats.replication_bytes_in is not None:
                        self.stats.replication_bytes_in.mark(state.tp.topic, appended)
                # Kafka's ReplicaFetcherThread: throttled partitions count against the quota, in sync or not
                if self.quota is not None and self.quota.is_throttled(state.tp):
                    self.quota.record(appended)
        if appended or state.lag is None:  # an empty answer (a throttled leader's) leaves the lag as it was
            state.lag = max(0, leader_hw - plog.log_end_offset)
        state.leader_high_watermark = leader_hw
        plog.update_high_watermark(min(leader_hw, plog.log_end_offset))
        if leader_log_start > plog.log_start_offset:
            plog.maybe_increment_log_start_offset(leader_log_start)
        self.replicas.notify(state.tp)

    async def _fetch_error(self, conn: AsyncBrokerConnection, state: FetchState, plog: PartitionLog, code: int) -> None:
        if code == ErrorCode.OFFSET_OUT_OF_RANGE:
            leader_end = await self._leader_offset(conn, state, LATEST)
            if leader_end is None:
                return
            if leader_end < plog.log_end_offset:
                log.warning("%s: leader %d ends at %d, below our end %d: truncating", state.tp, self.source_id,
                            leader_end, plog.log_end_offset)
                plog.truncate_to(leader_end)
                return
            leader_start = await self._leader_offset(conn, state, EARLIEST)
            if leader_start is not None and leader_start > plog.log_end_offset:
                log.warning("%s: leader %d starts at %d, past our end %d: restarting the log there", state.tp,
                            self.source_id, leader_start, plog.log_end_offset)
                plog.truncate_fully_and_start_at(leader_start)
            return
        if code == ErrorCode.OFFSET_MOVED_TO_TIERED_STORAGE:
            await self._build_remote_log_aux_state(conn, state, plog)
            return
        self._partition_error(state, code, "Fetch")

    async def _build_remote_log_aux_state(self, conn: AsyncBrokerConnection, state: FetchState,
                                          plog: PartitionLog) -> None:
        """Kafka's ``TierStateMachine``: our fetch offset is below the leader's local log start, so the
        offsets in between live in remote storage only. Rather than copying them, restart the local log
        at the end of the remote segment holding ``local start - 1``, with that segment's leader-epoch
        history and producer snapshot, and fetch only the local tail from there."""
        local = await self._leader_offset_and_epoch(conn, state, EARLIEST_LOCAL)
        leader_start = await self._leader_offset(conn, state, EARLIEST)
        if local is None or leader_start is None:
            return
        local_start, local_epoch = local
        part = self.replicas.partitions.get(state.tp)
        if self.remote_aux_state is None and self.remote_storage_enabled:
            # This broker tiers, but its RemoteLogManager starts only after it has joined the cluster (and its
            # fetchers have started): wait for it. Restarting the log without the remote segment's epoch history
            # would leave offsets below the local log start without an epoch, so once this replica leads, a
            # read of them from the remote tier would be answered OFFSET_OUT_OF_RANGE.
            self._delay(state)
            return
        if self.remote_aux_state is None or part is None or local_start <= leader_start:
            log.info("%s: offsets below %d are in the remote tier; this replica starts its local log there",
                     state.tp, local_start)
            plog.truncate_fully_and_start_at(local_start)
            plog.log_start_offset = min(leader_start, local_start)
            return
        target_offset, target_epoch = local_start - 1, local_epoch
        if self.config.follower_fetch_last_tiered_offset_enable and plog.log_end_offset <= plog.log_start_offset:
            # KIP-1023: an empty replica starts after the last tiered offset, not at the leader's local log
            # start: the offsets in between (tiered, still in the leader's local retention) stay remote for it.
            tiered = await self._leader_offset_and_epoch(conn, state, LATEST_TIERED)
            if tiered is not None and tiered[0] >= local_start:
                target_offset, target_epoch = tiered
        if target_offset == local_start - 1 and local_epoch > 0:
            # The epoch holding local_start - 1 may be an earlier one (Kafka asks where epoch - 1 ends).
            earlier = await self._epoch_end(conn, state, local_epoch - 1)
            if earlier is not None and earlier[1] > local_start - 1:
                target_epoch = earlier[0]
        try:
            aux = await self.remote_aux_state(state.tp, part.topic_id, target_epoch, target_offset)
        except Exception as e:  # noqa: BLE001 - not uploaded/visible yet, store down: retried after a backoff
            now = asyncio.get_running_loop().time()
            quiet = state.aux_warned_at is not None and now - state.aux_warned_at < AUX_STATE_WARNING_INTERVAL_S
            if not quiet:
                state.aux_warned_at = now
            log.log(logging.DEBUG if quiet else logging.WARNING, "%s: cannot build the replica's state from remote "
                    "storage yet (leader's local log starts at %d): %s", state.tp, local_start, e)
            self._delay(state)
            return
        state.aux_warned_at = None
        if self._log_of(state) is not plog:
            return
        log.info("%s: offsets %d..%d are in remote storage; this replica starts its local log at %d (epochs and "
                 "producer state from the remote segment ending at %d)", state.tp, leader_start, aux.next_offset - 1,
                 aux.next_offset, aux.next_offset - 1)
        plog.restore_from_remote_tier(aux.next_offset, leader_start, aux.epochs, aux.producer_snapshot)

    async def _epoch_end(self, conn: AsyncBrokerConnection, state: FetchState, epoch: int) -> tuple[int, int] | None:
        response = await conn.call(OFFSET_FOR_LEADER_EPOCH, OFFSET_FOR_LEADER_EPOCH_VERSION, replica_id=self.local_id,
                                   topics=[{"topic": state.tp.topic, "partitions": [
                                       {"partition": state.tp.partition, "current_leader_epoch": state.leader_epoch,
                                        "leader_epoch": epoch}]}])
        for t in response.topics:
            for p in t.partitions:
                if p.error_code:
                    self._partition_error(state, int(p.error_code), "OffsetForLeaderEpoch")
                    return None
                return int(p.leader_epoch), int(p.end_offset)
        return None

    def _partition_error(self, state: FetchState, code: int, what: str) -> None:
        if code in (ErrorCode.FENCED_LEADER_EPOCH, ErrorCode.NOT_LEADER_OR_FOLLOWER,
                    ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, ErrorCode.UNKNOWN_LEADER_EPOCH):
            log.info("%s: %s from leader %d answered %s; waiting for the next partition state", state.tp, what,
                     self.source_id, ErrorCode(code).name)
        else:
            log.warning("%s: %s from leader %d answered error %d", state.tp, what, self.source_id, code)
        self._delay(state)

    async def _leader_offset(self, conn: AsyncBrokerConnection, state: FetchState, spec: int) -> int | None:
        found = await self._leader_offset_and_epoch(conn, state, spec)
        return None if found is None else found[0]

    async def _leader_offset_and_epoch(self, conn: AsyncBrokerConnection, state: FetchState,
                                       spec: int) -> tuple[int, int] | None:
        response = await conn.call(LIST_OFFSETS, LIST_OFFSETS_VERSION, replica_id=self.local_id, isolation_level=0,
                                   topics=[{"name": state.tp.topic, "partitions": [
                                       {"partition_index": state.tp.partition,
                                        "current_leader_epoch": state.leader_epoch, "timestamp": spec}]}])
        for t in response.topics:
            for p in t.partitions:
                if p.error_code:
                    self._partition_error(state, int(p.error_code), "ListOffsets")
                    return None
                return int(p.offset), int(p.leader_epoch)
        return None


class ReplicaFetcherManager:
    """``num.replica.fetchers`` fetchers per source broker, keyed (leader id, fetcher id): Kafka's
    ``AbstractFetcherManager``/``ReplicaFetcherManager``.

    ``quota``: the broker's follower replication quota, shared by every fetcher. ``registry``: where each
    fetcher's Kafka ``FetcherStats`` meters go (``RequestsPerSec``, ``BytesPerSec``, labelled with the
    fetcher's name and its leader's address). ``on_resize`` callbacks run after a resize has moved
    partitions between fetchers (the lag metrics follow them)."""

    def __init__(self, local_id: int, endpoint: Callable[[int], tuple[str, int] | None], replicas: ReplicaManager,
                 config: ClusterConfig, security: ClientSecurity | None = None,
                 remote_storage_enabled: bool = False, quota: ReplicationQuotaManager | None = None,
                 registry: Registry | None = None) -> None:
        """``remote_storage_enabled``: this broker tiers (``remote.log.storage.system.enable``), so a follower
        below its leader's local log start waits for :meth:`set_remote_aux_state` instead of restarting its
        log without the remote epoch history."""
        self.local_id = local_id
        self.remote_storage_enabled = remote_storage_enabled
        self.security = security
        self.endpoint = endpoint
        self.replicas = replicas
        self.config = config
        self.quota = quota
        self.registry = registry
        self.replication_bytes_in: TopicMeter | None = None  # the broker's, set beside ``registry``
        self.num_fetchers = config.num_replica_fetchers
        self.fetchers: dict[tuple[int, int], ReplicaFetcher] = {}
        self._where: dict[TopicPartition, tuple[int, int]] = {}
        self._stats_labels: dict[tuple[int, int], dict[str, str]] = {}
        self._stopping: set[asyncio.Task[None]] = set()
        self.remote_aux_state: RemoteAuxStateBuilder | None = None  # set once tiering has started
        self.on_resize: list[Callable[[], None]] = []
        if quota is not None:
            quota.on_update.append(self._wake_all)

    def fetcher_id(self, tp: TopicPartition) -> int:
        return fetcher_id(tp, self.num_fetchers)

    def follow(self, tp: TopicPartition, leader: int, leader_epoch: int) -> None:
        """(Re)start fetching ``tp`` from ``leader`` (a new leader or a new epoch): the first fetch checks our tail."""
        self.unfollow(tp)
        if leader < 0 or leader == self.local_id:
            return
        key = (leader, self.fetcher_id(tp))
        self._fetcher(key).add(tp, leader_epoch)
        self._where[tp] = key

    def _fetcher(self, key: tuple[int, int]) -> ReplicaFetcher:
        fetcher = self.fetchers.get(key)
        if fetcher is None:
            leader, fid = key
            fetcher = self.fetchers[key] = ReplicaFetcher(
                leader, self.local_id, self.endpoint, self.replicas, self.config, self.remote_aux_state,
                self.remote_storage_enabled, fetcher_id=fid, quota=self.quota, stats=self._register_stats(key))
            fetcher.security = self.security
            fetcher.start()
            log.info("started fetcher %s to broker %d", fetcher.name, leader)
        return fetcher

    def _register_stats(self, key: tuple[int, int]) -> FetcherStats | None:
        if self.registry is None:
            return None
        leader, fid = key
        address = self.endpoint(leader)
        labels = {"clientId": fetcher_name(fid, leader), "brokerHost": address[0] if address else "",
                  "brokerPort": str(address[1]) if address else ""}
        self._stats_labels[key] = labels
        return FetcherStats(self.registry.meter(FETCHER_REQUESTS, "Fetch requests sent by the replica fetcher.",
                                                labels),
                            self.registry.meter(FETCHER_BYTES, "Record bytes appended by the replica fetcher.",
                                                labels), self.replication_bytes_in)

    def set_remote_aux_state(self, builder: RemoteAuxStateBuilder) -> None:
        """Tiering started: followers below their leader's local log start rebuild from remote storage."""
        self.remote_aux_state = builder
        for fetcher in self.fetchers.values():
            fetcher.remote_aux_state = builder

    def unfollow(self, tp: TopicPartition) -> None:
        key = self._where.pop(tp, None)
        if key is not None and (fetcher := self.fetchers.get(key)) is not None:
            fetcher.remove(tp)
            if not fetcher.partitions:
                # Kafka's shutdownIdleFetcherThreads, once the state change at hand is applied (the follow
                # that called this may put the partition right back)
                try:
                    asyncio.get_running_loop().call_soon(self._shutdown_idle)
                except RuntimeError:  # no loop (closing down): close() stops every fetcher anyway
                    pass

    def fetch_state(self, tp: TopicPartition) -> FetchState | None:
        """The fetch state of a followed partition (None: not being fetched)."""
        key = self._where.get(tp)
        fetcher = self.fetchers.get(key) if key is not None else None
        return fetcher.partitions.get(tp) if fetcher is not None else None

    def resize(self, num_fetchers: int) -> None:
        """Kafka's ``resizeThreadPool`` (a dynamic ``num.replica.fetchers``): every partition is placed again by
        the new count, its fetch state kept; fetchers left without partitions stop."""
        if num_fetchers == self.num_fetchers:
            return
        log.info("resizing the replica fetchers per source broker from %d to %d", self.num_fetchers, num_fetchers)
        self.num_fetchers = num_fetchers
        moved = [(leader, state) for (leader, _), fetcher in list(self.fetchers.items())
                 for state in fetcher.remove_all()]
        for leader, state in moved:
            key = (leader, self.fetcher_id(state.tp))
            self._fetcher(key).adopt(state)
            self._where[state.tp] = key
        self._shutdown_idle()
        for fn in self.on_resize:
            fn()

    def _shutdown_idle(self) -> None:
        for key, fetcher in list(self.fetchers.items()):
            if fetcher.partitions:
                continue
            del self.fetchers[key]
            labels = self._stats_labels.pop(key, None)
            if labels is not None and self.registry is not None:
                for name in (FETCHER_REQUESTS, FETCHER_BYTES):
                    self.registry.remove(name, labels)
            task = asyncio.get_running_loop().create_task(fetcher.stop(), name=f"stop-{fetcher.name}")
            self._stopping.add(task)
            task.add_done_callback(self._stopping.discard)
            log.info("stopped idle fetcher %s", fetcher.name)

    def _wake_all(self) -> None:
        for fetcher in self.fetchers.values():
            fetcher.wake()

    def lag(self) -> dict[TopicPartition, int]:
        """Per followed partition, the leader's last high watermark minus our log end (Kafka's
        ``FetcherLagMetrics``): 0 when caught up."""
        out = {}
        for tp in self._where:
            state = self.fetch_state(tp)
            part = self.replicas.partitions.get(tp)
            if state is not None and part is not None:
                out[tp] = max(0, state.leader_high_watermark - part.log.log_end_offset)
        return out

    async def close(self) -> None:
        await asyncio.gather(*(f.stop() for f in self.fetchers.values()), *self._stopping, return_exceptions=True)
        self.fetchers.clear()
