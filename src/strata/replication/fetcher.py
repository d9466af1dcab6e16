"""Follower fetchers: Kafka's ``ReplicaFetcherThread`` as one asyncio task per source broker.

A partition joins a fetcher when this broker becomes its follower, in the *truncating* state:
the fetcher first asks the leader where this replica's latest leader epoch ends
(OffsetForLeaderEpoch, KIP-101/279) and truncates the local log there, so a tail written under an
older leader that the new leader never had is dropped before anything new is appended. Then it
fetches from the log end with ``replica_id`` set, appends the leader's batches as they are (their
offsets and leader epochs kept, no record decoded), and takes the leader's high watermark and log
start offset from each response.

Errors, as Kafka handles them: OFFSET_OUT_OF_RANGE -> the leader's end below ours truncates to it,
its start above our end restarts the log there; OFFSET_MOVED_TO_TIERED_STORAGE -> the local log
restarts at the leader's local log start (the offsets below live in the remote tier); an epoch or
leadership error parks the partition until the next state; a lost connection backs off for
``replica.fetch.backoff.ms``.
"""

from __future__ import annotations

import asyncio
import logging
import struct
import uuid
from collections.abc import Awaitable, Callable, Iterable, Iterator
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Protocol

from strata.client.async_wire import AsyncBrokerConnection
from strata.client.security import ClientSecurity
from strata.client.wire import WireError
from strata.common import TopicPartition
from strata.config.cluster_config import ClusterConfig
from strata.errors import ErrorCode, KafkaError
from strata.log.partition_log import PartitionLog
from strata.replication.replica_manager import ReplicaManager
from strata.replication.truncation import offset_truncation_state

log = logging.getLogger(__name__)

FETCH, LIST_OFFSETS, OFFSET_FOR_LEADER_EPOCH = 1, 2, 23
FETCH_VERSION, LIST_OFFSETS_VERSION, OFFSET_FOR_LEADER_EPOCH_VERSION = 12, 8, 4
EARLIEST, LATEST, EARLIEST_LOCAL, LATEST_TIERED = -2, -1, -4, -5
_BATCH_HEAD = struct.Struct(">qi")  # base offset, batch length
AUX_STATE_WARNING_INTERVAL_S = 30.0  # a replica waiting on remote storage warns this often (DEBUG between)


