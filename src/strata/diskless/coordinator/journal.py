"""``JournaledControlPlane``: the default diskless coordinator, KIP-1164's topic-based design.

Commands are records of ``__diskless_metadata`` (partition 0), replicated by Strata's own replication;
every replica of that partition applies them, in log order and only once the high watermark covers them,
to its own :class:`SqliteControlPlane`. The partition's leader is the writable coordinator: it appends a
command, waits until it is committed, applies everything up to it and answers with what applying it
returned. Followers apply the same records to the same state (compared by ``state_digest``), so a new leader
serves after replaying what it had not applied yet. Queries (find_batches, list_offsets...) are answered
from the local state on any replica.

Why apply only committed records: an uncommitted tail can be truncated by a leader change; applying it
would put offsets into the state that the next leader never assigned. Why the SQLite state records the
journal offset in the same transaction as each command: a replica killed mid-replay restarts exactly after
the last command it applied, never applying one twice.

One worker thread owns the SQLite connection (SQLite objects stay in the thread that made them, and a
query never blocks the event loop); commands and queries queue on it in order.
"""

from __future__ import annotations

import asyncio
import logging
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Protocol, TypeVar

from strata.diskless.coordinator.commands import Command, CommandFormatError, decode, encode
from strata.diskless.coordinator.sqlite import SqliteControlPlane
from strata.errors import ErrorCode, KafkaError

log = logging.getLogger("strata.diskless.coordinator")

T = TypeVar("T")
COMMIT_TIMEOUT_S = 30.0
RECENT_OUTCOMES = 4096  # a remote append's answer must still be here when its produce response arrives


def _settle(fut: asyncio.Future[Any], outcome: Any) -> None:
    if isinstance(outcome, BaseException):
        fut.set_exception(outcome)
    else:
        fut.set_result(outcome)


class CommandLog(Protocol):
    """``__diskless_metadata`` partition 0 as the coordinator needs it; the broker implements it."""

    async def append(self, key: bytes, value: bytes) -> int:
        """Append one record through the partition's leader (this broker, or another one) and return its
        offset; raise KafkaError when it cannot be appended."""
        ...

    async def wait_committed(self, offset: int, timeout_s: float) -> None:
        """Return once the high watermark is past ``offset``; raise KafkaError when it cannot be."""

    def high_watermark(self) -> int:
        """The offset below which every record is committed (-1 when this broker has no replica)."""
        ...

    def read(self, start: int, end: int) -> Iterator[tuple[int, bytes | None, bytes | None]]:
        """(offset, key, value) of the records in ``[start, end)``."""
        ...

    def log_start_offset(self) -> int:
        """The first offset still in the log (the log is truncated below the latest snapshot)."""
        ...


SnapshotSource = Callable[[int], Awaitable[bytes | None]]
"""The newest snapshot in the store whose applied offset is at least the given one (None: there is none)."""


class CoordinatorUnavailableError(KafkaError):
    """The coordinator's state could not take a command (a replica that failed to apply one stops)."""

    error_code = ErrorCode.COORDINATOR_NOT_AVAILABLE


