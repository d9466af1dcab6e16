"""Fetch: whole batches sliced from segment files, long-polled by ``min_bytes``/``max_wait``.

Records are never decoded: each partition's data is a :class:`FileSlice`, spliced into the
encoded response and sent with ``sendfile`` (slices under ``INLINE_BYTES`` are read into the
response instead, where two syscalls would cost more than the copy). Incremental fetch sessions (KIP-227,
:mod:`strata.broker.fetch_sessions.cache`): a fetch continuing a session reads the session's partitions and
is answered only those with something new.

Tiered partitions: an offset in ``[log_start_offset, local_log_start_offset)`` is read from the
remote tier on the RemoteLogManager's reader pool - every such partition of the request at once
(Kafka before 4.2 served only the first) - and the response waits for those reads at most
``remote.fetch.max.wait.ms``. A read still running then is dropped and its partition answered
empty with no error, as Kafka does (the consumer fetches again); a failed read (store down)
answers KAFKA_STORAGE_ERROR, which clients retry. While the KIP-956 fetch quota
(``remote.log.manager.fetch.max.bytes.per.second``) is exceeded a partition needing the remote tier is
not read: it is answered with no records and no error, and the fetch long-polls as usual (Kafka 3.9).

Replication throttles (KIP-73, :mod:`strata.quota.replication`): in a follower's fetch, a partition this
broker's ``leader.replication.throttled.replicas`` names is answered with no records and no error while the
leader replication quota is exceeded and that follower is not in the ISR (Kafka's ``shouldLeaderThrottle``);
the records sent for throttled partitions, in sync or not, are recorded against the quota once answered.

Authorization (Kafka 3.9's ``KafkaApis.handleFetchRequest``), decided once per request before the first
pass (the long-poll reruns reuse it): a follower's fetch (``replica_id`` >= 0) needs CLUSTER_ACTION on the
cluster, else every partition is TOPIC_AUTHORIZATION_FAILED; a consumer needs READ on each topic, checked once
per topic and before its existence (TOPIC_AUTHORIZATION_FAILED, not UNKNOWN_TOPIC_OR_PARTITION, for a topic
it may not read). A topic id this broker cannot resolve stays UNKNOWN_TOPIC_ID. Without an authorizer nothing
is checked at all.

Rack-aware reads of diskless partitions (KIP-392, :mod:`strata.diskless.placement`): a consumer's Fetch v11+
carries its ``client.rack`` as ``rack_id``. A broker outside that rack answers a diskless partition with
``preferred_read_replica``, a live replica in the client's rack (the choice Metadata makes for ``diskless_az=``),
and, as Kafka's ``ReplicaManager.readFromLog`` does when its replica selector picks another replica, no records:
only the partition's watermarks, and the fetch is answered at once. Classic topics are unchanged (Strata does
not implement follower fetching for them).
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

from strata.broker.wire.dispatch import RequestContext, Spliced, handles
from strata.common import TopicPartition
from strata.diskless.coordinator.api import FindBatchRequest
from strata.diskless.placement import NO_BROKER, preferred_read_replica
from strata.errors import ErrorCode, KafkaError, OffsetOutOfRangeError
from strata.log.partition_log import FetchIsolation, PartitionLog
from strata.protocol.frame import Splice
from strata.security.acl import AclOperation, ResourceType
from strata.tiered.api import RemoteStorageNotReadyError, TopicIdPartition
from strata.tiered.manager import RemoteReadQueueFullError
from strata.tiered.reader import RemoteFetchResult

log = logging.getLogger(__name__)

FETCH = 1
INLINE_BYTES = 32 * 1024
_MIN_WAIT_S = 0.001
READ_COMMITTED = 1


class _FetchState:
    """One pass over the requested partitions; rerun after a wait for more data."""

    def __init__(self) -> None:
        self.bytes = 0
        self.errors = False
        self.splices: list[Splice] = []
        self.remote: list[tuple[dict[str, Any], PartitionLog, asyncio.Future[RemoteFetchResult]]] = []
        self.remote_reserved = 0  # budget promised to remote reads still running
        self.throttled_bytes = 0  # records of leader-throttled partitions in a follower's answer (KIP-73)
        self.replication_bytes: dict[str, int] = {}  # a follower's answer's bytes, by topic
        self.held_s: float | None = None  # a partition held back by the leader quota: seconds until it allows it
        self.diskless: list[tuple[dict[str, Any], FindBatchRequest]] = []  # read after the pass, all at once
        # diskless partitions served from this broker's consolidated replica: their watermarks are the
        # coordinator's (the replica may lag it), asked after the pass
        self.consolidated: list[tuple[dict[str, Any], TopicIdPartition]] = []
        # diskless partitions answered with a preferred read replica (KIP-392): no records, the coordinator's
        # watermarks; the fetch is answered at once
        self.redirected: list[tuple[dict[str, Any], TopicIdPartition]] = []
        self.client_rack: str | None = None  # the consumer's rack_id (Fetch v11+), None when it sent none
        self._racks: dict[int, str | None] | None = None  # the live brokers' racks, asked once per pass

    def racks(self, ctx: RequestContext) -> dict[int, str | None]:
        if self._racks is None:
            self._racks = {b["node_id"]: b.get("rack") for b in ctx.broker.view.brokers(ctx.listener_name)}
        return self._racks


def replica_id_of(request: Any) -> int:
    """The fetching follower's broker id (v15+ in ``replica_state``), -1 for consumers."""
    state = getattr(request, "replica_state", None)
    if state is not None:
        return int(state.replica_id)
    return int(getattr(request, "replica_id", -1))


