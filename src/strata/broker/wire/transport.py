"""Bytes to and from one non-blocking client socket, plain or TLS, without asyncio's streams.

The broker's connections run their own read and write loops on non-blocking sockets (a task per
connection waiting on fd readiness) so that Fetch responses can go out with ``sendfile``: the record
bytes travel from the page cache to the socket without entering Python. Over TLS that is impossible
without kernel TLS (the kernel here has no ``tls`` ULP, and Python 3.11's ``ssl`` cannot turn it on,
see ``strata.security.ssl_factory.kernel_tls_status``), so a TLS connection reads the file slice into
one reusable buffer and encrypts from there: one copy, in chunks of :data:`TLS_FILE_CHUNK`.

TLS runs in memory (:class:`TlsSocket`: an ``ssl.SSLObject`` between two ``ssl.MemoryBIO``), not on an
``ssl.SSLSocket``. OpenSSL returns at most one TLS record per read, and an SSLSocket reads a record
with two ``recv`` calls of its own (the 5-byte header, then the body): librdkafka writes a produce
request as a record per buffer segment (a record's 9-byte header and its 1 KiB value are records of
their own, ~2.7 KiB on average), so a GiB produced over an SSLSocket took ~800k ``recv`` calls and as
many trips through the connection's read loop, ~4 us per record. Here one ``recv`` of up to
:data:`TLS_RECV_BYTES` of ciphertext feeds the incoming BIO, and one :func:`recv_into` decrypts
record after record into the caller's buffer until the socket has nothing more or the buffer is
full. The write side encrypts into the outgoing BIO and sends its ciphertext with one ``send`` per
:data:`TLS_WRITE_CHUNK` (instead of one per 16 KiB record); ``MSG_MORE`` then works over TLS too.
TLS 1.3 post-handshake messages (session tickets, key updates, alerts) are whatever OpenSSL leaves
in the outgoing BIO after a read: it goes out before the connection waits for the peer, or with the
next response, in order.
"""

from __future__ import annotations

import asyncio
import errno
import os
import socket
import ssl
import threading
from collections.abc import Callable

MSG_MORE = getattr(socket, "MSG_MORE", 0)
TLS_FILE_CHUNK = 256 * 1024  # file bytes read per TLS write round (16 KiB TLS records inside)
# Ciphertext read per recv (and so the most an idle connection's incoming BIO keeps allocated): 64 KiB
# cost no more CPU per GiB than 256 KiB, 32 KiB ~5 % more (bench of the receive path alone).
TLS_RECV_BYTES = 64 * 1024
TLS_WRITE_CHUNK = 64 * 1024  # plaintext encrypted per send (bounds the outgoing BIO alike)
TLS_READ_AHEAD = 1024 * 1024  # most ciphertext one recv_into pulls off the socket before it returns
_shared = threading.local()  # one ciphertext buffer per event-loop thread


def _wake(waiter: asyncio.Future[None]) -> None:
    """The fd callback: the waiter may already be cancelled (a shutdown closing the connection in the
    same loop iteration the fd became ready); ``set_result`` would then log an InvalidStateError."""
    if not waiter.done():
        waiter.set_result(None)


async def writable(loop: asyncio.AbstractEventLoop, fd: int) -> None:
    waiter = loop.create_future()
    loop.add_writer(fd, _wake, waiter)
    try:
        await waiter
    finally:
        loop.remove_writer(fd)


async def readable(loop: asyncio.AbstractEventLoop, fd: int) -> None:
    waiter = loop.create_future()
    loop.add_reader(fd, _wake, waiter)
    try:
        await waiter
    finally:
        loop.remove_reader(fd)


def _ciphertext_buffer() -> memoryview:
    """The thread's buffer for ciphertext on its way from a socket into an incoming BIO: filled and
    written to the BIO with no ``await`` in between, so the connections of one loop share it."""
    view: memoryview | None = getattr(_shared, "view", None)
    if view is None:
        view = _shared.view = memoryview(bytearray(TLS_RECV_BYTES))
    return view


