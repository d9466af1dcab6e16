"""``__remote_log_metadata`` as the topic-based RLMM sees it: the broker's own log, no client.

Kafka's TopicBasedRemoteLogMetadataManager produces and consumes the topic through Kafka clients
over the broker's listener, then polls (every 50 ms) until its consumer has read its own write.
On a single node the log is right here: an append returns once the record is in the log (this
node is the whole ISR, so that is ``acks=all``), and the RLMM applies it to its cache at once.

Log access must happen on the event loop thread (the log's only writer); the RLMM calls from
worker threads, so each call is marshalled onto the loop and waited for.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Awaitable, Callable, Iterator
from datetime import timedelta
from typing import TYPE_CHECKING, Any, TypeVar

from strata.broker.cluster_services import ClusterView, TopicAdmin
from strata.broker.topics import TopicRegistry
from strata.client.async_wire import AsyncBrokerConnection
from strata.client.security import ClientSecurity
from strata.client.wire import ADMIN_CLIENT_ID, WireError
from strata.common import TopicPartition
from strata.errors import ApiError, CorruptRecordError, ErrorCode, KafkaStorageError
from strata.log.partition_log import PartitionLog
from strata.log.producer_state import AppendOrigin
from strata.log.reading import iter_log_records
from strata.protocol.records import BatchBuilder, decode_batch, iter_batches
from strata.replication.replica_manager import ReplicaManager
from strata.tiered.metadata.keys import new_topic_configs

if TYPE_CHECKING:
    from strata.broker.topics import TopicInfo

log = logging.getLogger(__name__)

REMOTE_LOG_METADATA_TOPIC = "__remote_log_metadata"
CALL_TIMEOUT_S = 120.0  # remote.log.metadata.consume.wait.ms's default

T = TypeVar("T")
MetadataRecord = tuple[int, bytes | None, bytes | None]  # (offset, key, value): value None is a tombstone


class BrokerMetadataTopic:
    """Implements ``strata.tiered.metadata.topic_based.MetadataTopic`` over the broker's log."""

    def __init__(self, replicas: ReplicaManager, topics: TopicRegistry,
                 create_topic: Callable[[str, int, dict[str, str]], TopicInfo],
                 loop: asyncio.AbstractEventLoop) -> None:
        """``create_topic``: the broker's local topic creation (single node: no controller to ask)."""
        self._replicas = replicas
        self._topics = topics
        self._create_topic = create_topic
        self._loop = loop
        self._loop_thread = threading.get_ident()

    def _on_loop(self, fn: Callable[[], T]) -> T:
        if threading.get_ident() == self._loop_thread:
            return fn()

        async def call() -> T:
            return fn()

        return asyncio.run_coroutine_threadsafe(call(), self._loop).result(CALL_TIMEOUT_S)

    def _log(self, partition: int):  # type: ignore[no-untyped-def]
        return self._replicas.get_log(TopicPartition(REMOTE_LOG_METADATA_TOPIC, partition))

    def ensure_created(self, num_partitions: int, retention_ms: int, replication_factor: int = 1) -> int:
        def create() -> int:
            info = self._topics.get(REMOTE_LOG_METADATA_TOPIC)
            if info is None:  # compacted (KIP-1266); an existing topic keeps its configs until migrated
                info = self._create_topic(REMOTE_LOG_METADATA_TOPIC, num_partitions, new_topic_configs(retention_ms))
            return info.partitions

        return self._on_loop(create)

    def append(self, partition: int, value: bytes | None, key: bytes | None = None) -> int:
        def write() -> int:
            builder = BatchBuilder()
            builder.append(value, key=key)
            tp = TopicPartition(REMOTE_LOG_METADATA_TOPIC, partition)
            try:
                info = self._replicas.append(tp, builder.build(), AppendOrigin.COORDINATOR)
            except OSError as e:
                raise KafkaStorageError(f"append to {tp} failed: {e}") from e
            return info.last_offset

        return self._on_loop(write)

    def read(self, partition: int, from_offset: int) -> Iterator[MetadataRecord]:
        def read_all() -> list[MetadataRecord]:
            plog = self._log(partition)
            plog.update_high_watermark(plog.log_end_offset)
            records = [(r.offset, r.key, r.value) for r in iter_log_records(plog, from_offset)]
            return _with_position(records, from_offset, plog.log_end_offset)

        return iter(self._on_loop(read_all))

    def end_offset(self, partition: int) -> int:
        return self._on_loop(lambda: self._log(partition).log_end_offset)

    def start_offset(self, partition: int) -> int:
        return self._on_loop(lambda: self._log(partition).log_start_offset)


