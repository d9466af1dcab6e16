"""ZooKeeper for an asyncio broker: the only module that imports kazoo.

kazoo is thread-based: its calls complete on kazoo's own threads and its watches and session
listeners fire there. Everything here turns that into asyncio: ``*_async`` results are linked to
futures of the broker's event loop, and watch/session callbacks are handed to the loop with
``call_soon_threadsafe``, so no code above this module ever runs on a kazoo thread or blocks the
loop on ZooKeeper (a lint test checks that nothing else imports kazoo).

kazoo's exceptions are translated to the small set of errors below, so the controller and the
registration code can be read without knowing kazoo, and so a transaction (``multi``) that fails
raises instead of returning its errors as list items (kazoo's ``commit`` does not raise: pitfall 5
of the replication reference).
"""

from __future__ import annotations

import asyncio
import enum
import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from kazoo import exceptions as kex
from kazoo.client import KazooClient, KazooState
from kazoo.handlers.threading import KazooTimeoutError
from kazoo.recipe.cache import TreeCache, TreeEvent
from kazoo.recipe.watchers import ChildrenWatch, DataWatch

log = logging.getLogger(__name__)

T = TypeVar("T")

# How long kazoo waits between two rounds of connection attempts at most. Its default grows the
# pause exponentially up to an hour, so after a ZooKeeper outage of a minute a broker would come
# back minutes late -- long after its session expired. ZooKeeper's own client retries within a
# second; so does this.
RECONNECT_MAX_DELAY_S = 1.0


class _KazooLog(logging.LoggerAdapter):  # type: ignore[type-arg]
    """kazoo's connection chatter (every dropped connection and failed attempt is a WARNING) one
    level down, at INFO: what matters -- the session suspended, expired, back -- is logged once per
    change by whoever listens to the session states (``ClusterNode``). Errors stay errors."""

    def log(self, level: int, msg: object, *args: Any, **kwargs: Any) -> None:
        super().log(logging.INFO if level == logging.WARNING else level, msg, *args, **kwargs)


_kazoo_log = _KazooLog(logging.getLogger("kazoo.client"), {})


def _client(hosts: str, session_timeout_ms: int) -> KazooClient:
    return KazooClient(hosts=hosts, timeout=session_timeout_ms / 1000, logger=_kazoo_log,
                       connection_retry={"max_tries": -1, "delay": 0.1, "backoff": 2,
                                         "max_delay": RECONNECT_MAX_DELAY_S})


class ZkError(Exception):
    """A ZooKeeper call failed."""


class ZkUnavailableError(ZkError):
    """No ZooKeeper server could be reached (at startup, or the connection was lost mid-call)."""


class ZkNoNodeError(ZkError):
    pass


class ZkNodeExistsError(ZkError):
    pass


class ZkBadVersionError(ZkError):
    """A conditional write lost: the znode changed since it was read (the fencing signal)."""


class ZkNotEmptyError(ZkError):
    pass


class ZkSessionExpiredError(ZkError):
    pass


def _translate(e: BaseException) -> BaseException:
    if isinstance(e, kex.NoNodeError):
        return ZkNoNodeError(str(e) or "no node")
    if isinstance(e, kex.NodeExistsError):
        return ZkNodeExistsError(str(e) or "node exists")
    if isinstance(e, kex.BadVersionError):
        return ZkBadVersionError(str(e) or "bad version")
    if isinstance(e, kex.NotEmptyError):
        return ZkNotEmptyError(str(e) or "not empty")
    if isinstance(e, kex.SessionExpiredError):
        return ZkSessionExpiredError("ZooKeeper session expired")
    if isinstance(e, (kex.ConnectionLoss, kex.ConnectionClosedError, kex.OperationTimeoutError,
                      KazooTimeoutError)):
        return ZkUnavailableError(f"ZooKeeper unavailable: {type(e).__name__} {e}")
    if isinstance(e, kex.ZookeeperError):
        return ZkError(f"{type(e).__name__}: {e}")
    return e


class SessionState(enum.Enum):
    """Kafka's view of the session: CONNECTED; SUSPENDED (disconnected, may come back with the
    session and its ephemerals intact); LOST (expired: ephemerals and raw watches are gone)."""

    CONNECTED = "CONNECTED"
    SUSPENDED = "SUSPENDED"
    LOST = "LOST"