class TlsSocket:
    """The server side of a TLS connection on a non-blocking socket, in memory: an ``ssl.SSLObject``
    between an incoming and an outgoing ``ssl.MemoryBIO``.

    Use it through :func:`tls_handshake`, :func:`recv_into`, :func:`send_bytes` and
    :func:`sendfile_slice`. One task drives it, alternating reads and writes (a connection reads a
    request, then answers it): two coroutines flushing the outgoing BIO at once could reorder records.
    ``ssl`` is the ``SSLObject`` (peer certificate, cipher, version); :meth:`close` closes the socket
    without a close_notify, as closing an SSLSocket does.
    """

    __slots__ = ("sock", "ssl", "_incoming", "_outgoing", "_eof")

    def __init__(self, context: ssl.SSLContext, sock: socket.socket) -> None:
        self.sock = sock
        self._incoming = ssl.MemoryBIO()
        self._outgoing = ssl.MemoryBIO()
        self.ssl = context.wrap_bio(self._incoming, self._outgoing, server_side=True)
        self._eof = False  # the socket reached EOF (written to the incoming BIO)

    def fileno(self) -> int:
        return self.sock.fileno()

    def close(self) -> None:
        self.sock.close()

    def _pull(self) -> bool:
        """One non-blocking ``recv`` of ciphertext into the incoming BIO; False: nothing there yet.
        EOF goes to the BIO as EOF (OpenSSL then reports close_notify or a truncated stream)."""
        buf = _ciphertext_buffer()
        try:
            n = self.sock.recv_into(buf)
        except (BlockingIOError, InterruptedError):
            return False
        if n:
            self._incoming.write(buf[:n])
        else:
            self._eof = True
            self._incoming.write_eof()
        return True

    async def _fill(self, loop: asyncio.AbstractEventLoop) -> None:
        """More ciphertext into the incoming BIO, waiting for the socket (output first: the peer may be
        waiting for a handshake message or a key update before it sends any more)."""
        if self._eof:
            raise ConnectionResetError("TLS peer closed the connection mid-record")
        if self._outgoing.pending:
            await self._flush_unless_closed(loop)
        while not self._pull():
            await readable(loop, self.sock.fileno())

    async def _flush(self, loop: asyncio.AbstractEventLoop, more: bool = False,
                     progress: Callable[[], None] | None = None) -> None:
        """Send the outgoing BIO's ciphertext."""
        outgoing = self._outgoing
        while outgoing.pending:
            await _send_plain(loop, self.sock, outgoing.read(), MSG_MORE if more else 0, progress)

    async def _flush_unless_closed(self, loop: asyncio.AbstractEventLoop) -> None:
        """Flush what OpenSSL wrote on its own (session tickets, a key update's answer); a peer that
        closed already loses it and its last bytes are still read (the next response's send fails)."""
        try:
            await self._flush(loop)
        except OSError:
            self._outgoing.read()

    def _flush_now(self) -> None:
        """What can go out without waiting (a fatal alert before the socket closes); errors ignored."""
        data = self._outgoing.read()
        if data:
            try:
                self.sock.send(data)
            except OSError:
                pass

    async def handshake(self, loop: asyncio.AbstractEventLoop) -> None:
        while True:
            try:
                self.ssl.do_handshake()
                break
            except ssl.SSLWantReadError:
                await self._fill(loop)
            except ssl.SSLError:
                self._flush_now()  # the alert, so the client learns why
                raise
        await self._flush_unless_closed(loop)  # the last flight (TLS 1.3: the session tickets)

    async def recv_into(self, loop: asyncio.AbstractEventLoop, buf: memoryview) -> int:
        """Decrypted bytes into ``buf``: record after record, pulling ciphertext off the socket without
        waiting, until the socket has nothing more (up to :data:`TLS_READ_AHEAD`) or ``buf`` is full.
        Waits only while nothing was read; ``buf`` is written after the last ``await``. 0: the peer
        closed (close_notify, or EOF)."""
        read = self.ssl.read
        size = len(buf)
        got = 0
        pulled = 0
        while True:
            try:
                n = read(size - got, buf[got:] if got else buf)
            except ssl.SSLWantReadError:
                if got:
                    if pulled < TLS_READ_AHEAD and self._pull():
                        pulled += TLS_RECV_BYTES
                        continue
                    return got
                await self._fill(loop)
                continue
            except (ssl.SSLZeroReturnError, ssl.SSLEOFError):  # close_notify; EOF without it (ragged)
                return got
            if not n:
                return got
            got += n
            if got >= size:
                return got

    async def send(self, loop: asyncio.AbstractEventLoop, data: bytes | bytearray | memoryview, more: bool,
                   progress: Callable[[], None] | None) -> None:
        view = memoryview(data)
        write = self.ssl.write
        try:
            while view:
                chunk = view[:TLS_WRITE_CHUNK]
                try:
                    n = write(chunk)
                except ssl.SSLWantReadError:  # a renegotiation (TLS 1.2) wants the peer's handshake first
                    await self._fill(loop)
                    continue
                finally:
                    chunk.release()
                view = view[n:]
                await self._flush(loop, more or bool(view), progress)
        finally:
            view.release()


