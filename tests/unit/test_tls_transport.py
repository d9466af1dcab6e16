"""``strata.broker.wire.transport`` over real TLS: a server-side :class:`TlsSocket` on a non-blocking socket of a
``socketpair``, a blocking ``ssl`` client on the other end in a thread, certificates from
``tests.security.certs``.

Large frames split across many (small) TLS records, reads that drain every record buffered, TLS 1.3
session tickets, close_notify, EOF without it, a peer reset,
a failed handshake's alert, and the write side (``send_bytes``, ``sendfile_slice``)."""

from __future__ import annotations

import asyncio
import os
import socket
import ssl
import struct
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from tests.security.certs import Pki, make_pki

from strata.broker.wire import transport
from strata.broker.wire.transport import TlsSocket, recv_into, send_bytes, sendfile_slice, tls_handshake, wrap_server
from strata.protocol.connection import NEED_DATA, RawFrame, ServerConnection


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("tls-transport-pki"))


def _server_context(pki: Pki, client_auth: bool = False) -> ssl.SSLContext:
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(str(pki.server.pem))
    if client_auth:
        ctx.load_verify_locations(str(pki.ca_cert))
        ctx.verify_mode = ssl.CERT_REQUIRED
    return ctx


def _client_context(pki: Pki) -> ssl.SSLContext:
    return ssl.create_default_context(cafile=str(pki.ca_cert))


class Peer:
    """The client end in a thread: ``script(ssl_socket)`` runs once the handshake is done."""

    def __init__(self, sock: socket.socket, ctx: ssl.SSLContext, script: Callable[[ssl.SSLSocket], Any]) -> None:
        self.result: Any = None
        self.error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, args=(sock, ctx, script), daemon=True)
        self._thread.start()

    def _run(self, sock: socket.socket, ctx: ssl.SSLContext, script: Callable[[ssl.SSLSocket], Any]) -> None:
        try:
            sock.settimeout(10)
            with ctx.wrap_socket(sock, server_hostname="localhost") as s:
                self.result = script(s)
        except BaseException as e:  # noqa: BLE001 - reported by join()
            self.error = e

    def join(self) -> Any:
        self._thread.join(10)
        assert not self._thread.is_alive(), "the client thread hung"
        if self.error is not None:
            raise self.error
        return self.result


@pytest.fixture
def pair() -> Iterator[tuple[socket.socket, socket.socket]]:
    """A connected loopback TCP pair (a socketpair's small buffers and missing RST would not do)."""
    with socket.create_server(("127.0.0.1", 0)) as listener:
        client = socket.create_connection(listener.getsockname())
        server, _ = listener.accept()
    server.setblocking(False)
    yield server, client
    server.close()
    client.close()


async def _serve(pki: Pki, server: socket.socket, client: socket.socket, script: Callable[[ssl.SSLSocket], Any],
                 body: Callable[[asyncio.AbstractEventLoop, TlsSocket], Any], client_auth: bool = False) -> Any:
    loop = asyncio.get_running_loop()
    peer = Peer(client, _client_context(pki), script)
    tls = wrap_server(_server_context(pki, client_auth), server)
    try:
        await asyncio.wait_for(tls_handshake(loop, tls), 10)
        out = await asyncio.wait_for(body(loop, tls), 20)
    except BaseException as e:
        tls.close()
        peer.join()  # the client's failure, when it failed first
        raise e
    tls.close()
    peer.join()
    return out, peer.result


def _pieces(data: bytes, sizes: list[int]) -> Iterator[bytes]:
    """``data`` cut as librdkafka cuts a produce request into TLS records (one per buffer segment)."""
    off, i = 0, 0
    while off < len(data):
        n = sizes[i % len(sizes)]
        yield data[off:off + n]
        off, i = off + n, i + 1


SEGMENTS = [52, 68, 46, 9, 1024, 9, 1024, 27, 1024, 16384, 2, 1024]