def _read_partition(ctx: RequestContext, name: str, p: Any, isolation: FetchIsolation, budget: int,
                    state: _FetchState, replica_id: int = -1) -> dict[str, Any]:
    replicas = ctx.broker.replicas
    tp = TopicPartition(name, p.partition)
    out: dict[str, Any] = {"partition_index": p.partition, "error_code": 0, "high_watermark": -1,
                           "last_stable_offset": -1, "log_start_offset": -1, "aborted_transactions": None,
                           "preferred_read_replica": -1, "records": b""}
    diskless = ctx.broker.diskless
    if replica_id < 0 and diskless is None and ctx.broker.topics.config(name).diskless_enable:
        state.errors = True  # its empty local log is not the topic: say so rather than serve nothing
        out["error_code"] = ErrorCode.KAFKA_STORAGE_ERROR
        return out
    consolidated = None
    if replica_id < 0 and diskless is not None and diskless.is_diskless(name):
        if state.client_rack and _redirect(ctx, name, p.partition, state, out):
            return out
        # Leaderless: any broker serves it. What this broker's replica has consolidated (local log, remote
        # tier) is read like any tiered log; the rest from the coordinator's coordinates and the WAL objects.
        consolidated = replicas.local_log(tp)
        end = None if consolidated is None else (consolidated.last_stable_offset
                                                 if isolation is FetchIsolation.TXN_COMMITTED
                                                 else consolidated.log_end_offset)
        if consolidated is None or not consolidated.log_start_offset <= p.fetch_offset < end:
            info = ctx.broker.topics.get(name)
            assert info is not None
            state.diskless.append((out, FindBatchRequest(info.topic_id, p.partition, p.fetch_offset,
                                                         max(0, min(p.partition_max_bytes, budget)))))
            return out
    try:
        if consolidated is not None:
            plog = consolidated  # any replica (the data is the coordinator's, not a leader's)
            info = ctx.broker.topics.get(name)
            assert info is not None
            state.consolidated.append((out, TopicIdPartition(info.topic_id, name, p.partition)))
        else:
            plog = replicas.get_log(tp)
            replicas.check_leader_epoch(tp, getattr(p, "current_leader_epoch", -1))
        if replica_id >= 0:
            return _read_for_follower(ctx, tp, plog, p, replica_id, budget, state, out)
        if ctx.version < 10 and plog.config.compression_type == "zstd":
            # Kafka's maybeConvertFetchedData: Fetch < v10 predates zstd (KIP-110); a topic recompressed to zstd
            # would hand such a client batches it cannot read
            state.errors = True
            out["error_code"] = ErrorCode.UNSUPPORTED_COMPRESSION_TYPE
            return out
        # A negative partition_max_bytes (hostile or buggy client) reads like 0: the first batch at most
        # (min_one_message), never a ValueError from the segment read turned into UNKNOWN_SERVER_ERROR.
        max_bytes = max(0, min(p.partition_max_bytes, budget))
        min_one = state.bytes == 0 and not state.remote
        out.update(high_watermark=plog.high_watermark, last_stable_offset=plog.last_stable_offset,
                   log_start_offset=plog.log_start_offset)
        rlm = ctx.broker.remote_log_manager
        if rlm is not None and plog.log_start_offset <= p.fetch_offset < plog.local_log_start_offset:
            if rlm.is_remote_log_fetch_quota_exceeded():
                return out  # KIP-956 (Kafka's readFromLog): no remote read in this fetch, no records, no error
            info = ctx.broker.topics.get(name)
            assert info is not None
            future = rlm.read(TopicIdPartition(info.topic_id, name, p.partition), plog, p.fetch_offset, max_bytes,
                              min_one, isolation is FetchIsolation.TXN_COMMITTED)
            state.remote.append((out, plog, future))
            state.remote_reserved += max_bytes
            return out
        data = plog.read(p.fetch_offset, max_bytes, isolation, min_one_message=min_one)
        records = data.records
        if isolation is FetchIsolation.TXN_COMMITTED:
            # No records, nothing to filter: skip reading the segments' transaction indexes.
            served = data.fetch_offset_metadata.segment_base_offset
            aborted = plog.collect_aborted_transactions(p.fetch_offset, plog.aborted_transactions_upper_bound(served)) \
                if records is not None and records.size else []
            out["aborted_transactions"] = [{"producer_id": a.producer_id, "first_offset": a.first_offset}
                                           for a in aborted]
        _attach(out, records, state)
    except RemoteReadQueueFullError as e:
        log.warning("fetch of %s from remote storage refused: %s", tp, e)
        state.errors = True
        out["error_code"] = ErrorCode.KAFKA_STORAGE_ERROR
    except KafkaError as e:
        state.errors = True
        out["error_code"] = e.error_code
        plog = replicas.local_log(tp)
        if plog is not None:
            out.update(high_watermark=plog.high_watermark, last_stable_offset=plog.last_stable_offset,
                       log_start_offset=plog.log_start_offset)
    return out