def wrap_server(context: ssl.SSLContext, sock: socket.socket) -> TlsSocket:
    """``sock`` (non-blocking, connected) as the server side of a TLS connection; no handshake yet."""
    return TlsSocket(context, sock)


async def tls_handshake(loop: asyncio.AbstractEventLoop, sock: TlsSocket) -> None:
    """Drive the server handshake; an ``ssl.SSLError`` (its alert sent) or OSError when it fails."""
    await sock.handshake(loop)


async def recv_into(loop: asyncio.AbstractEventLoop, sock: socket.socket | TlsSocket, buf: memoryview) -> int:
    """Bytes into ``buf`` (0: the peer closed), waiting for the fd only when nothing is buffered.

    ``buf`` is written only after the last ``await`` (a buffer shared by connections stays safe when its
    bytes are consumed before the caller's next ``await``). A plain socket returns one ``recv``; a TLS
    one all it can decrypt without waiting (:meth:`TlsSocket.recv_into`).
    """
    if type(sock) is TlsSocket:
        return await sock.recv_into(loop, buf)
    while True:
        try:
            return sock.recv_into(buf)
        except (BlockingIOError, InterruptedError):
            await readable(loop, sock.fileno())


async def _send_plain(loop: asyncio.AbstractEventLoop, sock: socket.socket, data: bytes | bytearray | memoryview,
                      flags: int, progress: Callable[[], None] | None) -> None:
    view = memoryview(data)
    try:
        while view:
            try:
                sent = sock.send(view, flags)
            except (BlockingIOError, InterruptedError):
                await writable(loop, sock.fileno())
                if progress is not None:
                    progress()
                continue
            view = view[sent:]
    finally:
        view.release()


async def send_bytes(loop: asyncio.AbstractEventLoop, sock: socket.socket | TlsSocket,
                     data: bytes | bytearray | memoryview, more: bool = False,
                     progress: Callable[[], None] | None = None) -> None:
    """``send`` until done on a non-blocking socket; ``more``: file data follows (``MSG_MORE``).

    With TCP_NODELAY, the few bytes of a Fetch response before its records would otherwise
    leave as a segment of their own; MSG_MORE lets the kernel put them in front of the file data.
    ``progress`` is called when bytes went out after waiting for the peer to read.
    """
    if type(sock) is TlsSocket:
        await sock.send(loop, data, more, progress)
        return
    await _send_plain(loop, sock, data, MSG_MORE if more else 0, progress)


async def sendfile_slice(loop: asyncio.AbstractEventLoop, sock: socket.socket | TlsSocket, fd: int, offset: int,
                         count: int, progress: Callable[[], None] | None = None) -> None:
    """``count`` bytes of file ``fd`` from ``offset``: ``os.sendfile`` on a plain socket, read and
    encrypted through one buffer on a TLS one."""
    if type(sock) is TlsSocket:
        await _send_file_tls(loop, sock, fd, offset, count, progress)
        return
    out = sock.fileno()
    while count > 0:
        try:
            sent = os.sendfile(out, fd, offset, count)
        except (BlockingIOError, InterruptedError):
            await writable(loop, out)
            if progress is not None:
                progress()
            continue
        except OSError as e:
            if e.errno in (errno.EAGAIN, errno.EWOULDBLOCK):
                await writable(loop, out)
                if progress is not None:
                    progress()
                continue
            raise
        if sent == 0:
            raise ConnectionError("file slice ended early (segment truncated or deleted)")
        offset += sent
        count -= sent


async def _send_file_tls(loop: asyncio.AbstractEventLoop, sock: TlsSocket, fd: int, offset: int, count: int,
                         progress: Callable[[], None] | None) -> None:
    chunk = bytearray(min(count, TLS_FILE_CHUNK))
    view = memoryview(chunk)
    try:
        while count > 0:
            want = min(count, len(chunk))
            got = os.preadv(fd, [view[:want]], offset)
            if got <= 0:
                raise ConnectionError("file slice ended early (segment truncated or deleted)")
            await sock.send(loop, view[:got], False, progress)
            offset += got
            count -= got
    finally:
        view.release()