@dataclass(slots=True)
class FetchState:
    tp: TopicPartition
    leader_epoch: int
    truncating: bool = True
    delayed_until: float = 0.0  # loop time before which the partition is not fetched
    leader_high_watermark: int = -1
    aux_warned_at: float | None = None  # loop time of the last warning about rebuilding from remote storage


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
    """Fetches every partition this broker follows whose leader is ``source_id``."""

    def __init__(self, source_id: int, local_id: int, endpoint: Callable[[int], tuple[str, int] | None],
                 replicas: ReplicaManager, config: ClusterConfig,
                 remote_aux_state: RemoteAuxStateBuilder | None = None, remote_storage_enabled: bool = False) -> None:
        self.remote_aux_state = remote_aux_state
        self.remote_storage_enabled = remote_storage_enabled
        self.source_id = source_id
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

    def add(self, tp: TopicPartition, leader_epoch: int) -> None:
        self.partitions[tp] = FetchState(tp, leader_epoch)
        self._changed.set()

    def remove(self, tp: TopicPartition) -> None:
        if self.partitions.pop(tp, None) is not None:
            self._changed.set()

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run(), name=f"replica-fetcher-{self.source_id}")

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
                truncating = [s for s in ready if s.truncating]
                if truncating:
                    await self._truncate(conn, truncating)
                fetching = [s for s in ready if not s.truncating and s.tp in self.partitions]
                if fetching:
                    await self._fetch(conn, fetching)
                if self._failing:
                    log.info("replica fetcher for broker %d: connected again", self.source_id)
                    self._failing = False
            except WireError as e:
                # One WARNING per outage (a dead leader is normal until the controller moves its partitions)
                if not self._failing:
                    log.warning("replica fetcher for broker %d: %s; retrying every %.1fs", self.source_id, e, backoff)
                else:
                    log.debug("replica fetcher for broker %d: %s", self.source_id, e)
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
        self._conn = AsyncBrokerConnection(address[0], address[1], client_id=f"strata-replica-{self.local_id}",
                                           timeout_s=self.config.replica_socket_timeout_ms / 1000,
                                           security=self.security)
        await self._conn.connect()
        return self._conn

    def _drop_connection(self) -> None:
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

    # -- truncation ---------------------------------------------------------------------------------

    async def _truncate(self, conn: AsyncBrokerConnection, states: list[FetchState]) -> None:
        by_topic: dict[str, list[dict[str, int]]] = {}
        for s in states:
            plog = self._log_of(s)
            if plog is None:
                continue
            latest = plog.leader_epoch_cache.latest_epoch
            if latest is None:  # nothing written under any epoch: nothing can diverge
                s.truncating = False
                continue
            by_topic.setdefault(s.tp.topic, []).append(
                {"partition": s.tp.partition, "current_leader_epoch": s.leader_epoch, "leader_epoch": latest})
        if not by_topic:
            return
        response = await conn.call(OFFSET_FOR_LEADER_EPOCH, OFFSET_FOR_LEADER_EPOCH_VERSION, replica_id=self.local_id,
                                   topics=[{"topic": t, "partitions": ps} for t, ps in by_topic.items()])
        for state, plog, p in self._answered(((t.topic, t.partitions) for t in response.topics), "partition"):
            if p.error_code:
                self._partition_error(state, int(p.error_code), "OffsetForLeaderEpoch")
                continue
            offset, done = truncation_offset(plog, p.leader_epoch, p.end_offset)
            if offset < plog.log_end_offset:  # records written under an older leader that this one lacks
                log.warning("%s: truncating to %d (leader %d: epoch %d ends at %d; our end %d)", state.tp, offset,
                            self.source_id, p.leader_epoch, p.end_offset, plog.log_end_offset)
            plog.truncate_to(offset)  # also drops an epoch this replica led without writing (at the end)
            state.truncating = not done

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

    async def _fetch(self, conn: AsyncBrokerConnection, states: list[FetchState]) -> None:
        by_topic: dict[str, list[dict[str, int]]] = {}
        for s in states:
            plog = self._log_of(s)
            if plog is None:
                continue
            by_topic.setdefault(s.tp.topic, []).append({
                "partition": s.tp.partition, "current_leader_epoch": s.leader_epoch,
                "fetch_offset": plog.log_end_offset,
                "last_fetched_epoch": plog.leader_epoch_cache.latest_epoch if plog.leader_epoch_cache.latest_epoch
                is not None else -1,
                "log_start_offset": plog.log_start_offset, "partition_max_bytes": self.config.replica_fetch_max_bytes})
        if not by_topic:
            return
        wait_ms = self.config.replica_fetch_wait_max_ms
        response = await conn.call(
            FETCH, FETCH_VERSION, timeout_s=self.config.replica_socket_timeout_ms / 1000 + wait_ms / 1000,
            replica_id=self.local_id, max_wait=timedelta(milliseconds=wait_ms),
            min_bytes=self.config.replica_fetch_min_bytes, max_bytes=self.config.replica_fetch_response_max_bytes,
            isolation_level=0, session_id=0, session_epoch=-1,
            topics=[{"topic": t, "partitions": ps} for t, ps in by_topic.items()], forgotten_topics_data=[],
            rack_id="")
        if response.error_code:
            raise WireError(f"fetch answered error {int(response.error_code)}")
        for state, plog, p in self._answered(((t.topic, t.partitions) for t in response.responses),
                                             "partition_index"):
            if p.error_code:
                await self._fetch_error(conn, state, plog, int(p.error_code))
                continue
            self._append(state, plog, p.records, p.high_watermark, p.log_start_offset)

    def _append(self, state: FetchState, plog: PartitionLog, records: bytes | None, leader_hw: int,
                leader_log_start: int) -> None:
        if records:
            batches = whole_batches(records)
            if len(batches):
                try:
                    plog.append_as_follower(batches)
                except KafkaError as e:
                    log.error("%s: cannot append the leader's batches: %s", state.tp, e)
                    self._delay(state)
                    return
                self.fetched_bytes += len(batches)
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
        state.truncating = False

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
    """One fetcher per source broker (``num.replica.fetchers`` > 1 is accepted; one task per leader
    suffices on an event loop, where fetches of different leaders already overlap)."""

    def __init__(self, local_id: int, endpoint: Callable[[int], tuple[str, int] | None], replicas: ReplicaManager,
                 config: ClusterConfig, security: ClientSecurity | None = None,
                 remote_storage_enabled: bool = False) -> None:
        """``remote_storage_enabled``: this broker tiers (``remote.log.storage.system.enable``), so a follower
        below its leader's local log start waits for :meth:`set_remote_aux_state` instead of restarting its
        log without the remote epoch history."""
        self.local_id = local_id
        self.remote_storage_enabled = remote_storage_enabled
        self.security = security
        self.endpoint = endpoint
        self.replicas = replicas
        self.config = config
        self.fetchers: dict[int, ReplicaFetcher] = {}
        self._where: dict[TopicPartition, int] = {}
        self.remote_aux_state: RemoteAuxStateBuilder | None = None  # set once tiering has started

    def follow(self, tp: TopicPartition, leader: int, leader_epoch: int) -> None:
        """(Re)start fetching ``tp`` from ``leader``, truncating first (a new leader or a new epoch)."""
        self.unfollow(tp)
        if leader < 0 or leader == self.local_id:
            return
        fetcher = self.fetchers.get(leader)
        if fetcher is None:
            fetcher = self.fetchers[leader] = ReplicaFetcher(leader, self.local_id, self.endpoint, self.replicas,
                                                             self.config, self.remote_aux_state,
                                                             self.remote_storage_enabled)
            fetcher.security = self.security
            fetcher.start()
        fetcher.add(tp, leader_epoch)
        self._where[tp] = leader

    def set_remote_aux_state(self, builder: RemoteAuxStateBuilder) -> None:
        """Tiering started: followers below their leader's local log start rebuild from remote storage."""
        self.remote_aux_state = builder
        for fetcher in self.fetchers.values():
            fetcher.remote_aux_state = builder

    def unfollow(self, tp: TopicPartition) -> None:
        source = self._where.pop(tp, None)
        if source is not None and (fetcher := self.fetchers.get(source)) is not None:
            fetcher.remove(tp)

    def lag(self) -> dict[TopicPartition, int]:
        """Per followed partition, the leader's last high watermark minus our log end (Kafka's
        ``FetcherLagMetrics``): 0 when caught up."""
        out = {}
        for tp, source in self._where.items():
            fetcher = self.fetchers.get(source)
            state = fetcher.partitions.get(tp) if fetcher is not None else None
            part = self.replicas.partitions.get(tp)
            if state is not None and part is not None:
                out[tp] = max(0, state.leader_high_watermark - part.log.log_end_offset)
        return out

    async def close(self) -> None:
        await asyncio.gather(*(f.stop() for f in self.fetchers.values()), return_exceptions=True)
        self.fetchers.clear()