def _redirect(ctx: RequestContext, name: str, partition: int, state: _FetchState, out: dict[str, Any]) -> bool:
    """A consumer in another rack than this broker's: answer the partition with a live replica in its rack
    as ``preferred_read_replica`` (True), or False to serve it here."""
    view = ctx.broker.view.partition(name, partition)
    preferred = preferred_read_replica(name, partition, view.replicas, state.racks(ctx), state.client_rack,
                                       ctx.broker.node_id)
    if preferred == NO_BROKER:
        return False
    info = ctx.broker.topics.get(name)
    assert info is not None
    out["preferred_read_replica"] = preferred
    state.redirected.append((out, TopicIdPartition(info.topic_id, name, partition)))
    return True


def _read_for_follower(ctx: RequestContext, tp: TopicPartition, plog: PartitionLog, p: Any, replica_id: int,
                       budget: int, state: _FetchState, out: dict[str, Any]) -> dict[str, Any]:
    """A follower's fetch: up to the log end (not the HW), never from the remote tier (it is told
    OFFSET_MOVED_TO_TIERED_STORAGE and starts its local log at ours), and its fetch offset is its
    log end offset: the leader's ISR and high watermark move with it. A follower whose last epoch diverges
    from ours is answered where our history of it ends (:func:`_diverging_epoch`) and nothing else: its fetch
    offset is not a position in our log, so it moves neither the ISR nor the high watermark."""
    diverging = _diverging_epoch(plog, p)
    if diverging is not None:
        out.update(diverging_epoch=diverging, high_watermark=plog.high_watermark,
                   last_stable_offset=plog.last_stable_offset, log_start_offset=plog.log_start_offset)
        return out
    if plog.log_start_offset <= p.fetch_offset < plog.local_log_start_offset:
        state.errors = True
        out.update(error_code=ErrorCode.OFFSET_MOVED_TO_TIERED_STORAGE, high_watermark=plog.high_watermark,
                   last_stable_offset=plog.last_stable_offset, log_start_offset=plog.log_start_offset)
        return out
    max_bytes = max(0, min(p.partition_max_bytes, budget))
    diskless = ctx.broker.diskless
    # A switched partition: only its classic part is copied from the leader, the rest is replayed from the WAL
    # (one dict lookup: only this broker's consolidating diskless partitions have an entry)
    classic_end = diskless.classic_end(tp) if diskless is not None else None
    records = None if classic_end is not None and p.fetch_offset >= classic_end else plog.read(
        p.fetch_offset, max_bytes, FetchIsolation.LOG_END, min_one_message=state.bytes == 0,
        upper_bound=classic_end).records
    ctx.broker.replicas.update_follower_fetch(tp, replica_id, p.fetch_offset, getattr(p, "log_start_offset", -1))
    out.update(high_watermark=plog.high_watermark, last_stable_offset=plog.last_stable_offset,
               log_start_offset=plog.log_start_offset)
    quota = ctx.broker.replication_quotas.leader
    if quota.is_throttled(tp):
        part = ctx.broker.replicas.partitions.get(tp)
        if (part is None or replica_id not in part.isr) and quota.is_quota_exceeded():
            state.held_s = quota.throttle_s()
            return out  # Kafka's shouldLeaderThrottle: no records, no error (it counts nothing towards min_bytes)
        if records is not None:
            state.throttled_bytes += records.size
    before = state.bytes
    _attach(out, records, state)
    if state.bytes > before:
        state.replication_bytes[tp.topic] = state.replication_bytes.get(tp.topic, 0) + state.bytes - before
    return out