async def _read_frames(loop: asyncio.AbstractEventLoop, tls: TlsSocket, count: int, limit: int) -> list[bytes]:
    """The broker's read loop (connection.ClientConnection.run / _recv) with raw frames."""
    proto = ServerConnection(limit)
    proto.raw_frames = True
    shared = memoryview(bytearray(256 * 1024))
    frames: list[bytes] = []
    while len(frames) < count:
        event = proto.next_event()
        if event is NEED_DATA:
            direct = proto.get_buffer()
            try:
                if direct is not None:
                    n = await recv_into(loop, tls, direct)
                    proto.buffer_updated(n)
                else:
                    n = await recv_into(loop, tls, shared)
                    proto.receive_data(shared[:n])
            finally:
                if direct is not None:
                    direct.release()
            assert n, "EOF before the last frame"
            continue
        assert isinstance(event, RawFrame)
        frames.append(event.data)
    return frames


def test_large_frames_in_many_small_records_arrive_whole(pki: Pki, pair: tuple[socket.socket, socket.socket]) -> None:
    bodies = [os.urandom(n) for n in (3 * 1024 * 1024 + 17, 10, 40_000, 1, 1024 * 1024)]
    stream = b"".join(struct.pack(">i", len(b)) + b for b in bodies)

    def client(s: ssl.SSLSocket) -> int:
        writes = 0
        for piece in _pieces(stream, SEGMENTS):
            s.sendall(piece)  # one TLS record each
            writes += 1
        assert s.recv(1) == b"k"
        return writes

    frames, writes = asyncio.run(_serve(pki, *pair, client, lambda loop, tls: _frames_then_ack(loop, tls, len(bodies))))
    assert frames == bodies
    assert writes > 2000  # records


async def _frames_then_ack(loop: asyncio.AbstractEventLoop, tls: TlsSocket, count: int) -> list[bytes]:
    frames = await _read_frames(loop, tls, count, 8 * 1024 * 1024)
    await send_bytes(loop, tls, b"k")
    return frames


def test_one_read_drains_every_buffered_record(pki: Pki, pair: tuple[socket.socket, socket.socket]) -> None:
    """Records already on the socket come back from one recv_into, not one record per call."""
    records = [os.urandom(1000) for _ in range(50)]
    sent = threading.Event()

    def client(s: ssl.SSLSocket) -> None:
        for r in records:
            s.sendall(r)
        sent.set()
        assert s.recv(1) == b"k"

    async def body(loop: asyncio.AbstractEventLoop, tls: TlsSocket) -> list[int]:
        await loop.run_in_executor(None, sent.wait, 10)
        await asyncio.sleep(0.05)
        buf = memoryview(bytearray(1024 * 1024))
        counts = []
        total = 0
        while total < 50_000:
            n = await recv_into(loop, tls, buf[total:])
            counts.append(n)
            total += n
        assert bytes(buf[:total]) == b"".join(records)
        await send_bytes(loop, tls, b"k")
        return counts

    counts, _ = asyncio.run(_serve(pki, *pair, client, body))
    assert counts == [50_000]


def test_a_full_buffer_leaves_the_rest_for_the_next_read(pki: Pki, pair: tuple[socket.socket, socket.socket]) -> None:
    data = os.urandom(100_000)

    def client(s: ssl.SSLSocket) -> None:
        s.sendall(data)
        assert s.recv(1) == b"k"

    async def body(loop: asyncio.AbstractEventLoop, tls: TlsSocket) -> bytes:
        got = bytearray()
        small = memoryview(bytearray(7))
        while len(got) < len(data):
            n = await recv_into(loop, tls, small)
            assert 0 < n <= 7
            got += small[:n]
        await send_bytes(loop, tls, b"k")
        return bytes(got)

    got, _ = asyncio.run(_serve(pki, *pair, client, body))
    assert got == data


