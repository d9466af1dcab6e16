"""AsyncZk against a real ZooKeeper: calls, transactions as fencing, watches on the loop, sessions."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

import pytest

from strata.cluster.zk import (
    AsyncZk,
    MultiError,
    Op,
    SessionState,
    ZkBadVersionError,
    ZkNodeExistsError,
    ZkNoNodeError,
    ZkUnavailableError,
    split_chroot,
)
from strata.tools.zookeeper import free_port


def run(coro):  # noqa: ANN001, ANN201
    return asyncio.run(coro)


def test_split_chroot() -> None:
    assert split_chroot("a:1,b:2/x/y") == ("a:1,b:2", "/x/y")
    assert split_chroot("a:1") == ("a:1", "")
    assert split_chroot("a:1/") == ("a:1", "")


def test_calls_in_a_chroot_that_did_not_exist(zk_connect: str) -> None:
    async def main() -> None:
        zk = AsyncZk(zk_connect, session_timeout_ms=4000, connection_timeout_ms=5000)
        await zk.start()
        try:
            await zk.ensure_path("/brokers/ids")
            await zk.create("/brokers/ids/1", b'{"a":1}', ephemeral=True)
            with pytest.raises(ZkNodeExistsError):
                await zk.create("/brokers/ids/1", b"again", ephemeral=True)
            data, stat = await zk.get("/brokers/ids/1")
            assert data == b'{"a":1}' and stat.ephemeral_owner == zk.session_id and stat.version == 0
            assert await zk.children("/brokers/ids") == ["1"]
            assert await zk.get_or_none("/nope") is None
            with pytest.raises(ZkNoNodeError):
                await zk.get("/nope")
            stat = await zk.set("/brokers/ids/1", b"x", version=0)
            assert stat.version == 1
            with pytest.raises(ZkBadVersionError):
                await zk.set("/brokers/ids/1", b"y", version=0)
            seq = await zk.create("/brokers/seq_", b"", sequence=True)
            assert seq.startswith("/brokers/seq_0000000")
            await zk.delete_recursive("/brokers")
            assert await zk.exists("/brokers") is None
        finally:
            await zk.close()

    run(main())


def test_multi_is_all_or_nothing_and_names_the_failed_op(zk_connect: str) -> None:
    """The controller's fencing: a write guarded by a check of /controller_epoch's version."""
    async def main() -> None:
        zk = AsyncZk(zk_connect, session_timeout_ms=4000)
        await zk.start()
        try:
            await zk.create("/controller_epoch", b"1")
            _, epoch = await zk.get("/controller_epoch")
            await zk.create("/state", b"0")
            await zk.multi([Op.check("/controller_epoch", epoch.version), Op.set("/state", b"1", 0)])
            assert (await zk.get("/state"))[0] == b"1"
            await zk.set("/controller_epoch", b"2")  # a newer controller
            with pytest.raises(MultiError) as e:
                await zk.multi([Op.check("/controller_epoch", epoch.version), Op.set("/state", b"zombie", 1),
                                Op.create("/made")])
            assert e.value.index == 0 and isinstance(e.value.cause, ZkBadVersionError)
            assert (await zk.get("/state"))[0] == b"1" and await zk.exists("/made") is None
        finally:
            await zk.close()

    run(main())


def test_watches_run_on_the_event_loop(zk_connect: str) -> None:
    async def main() -> None:
        zk = AsyncZk(zk_connect, session_timeout_ms=4000)
        await zk.start()
        loop_thread = threading.get_ident()
        seen_children: list[list[str]] = []
        seen_data: list[bytes | None] = []
        tree: list[tuple[str, str]] = []
        changed = asyncio.Event()

        def on_children(children: list[str]) -> None:
            assert threading.get_ident() == loop_thread
            seen_children.append(sorted(children))
            changed.set()

        def on_data(data: bytes | None, _stat: object) -> None:
            assert threading.get_ident() == loop_thread
            seen_data.append(data)
            changed.set()

        def on_tree(kind: str, path: str, _data: bytes | None, _stat: object) -> None:
            assert threading.get_ident() == loop_thread
            tree.append((kind, path))
            changed.set()

        async def until(cond) -> None:  # noqa: ANN001
            async with asyncio.timeout(10):
                while not cond():
                    changed.clear()
                    await changed.wait()

        try:
            await zk.ensure_path("/ids")
            zk.watch_children("/ids", on_children)
            stop_data = zk.watch_data("/ids/1", on_data)
            zk.tree_cache("/ids", on_tree)
            await until(lambda: seen_children == [[]] and seen_data == [None] and ("initialized", "/ids") in tree)
            await zk.create("/ids/1", b"one", ephemeral=True)
            await until(lambda: seen_children[-1] == ["1"] and seen_data[-1] == b"one"
                        and ("added", "/ids/1") in tree)
            await zk.set("/ids/1", b"uno")
            await until(lambda: seen_data[-1] == b"uno" and ("updated", "/ids/1") in tree)
            stop_data()
            await zk.delete("/ids/1")
            await until(lambda: seen_children[-1] == [] and ("removed", "/ids/1") in tree)
            assert seen_data[-1] == b"uno"  # stopped: no callback after stop
        finally:
            await zk.close()

    run(main())


def test_unreachable_zookeeper_fails_after_the_connection_timeout(tmp_path: Path) -> None:
    async def main() -> None:
        zk = AsyncZk(f"127.0.0.1:{free_port()}", session_timeout_ms=2000, connection_timeout_ms=800)
        with pytest.raises(ZkUnavailableError, match="zookeeper.connection.timeout.ms=800"):
            await zk.start()

    run(main())


def test_session_lost_is_reported_after_a_pause(zookeeper: object, zk_connect: str) -> None:
    """A frozen ZooKeeper client (here: its server frozen past the session) sees SUSPENDED then LOST,
    and comes back CONNECTED with a new session whose ephemerals are gone."""
    async def main() -> None:
        zk = AsyncZk(zk_connect, session_timeout_ms=1000, connection_timeout_ms=5000)
        await zk.start()
        states: list[SessionState] = []
        reconnected = asyncio.Event()

        def on_state(s: SessionState) -> None:
            states.append(s)
            if s == SessionState.CONNECTED and SessionState.LOST in states:
                reconnected.set()

        zk.add_state_listener(on_state)
        try:
            await zk.create("/eph", b"", ephemeral=True)
            old_session = zk.session_id
            # expire the session from the server side: a second client with the same session id
            # and password closes it (ZooKeeper's documented way to force an expiry in tests)
            from kazoo.client import KazooClient

            sid, pwd = zk._zk.client_id  # type: ignore[union-attr]
            other = KazooClient(hosts=zk_connect, client_id=(sid, pwd))
            await asyncio.get_running_loop().run_in_executor(None, other.start, 10)
            await asyncio.get_running_loop().run_in_executor(None, other.stop)
            other.close()
            async with asyncio.timeout(20):
                await reconnected.wait()
            assert SessionState.LOST in states
            assert zk.session_id != old_session
            assert await zk.exists("/eph") is None
        finally:
            await zk.close()

    run(main())


def test_zookeeper_starts_from_a_relative_directory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``make nemesis`` passes ``--out nemesis-out``: the servers run in their own directories, where a relative
    config path does not resolve (ZooKeeper exited with 2, "zoo.cfg file is missing")."""
    from strata.tools.zookeeper import ZooKeeperEnsemble, ZooKeeperServer

    monkeypatch.chdir(tmp_path)
    server = ZooKeeperServer(Path("relative/zk"))
    try:
        server.start().wait_ready(60)
        assert server.directory.is_absolute()
    finally:
        server.stop()
    ensemble = ZooKeeperEnsemble(Path("relative/ensemble"), size=3)
    try:
        ensemble.start().wait_ready(90)
    finally:
        ensemble.stop()