def _diverging_epoch(plog: PartitionLog, p: Any) -> dict[str, int] | None:
    """KIP-320's truncation on fetch (Kafka's ``Partition.readRecords``): the follower's ``last_fetched_epoch``
    against our epoch history. None when its log is a prefix of ours (it fetches on); else the largest epoch
    we have up to its last one and where that ends, which is where it truncates. An epoch we cannot place, or
    a fetch offset below our log start, is OFFSET_OUT_OF_RANGE (it then asks for our offsets)."""
    last = getattr(p, "last_fetched_epoch", -1)
    if last < 0:  # an empty follower log, or a client that does not say: nothing to check
        return None
    epoch, end = plog.leader_epoch_cache.end_offset_for(last, plog.log_end_offset)
    if epoch < 0 or end < 0:
        raise OffsetOutOfRangeError(f"cannot determine the end offset of the last fetched epoch {last}")
    if p.fetch_offset < plog.log_start_offset:
        raise OffsetOutOfRangeError(f"fetch offset {p.fetch_offset} is below the log start offset "
                                    f"{plog.log_start_offset}")
    if epoch < last or end < p.fetch_offset:
        return {"epoch": epoch, "end_offset": end}
    return None


def _attach(out: dict[str, Any], records: Any, state: _FetchState) -> None:
    """A local read's slice: read into the response when small, spliced (sendfile) otherwise."""
    if records is not None and records.size:
        if records.size < INLINE_BYTES:
            out["records"] = records.read()
        else:
            splice = Splice(records, records.size)
            state.splices.append(splice)
            out["records"] = splice.marker
        state.bytes += records.size


