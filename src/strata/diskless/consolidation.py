"""Consolidation: diskless batches replayed into Kafka's per-partition logs, which KIP-405 then tiers.

WAL objects are small, shared by every partition a broker received in 250 ms, and one long-lived partition
pins a whole object. So the WAL is only a short-lived buffer (Inkless's consolidation, KIP-1165): every
replica of a diskless partition replays its committed batches, in offset order, into an ordinary local log
(its "leader" is the coordinator plus ranged reads of the objects, the way a follower's leader is another
broker). From there everything Kafka's tiered storage does applies unchanged: the partition leader's
RemoteLogManager copies rolled segments to the remote tier and writes ``__remote_log_metadata``, local
retention trims the local copy, the Spark source reads remote segments straight from the store, and
``.txnindex`` is built from the replayed markers.

Once the leader's remote tier holds a batch, the leader asks the coordinator to *prune* the WAL below its
highest tiered offset; a WAL object whose every batch is pruned (or expired) is then deleted by the file
cleaner. The leader also reports its log start (remote retention, DeleteRecords) as the coordinator's
cross-tier log start, which ``ListOffsets(EARLIEST)`` answers on every broker.

Rules that keep every replica equal to the coordinator:

* a replica appends only committed batches (the coordinator's high watermark), stamped with the
  partition's diskless leader epoch (0, or a switched partition's epoch at its seal; the field is outside
  the CRC), so its high watermark is its log end;
* a replica behind the WAL start (a wiped disk, a new replica, a long outage after pruning) restarts its
  local log at the WAL start: everything below is in the remote tier, which any replica serves;
* a replica ahead of the coordinator (only after the coordinator's state went back, which should never
  happen) is truncated to it, loudly.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

from strata.common import TopicPartition
from strata.diskless.coordinator.api import (
    AdvanceLogStartRequest,
    FindBatchRequest,
    InitDisklessLogRequest,
    InitProducer,
    IsolationLevel,
    LogInfo,
    PruneBatchesRequest,
    TopicIdPartition,
)
from strata.diskless.reader import PartitionRead
from strata.errors import ErrorCode, KafkaError
from strata.log.partition_log import PartitionLog

log = logging.getLogger("strata.diskless.consolidation")


Query = Callable[[Callable[[Any], Any]], Awaitable[Any]]
Execute = Callable[[str, Any], Awaitable[Any]]
Read = Callable[[Sequence[Any], int], Awaitable[list[PartitionRead]]]


@dataclass(slots=True)
class ConsolidationStats:
    batches: int = 0
    bytes: int = 0
    restarts: int = 0
    seals: int = 0
    prune_requests: int = 0
    batches_pruned: int = 0
    lag_offsets: int = 0  # offsets committed but not yet consolidated here, over the hosted partitions (last run)


@dataclass(frozen=True, slots=True)
class Hosted:
    """A diskless partition with a replica (a local log) on this broker."""

    tp: TopicPartition
    topic_id: uuid.UUID
    log: PartitionLog
    leads: bool
    leader_epoch: int = 0  # the classic leadership's epoch (a switch's seal stamps it on the diskless batches)
    classic_following: bool = False  # a replica fetcher still copies the classic part from the leader


def seal_request(h: Hosted) -> InitDisklessLogRequest | None:
    """The leader's seal of a partition the coordinator does not know yet: a classic partition switched to
    diskless (KIP-1150), or a new diskless one whose creation did not reach the coordinator. The diskless log
    starts at the classic log's end once every in-sync replica has it (high watermark = log end; no classic
    append comes any more: produce goes to the WAL), with the classic producers' states and the leader's epoch.
    None while the followers catch up."""
    plog = h.log
    if plog.high_watermark != plog.log_end_offset:
        return None
    producers = tuple(
        InitProducer(e.producer_id, e.producer_epoch, e.coordinator_epoch,
                     tuple((b.first_seq, b.last_seq, b.first_offset, b.timestamp) for b in e.batch_metadata),
                     e.current_txn_first_offset)
        for e in plog.producer_state.producers.values() if e.producer_epoch >= 0)
    epoch = max(h.leader_epoch, plog.leader_epoch_cache.latest_epoch or 0)
    return InitDisklessLogRequest(h.topic_id, h.tp.topic, h.tp.partition, plog.log_end_offset,
                                  plog.log_start_offset, epoch, producers)


class Consolidator:
    """Replays committed diskless batches into the hosted replicas' local logs (see the module doc).

    ``hosted``: this broker's replicas of diskless partitions; ``query``/``execute``: the coordinator;
    ``read``: the diskless reader (coordinates to servable bytes); ``notify``: wakes fetches waiting on a
    local log. One run handles every hosted partition with one ``find_batches`` call."""

    def __init__(self, hosted: Callable[[], list[Hosted]], query: Query, execute: Execute, read: Read,
                 notify: Callable[[TopicPartition], None], now_ms: Callable[[], int], max_bytes: int,
                 prune_interval_ms: int, stop_following: Callable[[TopicPartition], None] = lambda tp: None,
                 consolidating: set[TopicPartition] | None = None) -> None:
        """``consolidating``: where the partitions consolidating here are recorded (the replica manager keeps
        them in the ISR)."""
        self._hosted = hosted
        self._consolidating = consolidating if consolidating is not None else set()
        # Where each hosted partition's diskless log starts (its seal; 0 for a topic born diskless), as the
        # coordinator said: a leader serves its followers' fetches only below it (``classic_end``)
        self._diskless_starts: dict[TopicPartition, int] = {}
        self._stop_following = stop_following
        self._query = query
        self._execute = execute
        self._read = read
        self._notify = notify
        self._now_ms = now_ms
        self.max_bytes = max_bytes
        self.prune_interval_ms = prune_interval_ms
        self._last_prune_ms = -prune_interval_ms
        self.stats = ConsolidationStats()

    async def run_once(self) -> int:
        """Consolidate what the coordinator committed since the last run; the leaders' pruning once per
        ``prune_interval_ms``. Returns the number of batches appended (0: caught up)."""
        hosted = self._hosted()
        self._consolidating.intersection_update(h.tp for h in hosted)  # a topic deleted, or no longer hosted here
        for tp in self._diskless_starts.keys() - self._consolidating:
            del self._diskless_starts[tp]
        if not hosted:
            return 0
        parts = [TopicIdPartition(h.topic_id, h.tp.partition) for h in hosted]
        infos: list[LogInfo] = await self._query(lambda s: s.get_logs(parts))
        wanted: list[tuple[Hosted, LogInfo]] = []
        lag = 0
        seals = []
        for h, info in zip(hosted, infos, strict=True):
            if info.error != ErrorCode.NONE:
                if info.error == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION and h.leads:
                    seal = seal_request(h)
                    if seal is not None:
                        seals.append(seal)
                continue
            self._consolidating.add(h.tp)
            self._diskless_starts[h.tp] = info.diskless_start_offset
            if h.classic_following:
                if h.log.log_end_offset < info.diskless_start_offset:
                    continue  # a switched partition's follower still copying the classic part up to the seal
                self._stop_following(h.tp)
            self._align(h, info)
            if h.log.log_end_offset < info.high_watermark:
                wanted.append((h, info))
                lag += info.high_watermark - h.log.log_end_offset
        self.stats.lag_offsets = lag
        if seals:
            created = await self._execute("init_diskless_log", seals)
            self.stats.seals += sum(1 for r in created if r.created)
            for seal, r in zip(seals, created, strict=True):  # before this leader consolidates past it
                if r.created:
                    self._diskless_starts[TopicPartition(seal.topic_name, seal.partition)] = seal.seal_offset
            for r in created:
                if r.created:
                    log.info("%s-%d: diskless from now on (classic-to-diskless switch sealed)", r.topic_id, r.partition)
        appended = 0
        if wanted:
            appended = await self._consolidate(wanted)
        now = self._now_ms()
        if now - self._last_prune_ms >= self.prune_interval_ms:
            self._last_prune_ms = now
            await self._prune([(h, i) for h, i in zip(hosted, infos, strict=True) if h.leads and not i.error])
        return appended

    def classic_end(self, tp: TopicPartition) -> int | None:
        """Where a switched partition's classic part ends (its seal), once the coordinator has it: a leader
        serves its followers' fetches only below it, so that a follower still fetching when the seal lands
        (it stops once its own coordinator replica has the seal) copies the classic part only and replays the
        rest from the WAL like every replica. None while unsealed (the whole log is classic)."""
        return self._diskless_starts.get(tp)

    def _align(self, h: Hosted, info: LogInfo) -> None:
        """Bring the local log's ends within the coordinator's: restart it at the WAL start when it fell
        below it, truncate it when it is ahead, and follow the cross-tier log start (DeleteRecords)."""
        plog = h.log
        if plog.log_end_offset > info.high_watermark:
            log.error("%s: the local log ends at %d past the diskless coordinator's high watermark %d: "
                      "truncating to it", h.tp, plog.log_end_offset, info.high_watermark)
            plog.truncate_to(info.high_watermark)
        cross = info.remote_log_start_offset if info.remote_log_start_offset is not None else info.log_start_offset
        if plog.log_end_offset < info.log_start_offset:
            log.info("%s: local log ends at %d, the WAL starts at %d: restarting it there (below: remote tier)",
                     h.tp, plog.log_end_offset, info.log_start_offset)
            plog.restart_above_remote_tier(info.log_start_offset, min(cross, info.log_start_offset),
                                           info.leader_epoch)
            self.stats.restarts += 1
        elif cross > plog.log_start_offset:
            plog.maybe_increment_log_start_offset(cross)

    async def _consolidate(self, wanted: list[tuple[Hosted, LogInfo]]) -> int:
        requests = [FindBatchRequest(h.topic_id, h.tp.partition, h.log.log_end_offset, self.max_bytes)
                    for h, _ in wanted]
        found = await self._query(lambda s: s.find_batches(requests, fetch_max_bytes=self.max_bytes * len(requests),
                                                           isolation_level=IsolationLevel.READ_UNCOMMITTED))
        reads = await self._read(found, self._now_ms())
        appended = 0
        for (h, _), read in zip(wanted, reads, strict=True):
            if read.error != ErrorCode.NONE or not read.records:
                if read.error not in (ErrorCode.NONE, ErrorCode.OFFSET_OUT_OF_RANGE):
                    log.warning("consolidating %s from %d: %s (%s)", h.tp, h.log.log_end_offset, read.error.name,
                                read.message or "retried")
                continue
            records = read.records  # offsets and leader epoch 0 already written by the reader
            try:
                info = h.log.append_as_follower(records)
            except KafkaError as e:
                log.warning("consolidating %s at %d failed: %s", h.tp, h.log.log_end_offset, e)
                continue
            h.log.update_high_watermark(h.log.log_end_offset)
            self._notify(h.tp)
            self.stats.batches += len(info.batches)
            self.stats.bytes += len(records)
            appended += len(info.batches)
        return appended

    async def _prune(self, led: list[tuple[Hosted, LogInfo]]) -> None:
        """The leader's part: WAL batches its remote tier holds are pruned; its log start becomes the
        coordinator's cross-tier log start."""
        prune, advance = [], []
        for h, info in led:
            tiered = h.log.highest_offset_in_remote_storage
            if tiered >= info.log_start_offset:
                prune.append(PruneBatchesRequest(h.topic_id, h.tp.partition, tiered))
            start = h.log.log_start_offset
            if info.remote_log_start_offset is None or start > info.remote_log_start_offset:
                advance.append(AdvanceLogStartRequest(h.topic_id, h.tp.partition, min(start, info.high_watermark)))
        if advance:  # first: once the WAL start moves, EARLIEST must already answer the cross-tier start
            await self._execute("advance_log_start", advance)
        if prune:
            results = await self._execute("prune_batches", prune)
            self.stats.prune_requests += 1
            pruned = sum(r.batches_deleted for r in results if not r.error)
            self.stats.batches_pruned += pruned
            if pruned:
                log.info("pruned %d diskless batches already in the remote tier", pruned)

    async def run(self, interval_ms: int, committed: Callable[[float], Awaitable[None]]) -> None:
        """Consolidate after each commit this broker sees (at most every ``interval_ms``) until cancelled."""
        while True:
            try:
                while await self.run_once():
                    await asyncio.sleep(0)  # more to do: keep going, but let the loop breathe
            except asyncio.CancelledError:
                raise
            except Exception as e:  # noqa: BLE001 - the store or coordinator away: retried next round
                log.warning("diskless consolidation: %s", e)
            await asyncio.sleep(interval_ms / 1000)
            await committed(max(interval_ms, 1000) / 1000)