@pytest.mark.parametrize("how", ["close_notify", "eof", "reset"])
def test_the_peer_closing(pki: Pki, pair: tuple[socket.socket, socket.socket], how: str) -> None:
    """close_notify and EOF without it read as 0 (after the data before them); a reset is an OSError."""

    def client(s: ssl.SSLSocket) -> None:
        s.sendall(b"last words")
        if how == "close_notify":
            try:
                s.unwrap()  # sends close_notify, then waits for the server's: the server closes without one
            except (ssl.SSLError, OSError):
                pass
        elif how == "eof":
            # A FIN without close_notify. Not close(): with the server's TLS 1.3 session tickets unread in
            # the receive buffer, the kernel answers close() with an RST (a reset, not an EOF, seen once in
            # CI). shutdown() on an SSLSocket drops the TLS layer and shuts the TCP socket's write side; the
            # client then reads (raw) until the server closes, so nothing is left unread.
            s.shutdown(socket.SHUT_WR)
            while s.recv(4096):
                pass
        elif how == "reset":
            s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        s.close()

    async def body(loop: asyncio.AbstractEventLoop, tls: TlsSocket) -> list[Any]:
        buf = memoryview(bytearray(1024))
        seen: list[Any] = []
        for _ in range(3):
            try:
                n = await recv_into(loop, tls, buf)
            except OSError as e:
                seen.append(type(e))
                break
            seen.append(bytes(buf[:n]))
            if n == 0:
                break
        return seen

    seen, _ = asyncio.run(_serve(pki, *pair, client, body))
    if how == "reset":  # the RST may overtake the data (the kernel then drops it), and the session
        # tickets' send may have taken the error already (a read then sees EOF)
        assert seen in ([b"last words", ConnectionResetError], [ConnectionResetError], [b"last words", b""], [b""])
    else:
        assert seen == [b"last words", b""]


def test_an_echo_both_ways_over_tls13(pki: Pki, pair: tuple[socket.socket, socket.socket]) -> None:
    """300 kB in, the same out in TLS_WRITE_CHUNK rounds, while the client's reads process the session
    tickets. (Python has no API to send a KeyUpdate: that post-handshake message takes the same path,
    into the incoming BIO and its answer out of the outgoing one before the next wait or response.)"""
    data = os.urandom(300_000)

    def client(s: ssl.SSLSocket) -> bytes:
        s.sendall(data)
        got = bytearray()
        while len(got) < len(data):
            chunk = s.recv(65536)
            assert chunk
            got += chunk
        return bytes(got)

    async def body(loop: asyncio.AbstractEventLoop, tls: TlsSocket) -> str | None:
        buf = memoryview(bytearray(len(data)))
        total = 0
        while total < len(data):
            total += await recv_into(loop, tls, buf[total:])
        await send_bytes(loop, tls, buf)  # echoed: encrypted in TLS_WRITE_CHUNK rounds
        return tls.ssl.version()

    version, echoed = asyncio.run(_serve(pki, *pair, client, body))
    assert version == "TLSv1.3"
    assert echoed == data


def test_session_tickets_reach_the_client_before_it_sends(pki: Pki, pair: tuple[socket.socket, socket.socket]) -> None:
    """TLS 1.3 session tickets go out with the handshake's last flight: the client can resume."""

    def client(s: ssl.SSLSocket) -> bool:
        s.sendall(b"hi")
        assert s.recv(2) == b"ok"
        return s.session is not None and s.session.has_ticket

    async def body(loop: asyncio.AbstractEventLoop, tls: TlsSocket) -> None:
        buf = memoryview(bytearray(16))
        assert await recv_into(loop, tls, buf) == 2
        await send_bytes(loop, tls, b"ok")

    _, has_ticket = asyncio.run(_serve(pki, *pair, client, body))
    assert has_ticket


def test_a_failed_handshake_sends_its_alert(pki: Pki, pair: tuple[socket.socket, socket.socket]) -> None:
    """Client auth required, no client certificate: the server's handshake fails with an SSLError and
    the client learns why from the alert (TLS 1.3: on its first read)."""
    server, client_sock = pair

    async def run() -> BaseException | None:
        loop = asyncio.get_running_loop()
        peer = Peer(client_sock, _client_context(pki), lambda s: s.recv(1))
        tls = wrap_server(_server_context(pki, client_auth=True), server)
        failed: BaseException | None = None
        try:
            await asyncio.wait_for(tls_handshake(loop, tls), 10)
        except ssl.SSLError as e:
            failed = e
        tls.close()
        with pytest.raises(ssl.SSLError, match="(?i)certificate"):
            peer.join()
        return failed

    failed = asyncio.run(run())
    assert failed is not None