def _refused_topics(ctx: RequestContext, request: Any, requested: list[Any]) -> frozenset[str] | None:
    """The names of the requested topics this fetch may not read, or None for "every topic" (a follower
    without CLUSTER_ACTION). Empty at once without an authorizer: the hot path pays one attribute lookup."""
    if not ctx.broker.authorization.enabled:
        return frozenset()
    if replica_id_of(request) >= 0:
        return frozenset() if ctx.authorize_cluster(AclOperation.CLUSTER_ACTION) else None
    topics = ctx.broker.topics
    names = set()
    for t in requested:
        name = getattr(t, "topic", None)
        if name is None:
            info = topics.by_id(getattr(t, "topic_id", None))
            name = info.name if info is not None else None
        if name is not None:
            names.add(name)
    return frozenset(n for n in names if not ctx.authorize(AclOperation.READ, ResourceType.TOPIC, n))


def _error_parts(t: Any, code: int) -> list[dict[str, Any]]:
    return [{"partition_index": p.partition, "error_code": code, "high_watermark": -1,
             "last_stable_offset": -1, "log_start_offset": -1, "aborted_transactions": None,
             "preferred_read_replica": -1, "records": b""} for p in t.partitions]


def _one_pass(ctx: RequestContext, request: Any, requested: list[Any], isolation: FetchIsolation,
              refused: frozenset[str] | None = frozenset()) -> tuple[list[dict[str, Any]], _FetchState,
                                                                    list[TopicPartition]]:
    """Read ``requested`` (the request's topics, or its fetch session's) once."""
    topics = ctx.broker.topics
    state = _FetchState()
    replica_id = replica_id_of(request)
    state.client_rack = getattr(request, "rack_id", None) or None
    max_bytes = getattr(request, "max_bytes", 0x7FFFFFFF)
    responses = []
    tps = []
    for t in requested:
        name = getattr(t, "topic", None)
        topic_id = getattr(t, "topic_id", None)
        info = topics.get(name) if name is not None else topics.by_id(topic_id)
        if refused is None or (refused and (name if name is not None else info.name if info else None) in refused):
            # not state.errors: as in Kafka, the partitions it may read still long-poll
            parts = _error_parts(t, ErrorCode.TOPIC_AUTHORIZATION_FAILED)
        elif info is None:
            code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION if name is not None else ErrorCode.UNKNOWN_TOPIC_ID
            state.errors = True
            parts = _error_parts(t, code)
        else:
            parts = []
            for p in t.partitions:
                budget = max(0, max_bytes - state.bytes - state.remote_reserved)
                parts.append(_read_partition(ctx, info.name, p, isolation, budget, state, replica_id))
                tps.append(TopicPartition(info.name, p.partition))
        responses.append({"topic": name if name is not None else (info.name if info else ""),
                          "topic_id": info.topic_id if info else topic_id, "partitions": parts})
    return responses, state, tps


async def _complete_diskless_reads(ctx: RequestContext, state: _FetchState, read_committed: bool,
                                   max_bytes: int) -> None:
    """One coordinator query for every diskless partition of the pass, then their range reads at once."""
    diskless = ctx.broker.diskless
    assert diskless is not None
    try:
        if not diskless.started:  # a diskless topic created through another broker a moment ago
            await diskless.open_for_requests()
        reads = await diskless.fetch([req for _, req in state.diskless], max(0, max_bytes - state.bytes),
                                     read_committed)
    except KafkaError as e:
        log.warning("diskless fetch failed: %s", e)
        state.errors = True
        for out, _ in state.diskless:
            out["error_code"] = e.error_code
        return
    replicas = ctx.broker.replicas
    for (out, req), read in zip(state.diskless, reads, strict=True):
        out.update(error_code=read.error, high_watermark=read.high_watermark,
                   last_stable_offset=read.last_stable_offset, log_start_offset=read.log_start_offset)
        if read.error == ErrorCode.OFFSET_OUT_OF_RANGE and req.offset < read.log_start_offset:
            _below_wal(ctx, replicas, out, req)
        if out["error_code"]:
            state.errors = True
            continue
        if read_committed:
            out["aborted_transactions"] = [{"producer_id": a.producer_id, "first_offset": a.first_offset}
                                           for a in read.aborted_transactions]
        _attach_bytes(out, read.records, state)


