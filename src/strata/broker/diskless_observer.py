"""A broker without a replica of ``__diskless_metadata`` follows it as a consumer: the coordinator's observer.

``__diskless_metadata`` has three replicas (``diskless.metadata.topic.replication.factor``); a larger cluster
still has every broker take produce and fetch for diskless partitions, so every broker needs the coordinator's
state. A broker that holds no replica reads the partition's committed records from its leader with consumer
Fetches (replica id -1, so the leader serves only what its high watermark covers, and the observer is never
part of the ISR: it cannot slow a commit) and the journal applies them to its own SQLite state, exactly as a
replica's journal applies its local log. Its writes are forwarded to the leader as every non-leader's are.

Records are kept in memory only until the journal applied them; a broker that starts behind the leader's log
start (the topic truncated below a snapshot) is told the log start, and its journal restores the newest
snapshot from the store, as a replica's does.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

from strata.client.async_wire import AsyncBrokerConnection
from strata.client.security import ClientSecurity
from strata.client.wire import ADMIN_CLIENT_ID
from strata.diskless.metadata_log import DISKLESS_METADATA_TOPIC
from strata.errors import ErrorCode
from strata.protocol.records import decode_batch, iter_batches

log = logging.getLogger("strata.diskless")

FETCH, FETCH_VERSION = 1, 12
FETCH_MAX_BYTES = 8 * 1024 * 1024
POLL_WAIT_MS = 500
RETRY_S = 0.5


class DisklessMetadataObserver:
    """The committed records of ``__diskless_metadata-0``, fetched from its leader (see the module doc).
    ``view``: the cluster view (the partition's leader, brokers' addresses)."""

    def __init__(self, view: Any, security: ClientSecurity | None = None) -> None:
        self._view = view
        self._security = security
        self._records: deque[tuple[int, bytes | None, bytes | None]] = deque()
        self._next = 0  # the next offset to fetch: everything below it that is kept is committed
        self._log_start = 0
        self._arrived = asyncio.Event()
        self._conn: tuple[int, AsyncBrokerConnection] | None = None
        self._task: asyncio.Task[None] | None = None

    @property
    def running(self) -> bool:
        return self._task is not None and not self._task.done()

    def start(self, from_offset: int) -> None:
        """Fetch from ``from_offset`` on (the journal's next command) until :meth:`stop`."""
        if self.running:
            return
        self._next = max(from_offset, 0)
        self._records.clear()
        self._task = asyncio.get_running_loop().create_task(self._run(), name="diskless-metadata-observer")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None
        self._drop_connection()

    # -- the CommandLog side (read by the journal through MetadataTopicLog) -----------------------

    def high_watermark(self) -> int:
        return self._next

    def log_start_offset(self) -> int:
        return self._log_start

    def read(self, start: int, end: int) -> Iterator[tuple[int, bytes | None, bytes | None]]:
        records = self._records
        while records and records[0][0] < start:  # applied already: not needed again
            records.popleft()
        for record in list(records):
            if record[0] >= end:
                break
            yield record

    async def wait(self, timeout_s: float) -> None:
        """Until records arrive (or the leader's log start moved), at most ``timeout_s``."""
        try:
            await asyncio.wait_for(self._arrived.wait(), timeout_s)
        except TimeoutError:
            pass

    # -- fetching ------------------------------------------------------------------------------------

    async def _run(self) -> None:
        while True:
            try:
                leader = self._view.partition(DISKLESS_METADATA_TOPIC, 0).leader
                if leader < 0:
                    await asyncio.sleep(RETRY_S)
                    continue
                await self._fetch_once(leader)
            except asyncio.CancelledError:
                raise
            except Exception as e:  # noqa: BLE001 - a leader moving or gone: fetch again, from the new one
                log.debug("observing %s: %s", DISKLESS_METADATA_TOPIC, e)
                self._drop_connection()
                await asyncio.sleep(RETRY_S)

    def _connection(self, broker_id: int) -> AsyncBrokerConnection:
        if self._conn is not None and self._conn[0] == broker_id:
            return self._conn[1]
        self._drop_connection()
        broker = self._view.broker(broker_id)
        if broker is None:
            raise ConnectionError(f"broker {broker_id} is not registered")
        conn = AsyncBrokerConnection(broker["host"], broker["port"], client_id=ADMIN_CLIENT_ID, timeout_s=10.0,
                                     security=self._security)
        self._conn = (broker_id, conn)
        return conn

    def _drop_connection(self) -> None:
        if self._conn is not None:
            _, conn = self._conn
            self._conn = None
            conn.close()

    async def _fetch_once(self, leader: int) -> None:
        conn = self._connection(leader)
        response = await conn.call(
            FETCH, FETCH_VERSION, timeout_s=POLL_WAIT_MS / 1000 + 10, replica_id=-1,
            max_wait=timedelta(milliseconds=POLL_WAIT_MS), min_bytes=1, max_bytes=FETCH_MAX_BYTES, isolation_level=0,
            session_id=0, session_epoch=-1, forgotten_topics_data=[], rack_id="",
            topics=[{"topic": DISKLESS_METADATA_TOPIC, "partitions": [
                {"partition": 0, "current_leader_epoch": -1, "fetch_offset": self._next, "last_fetched_epoch": -1,
                 "log_start_offset": -1, "partition_max_bytes": FETCH_MAX_BYTES}]}])
        if response.error_code:
            raise ConnectionError(f"fetch answered error {int(response.error_code)}")
        p = response.responses[0].partitions[0]
        code = int(p.error_code)
        if code == ErrorCode.OFFSET_OUT_OF_RANGE and self._next < int(p.log_start_offset):
            # truncated below a snapshot: the journal restores it and goes on from the log start
            self._log_start = int(p.log_start_offset)
            self._next = self._log_start
            self._records.clear()
            self._wake()
            return
        if code:
            raise ConnectionError(f"fetch of {DISKLESS_METADATA_TOPIC}-0 from broker {leader}: "
                                  f"{ErrorCode(code).name}")
        self._log_start = int(p.log_start_offset)
        data = p.records or b""
        got = 0
        for position, header in iter_batches(data):
            if header.next_offset <= self._next:
                continue
            for r in decode_batch(data, position).records:
                if r.offset >= self._next:
                    self._records.append((r.offset, r.key, r.value))
                    got += 1
            self._next = max(self._next, header.next_offset)  # control batches too: offsets stay contiguous
        if got or data:
            self._wake()

    def _wake(self) -> None:
        self._arrived.set()
        self._arrived = asyncio.Event()