def test_garbage_instead_of_a_client_hello_fails_the_handshake(pki: Pki, pair: tuple[socket.socket, socket.socket]
                                                               ) -> None:
    server, client_sock = pair

    async def run(payload: bytes) -> type[BaseException]:
        loop = asyncio.get_running_loop()
        tls = wrap_server(_server_context(pki), server)
        client_sock.sendall(payload)
        try:
            await asyncio.wait_for(tls_handshake(loop, tls), 5)
        except (ssl.SSLError, OSError) as e:
            return type(e)
        raise AssertionError("handshake succeeded")

    assert issubclass(asyncio.run(run(b"\x00\x00\x00\x16\x00\x12\x00\x03" + b"\x00" * 20)), ssl.SSLError)


def test_eof_during_the_handshake(pki: Pki, pair: tuple[socket.socket, socket.socket]) -> None:
    server, client_sock = pair

    async def run() -> None:
        loop = asyncio.get_running_loop()
        tls = wrap_server(_server_context(pki), server)
        client_sock.sendall(b"\x16\x03\x01\x00\x40")  # a record header, then nothing
        client_sock.shutdown(socket.SHUT_WR)
        with pytest.raises((ssl.SSLError, OSError)):
            await asyncio.wait_for(tls_handshake(loop, tls), 5)

    asyncio.run(run())


def test_sendfile_slice_and_send_bytes_over_tls(pki: Pki, pair: tuple[socket.socket, socket.socket],
                                                tmp_path: Path) -> None:
    """A Fetch response's shape: a small header with MSG_MORE, then a file slice, encrypted in rounds."""
    content = os.urandom(1_500_000)
    path = tmp_path / "segment"
    path.write_bytes(content)
    offset, count = 12_345, 1_234_567
    expected = b"header" + content[offset:offset + count] + b"trailer"

    def client(s: ssl.SSLSocket) -> bytes:
        got = bytearray()
        while len(got) < len(expected):
            chunk = s.recv(1 << 20)
            assert chunk
            got += chunk
        return bytes(got)

    async def body(loop: asyncio.AbstractEventLoop, tls: TlsSocket) -> None:
        with open(path, "rb") as f:
            await send_bytes(loop, tls, b"header", more=True)
            await sendfile_slice(loop, tls, f.fileno(), offset, count)
            await send_bytes(loop, tls, b"trailer")

    _, got = asyncio.run(_serve(pki, *pair, client, body))
    assert got == expected


def test_a_slow_reader_is_written_to_as_it_reads(pki: Pki, pair: tuple[socket.socket, socket.socket]) -> None:
    """More than the socket buffers hold: the writer waits for the fd and reports progress."""
    data = os.urandom(8 * 1024 * 1024)
    progress: list[int] = []

    def client(s: ssl.SSLSocket) -> int:
        time.sleep(0.3)  # the socket buffers fill first
        got = 0
        while got < len(data):
            chunk = s.recv(4096)
            assert chunk
            got += len(chunk)
        return got

    async def body(loop: asyncio.AbstractEventLoop, tls: TlsSocket) -> None:
        await send_bytes(loop, tls, data, progress=lambda: progress.append(1))

    _, got = asyncio.run(_serve(pki, *pair, client, body))
    assert got == len(data)
    assert progress


def test_the_ciphertext_buffer_is_shared_and_small() -> None:
    a = transport._ciphertext_buffer()
    assert a is transport._ciphertext_buffer()
    assert len(a) == transport.TLS_RECV_BYTES <= 64 * 1024


def test_plain_sockets_read_as_before(pair: tuple[socket.socket, socket.socket]) -> None:
    server, client = pair

    async def run() -> list[bytes]:
        loop = asyncio.get_running_loop()
        buf = memoryview(bytearray(64))
        loop.call_later(0.05, client.sendall, b"late")
        first = bytes(buf[:await recv_into(loop, server, buf)])
        client.close()
        return [first, bytes(buf[:await recv_into(loop, server, buf)])]

    assert asyncio.run(run()) == [b"late", b""]