async def _coordinator_watermarks(ctx: RequestContext, entries: list[tuple[dict[str, Any], TopicIdPartition]]
                                  ) -> None:
    """The partition's high watermark, last stable offset and log start for diskless partitions served from
    the consolidated replica: a consumer must not take the replica's end (behind the coordinator's while
    consolidation catches up) for the partition's (a premature end-of-partition, a wrong lag). Also those
    answered with a preferred read replica (Kafka sends the partition's watermarks with it)."""
    diskless = ctx.broker.diskless
    assert diskless is not None
    try:
        infos = await diskless.log_infos_now([(tip.topic_id, tip.partition) for _, tip in entries])
    except KafkaError as e:
        log.warning("diskless watermarks unavailable: %s", e)
        return
    for (out, _), info in zip(entries, infos, strict=True):
        if info.error == ErrorCode.NONE:
            cross = info.remote_log_start_offset
            out.update(high_watermark=info.high_watermark, last_stable_offset=info.last_stable_offset,
                       log_start_offset=info.log_start_offset if cross is None else cross)


def _below_wal(ctx: RequestContext, replicas: Any, out: dict[str, Any], req: FindBatchRequest) -> None:
    """An offset below the WAL's start (pruned after tiering) but maybe not below the partition's cross-tier
    log start: only a replica, which reads the remote tier, can tell and serve it. A broker without one sends
    the client to the partition's leader (NOT_LEADER_OR_FOLLOWER: it refreshes its metadata); a replica whose
    consolidation has not caught up yet answers nothing for now (the consumer fetches again)."""
    info = ctx.broker.topics.by_id(req.topic_id)
    plog = replicas.local_log(TopicPartition(info.name, req.partition)) if info is not None else None
    if plog is None:
        out["error_code"] = ErrorCode.NOT_LEADER_OR_FOLLOWER
    elif req.offset >= plog.log_start_offset:
        out.update(error_code=ErrorCode.NONE, log_start_offset=plog.log_start_offset)
    else:
        out["log_start_offset"] = plog.log_start_offset


def _attach_bytes(out: dict[str, Any], records: bytes | memoryview, state: _FetchState) -> None:
    """Records read into memory (remote tier, diskless): spliced into the response frame when large, so
    the body is never copied again."""
    size = len(records)
    if size >= INLINE_BYTES:
        splice = Splice(records, size)
        state.splices.append(splice)
        out["records"] = splice.marker
    elif size:
        out["records"] = bytes(records)
    state.bytes += size


async def _wait_for_data(ctx: RequestContext, tps: list[TopicPartition], diskless: bool, wait_s: float) -> None:
    """Until a local partition of the fetch changes or (diskless partitions) a WAL object is committed."""
    if not diskless:
        await ctx.broker.replicas.wait_for_data(tps, wait_s)
        return
    assert ctx.broker.diskless is not None
    waits = {asyncio.ensure_future(ctx.broker.replicas.wait_for_data(tps, wait_s)),
             asyncio.ensure_future(ctx.broker.diskless.wait_for_commit(wait_s))}
    _, pending = await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
    for task in pending:
        task.cancel()
    await asyncio.gather(*pending, return_exceptions=True)


async def _complete_remote_reads(ctx: RequestContext, state: _FetchState) -> None:
    """Kafka's DelayedRemoteFetch: wait for every remote read, at most ``remote.fetch.max.wait.ms``."""
    rlm = ctx.broker.remote_log_manager
    assert rlm is not None
    futures = {future for _, _, future in state.remote}
    _, pending = await asyncio.wait(futures, timeout=rlm.config.fetch_max_wait_ms / 1000)
    for out, plog, future in state.remote:
        if future in pending:
            future.cancel()
            rlm.stats.remote.DelayedRemoteFetchExpiresPerSec.mark()
            # Kafka answers an expired remote read with empty records, no error. When the last remote
            # read failed on the store, say so (retriable) instead of letting the consumer poll in silence.
            if rlm.reader is not None and rlm.reader.store_error is not None:
                out["error_code"] = ErrorCode.KAFKA_STORAGE_ERROR
            continue
        try:
            result = future.result()
        except KafkaError as e:
            out["error_code"] = e.error_code
            continue
        except RemoteStorageNotReadyError:
            out["error_code"] = ErrorCode.REPLICA_NOT_AVAILABLE
            continue
        except Exception as e:
            log.warning("remote read of %s-%d failed: %s: %s", plog.topic_partition.topic,
                        plog.topic_partition.partition, type(e).__name__, e)
            out["error_code"] = ErrorCode.KAFKA_STORAGE_ERROR
            continue
        _attach_bytes(out, result.records, state)
        if result.aborted_txns is not None:
            aborted = list(result.aborted_txns)
            if not result.aborted_txns_complete:  # the rest lives in the local segments
                aborted += plog.collect_aborted_transactions(result.first_batch_offset, result.upper_bound_offset)
            out["aborted_transactions"] = [{"producer_id": a.producer_id, "first_offset": a.first_offset}
                                           for a in aborted]