# -- a cluster --------------------------------------------------------------------------------------

PRODUCE, FETCH, LIST_OFFSETS = 0, 1, 2
PRODUCE_VERSION, FETCH_VERSION, LIST_OFFSETS_VERSION = 9, 12, 7
_RETRIABLE = frozenset({
    ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.LEADER_NOT_AVAILABLE, ErrorCode.NOT_ENOUGH_REPLICAS,
    ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND, ErrorCode.REQUEST_TIMED_OUT, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
    ErrorCode.FENCED_LEADER_EPOCH, ErrorCode.UNKNOWN_LEADER_EPOCH, ErrorCode.KAFKA_STORAGE_ERROR,
    ErrorCode.REPLICA_NOT_AVAILABLE})
RETRY_BACKOFF_S = 0.1
SLOW_CALL_WARNING_S = 5.0
FETCH_MAX_BYTES = 8 * 1024 * 1024


class _Retriable(Exception):
    """The partition's leader is moving or behind: try again after a short backoff."""


class ClusterMetadataTopic:
    """``__remote_log_metadata`` as a replicated topic, read and written the way Kafka's RLMM does it
    through its producer and consumer: appends go to the partition's leader with ``acks=all``, reads
    return committed records only (up to the leader's high watermark). When this broker leads the
    partition both happen on its own log; otherwise over the inter-broker connection to the leader.

    Reading only committed records matters: a follower's cache must never apply an event that a leader
    change could truncate away. Every call hops onto the event loop (the RLMM calls from its threads)
    and retries retriable errors (a leader moving, an ISR below ``min.insync.replicas``) until
    ``CALL_TIMEOUT_S``; a Produce retried after a lost answer may append an event twice, which the
    cache refuses as an invalid transition (logged) - Kafka's RLMM producer is not idempotent either.
    """

    create_in_background = True  # the topic needs registered brokers: created by the RLMM's loading thread

    def __init__(self, *, node_id: int, replicas: ReplicaManager, view: ClusterView, admin: TopicAdmin,
                 topics: TopicRegistry, loop: asyncio.AbstractEventLoop,
                 security: ClientSecurity | None = None) -> None:
        self._node_id = node_id
        self._replicas = replicas
        self._view = view
        self._admin = admin
        self._topics = topics
        self._loop = loop
        self._connections: dict[tuple[int, bool], tuple[AsyncBrokerConnection, asyncio.Lock]] = {}
        self._security = security

    # -- plumbing --------------------------------------------------------------------------------

    def _call(self, make: Callable[[], Awaitable[T]], timeout_s: float = CALL_TIMEOUT_S) -> T:
        async def attempt() -> T:
            started = self._loop.time()
            deadline = started + timeout_s
            warned = False
            while True:
                try:
                    return await make()
                except (_Retriable, WireError) as e:
                    now = self._loop.time()
                    if now + RETRY_BACKOFF_S >= deadline:
                        raise KafkaStorageError(f"{REMOTE_LOG_METADATA_TOPIC}: {e}") from None
                    if not warned and now - started >= SLOW_CALL_WARNING_S:
                        warned = True
                        log.warning("%s: still retrying after %.0f s: %s", REMOTE_LOG_METADATA_TOPIC, now - started, e)
                    else:
                        log.debug("%s: retrying: %s", REMOTE_LOG_METADATA_TOPIC, e)
                    await asyncio.sleep(RETRY_BACKOFF_S)

        return asyncio.run_coroutine_threadsafe(attempt(), self._loop).result(timeout_s + 5)

    def _leader(self, partition: int) -> int:
        leader = self._view.partition(REMOTE_LOG_METADATA_TOPIC, partition).leader
        if leader < 0:
            raise _Retriable(f"partition {partition} has no leader")
        return leader

    def _local_leader_log(self, partition: int) -> PartitionLog | None:
        tp = TopicPartition(REMOTE_LOG_METADATA_TOPIC, partition)
        part = self._replicas.partitions.get(tp)
        return part.log if part is not None and part.is_leader else None

    async def _request(self, broker_id: int, api_key: int, version: int, timeout_s: float, *, polling: bool = False,
                       **fields: Any) -> Any:
        """One request on this broker's connection to ``broker_id``. The consumer task's long polls use a
        connection of their own: sharing one would queue every write's read-back behind a poll (each upload
        waited for three of them - 600 ms a segment - before this was split)."""
        key = (broker_id, polling)
        entry = self._connections.get(key)
        if entry is None:
            broker = self._view.broker(broker_id)
            if broker is None:
                raise _Retriable(f"broker {broker_id} is not registered")
            conn = AsyncBrokerConnection(broker["host"], broker["port"], client_id=ADMIN_CLIENT_ID, timeout_s=10.0,
                                         security=self._security)
            entry = self._connections[key] = (conn, asyncio.Lock())
        conn, lock = entry
        async with lock:  # one request at a time per connection
            return await conn.call(api_key, version, timeout_s=timeout_s, **fields)

    @staticmethod
    def _check(code: int, what: str) -> None:
        if code in _RETRIABLE:
            raise _Retriable(f"{what}: {ErrorCode(code).name}")
        if code:
            raise KafkaStorageError(f"{REMOTE_LOG_METADATA_TOPIC} {what} failed with error {code}")

    # -- MetadataTopic ---------------------------------------------------------------------------

    def ensure_created(self, num_partitions: int, retention_ms: int, replication_factor: int = 3) -> int:
        async def create() -> int:
            info = self._topics.get(REMOTE_LOG_METADATA_TOPIC)
            if info is None:
                try:
                    info = await self._admin.create_topic(  # compacted (KIP-1266); an existing topic is kept
                        REMOTE_LOG_METADATA_TOPIC, num_partitions, replication_factor,
                        new_topic_configs(retention_ms))
                except ApiError as e:
                    if e.error_code != ErrorCode.TOPIC_ALREADY_EXISTS:
                        raise
                    raise _Retriable("created by another broker, not visible here yet") from None
            return info.partitions

        return self._call(create, timeout_s=30.0)

    def append(self, partition: int, value: bytes | None, key: bytes | None = None) -> int:
        tp = TopicPartition(REMOTE_LOG_METADATA_TOPIC, partition)

        async def produce() -> int:
            builder = BatchBuilder()
            builder.append(value, key=key)
            batch = builder.build()
            leader = self._leader(partition)
            if leader == self._node_id:
                try:
                    info = self._replicas.append(tp, batch, AppendOrigin.COORDINATOR, required_acks=-1)
                except ApiError as e:
                    self._check(e.error_code, f"append to {tp}")
                    raise
                except OSError as e:
                    raise KafkaStorageError(f"append to {tp} failed: {e}") from e
                code = await self._replicas.wait_for_replication(tp, info.last_offset + 1, CALL_TIMEOUT_S / 4)
                self._check(code, f"append to {tp}")
                return info.last_offset
            response = await self._request(
                leader, PRODUCE, PRODUCE_VERSION, CALL_TIMEOUT_S / 4 + 5, transactional_id=None, acks=-1,
                timeout=timedelta(seconds=CALL_TIMEOUT_S / 4),
                topic_data=[{"name": tp.topic, "partition_data": [{"index": partition, "records": batch}]}])
            p = response.responses[0].partition_responses[0]
            self._check(int(p.error_code), f"produce to {tp} on broker {leader}")
            return int(p.base_offset)

        return self._call(produce)

    def read(self, partition: int, from_offset: int) -> Iterator[MetadataRecord]:
        async def read_all() -> list[MetadataRecord]:
            out: list[MetadataRecord] = []
            offset = from_offset
            while True:
                got, high_watermark, next_offset = await self._read_once(partition, offset, 0)
                out.extend(got)
                if next_offset >= high_watermark or next_offset <= offset:
                    return out
                offset = next_offset

        return iter(self._call(read_all))

    def poll(self, positions: dict[int, int], max_wait_ms: int) -> dict[int, list[MetadataRecord]]:
        """New committed records of several partitions from their positions: one long-polling Fetch per
        leader broker, local reads for the partitions led here (the RLMM's consumer task)."""
        async def poll_all() -> dict[int, list[MetadataRecord]]:
            by_leader: dict[int, list[int]] = {}
            for p in positions:
                try:
                    by_leader.setdefault(self._leader(p), []).append(p)
                except _Retriable:
                    continue
            out: dict[int, list[MetadataRecord]] = {}
            local = [p for p in by_leader.pop(self._node_id, []) if self._local_leader_log(p) is not None]
            for p in local:
                out[p] = (await self._read_once(p, positions[p], 0))[0]
            if by_leader:
                wait = 0 if any(out.values()) else max_wait_ms
                results = await asyncio.gather(*(self._fetch(b, {p: positions[p] for p in ps}, wait)
                                                 for b, ps in by_leader.items()), return_exceptions=True)
                for result in results:
                    if isinstance(result, BaseException):
                        raise result
                    for p, (records, _hw, _next) in result.items():
                        out[p] = records
            elif not any(out.values()) and local:
                await self._replicas.wait_for_data(
                    [TopicPartition(REMOTE_LOG_METADATA_TOPIC, p) for p in local], max_wait_ms / 1000)
            return {p: r for p, r in out.items() if r}

        return self._call(poll_all, timeout_s=max_wait_ms / 1000 + 30)

    def end_offset(self, partition: int) -> int:
        """The high watermark: what a consumer can read (the snapshot's replay bound)."""
        return self._call(lambda: self._list_offset(partition, -1))

    def start_offset(self, partition: int) -> int:
        return self._call(lambda: self._list_offset(partition, -2))

    # -- reads -----------------------------------------------------------------------------------

    async def _read_once(self, partition: int, offset: int, wait_ms: int) -> tuple[list[MetadataRecord], int, int]:
        """(records, high watermark, next offset) of one read from the leader: the next offset follows the
        batches read, not the records (a compacted batch may have none left; see ``_with_position``)."""
        plog = self._local_leader_log(partition)
        if plog is not None:
            high_watermark = plog.high_watermark
            got = [(r.offset, r.key, r.value) for r in iter_log_records(plog, offset, high_watermark)]
            next_offset = max(offset, high_watermark)
            return _with_position(got, offset, next_offset), high_watermark, next_offset
        leader = self._leader(partition)
        if leader == self._node_id:  # named leader, not taken up yet (a restart): ask again, not ourselves
            raise _Retriable(f"partition {partition}: this broker has not taken up its leadership yet")
        return (await self._fetch(leader, {partition: offset}, wait_ms))[partition]

    async def _fetch(self, leader: int, positions: dict[int, int], wait_ms: int
                     ) -> dict[int, tuple[list[MetadataRecord], int, int]]:
        response = await self._request(
            leader, FETCH, FETCH_VERSION, wait_ms / 1000 + CALL_TIMEOUT_S / 4, polling=wait_ms > 0, replica_id=-1,
            max_wait=timedelta(milliseconds=wait_ms), min_bytes=1, max_bytes=FETCH_MAX_BYTES, isolation_level=0,
            session_id=0, session_epoch=-1, forgotten_topics_data=[], rack_id="",
            topics=[{"topic": REMOTE_LOG_METADATA_TOPIC, "partitions": [
                {"partition": p, "current_leader_epoch": -1, "fetch_offset": offset, "last_fetched_epoch": -1,
                 "log_start_offset": -1, "partition_max_bytes": FETCH_MAX_BYTES} for p, offset in positions.items()]}])
        if response.error_code:
            raise _Retriable(f"fetch answered error {int(response.error_code)}")
        out: dict[int, tuple[list[MetadataRecord], int, int]] = {}
        for t in response.responses:
            for p in t.partitions:
                index = int(p.partition_index)
                if p.error_code == ErrorCode.OFFSET_OUT_OF_RANGE:
                    # Retention passed our position: what it deleted is gone for everyone; go on from the start.
                    out[index] = ([], int(p.high_watermark), max(positions[index], int(p.log_start_offset)))
                    continue
                self._check(int(p.error_code), f"fetch of {REMOTE_LOG_METADATA_TOPIC}-{index} from broker {leader}")
                records, next_offset = _decode_records(p.records or b"", positions[index])
                out[index] = (records, int(p.high_watermark), next_offset)
        return out

    async def _list_offset(self, partition: int, spec: int) -> int:
        plog = self._local_leader_log(partition)
        if plog is not None:
            return plog.high_watermark if spec == -1 else plog.log_start_offset
        leader = self._leader(partition)
        if leader == self._node_id:
            raise _Retriable(f"partition {partition}: this broker has not taken up its leadership yet")
        response = await self._request(leader, LIST_OFFSETS, LIST_OFFSETS_VERSION, CALL_TIMEOUT_S / 4, replica_id=-1,
                                       isolation_level=0, topics=[{"name": REMOTE_LOG_METADATA_TOPIC, "partitions": [
                                           {"partition_index": partition, "current_leader_epoch": -1,
                                            "timestamp": spec}]}])
        p = response.topics[0].partitions[0]
        self._check(int(p.error_code), f"ListOffsets of {REMOTE_LOG_METADATA_TOPIC}-{partition}")
        return int(p.offset)

    def close(self) -> None:
        for conn, _lock in self._connections.values():
            conn.close()
        self._connections.clear()


