"""The connection's pipelined answers (dispatch.Deferred), over a real loopback socket with stub handlers.

The handlers stand in for produce (deferred, answered when the test releases its gate) and ApiVersions
(answered at once, or deferred to fail), so each test decides the order in which deferred answers become
ready and checks the order in which they leave: request order, always.
"""

from __future__ import annotations

import asyncio
import socket
import struct
from collections.abc import Callable, Coroutine
from types import SimpleNamespace
from typing import Any

from strata.broker.wire.connection import MAX_DEFERRED, ClientConnection
from strata.broker.wire.dispatch import CloseConnection, Deferred, HandlerSpec, RequestContext
from strata.client.wire import encode_request

PRODUCE, API_VERSIONS = 0, 18


class Stubs:
    """The handlers' side: which requests reached a handler, and the gates their deferred answers wait on."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.calls: list[int] = []  # produce keys (its timeout field) in the order the handler saw them
        self.gates: dict[int, asyncio.Future[Any]] = {}
        self.versions_fail = False

    def gate(self, key: int) -> asyncio.Future[Any]:
        if key not in self.gates:
            self.gates[key] = self.loop.create_future()
        return self.gates[key]

    async def produce(self, ctx: RequestContext, body: Any) -> Any:
        key = int(body.timeout.total_seconds() * 1000)
        self.calls.append(key)
        gate = self.gate(key)

        async def later() -> Any:
            outcome = await gate
            if isinstance(outcome, BaseException):
                raise outcome
            return None if body.acks == 0 else ctx.respond(responses=[], throttle_time=0)

        return Deferred(later())

    async def api_versions(self, ctx: RequestContext, body: Any) -> Any:
        if self.versions_fail:
            async def failing() -> Any:
                raise RuntimeError("deferred part failed")
            return Deferred(failing())
        return ctx.respond(error_code=0, api_keys=[], throttle_time_ms=0)


class Peer:
    """The client end: raw frames out, frames in."""

    def __init__(self, sock: socket.socket, loop: asyncio.AbstractEventLoop) -> None:
        self.sock = sock
        self.loop = loop
        self.cid = 0
        self.kinds: dict[int, int] = {}

    async def produce(self, key: int, acks: int = -1) -> int:
        return await self._send(PRODUCE, 9, acks=acks, timeout=key, transactional_id=None, topic_data=[])

    async def api_versions(self) -> int:
        return await self._send(API_VERSIONS, 3, client_software_name="t", client_software_version="1")

    async def _send(self, api_key: int, version: int, **fields: Any) -> int:
        self.cid += 1
        self.kinds[self.cid] = api_key
        await self.loop.sock_sendall(self.sock, encode_request(api_key, version, self.cid, "t", **fields))
        return self.cid

    async def _exactly(self, n: int) -> bytes:
        out = bytearray()
        while len(out) < n:
            chunk = await self.loop.sock_recv(self.sock, n - len(out))
            if not chunk:
                raise ConnectionError("closed")
            out += chunk
        return bytes(out)

    async def answer(self, timeout: float = 5) -> tuple[int, bytes]:
        """The next answer: (correlation id, body bytes after it)."""
        async def read() -> tuple[int, bytes]:
            (size,) = struct.unpack(">i", await self._exactly(4))
            frame = await self._exactly(size)
            return struct.unpack_from(">i", frame)[0], frame
        return await asyncio.wait_for(read(), timeout)

    async def nothing(self, within: float = 0.2) -> None:
        try:
            got = await asyncio.wait_for(self.loop.sock_recv(self.sock, 1), within)
        except TimeoutError:
            return
        raise AssertionError(f"unexpected bytes: {got!r}")


def run(body: Callable[[Stubs, Peer, asyncio.Task[None]], Coroutine[Any, Any, None]], *,
        quotas: bool = False) -> Callable[[], None]:
    def test() -> None:
        async def main() -> None:
            loop = asyncio.get_running_loop()
            with socket.create_server(("127.0.0.1", 0)) as listener:
                client = socket.create_connection(listener.getsockname())
                server, _ = listener.accept()
            server.setblocking(False)
            client.setblocking(False)
            stubs = Stubs(loop)
            throttler = SimpleNamespace(quotas=SimpleNamespace(enabled=quotas, fetch=SimpleNamespace(enabled=False)),
                                        times=lambda request: False, before_response=lambda *args: 0)
            broker = SimpleNamespace(config=SimpleNamespace(socket_request_max_bytes=1 << 20,
                                                            connections_max_idle_ms=-1),
                                     throttler=throttler, shutting_down=False)
            session = SimpleNamespace(sasl=None, principal="User:ANONYMOUS", close_after_send_s=None)
            conn = ClientConnection(broker, server, "peer:1", session)  # type: ignore[arg-type]
            conn._handlers = {PRODUCE: HandlerSpec(PRODUCE, 0, 11, stubs.produce),
                              API_VERSIONS: HandlerSpec(API_VERSIONS, 0, 4, stubs.api_versions)}
            task = loop.create_task(conn.run())
            try:
                await asyncio.wait_for(body(stubs, Peer(client, loop), task), 20)
            finally:
                client.close()
                if not task.done():
                    task.cancel()
                await asyncio.gather(task, return_exceptions=True)
            left = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            assert left == [], left  # nothing owed outlives the connection

        asyncio.run(main())

    test.__name__ = body.__name__
    return test


async def until(predicate: Callable[[], bool]) -> None:
    while not predicate():
        await asyncio.sleep(0.005)


@run
async def test_answers_leave_in_request_order_whatever_order_they_are_ready_in(
        stubs: Stubs, peer: Peer, task: asyncio.Task[None]) -> None:
    for key in (1, 2, 3):
        await peer.produce(key)
    versions = await peer.api_versions()
    await until(lambda: stubs.calls == [1, 2, 3])  # read and handled while the first still waits
    stubs.gate(3).set_result(None)
    stubs.gate(2).set_result(None)
    await peer.nothing()  # 2 and 3 are ready, the ApiVersions answer too: all wait for 1
    stubs.gate(1).set_result(None)
    assert [(await peer.answer())[0] for _ in range(4)] == [1, 2, 3, versions]
    await peer.produce(4)  # nothing owed any more: the next deferred answer goes out when ready
    await until(lambda: stubs.calls[-1:] == [4])
    stubs.gate(4).set_result(None)
    assert (await peer.answer())[0] == 5


@run
async def test_acks_0_has_no_answer_and_keeps_its_place(stubs: Stubs, peer: Peer, task: asyncio.Task[None]) -> None:
    await peer.produce(1, acks=0)
    second = await peer.produce(2)
    await until(lambda: stubs.calls == [1, 2])
    stubs.gate(2).set_result(None)
    await peer.nothing()
    stubs.gate(1).set_result(None)
    assert (await peer.answer())[0] == second


@run
async def test_at_the_bound_the_connection_reads_no_more_until_the_oldest_is_sent(
        stubs: Stubs, peer: Peer, task: asyncio.Task[None]) -> None:
    for key in range(1, MAX_DEFERRED + 4):
        await peer.produce(key)
    await until(lambda: len(stubs.calls) == MAX_DEFERRED)
    await asyncio.sleep(0.1)
    assert len(stubs.calls) == MAX_DEFERRED
    stubs.gate(1).set_result(None)
    assert (await peer.answer())[0] == 1
    await until(lambda: len(stubs.calls) == MAX_DEFERRED + 1)
    for key in range(2, MAX_DEFERRED + 4):
        stubs.gate(key).set_result(None)
    assert [(await peer.answer())[0] for _ in range(2, MAX_DEFERRED + 4)] == list(range(2, MAX_DEFERRED + 4))


@run
async def test_a_deferred_close_goes_after_earlier_answers_and_before_later_ones(
        stubs: Stubs, peer: Peer, task: asyncio.Task[None]) -> None:
    await peer.produce(1)
    await peer.produce(2, acks=0)
    await peer.api_versions()
    await peer.produce(4)
    await until(lambda: stubs.calls == [1, 2, 4])
    stubs.gate(4).set_result(None)
    stubs.gate(2).set_result(CloseConnection("an acks=0 produce failed"))
    await peer.nothing()
    stubs.gate(1).set_result(None)
    assert (await peer.answer())[0] == 1
    try:
        got = await peer.answer()
    except ConnectionError:
        pass
    else:
        raise AssertionError(f"answered {got[0]} after the close")
    await asyncio.wait_for(task, 5)  # run() ended: the close is not an error


@run
async def test_a_failed_deferred_answer_is_an_error_response_or_a_close(
        stubs: Stubs, peer: Peer, task: asyncio.Task[None]) -> None:
    stubs.versions_fail = True
    versions = await peer.api_versions()  # ApiVersions has a top-level error code: UNKNOWN_SERVER_ERROR
    cid, frame = await peer.answer()
    assert cid == versions and struct.unpack_from(">h", frame, 4)[0] == -1
    await peer.produce(1)  # a produce response has none: the connection closes
    await until(lambda: stubs.calls == [1])
    stubs.gate(1).set_result(RuntimeError("boom"))
    try:
        await peer.answer()
    except ConnectionError:
        pass
    else:
        raise AssertionError("answered a failed produce")


@run
async def test_a_client_gone_with_answers_owed_ends_them(stubs: Stubs, peer: Peer, task: asyncio.Task[None]) -> None:
    for key in (1, 2, 3):
        await peer.produce(key)
    await until(lambda: stubs.calls == [1, 2, 3])
    peer.sock.close()
    await asyncio.wait_for(task, 5)
    assert all(stubs.gate(key).cancelled() for key in (1, 2, 3))  # their waits were cancelled


@run
async def test_broker_shutdown_cancels_a_connection_with_answers_owed(
        stubs: Stubs, peer: Peer, task: asyncio.Task[None]) -> None:
    await peer.produce(1)
    await peer.produce(2)
    await until(lambda: stubs.calls == [1, 2])
    task.cancel()
    try:
        await task
    except asyncio.CancelledError:
        pass
    else:
        raise AssertionError("the cancellation was swallowed")
    assert stubs.gate(1).cancelled() and stubs.gate(2).cancelled()


@run
async def test_a_peer_that_resets_while_answers_go_out_ends_the_connection(
        stubs: Stubs, peer: Peer, task: asyncio.Task[None]) -> None:
    await peer.produce(1)
    await peer.produce(2)
    await until(lambda: stubs.calls == [1, 2])
    peer.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    peer.sock.close()  # RST
    stubs.gate(1).set_result(None)
    stubs.gate(2).set_result(None)
    await asyncio.wait_for(task, 5)


async def _quotas_answer_in_turn(stubs: Stubs, peer: Peer, task: asyncio.Task[None]) -> None:
    await peer.produce(1)
    await peer.produce(2)
    await until(lambda: stubs.calls == [1])
    await asyncio.sleep(0.1)
    assert stubs.calls == [1]  # with quotas, a deferred answer is awaited in turn: nothing read meanwhile
    stubs.gate(1).set_result(None)
    assert (await peer.answer())[0] == 1
    await until(lambda: stubs.calls == [1, 2])
    stubs.gate(2).set_result(None)
    assert (await peer.answer())[0] == 2


test_with_quotas_a_deferred_answer_is_awaited_in_turn = run(_quotas_answer_in_turn, quotas=True)
