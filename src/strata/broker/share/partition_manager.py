"""Kafka's ``SharePartitionManager``: the share-partitions this broker leads, and the fetch, acknowledge and
release operations ShareFetch and ShareAcknowledge run on them.

A share-partition (group, topic, partition) is created on the first fetch, on the partition's leader: its
state is read back from the share coordinator (ReadShareGroupState, which also fences older leaders) and a
never-read partition starts where ``share.auto.offset.reset`` says. From then on the pure state machine
(:class:`strata.coordinator.share.share_partition.SharePartition`) decides what is acquired, acknowledged
and released; this module reads the log for it, persists each change with WriteShareGroupState before it
takes effect (one write at a time per share-partition, so the coordinator sees them in order), runs the
acquisition-lock timers and wakes fetches waiting for records to become available.

A leadership change (the partition's leader epoch moved, or this broker no longer leads it) drops the
share-partition: the next fetch re-reads the state under the new epoch. A write fenced by the coordinator
(FENCED_LEADER_EPOCH / FENCED_STATE_EPOCH) drops it too.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any
from uuid import UUID

from strata.broker.share.log_reader import Records, ShareRead, read_for_share
from strata.broker.share.sessions import ShareSessionCache
from strata.common import TopicPartition
from strata.config.group_config import parse_share_auto_offset_reset
from strata.coordinator.share.share_partition import AcquiredRecords, PendingUpdate, SharePartition
from strata.errors import ErrorCode, KafkaError, OffsetOutOfRangeError
from strata.tiered.api import TopicIdPartition

if TYPE_CHECKING:
    from strata.broker.services import BrokerServices
    from strata.broker.share.persister import SharePersister

log = logging.getLogger("strata.share")

Key = tuple[str, UUID, int]  # (group id, topic id, partition)
_FENCED = frozenset({ErrorCode.FENCED_LEADER_EPOCH, ErrorCode.FENCED_STATE_EPOCH})


def persister_error(code: int) -> int:
    """What a client is told when the share coordinator refused or could not be reached (Kafka's
    ``SharePartition.fetchPersisterError``): the coordinator's own errors become COORDINATOR_NOT_AVAILABLE
    (retriable), a fenced leader epoch NOT_LEADER_OR_FOLLOWER; anything unexpected UNKNOWN_SERVER_ERROR."""
    if code in (ErrorCode.NOT_COORDINATOR, ErrorCode.COORDINATOR_NOT_AVAILABLE,
                ErrorCode.COORDINATOR_LOAD_IN_PROGRESS):
        return ErrorCode.COORDINATOR_NOT_AVAILABLE
    if code == ErrorCode.FENCED_LEADER_EPOCH:
        return ErrorCode.NOT_LEADER_OR_FOLLOWER
    if code in (ErrorCode.GROUP_ID_NOT_FOUND, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, ErrorCode.FENCED_STATE_EPOCH):
        return code
    return ErrorCode.UNKNOWN_SERVER_ERROR


class ShareFetchError(Exception):
    """A partition-level answer: ``error_code`` with a message for the client."""

    def __init__(self, error_code: int, message: str | None = None) -> None:
        super().__init__(message or ErrorCode(error_code).name)
        self.error_code = error_code
        self.message = message


@dataclass(slots=True)
class _Entry:
    key: Key
    tp: TopicPartition
    leader_epoch: int
    sp: SharePartition
    fetch_lock: asyncio.Lock = field(default_factory=asyncio.Lock)  # one acquisition at a time (Kafka)
    write_lock: asyncio.Lock = field(default_factory=asyncio.Lock)  # writes reach the coordinator in order
    timer: asyncio.TimerHandle | None = None
    timer_deadline: int | None = None
    dropped: bool = False


@dataclass(frozen=True, slots=True)
class FetchedPartition:
    records: Records  # the acquired batches: bytes, or a slice of a segment file (sent with sendfile)
    acquired: list[AcquiredRecords]


@dataclass(slots=True)
class ShareStats:
    acquired_records: int = 0
    acknowledged_records: int = 0
    released_records: int = 0
    lock_expiries: int = 0
    write_failures: int = 0


class SharePartitionManager:
    def __init__(self, broker: BrokerServices, persister: SharePersister) -> None:
        self.broker = broker
        self.persister = persister
        cfg = broker.config.share_groups
        self.sessions = ShareSessionCache(cfg.max_share_sessions)
        self._entries: dict[Key, _Entry] = {}
        self._initializing: dict[Key, asyncio.Task[_Entry]] = {}
        self._changed = asyncio.Event()  # records may have become available (release, expiry, commit)
        self._tasks: set[asyncio.Task[Any]] = set()
        self.stats = ShareStats()

    # -- clock, settings ---------------------------------------------------------------------------

    def _now(self) -> int:
        return self.broker.clock.milliseconds()

    def _group_settings(self, group_id: str) -> Any:
        store = self.broker.group_configs
        return store.settings(group_id) if store is not None else None

    def lock_duration_ms(self, group_id: str) -> int:
        settings = self._group_settings(group_id)
        if settings is not None:
            return int(settings.share_record_lock_duration_ms)
        return int(self.broker.config.share_groups.record_lock_duration_ms)

    def read_committed(self, group_id: str) -> bool:
        settings = self._group_settings(group_id)
        return settings is not None and settings.share_isolation_level == "read_committed"

    # -- the share-partitions ----------------------------------------------------------------------

    def _leader_log(self, tp: TopicPartition) -> Any:
        try:
            return self.broker.replicas.get_log(tp)
        except KafkaError as e:
            raise ShareFetchError(e.error_code, str(e)) from None

    async def entry(self, group_id: str, topic_id: UUID, name: str, partition: int) -> _Entry:
        """The share-partition, initialized (ShareFetchError with the partition's error otherwise)."""
        key = (group_id, topic_id, partition)
        tp = TopicPartition(name, partition)
        self._leader_log(tp)  # NOT_LEADER_OR_FOLLOWER / UNKNOWN_TOPIC_OR_PARTITION
        epoch = self.broker.replicas.leader_epoch_of(name, partition)
        found = self._entries.get(key)
        if found is not None:
            if found.leader_epoch == epoch:
                return found
            self._drop(found, "leader epoch moved")
        task = self._initializing.get(key)
        if task is None:
            task = asyncio.get_running_loop().create_task(self._initialize(key, tp, epoch))
            self._initializing[key] = task
            task.add_done_callback(lambda _t: self._initializing.pop(key, None))
        return await asyncio.shield(task)

    async def _initialize(self, key: Key, tp: TopicPartition, leader_epoch: int) -> _Entry:
        group_id, topic_id, partition = key
        read = await self.persister.read(group_id, topic_id, partition, leader_epoch)
        if read.error_code:
            why = ErrorCode(read.error_code).name
            raise ShareFetchError(persister_error(read.error_code),
                                  f"reading the state of share-partition {group_id}:{tp}: {why}")
        plog = self._leader_log(tp)
        start = read.start_offset
        if start < 0:
            start = await self._reset_offset(group_id, topic_id, tp, plog)
        cfg = self.broker.config.share_groups
        sp = SharePartition(group_id, topic_id, partition, delivery_count_limit=cfg.delivery_count_limit,
                            max_in_flight=cfg.partition_max_record_locks,
                            lock_duration_ms=self.lock_duration_ms(group_id))
        batches = [b for b in read.state_batches if b.last_offset >= start]
        if batches and batches[0].first_offset < start:
            b = batches[0]
            batches[0] = type(b)(start, b.last_offset, b.delivery_state, b.delivery_count)
        sp.initialize(start, batches, read.state_epoch, leader_epoch)
        if plog.log_start_offset > sp.start_offset:
            sp.update_log_start(plog.log_start_offset)
        entry = _Entry(key, tp, leader_epoch, sp)
        self._entries[key] = entry
        log.info("share-partition %s:%s started at offset %d (state epoch %d, leader epoch %d)", group_id, tp,
                 sp.start_offset, read.state_epoch, leader_epoch)
        return entry

    async def _reset_offset(self, group_id: str, topic_id: UUID, tp: TopicPartition, plog: Any) -> int:
        """Where a share-partition the group never read starts: ``share.auto.offset.reset``."""
        settings = self._group_settings(group_id)
        kind, duration_ms = parse_share_auto_offset_reset(
            settings.share_auto_offset_reset if settings is not None else "latest")
        if kind == "earliest":
            return int(plog.log_start_offset)
        if kind == "latest":
            return int(plog.high_watermark)
        timestamp = self._now() - duration_ms
        found = None
        rlm = self.broker.remote_log_manager
        if rlm is not None and plog.log_start_offset < plog.local_log_start_offset:
            found = await rlm.find_offset_by_timestamp(TopicIdPartition(topic_id, tp.topic, tp.partition), plog,
                                                       timestamp)
        if found is None:
            found = plog.fetch_offset_by_timestamp(timestamp)
        if found is None or found.offset >= plog.high_watermark:
            return int(plog.high_watermark)
        return int(found.offset)

    def _drop(self, entry: _Entry, why: str) -> None:
        if entry.dropped:
            return
        entry.dropped = True
        if entry.timer is not None:
            entry.timer.cancel()
        if self._entries.get(entry.key) is entry:
            del self._entries[entry.key]
        log.info("share-partition %s:%s dropped: %s", entry.key[0], entry.tp, why)

    def on_partition_moved(self, tp: TopicPartition) -> None:
        """This broker no longer leads ``tp`` (or the topic is gone): forget its share-partitions."""
        for entry in [e for e in self._entries.values() if e.tp == tp]:
            self._drop(entry, "no longer the partition's leader")

    def on_topic_deleted(self, topic_id: UUID) -> None:
        for entry in [e for e in self._entries.values() if e.key[1] == topic_id]:
            self._drop(entry, "topic deleted")

    # -- fetch -------------------------------------------------------------------------------------

    async def acquire(self, entry: _Entry, member_id: str, max_bytes: int, max_records: int, batch_size: int,
                      record_limit_mode: bool) -> FetchedPartition:
        """Read the log at the share-partition's next fetch offset and hand what it can to ``member_id``."""
        async with entry.fetch_lock:
            if entry.dropped:
                raise ShareFetchError(ErrorCode.NOT_LEADER_OR_FOLLOWER, "share-partition moved")
            sp = entry.sp
            group_id = entry.key[0]
            sp.lock_duration_ms = self.lock_duration_ms(group_id)
            if not sp.can_acquire():
                return FetchedPartition(b"", [])
            plog = self._leader_log(entry.tp)
            if plog.log_start_offset > sp.start_offset:
                sp.update_log_start(plog.log_start_offset)
            offset = sp.next_fetch_offset()
            read_committed = self.read_committed(group_id)
            tip = TopicIdPartition(entry.key[1], entry.tp.topic, entry.tp.partition)
            try:
                read: ShareRead = await read_for_share(plog, self.broker.remote_log_manager, tip, offset,
                                                       max_bytes, read_committed, max_records)
            except OffsetOutOfRangeError:
                # Kafka's ShareFetchUtils: not passed on; the share-partition jumps to the log start
                sp.update_log_start(plog.log_start_offset)
                return FetchedPartition(b"", [])
            except TimeoutError:
                raise ShareFetchError(ErrorCode.KAFKA_STORAGE_ERROR, "remote read timed out") from None
            if not read.batches:
                return FetchedPartition(b"", [])
            acquired = sp.acquire(member_id, read.offsets(), max_records, batch_size, self._now(),
                                  record_limit_mode, fetch_offset=offset, aborted=read.aborted)
            self._arm(entry)
            if not acquired:
                return FetchedPartition(b"", [])
            self.stats.acquired_records += sum(a.last_offset - a.first_offset + 1 for a in acquired)
            return FetchedPartition(read.slice(acquired[0].first_offset, acquired[-1].last_offset), acquired)

    # -- acknowledge, release ----------------------------------------------------------------------

    async def acknowledge(self, entry: _Entry, member_id: str,
                          batches: Sequence[tuple[int, int, Sequence[int]]]) -> int:
        """Apply and persist a member's acknowledgements; the partition's acknowledge error code."""
        if entry.dropped:
            return ErrorCode.NOT_LEADER_OR_FOLLOWER
        code, update = entry.sp.acknowledge(member_id, batches, self._now())
        if code or update is None:
            return code
        count = sum(b.last_offset - b.first_offset + 1 for b in update.state_batches)
        code = await self._persist(entry, update)
        if not code:
            self.stats.acknowledged_records += count
        self._arm(entry)
        return code

    async def release(self, entry: _Entry, member_id: str) -> int:
        if entry.dropped:
            return ErrorCode.NONE
        update = entry.sp.release_member(member_id)
        count = sum(b.last_offset - b.first_offset + 1 for b in update.state_batches)
        code = await self._persist(entry, update)
        if not code:
            self.stats.released_records += count
        return code

    def release_member(self, group_id: str, member_id: str, then_forget: bool = False) -> None:
        """In the background: give back everything ``member_id`` holds on this broker (``then_forget``: and
        drop the group's share-partitions once that is written)."""
        entries = [e for e in self._entries.values() if e.key[0] == group_id]
        if entries or then_forget:
            self._spawn(self._release_all(entries, member_id, then_forget))

    async def _release_all(self, entries: list[_Entry], member_id: str, then_forget: bool) -> None:
        await asyncio.gather(*(self.release(e, member_id) for e in entries))
        if then_forget:
            for entry in entries:
                self._drop(entry, "its share group is empty")

    def close_session(self, group_id: str, member_id: str) -> None:
        """The member's share session ended (epoch -1, or its connection closed): its records go back
        (Kafka's ``onMemberLeave``), and once no session of its group is left on this broker the group's
        share-partitions are forgotten (``onGroupEmpty``), so the next member reads the state the coordinator
        then holds (offsets reset or deleted meanwhile). A member that merely leaves the group keeps its
        records until its final acknowledgement or its locks expire, as in Kafka: the leave heartbeat and the
        final acknowledgement travel on different connections, and releasing at the first would hand
        records it is still acknowledging to another member."""
        self.sessions.close(group_id, member_id)
        empty = not any(s.group_id == group_id for s in self.sessions.sessions())
        self.release_member(group_id, member_id, then_forget=empty)

    def connection_closed(self, connection_id: str) -> None:
        for session in self.sessions.of_connection(connection_id):
            self.close_session(session.group_id, session.member_id)

    async def _persist(self, entry: _Entry, update: PendingUpdate) -> int:
        """WriteShareGroupState, then commit (or roll back) the change; wakes waiting fetches."""
        sp = entry.sp
        if not update.needs_write:
            sp.commit(update)
            return ErrorCode.NONE
        group_id, topic_id, partition = entry.key
        async with entry.write_lock:
            code = await self.persister.write(group_id, topic_id, partition, update.state_epoch, update.leader_epoch,
                                              update.start_offset, update.delivery_complete_count,
                                              update.state_batches)
        if code:
            self.stats.write_failures += 1
            sp.rollback(update, self._now())
            log.warning("persisting share-partition %s:%s failed: %s", group_id, entry.tp, ErrorCode(code).name)
            if code in _FENCED:
                self._drop(entry, ErrorCode(code).name)
            code = persister_error(code)
        else:
            sp.commit(update)
        self._wake()
        return code

    # -- acquisition locks ---------------------------------------------------------------------------

    def _arm(self, entry: _Entry) -> None:
        """Keep one timer per share-partition at its earliest lock deadline."""
        if entry.dropped:
            return
        deadline = entry.sp.next_lock_deadline()
        if deadline == entry.timer_deadline:
            return
        if entry.timer is not None:
            entry.timer.cancel()
            entry.timer = None
        entry.timer_deadline = deadline
        if deadline is None:
            return
        delay = max(0.0, (deadline - self._now()) / 1000)
        entry.timer = asyncio.get_running_loop().call_later(delay, self._locks_due, entry)

    def _locks_due(self, entry: _Entry) -> None:
        entry.timer = None
        entry.timer_deadline = None
        if entry.dropped:
            return
        self._spawn(self._expire(entry))

    async def _expire(self, entry: _Entry) -> None:
        update = entry.sp.expire_locks(self._now())
        if update is not None:
            self.stats.lock_expiries += 1
            await self._persist(entry, update)
        self._arm(entry)

    # -- waiting -------------------------------------------------------------------------------------

    def _wake(self) -> None:
        self._changed.set()
        self._changed = asyncio.Event()

    async def wait(self, tps: list[TopicPartition], timeout_s: float) -> None:
        """Until a fetched partition's log changes or records become available again, or ``timeout_s``."""
        if timeout_s <= 0:
            return
        changed = self._changed
        waits = {asyncio.ensure_future(self.broker.replicas.wait_for_data(tps, timeout_s)),
                 asyncio.ensure_future(changed.wait())}
        _, pending = await asyncio.wait(waits, timeout=timeout_s, return_when=asyncio.FIRST_COMPLETED)
        for task in pending:
            task.cancel()
        await asyncio.gather(*pending, return_exceptions=True)

    # -- housekeeping --------------------------------------------------------------------------------

    def _spawn(self, coro: Any) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._done)

    def _done(self, task: asyncio.Task[Any]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.warning("share-partition task failed: %s", task.exception())

    async def stop(self) -> None:
        for entry in list(self._entries.values()):
            if entry.timer is not None:
                entry.timer.cancel()
        tasks = [*self._tasks, *self._initializing.values()]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self._entries.clear()

    def partitions(self) -> list[SharePartition]:
        return [e.sp for e in self._entries.values()]