class JournaledControlPlane:
    def __init__(self, commands: CommandLog, db_path: str, now_ms: Callable[[], int],
                 snapshots: SnapshotSource | None = None) -> None:
        self._log = commands
        self._snapshots = snapshots
        self._db_path = db_path
        self._now_ms = now_ms
        self._thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="diskless-coordinator")
        self._state: SqliteControlPlane | None = None
        self._applied = -1
        self._apply_lock = asyncio.Lock()
        self._waiters: dict[int, asyncio.Future[Any]] = {}
        self._recent: OrderedDict[int, Any] = OrderedDict()  # outcomes of the last commands, by offset
        self._failed: str | None = None
        self.commands_applied = 0

    # -- lifecycle ------------------------------------------------------------------------------

    async def start(self) -> None:
        def open_state() -> int:
            self._state = SqliteControlPlane(self._db_path)
            return self._state.applied_offset()
        self._applied = await self._in_thread(open_state)
        log.info("diskless coordinator state %s: applied up to offset %d", self._db_path, self._applied)

    async def close(self) -> None:
        for fut in self._waiters.values():
            if not fut.done():
                fut.set_exception(CoordinatorUnavailableError("the diskless coordinator is shutting down"))
        self._waiters.clear()
        if self._state is not None:
            state, self._state = self._state, None
            await asyncio.get_running_loop().run_in_executor(self._thread, state.close)
        self._thread.shutdown(wait=True)

    @property
    def applied_offset(self) -> int:
        return self._applied

    # -- the thread -----------------------------------------------------------------------------

    async def _in_thread(self, fn: Callable[[], T]) -> T:
        return await asyncio.get_running_loop().run_in_executor(self._thread, fn)

    async def query(self, fn: Callable[[SqliteControlPlane], T]) -> T:
        """Run a read-only ControlPlane call on the local state (any replica)."""
        if self._failed is not None:
            raise CoordinatorUnavailableError(self._failed)

        def run() -> T:
            if self._state is None:
                raise CoordinatorUnavailableError("the diskless coordinator is not started")
            return fn(self._state)
        return await self._in_thread(run)

    # -- commands -------------------------------------------------------------------------------

    async def execute(self, kind: str, args: Any = None) -> Any:
        """Append a command as leader, wait until it is committed and applied here, return its answer.

        Raises what applying it raised (an InvalidCommitError changes nothing, on every replica alike) or a
        KafkaError from the append. A broker that does not lead the partition appends through its leader and
        takes the answer from its own replica's replay of the record: applying is deterministic, so the
        answer is the leader's."""
        if self._failed is not None:
            raise CoordinatorUnavailableError(self._failed)
        key, value = encode(Command(kind, self._now_ms(), args))
        offset = await self._log.append(key, value)
        fut: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._waiters[offset] = fut
        try:
            if offset > self._applied:  # (a remote append: this replica may have applied it meanwhile)
                await self._log.wait_committed(offset, COMMIT_TIMEOUT_S)
            # Always through the apply lock: a catch-up in flight (the replay loop's) moves the applied offset
            # in the coordinator's thread before it hands out the answers on this loop, so "applied" alone
            # does not mean the answer is out yet.
            await self.catch_up()
            if not fut.done():
                if offset not in self._recent:  # the log moved under us (a truncation) or fell out of memory
                    raise CoordinatorUnavailableError(f"command at offset {offset} was not applied")
                _settle(fut, self._recent[offset])
            return fut.result()
        finally:
            self._waiters.pop(offset, None)

    async def catch_up(self) -> int:
        """Apply every committed record not applied yet; returns the applied offset."""
        async with self._apply_lock:
            end = self._log.high_watermark()
            if self._applied + 1 < end and self._applied + 1 < self._log.log_start_offset():
                await self._restore(self._log.log_start_offset() - 1)
            while self._applied + 1 < end and self._failed is None:
                records = []
                for offset, key, value in self._log.read(self._applied + 1, end):
                    records.append((offset, key, value))
                    if len(records) >= 500:
                        break
                if not records:
                    break
                results = await self._in_thread(lambda rs=records: self._apply_all(rs))  # type: ignore[misc]
                for offset, outcome in results:
                    self._recent[offset] = outcome
                    fut = self._waiters.get(offset)
                    if fut is not None and not fut.done():
                        _settle(fut, outcome)
                while len(self._recent) > RECENT_OUTCOMES:
                    self._recent.popitem(last=False)
            return self._applied

    async def _restore(self, needed: int) -> None:
        """The log no longer holds the next command this replica needs (it was truncated below a snapshot:
        a new or wiped replica, or one down for long): start again from the newest snapshot."""
        data = await self._snapshots(needed) if self._snapshots is not None else None
        if data is None:
            self._failed = (f"diskless coordinator: the commands after offset {self._applied} are gone from the log "
                            f"and no snapshot at offset {needed} or later is in the store")
            log.error("%s", self._failed)
            raise CoordinatorUnavailableError(self._failed)

        def restore() -> int:
            assert self._state is not None
            self._state.restore(data)
            return self._state.applied_offset()
        before, self._applied = self._applied, await self._in_thread(restore)
        log.warning("diskless coordinator state restored from a snapshot at offset %d (had applied %d)",
                    self._applied, before)

    async def snapshot(self) -> tuple[int, bytes]:
        """(applied offset, image) of this replica's state, taken in one step."""
        def take() -> tuple[int, bytes]:
            assert self._state is not None
            return self._state.applied_offset(), self._state.snapshot()
        return await self._in_thread(take)

    def _apply_all(self, records: list[tuple[int, bytes | None, bytes | None]]) -> list[tuple[int, Any]]:
        """In the thread: apply records in order; a command failing as a whole (a KafkaError, the same on
        every replica) is its answer; anything else stops this replica rather than let it diverge."""
        state = self._state
        assert state is not None
        out: list[tuple[int, Any]] = []
        for offset, key, value in records:
            if offset <= self._applied:
                continue
            try:
                command = decode(key, value)
                with state.applying(offset):
                    outcome: Any = command.apply(state)
                state.mark_applied(offset)  # a command that wrote nothing (a no-op) moves the offset too
            except CommandFormatError as e:
                self._failed = f"diskless coordinator stopped at offset {offset}: {e}"
                log.error("%s", self._failed)
                out.append((offset, CoordinatorUnavailableError(self._failed)))
                break
            except KafkaError as e:
                state.mark_applied(offset)
                outcome = e
            except Exception as e:  # noqa: BLE001 - a bug or a broken database: stop, loudly
                self._failed = f"diskless coordinator stopped at offset {offset}: applying it failed: {e!r}"
                log.exception("%s", self._failed)
                out.append((offset, CoordinatorUnavailableError(self._failed)))
                break
            self._applied = offset
            self.commands_applied += 1
            out.append((offset, outcome))
        return out