@dataclass(frozen=True, slots=True)
class ZnodeStat:
    version: int
    czxid: int
    mzxid: int
    ephemeral_owner: int
    num_children: int

    @classmethod
    def of(cls, stat: Any) -> ZnodeStat:
        return cls(stat.version, stat.czxid, stat.mzxid, stat.ephemeralOwner, stat.numChildren)


@dataclass(frozen=True, slots=True)
class Op:
    """One operation of a ``multi``: ``create``, ``set``, ``check`` or ``delete``."""

    kind: str
    path: str
    data: bytes = b""
    version: int = -1
    ephemeral: bool = False
    sequence: bool = False

    @classmethod
    def create(cls, path: str, data: bytes = b"", *, ephemeral: bool = False, sequence: bool = False) -> Op:
        return cls("create", path, data, ephemeral=ephemeral, sequence=sequence)

    @classmethod
    def set(cls, path: str, data: bytes, version: int = -1) -> Op:
        return cls("set", path, data, version)

    @classmethod
    def check(cls, path: str, version: int) -> Op:
        return cls("check", path, version=version)

    @classmethod
    def delete(cls, path: str, version: int = -1) -> Op:
        return cls("delete", path, version=version)


@dataclass(frozen=True, slots=True)
class MultiError(ZkError):
    """A ``multi`` that was rolled back: ``index`` is the operation that failed, ``cause`` why."""

    index: int
    op: Op
    cause: BaseException

    def __str__(self) -> str:
        return f"transaction rolled back at op {self.index} ({self.op.kind} {self.op.path}): {self.cause}"


def split_chroot(connect: str) -> tuple[str, str]:
    """``host:port,host:port/chroot`` -> (``host:port,host:port``, ``/chroot`` or ``""``)."""
    slash = connect.find("/")
    if slash < 0:
        return connect, ""
    return connect[:slash], connect[slash:].rstrip("/")


