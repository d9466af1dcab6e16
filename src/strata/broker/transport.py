"""Bytes to and from one non-blocking client socket, plain or TLS, without asyncio's streams.

The broker's connections run their own read and write loops on non-blocking sockets (a task per
connection waiting on fd readiness) so that Fetch responses can go out with ``sendfile``: the record
bytes travel from the page cache to the socket without entering Python. Over TLS that is impossible
without kernel TLS (the kernel here has no ``tls`` ULP, and Python 3.11's ``ssl`` cannot turn it on,
see ``strata.security.ssl_factory.kernel_tls_status``), so a TLS connection reads the file slice into
one reusable buffer and encrypts from there: one copy, in chunks of :data:`TLS_FILE_CHUNK`.

An ``ssl.SSLSocket`` in non-blocking mode signals "try again" with ``SSLWantReadError`` /
``SSLWantWriteError`` (either can happen on a read or a write: TLS 1.3 key updates and session
tickets are records of their own), and may hold decrypted bytes that the fd does not show as
readable (``pending()``); every read therefore tries the socket first and waits for the fd only
when OpenSSL has nothing.
"""

from __future__ import annotations

import asyncio
import errno
import os
import socket
import ssl
from collections.abc import Callable

MSG_MORE = getattr(socket, "MSG_MORE", 0)
TLS_FILE_CHUNK = 256 * 1024  # file bytes read per TLS write round (16 KiB TLS records inside)


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


async def recv_into(loop: asyncio.AbstractEventLoop, sock: socket.socket, buf: memoryview) -> int:
    """One read into ``buf`` (0: the peer closed), waiting for the fd only when nothing is buffered."""
    while True:
        try:
            return sock.recv_into(buf)
        except (BlockingIOError, InterruptedError, ssl.SSLWantReadError):
            await readable(loop, sock.fileno())
        except ssl.SSLWantWriteError:
            await writable(loop, sock.fileno())
        except ssl.SSLZeroReturnError:  # close_notify: an orderly end
            return 0


async def send_bytes(loop: asyncio.AbstractEventLoop, sock: socket.socket, data: bytes | bytearray | memoryview,
                     more: bool = False, progress: Callable[[], None] | None = None) -> None:
    """``send`` until done on a non-blocking socket; ``more``: file data follows (``MSG_MORE``).

    With TCP_NODELAY, the few bytes of a Fetch response before its records would otherwise
    leave as a segment of their own; MSG_MORE lets the kernel put them in front of the file data
    (plain sockets only: an SSLSocket takes no flags, and its records are framed anyway).
    ``progress`` is called when bytes went out after waiting for the peer to read.
    """
    tls = isinstance(sock, ssl.SSLSocket)
    flags = MSG_MORE if more and not tls else 0
    view = memoryview(data)
    try:
        while view:
            try:
                sent = sock.send(view) if tls else sock.send(view, flags)
            except (BlockingIOError, InterruptedError, ssl.SSLWantWriteError):
                await writable(loop, sock.fileno())
                if progress is not None:
                    progress()
                continue
            except ssl.SSLWantReadError:
                await readable(loop, sock.fileno())
                continue
            view = view[sent:]
    finally:
        view.release()


async def sendfile_slice(loop: asyncio.AbstractEventLoop, sock: socket.socket, fd: int, offset: int,
                         count: int, progress: Callable[[], None] | None = None) -> None:
    """``count`` bytes of file ``fd`` from ``offset``: ``os.sendfile`` on a plain socket, read and
    encrypted through one buffer on a TLS one."""
    if isinstance(sock, ssl.SSLSocket):
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


async def _send_file_tls(loop: asyncio.AbstractEventLoop, sock: ssl.SSLSocket, fd: int, offset: int, count: int,
                         progress: Callable[[], None] | None) -> None:
    chunk = bytearray(min(count, TLS_FILE_CHUNK))
    view = memoryview(chunk)
    try:
        while count > 0:
            want = min(count, len(chunk))
            got = os.preadv(fd, [view[:want]], offset)
            if got <= 0:
                raise ConnectionError("file slice ended early (segment truncated or deleted)")
            await send_bytes(loop, sock, view[:got], progress=progress)
            offset += got
            count -= got
    finally:
        view.release()


async def tls_handshake(loop: asyncio.AbstractEventLoop, sock: ssl.SSLSocket) -> None:
    """Drive the server handshake of a non-blocking SSLSocket (``do_handshake_on_connect=False``)."""
    while True:
        try:
            sock.do_handshake()
            return
        except ssl.SSLWantReadError:
            await readable(loop, sock.fileno())
        except ssl.SSLWantWriteError:
            await writable(loop, sock.fileno())