def _decode_records(data: bytes, from_offset: int) -> tuple[list[MetadataRecord], int]:
    """(offset, key, value) of the data records at or after ``from_offset`` in whole fetched batches (tombstones
    included), and the offset after the last batch."""
    out: list[MetadataRecord] = []
    next_offset = from_offset
    try:
        for position, header in iter_batches(data):
            if header.next_offset <= from_offset:
                continue
            next_offset = max(next_offset, header.next_offset)
            if header.is_control:
                continue
            out.extend((r.offset, r.key, r.value) for r in decode_batch(data, position).records
                       if r.offset >= from_offset)
    except CorruptRecordError as e:
        raise _Retriable(f"a fetched batch is corrupt: {e}") from None
    return _with_position(out, from_offset, next_offset), next_offset


def _with_position(records: list[MetadataRecord], from_offset: int, next_offset: int) -> list[MetadataRecord]:
    """``records``, ending with ``(next_offset - 1, None, None)`` when the read went past its last record.

    Compaction leaves batches with no record (the cleaner keeps the last batch of a cleaned range, emptied)
    and gaps; a reader that positions itself after the last record it applied would ask for such a range
    again and again, each answer returned at once, never waiting: the consumer task would spin. The marker
    (no key, no value: nothing to apply, the RLMM's ``_decode`` gives None) moves its position past it, as a
    Kafka consumer's position follows the batches it fetched."""
    last = records[-1][0] if records else from_offset - 1
    if next_offset - 1 > last:
        records.append((next_offset - 1, None, None))
    return records