@handles(FETCH)
async def fetch(ctx: RequestContext, request: Any) -> Any:
    isolation = FetchIsolation.TXN_COMMITTED if getattr(request, "isolation_level", 0) == READ_COMMITTED \
        else FetchIsolation.HIGH_WATERMARK
    if replica_id_of(request) >= 0:
        isolation = FetchIsolation.LOG_END
    max_wait_s = max(0.0, request.max_wait.total_seconds())
    started = time.monotonic()
    deadline = started + max_wait_s
    min_bytes = request.min_bytes
    sessions = ctx.broker.fetch_sessions
    session = sessions.context(request, ctx.version, replica_id_of(request) >= 0, ctx.broker.clock.milliseconds())
    if session.error:
        return ctx.respond(throttle_time=0, error_code=session.error, session_id=0, responses=[])
    refused = _refused_topics(ctx, request, session.topics)
    while True:
        responses, state, tps = _one_pass(ctx, request, session.topics, isolation, refused)
        if state.diskless:
            # Inkless's floor (diskless.fetch.max.wait.ms, min bytes 1): an empty diskless answer costs a
            # coordinator query, so a consumer polling without waiting is made to wait a little
            diskless = ctx.broker.diskless
            assert diskless is not None
            deadline = max(deadline, started + diskless.dc.fetch_max_wait_ms / 1000)
            min_bytes = max(min_bytes, 1)
            await _complete_diskless_reads(ctx, state, isolation is FetchIsolation.TXN_COMMITTED,
                                           getattr(request, "max_bytes", 0x7FFFFFFF))
        if state.consolidated or state.redirected:
            await _coordinator_watermarks(ctx, state.consolidated + state.redirected)
        if state.remote:
            await _complete_remote_reads(ctx, state)
            break
        remaining = deadline - time.monotonic()
        if state.bytes >= min_bytes or state.errors or remaining <= 0 or not tps or state.redirected \
                or ctx.broker.shutting_down:
            break
        # A partition held back by the leader quota is looked at again once the quota allows it (Kafka's
        # DelayedFetch waits for max_wait, which makes a throttled copy run below its rate)
        wait = remaining if state.held_s is None else min(remaining, max(state.held_s, _MIN_WAIT_S))
        await _wait_for_data(ctx, tps, bool(state.diskless), wait)
    replicated = sum(state.replication_bytes.values())
    if state.bytes > replicated:  # Kafka counts followers' bytes in ReplicationBytesOutPerSec only
        ctx.broker.stats.topics.BytesOutPerSec.mark(None, state.bytes - replicated)
    for topic, n in state.replication_bytes.items():
        ctx.broker.stats.topics.ReplicationBytesOutPerSec.mark(topic, n)
    if state.throttled_bytes:  # KafkaApis: the answer's throttled partitions count against the leader quota
        ctx.broker.replication_quotas.leader.record(state.throttled_bytes)
    session_id, responses = sessions.finish(session, responses, ctx.broker.clock.milliseconds())
    body = ctx.respond(throttle_time=0, error_code=0, session_id=session_id, responses=responses)
    return Spliced(body, state.splices) if state.splices else body