class AsyncZk:
    """One ZooKeeper session, used from one asyncio loop."""

    def __init__(self, connect: str, *, session_timeout_ms: int = 18_000, connection_timeout_ms: int = 18_000,
                 loop: asyncio.AbstractEventLoop | None = None) -> None:
        self.connect = connect
        self.hosts, self.chroot = split_chroot(connect)
        self.session_timeout_ms = session_timeout_ms
        self.connection_timeout_ms = connection_timeout_ms
        self._loop = loop
        self._listeners: list[Callable[[SessionState], None]] = []
        self._zk: KazooClient | None = None
        self._closed = False
        self.state = SessionState.LOST

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        if self._loop is None:
            self._loop = asyncio.get_running_loop()
        return self._loop

    # -- session ------------------------------------------------------------------------------

    async def start(self) -> None:
        """Connect (waiting at most ``connection_timeout_ms``) and create the chroot if missing.

        The chroot is created through a client without it: inside a chroot that does not exist
        every create fails with NoNode (pitfall 10).
        """
        loop = self.loop
        timeout_s = self.connection_timeout_ms / 1000
        if self.chroot:
            root = _client(self.hosts, self.session_timeout_ms)
            try:
                await loop.run_in_executor(None, root.start, timeout_s)
                await loop.run_in_executor(None, root.ensure_path, self.chroot)
            except KazooTimeoutError:
                raise ZkUnavailableError(self._unreachable()) from None
            except kex.KazooException as e:  # e.g. the connection lost again while creating the chroot
                err = _translate(e)
                raise (ZkUnavailableError(f"{self._unreachable()}: {err}") if isinstance(err, ZkUnavailableError)
                       else err) from None
            finally:
                await loop.run_in_executor(None, _stop_and_close, root)
        zk = _client(self.connect, self.session_timeout_ms)
        zk.add_listener(self._on_kazoo_state)
        try:
            await loop.run_in_executor(None, zk.start, timeout_s)
        except KazooTimeoutError:
            await loop.run_in_executor(None, _stop_and_close, zk)
            raise ZkUnavailableError(self._unreachable()) from None
        self._zk = zk
        self.state = SessionState.CONNECTED

    def _unreachable(self) -> str:
        return (f"cannot connect to ZooKeeper at {self.hosts} within zookeeper.connection.timeout.ms="
                f"{self.connection_timeout_ms}")

    @property
    def session_id(self) -> int:
        zk = self._require()
        return int(zk.client_id[0]) if zk.client_id else 0

    def add_state_listener(self, listener: Callable[[SessionState], None]) -> None:
        """``listener(state)`` runs on the event loop at every session state change."""
        self._listeners.append(listener)

    def _on_kazoo_state(self, state: str) -> None:  # kazoo thread: never block here
        mapped = {KazooState.CONNECTED: SessionState.CONNECTED, KazooState.SUSPENDED: SessionState.SUSPENDED,
                  KazooState.LOST: SessionState.LOST}[state]
        if self._closed:
            return
        self.loop.call_soon_threadsafe(self._deliver_state, mapped)

    def _deliver_state(self, state: SessionState) -> None:
        if self._closed or state == self.state:
            return
        self.state = state
        for listener in list(self._listeners):
            try:
                listener(state)
            except Exception:
                log.exception("ZooKeeper session listener failed")

    async def close(self) -> None:
        """End the session: its ephemeral znodes (registration, controller) vanish at once."""
        self._closed = True
        zk, self._zk = self._zk, None
        if zk is not None:
            await self.loop.run_in_executor(None, _stop_and_close, zk)

    def _require(self) -> KazooClient:
        if self._zk is None:
            raise ZkUnavailableError("ZooKeeper client is not started")
        return self._zk

    # -- calls --------------------------------------------------------------------------------

    def _await(self, async_result: Any) -> asyncio.Future[Any]:
        loop = self.loop
        fut: asyncio.Future[Any] = loop.create_future()

        def done(result: Any) -> None:  # kazoo thread
            try:
                value = result.get_nowait()
            except BaseException as e:  # noqa: BLE001 - handed to the loop as it is
                err = _translate(e)
                loop.call_soon_threadsafe(_settle, fut, None, err)
            else:
                loop.call_soon_threadsafe(_settle, fut, value, None)

        async_result.rawlink(done)
        return fut

    async def get(self, path: str) -> tuple[bytes, ZnodeStat]:
        data, stat = await self._await(self._require().get_async(path))
        return data, ZnodeStat.of(stat)

    async def get_or_none(self, path: str) -> tuple[bytes, ZnodeStat] | None:
        try:
            return await self.get(path)
        except ZkNoNodeError:
            return None

    async def exists(self, path: str) -> ZnodeStat | None:
        stat = await self._await(self._require().exists_async(path))
        return None if stat is None else ZnodeStat.of(stat)

    async def children(self, path: str) -> list[str]:
        return list(await self._await(self._require().get_children_async(path)))

    async def create(self, path: str, data: bytes = b"", *, ephemeral: bool = False, sequence: bool = False,
                     makepath: bool = False) -> str:
        return str(await self._await(self._require().create_async(
            path, data, ephemeral=ephemeral, sequence=sequence, makepath=makepath)))

    async def set(self, path: str, data: bytes, version: int = -1) -> ZnodeStat:
        return ZnodeStat.of(await self._await(self._require().set_async(path, data, version)))

    async def delete(self, path: str, version: int = -1) -> None:
        await self._await(self._require().delete_async(path, version))

    async def ensure_path(self, path: str) -> None:
        await self._await(self._require().ensure_path_async(path))

    async def delete_recursive(self, path: str) -> None:
        zk = self._require()
        try:
            await self.loop.run_in_executor(None, lambda: zk.delete(path, recursive=True))
        except kex.NoNodeError:
            return
        except kex.KazooException as e:
            raise _translate(e) from None

    async def multi(self, ops: Sequence[Op]) -> list[Any]:
        """All of ``ops`` or none; raises :class:`MultiError` naming the operation that failed."""
        txn = self._require().transaction()
        for op in ops:
            if op.kind == "create":
                txn.create(op.path, op.data, ephemeral=op.ephemeral, sequence=op.sequence)
            elif op.kind == "set":
                txn.set_data(op.path, op.data, op.version)
            elif op.kind == "check":
                txn.check(op.path, op.version)
            elif op.kind == "delete":
                txn.delete(op.path, op.version)
            else:
                raise ValueError(f"unknown op {op.kind}")
        results = await self._await(txn.commit_async())
        for i, r in enumerate(results):
            if isinstance(r, BaseException) and not isinstance(r, kex.RolledBackError):
                raise MultiError(i, ops[i], _translate(r))
        return [ZnodeStat.of(r) if hasattr(r, "czxid") else r for r in results]

    async def retry(self, fn: Callable[[], Awaitable[T]], *, attempts: int = 10, delay_s: float = 0.2) -> T:
        """Retry an idempotent read (or a conditional write) through a connection loss.

        A connection loss during an ensemble leader change reaches the caller even with kazoo's
        command retry (pitfall 6); the session survives it, so the same call is simply repeated.
        """
        for attempt in range(attempts):
            try:
                return await fn()
            except ZkUnavailableError:
                if attempt == attempts - 1 or self._closed:
                    raise
                await asyncio.sleep(delay_s * (attempt + 1))
        raise AssertionError("unreachable")

    # -- watches ------------------------------------------------------------------------------

    def watch_children(self, path: str, callback: Callable[[list[str]], None]) -> Callable[[], None]:
        """``callback(children)`` on the loop now and at every change (re-armed across sessions).

        Returns a function that stops the watch. The znode must exist.
        """
        stopped = False
        loop = self.loop

        def on_children(children: list[str]) -> bool | None:  # kazoo thread
            if stopped or self._closed:
                return False
            loop.call_soon_threadsafe(_call_unless, lambda: stopped or self._closed, callback, list(children))
            return None

        ChildrenWatch(self._require(), path, on_children)

        def stop() -> None:
            nonlocal stopped
            stopped = True

        return stop

    def watch_data(self, path: str, callback: Callable[[bytes | None, ZnodeStat | None], None]
                   ) -> Callable[[], None]:
        """``callback(data, stat)`` on the loop now and at every change; ``(None, None)`` when absent."""
        stopped = False
        loop = self.loop

        def on_data(data: bytes | None, stat: Any) -> bool | None:  # kazoo thread
            if stopped or self._closed:
                return False
            st = None if stat is None else ZnodeStat.of(stat)
            loop.call_soon_threadsafe(_call_unless, lambda: stopped or self._closed, callback, data, st)
            return None

        DataWatch(self._require(), path, on_data)

        def stop() -> None:
            nonlocal stopped
            stopped = True

        return stop

    def tree_cache(self, path: str, on_event: Callable[[str, str, bytes | None, ZnodeStat | None], None]
                   ) -> Callable[[], None]:
        """Mirror the subtree under ``path``; ``on_event(kind, path, data, stat)`` on the loop.

        ``kind`` is ``added``, ``updated``, ``removed`` or ``initialized`` (every znode present at
        the start has been reported). The cache re-reads the tree after a session loss: ``lost``
        says the session expired (the mirror may be stale: changes made meanwhile were not
        watched), and the next ``initialized`` that the tree was read again on the new session.
        """
        cache = TreeCache(self._require(), path)
        loop = self.loop
        kinds = {TreeEvent.NODE_ADDED: "added", TreeEvent.NODE_UPDATED: "updated",
                 TreeEvent.NODE_REMOVED: "removed", TreeEvent.INITIALIZED: "initialized",
                 TreeEvent.CONNECTION_LOST: "lost"}

        def listener(event: Any) -> None:  # kazoo thread
            kind = kinds.get(event.event_type)
            if kind is None or self._closed:
                return
            if event.event_data is None:
                loop.call_soon_threadsafe(on_event, kind, path, None, None)
                return
            node = event.event_data
            st = None if node.stat is None else ZnodeStat.of(node.stat)
            loop.call_soon_threadsafe(on_event, kind, node.path, node.data, st)

        def fault(e: BaseException) -> None:  # kazoo thread; without a listener kazoo logs a traceback
            log.warning("ZooKeeper mirror of %s: %s (it is read again when the connection is back)", path,
                        _translate(e))

        cache.listen(listener)
        cache.listen_fault(fault)
        cache.start()

        def stop() -> None:
            cache.close()

        return stop


def _settle(fut: asyncio.Future[Any], value: Any, err: BaseException | None) -> None:
    if fut.done():
        return
    if err is not None:
        fut.set_exception(err)
    else:
        fut.set_result(value)


def _call_unless(stopped: Callable[[], bool], fn: Callable[..., None], *args: Any) -> None:
    if stopped():
        return
    try:
        fn(*args)
    except Exception:
        log.exception("ZooKeeper watch callback failed")


def _stop_and_close(zk: KazooClient) -> None:
    try:
        zk.stop()
    finally:
        zk.close()
