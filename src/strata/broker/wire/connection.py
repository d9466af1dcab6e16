"""One client socket: read → sans-IO connection → dispatch → write, in request order.

Kafka answers a connection's requests in the order they arrived, so requests are handled one
at a time per connection (clients pipeline up to ``max.in.flight`` requests; they queue in the
socket buffer). A long-polling Fetch therefore holds only its own connection, and a client that
stops reading its responses holds at most one response (the next request is read only once the
last answer went out) until ``connections.max.idle.ms`` passes without progress.

One exception: a produce with diskless partitions waits for a WAL commit shared by every request the broker
takes in that commit interval. Its handler does its work in turn and returns a
:class:`~strata.broker.wire.dispatch.Deferred` for the wait; the connection then owes that answer and reads
the next request at once, so a producer's pipelined requests join the same WAL object instead of one commit
cycle each; a classic acks=all produce defers its wait for the followers the same way. Owed answers go out
in request order (a task per connection sends them as they become ready), and every later answer goes out
after them; at ``MAX_DEFERRED`` owed the connection stops reading until the oldest went out. With client
quotas on, or over TLS (one task drives a TLS connection), a deferred answer is awaited in turn as before.
Handler errors that escape (bugs) are logged and answered with the API's UNKNOWN_SERVER_ERROR response (or,
for an API whose response has no top-level error code, by closing the connection), never allowed to kill the
broker; framing violations, and requests for an API or version the broker does not serve (ApiVersions aside,
answered with UNSUPPORTED_VERSION as in Kafka), close this connection only.

Fetch responses go out as ``send`` for the encoded parts and ``sendfile`` for the record bytes
(``MSG_MORE`` on the bytes before a file slice, so they share its first segment).
"""

from __future__ import annotations

import asyncio
import ctypes
import logging
import socket
import ssl
import struct
import sys
import threading
from collections import deque
from typing import Any, Protocol

from strata.broker.services import BrokerServices
from strata.broker.wire.authentication import SASL_MAX_RECEIVE_SIZE, Session, log_failure
from strata.broker.wire.dispatch import CloseConnection, Deferred, RequestContext, Spliced, handlers, supported_versions
from strata.broker.wire.throttling import Throttler, TimedCall, frame_size, with_throttle
from strata.broker.wire.transport import recv_into, send_bytes, sendfile_slice, tls_handshake, wrap_server
from strata.protocol.build import make, zero_values
from strata.protocol.connection import NEED_DATA, ProtocolViolation, RawFrame, ServerConnection
from strata.protocol.frame import Request, api_versions_unsupported_response, encode_response, response_class
from strata.security.principal import NoMatchingRuleError
from strata.security.sasl import SaslAuthenticationError

log = logging.getLogger(__name__)


class ConnectionServices(BrokerServices, Protocol):
    """What a client connection needs beyond its handlers' services: the quota throttler (charged per
    request) and whether the broker is stopping (then the connection ends after the request in hand)."""

    throttler: Throttler
    shutting_down: bool

RECV_BYTES = 256 * 1024
_shared = threading.local()  # one receive buffer per event-loop thread, shared by its connections
LARGE_PART = 64 * 1024  # buffers at least this big are sent as they are instead of copied into one
_SIZE = struct.Struct(">i")
M_TRIM_THRESHOLD = -1
M_MMAP_THRESHOLD = -3
_allocator_tuned = False


def tune_allocator() -> None:
    """Make glibc recycle megabyte-sized request buffers instead of mapping fresh memory each time.

    Every produce request is a buffer of up to ``socket.request.max.bytes`` plus kio's copy of
    its records. Above glibc's mmap threshold each such allocation is a fresh ``mmap`` whose
    pages are faulted in and zeroed, then unmapped again, and freed heap tops are trimmed back
    to the kernel: measured here, that doubled the broker's CPU per produced megabyte (0.45 ->
    0.25 s per 256 MiB). Raising both thresholds keeps those buffers in the heap for reuse, at
    the cost of up to 128 MiB of freed memory the process keeps. Once per process; a no-op
    where there is no glibc ``mallopt``.
    """
    global _allocator_tuned
    if _allocator_tuned:
        return
    _allocator_tuned = True
    if not sys.platform.startswith("linux"):
        return
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt(M_MMAP_THRESHOLD, 32 * 1024 * 1024)  # glibc's largest allowed value on 64-bit
    mallopt(M_TRIM_THRESHOLD, 128 * 1024 * 1024)


def _receive_buffer() -> memoryview:
    """The event-loop thread's receive buffer: idle connections hold no buffer of their own.

    It is only ever filled and handed to the sans-IO connection (which copies) with no ``await`` in
    between (:meth:`ClientConnection._recv`), so the connections of one loop can share it; a
    buffer per connection made a thousand idle connections cost 256 MiB of RSS.
    """
    view: memoryview | None = getattr(_shared, "view", None)
    if view is None:
        view = _shared.view = memoryview(bytearray(RECV_BYTES))
    return view


YIELD_EVERY_REQUESTS = 4  # buffered requests a connection serves before it lets the event loop run others
MAX_DEFERRED = 32  # answers a connection may owe behind a deferred one before it stops reading requests
SASL_APIS = (17, 36)  # SaslHandshake, SaslAuthenticate: their answer changes how the connection reads


class _Close:
    """An answer that is no answer: close the connection once every earlier answer went out."""

    __slots__ = ("reason",)

    def __init__(self, reason: str) -> None:
        self.reason = reason


class ClientConnection:
    """``session``: the listener's security state for this connection; ``tls``: the listener's server
    context when the connection starts with a TLS handshake; ``principal_of_certificate`` turns the
    client's certificate into the principal (SSL listeners)."""

    def __init__(self, broker: ConnectionServices, sock: socket.socket, peer: str, session: Session,
                 tls: ssl.SSLContext | None = None, principal_of_certificate: Any = None) -> None:
        self.broker = broker
        self.sock = sock
        self.peer = peer
        self.session = session
        self._tls = tls
        self._principal_of_certificate = principal_of_certificate
        self._supported = supported_versions()
        self._handlers = handlers()  # the registry is complete once the broker started: look it up once
        self._throttler = broker.throttler
        self.protocol = ServerConnection(broker.config.socket_request_max_bytes, self._supported)
        if session.sasl is not None:  # unauthenticated peers send small frames only (sasl.server.max.receive.size)
            self.protocol.max_request_size = min(SASL_MAX_RECEIVE_SIZE, broker.config.socket_request_max_bytes)
        self._loop = asyncio.get_running_loop()
        self._task: asyncio.Task[None] | None = None
        self._idle_s = broker.config.connections_max_idle_ms / 1000
        self._idle_timer: asyncio.TimerHandle | None = None
        self._last_active = 0.0
        self._reading = False
        self._sending = False
        self._closed_idle = False
        # Answers still owed, in request order, once a handler deferred one (dispatch.Deferred): (request,
        # the task running its deferred part), or (None, encoded parts) for an answer ready behind them.
        # ``_sender`` sends them in turn. Plaintext only: one task at a time drives a TLS connection
        # (transport.TlsSocket).
        self._pipelining = tls is None
        self._answers: deque[tuple[Request | None, Any]] = deque()
        self._sender: asyncio.Task[None] | None = None
        self._answer_sent: asyncio.Future[None] | None = None  # woken by the sender after each answer
        self._closing = False  # the sender ends the connection (a deferred CloseConnection, a failed send)
        self._close_reason: str | None = None
        tune_allocator()

    async def run(self) -> None:
        """Serve requests until EOF, a framing violation, idleness or broker shutdown.

        The idle limit is a per-connection timer checked against the last read, not a
        ``wait_for`` around every read: that would cost a task per read, and on Python 3.11 a
        ``wait_for`` whose read completes as the task is cancelled swallows the cancellation, so
        a connection with data arriving could outlive ``Broker.stop`` forever.
        """
        loop = self._loop
        protocol = self.protocol
        broker = self.broker
        self._task = asyncio.current_task()
        self._last_active = loop.time()
        if self._idle_s >= 0:
            self._idle_timer = loop.call_at(self._last_active + self._idle_s, self._check_idle)
        served = 0  # requests served from buffered bytes since this task last gave the loop a turn
        try:
            if self._tls is not None and not await self._start_tls():
                return
            while not broker.shutting_down:
                event = protocol.next_event()
                if event is NEED_DATA:
                    served = 0
                    direct = protocol.get_buffer()  # the rest of a large frame: read straight into it
                    self._reading = True
                    try:
                        n = await self._recv(direct)
                    finally:
                        self._reading = False
                        if direct is not None:
                            direct.release()
                    if n == 0:
                        return
                    self._last_active = loop.time()
                    continue
                if isinstance(event, ProtocolViolation):
                    log.warning("closing connection from %s: %s", self.peer, event.reason)
                    return
                if isinstance(event, RawFrame):
                    if not await self._raw_token(event.data):
                        return
                    continue
                assert isinstance(event, Request)
                if not await self._serve(event):
                    if self._answers:  # closing after this request: what earlier ones are owed goes out first
                        await self._wait_owed_below(1)
                    return
                self._last_active = loop.time()
                served += 1
                if served >= YIELD_EVERY_REQUESTS:
                    # A client pipelining many requests has them all buffered: serving them back to back
                    # never suspends, and starved every other connection and the log cleaner's calls
                    # (1.35 s median ApiVersions latency beside 64 OffsetCommits in flight).
                    served = 0
                    await asyncio.sleep(0)
        except asyncio.CancelledError:
            if self._closing:
                if self._close_reason is not None:
                    log.info("closing connection from %s: %s", self.peer, self._close_reason)
            elif self._closed_idle:
                log.info("closing idle connection from %s", self.peer)
            else:
                raise
        except (ConnectionError, OSError) as e:
            log.debug("connection from %s ended: %s", self.peer, e)
        finally:
            if self._idle_timer is not None:
                self._idle_timer.cancel()
            shares = getattr(broker, "shares", None)
            if shares is not None:  # KIP-932: a member's share sessions end with its connection
                shares.connection_closed(self.peer)
            try:
                if self._answers or self._sender is not None:
                    await self._abandon_answers()
            finally:
                try:
                    self.sock.close()
                except OSError:
                    pass

    async def _start_tls(self) -> bool:
        """The TLS handshake (under the idle timer); the client certificate's principal on SSL listeners."""
        assert self._tls is not None
        try:
            tls_sock = wrap_server(self._tls, self.sock)
        except (ssl.SSLError, OSError) as e:
            log.info("TLS with %s failed: %s", self.peer, e)
            return False
        self.sock = tls_sock  # type: ignore[assignment]  # transport takes either
        self._reading = True
        try:
            await tls_handshake(self._loop, tls_sock)
        except (ssl.SSLError, OSError) as e:  # a plaintext client, an untrusted or expired certificate ...
            log.info("TLS handshake with %s failed: %s", self.peer, getattr(e, "reason", None) or e)
            return False
        finally:
            self._reading = False
        self._last_active = self._loop.time()
        if self.session.sasl is None and self._principal_of_certificate is not None:
            try:
                self.session.principal = self._principal_of_certificate(tls_sock.ssl)
            except NoMatchingRuleError as e:  # Kafka fails the authentication: no principal, no connection
                log.info("closing TLS connection from %s: ssl.principal.mapping.rules map no name for it (%s)",
                         self.peer, e)
                return False
        return True

    async def _raw_token(self, token: bytes) -> bool:
        """A SASL token after a v0 SaslHandshake: the challenge goes back as a bare frame; a failure
        closes the connection (v0 has no way to carry an error) after the failure delay."""
        state = self.session.sasl
        assert state is not None
        try:
            challenge, principal = state.authenticate(token, self.session.principal)
        except SaslAuthenticationError as e:
            log_failure(self.session, state.mechanism, e.detail or str(e))
            await asyncio.sleep(state.failure_delay_ms / 1000)
            return False
        if principal is not None:
            self.session.principal = principal
            self._authenticated()
        await self._send([_SIZE.pack(len(challenge)) + challenge])
        return True

    def _authenticated(self) -> None:
        """Authentication finished: requests go back to being requests, of any size."""
        self.protocol.raw_frames = False
        self.protocol.max_request_size = self.broker.config.socket_request_max_bytes

    async def _recv(self, direct: memoryview | None) -> int:
        """One read: into ``direct`` (the rest of a large frame), else through the shared buffer.

        ``recv_into`` writes the buffer only after its last ``await``, so bytes read into the shared
        buffer reach the protocol before the next ``await``. Over TLS one read is every record that
        can be decrypted without waiting. Returns the byte count (0: the peer closed).
        """
        if direct is not None:
            n = await recv_into(self._loop, self.sock, direct)
            self.protocol.buffer_updated(n)
            return n
        buf = _receive_buffer()
        n = await recv_into(self._loop, self.sock, buf)
        if n:
            self.protocol.receive_data(buf[:n])
        return n

    def _progress(self) -> None:
        """The peer read part of a response: a slow reader is not an idle one."""
        self._last_active = self._loop.time()

    def _check_idle(self) -> None:
        """Timer callback: close the connection if it has been idle for ``connections.max.idle.ms``.

        Idle means waiting for a request, or (Kafka's selector counts no progress either way) waiting
        for a peer that stopped reading its responses: a client that sends requests and never reads
        would otherwise hold the connection and its response forever.
        """
        now = self._loop.time()
        deadline = self._last_active + self._idle_s
        if now >= deadline and (self._reading or self._sending) and self._task is not None:
            self._closed_idle = True
            self._task.cancel()
            return
        # Busy answering (a long poll) past the deadline: idleness counts from the answer on.
        self._idle_timer = self._loop.call_at(deadline if now < deadline else now + self._idle_s, self._check_idle)

    async def _serve(self, request: Request) -> bool:
        """Answer one request; False means close the connection."""
        cid = request.header.correlation_id
        if request.body is None:  # ApiVersions at a version it does not speak (any other API: closed by decoding)
            log.debug("ApiVersions v%d from %s is not supported: answering v0 with UNSUPPORTED_VERSION",
                      request.api_version, self.peer)
            if self._answers and not await self._wait_owed_below(1):
                return False
            await self._send([api_versions_unsupported_response(cid, self._supported)])
            return True
        session = self.session
        state = session.sasl
        if state is not None:
            if not state.allows(request.api_key):
                log.info("closing connection from %s: %s request (API %d) %s", self.peer,
                         "unexpected" if state.authenticated else "before SASL authentication", request.api_key,
                         "during a SASL exchange" if state.server is not None else "")
                return False
            if state.authenticated and state.server is None and request.api_key not in (17, 36) and state.expired():
                log.info("closing connection from %s: its SASL session expired (connections.max.reauth.ms) and "
                         "the client did not re-authenticate", self.peer)
                return False
        spec = self._handlers[request.api_key]
        ctx = RequestContext(self.broker, request, self.peer, session)
        throttler = self._throttler
        throttle_ms = 0
        try:
            if throttler.quotas.enabled:
                call = TimedCall(spec.fn(ctx, request.body)) if throttler.times(request) else None
                response = await (call if call is not None else spec.fn(ctx, request.body))
                if type(response) is Deferred:  # quotas charge and mute per request: answered here, in turn
                    response = await self._inline(response, call)
                throttle_ms = throttler.before_response(request, session.principal, call.busy_s if call else 0.0)
                if throttle_ms and response is not None:
                    response = with_throttle(response, throttle_ms)
            else:
                response = await spec.fn(ctx, request.body)
                if type(response) is Deferred:
                    if self._pipelining:
                        return await self._defer(request, response)
                    response = await self._inline(response, None)
            if response is None:  # acks=0 produce: no answer (muted all the same when over its quota)
                if throttle_ms:
                    await asyncio.sleep(throttle_ms / 1000)
                return True
            if isinstance(response, Spliced):
                parts = encode_response(response.body, cid, response.splices)
            else:
                parts = encode_response(response, cid)
            if throttler.quotas.fetch.enabled:
                fetch_ms = throttler.fetch_throttle(request, session.principal, frame_size(parts))
                if fetch_ms > throttle_ms:
                    throttle_ms = fetch_ms
                    response = with_throttle(response, throttle_ms)
                    parts = (encode_response(response.body, cid, response.splices) if isinstance(response, Spliced)
                             else encode_response(response, cid))
        except CloseConnection as e:
            log.info("closing connection from %s: %s", self.peer, e)
            return False
        except Exception:
            log.exception("handler for API %d v%d failed", request.api_key, request.api_version)
            error = _error_response(request)
            if error is None:
                # No top-level error code to carry the failure: an empty answer would read as
                # success with nothing in it, so close instead (the client retries elsewhere).
                return False
            parts = encode_response(error, cid)
        if self._answers:  # earlier answers are still owed: this one goes out after them
            if not throttle_ms and session.close_after_send_s is None and request.api_key not in SASL_APIS:
                return await self._owe(None, parts)
            if not await self._wait_owed_below(1):  # it changes the connection once sent: in turn, here
                return False
        await self._send(parts)
        if throttle_ms:  # KIP-219: the response is out, the channel stays muted for the throttle time
            await asyncio.sleep(throttle_ms / 1000)
        if session.close_after_send_s is not None:
            if session.close_after_send_s > 0:
                await asyncio.sleep(session.close_after_send_s)
            return False
        if state is not None:
            if request.api_key == 17 and state.server is not None and request.api_version == 0:
                self.protocol.raw_frames = True  # v0: the tokens follow as bare frames
            elif request.api_key == 36 and state.authenticated and state.server is None:
                self._authenticated()
        return True

    # -- pipelined answers (a handler's Deferred) --------------------------------------------------

    async def _inline(self, deferred: Deferred, call: TimedCall | None) -> Any:
        """Wait for a deferred answer here, as if the handler had (quotas on, or a TLS connection)."""
        if call is None:
            return await deferred.answer
        later = TimedCall(deferred.answer)
        try:
            return await later
        finally:
            call.busy_s += later.busy_s

    async def _defer(self, request: Request, deferred: Deferred) -> bool:
        """Owe the request's answer and go on reading: it is sent after every earlier one. The deferred
        part runs as a task of its own from now on, not from when the earlier answers went out."""
        return await self._owe(request, self._loop.create_task(deferred.answer))

    async def _owe(self, request: Request | None, answer: Any) -> bool:
        """Queue an answer behind those already owed; at MAX_DEFERRED owed, read nothing more until the
        oldest went out (a client that pipelines without end, or stops reading, holds a bounded number).
        False: the connection is closing."""
        self._answers.append((request, answer))
        if self._sender is None:
            self._sender = self._loop.create_task(self._send_owed(), name=f"answers-{self.peer}")
        if len(self._answers) >= MAX_DEFERRED:
            return await self._wait_owed_below(MAX_DEFERRED)
        return True

    async def _finish(self, request: Request, task: asyncio.Task[Any]) -> Any:
        """A deferred answer, encoded as ``_serve`` would send it: parts, None (no answer) or a _Close."""
        try:
            response = await task
        except CloseConnection as e:
            return _Close(str(e))
        except Exception:
            log.exception("handler for API %d v%d failed", request.api_key, request.api_version)
            error = _error_response(request)
            if error is None:
                return _Close(f"its API {request.api_key} request failed and the answer has no error code")
            return encode_response(error, request.header.correlation_id)
        if response is None:
            return None
        if isinstance(response, Spliced):
            return encode_response(response.body, request.header.correlation_id, response.splices)
        return encode_response(response, request.header.correlation_id)

    async def _send_owed(self) -> None:
        """Send the owed answers in request order, each once ready; a _Close (or a failed send) closes
        the connection after what went before it."""
        answers = self._answers
        try:
            while answers:
                request, answer = answers[0]
                parts = answer if request is None else await self._finish(request, answer)
                if type(parts) is _Close:
                    self._close(parts.reason)
                    return
                if parts is not None:
                    await self._send(parts)
                answers.popleft()
                self._wake_owed()
        except (ConnectionError, OSError) as e:
            log.debug("connection from %s ended: %s", self.peer, e)
            self._close(None)
        except asyncio.CancelledError:
            raise
        except Exception:  # a bug: the connection cannot keep its answers in order any more
            log.exception("answering %s failed", self.peer)
            self._close(None)
        finally:
            self._sender = None
            self._wake_owed()

    def _close(self, reason: str | None) -> None:
        """The sender ends the connection: the reading task stops (and cancels what is still owed)."""
        self._closing = True
        self._close_reason = reason
        if self._task is not None and not self._task.done():
            self._task.cancel()

    def _wake_owed(self) -> None:
        waiter = self._answer_sent
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    async def _wait_owed_below(self, limit: int) -> bool:
        """Wait until fewer than ``limit`` answers are owed (1: all sent); False: the connection is closing."""
        while len(self._answers) >= limit and not self._closing and self._sender is not None:
            waiter = self._answer_sent = self._loop.create_future()
            await waiter
        return not self._closing and len(self._answers) < limit

    async def _abandon_answers(self) -> None:
        """The connection ends: cancel what is still owed and the sender, and wait until they ended (at
        once: they only wait). A diskless produce's batches commit anyway (the writer answers no one)."""
        owed = [answer for request, answer in self._answers if request is not None]
        self._answers.clear()
        tasks = [*owed, self._sender] if self._sender is not None else owed
        for task in tasks:
            task.cancel()
        interrupted = False
        while tasks:
            try:
                await asyncio.wait(tasks)
                break
            except asyncio.CancelledError:  # cancelled again (broker shutdown): finish the clean-up first
                interrupted = True
        for task in owed:  # failures nobody will answer now (the connection is gone): retrieved, not logged
            if not task.cancelled():
                task.exception()
        if interrupted:
            raise asyncio.CancelledError

    async def _send(self, parts: list[Any]) -> None:
        """Bytes parts with ``send``, file slices with ``sendfile``, in order."""
        loop = self._loop
        sock = self.sock
        progress = self._progress
        self._sending = True
        try:
            if len(parts) == 1:
                await send_bytes(loop, sock, parts[0], progress=progress)
                return
            pending = bytearray()
            for part in parts:
                if isinstance(part, (bytes, bytearray, memoryview)):
                    if len(part) < LARGE_PART:
                        pending += part
                        continue
                    if pending:  # a large buffer (remote-tier records) goes out as is, not copied
                        await send_bytes(loop, sock, pending, more=True, progress=progress)
                        pending = bytearray()
                    await send_bytes(loop, sock, part, more=True, progress=progress)
                    continue
                if pending:
                    await send_bytes(loop, sock, pending, more=True, progress=progress)
                    pending = bytearray()
                await sendfile_slice(loop, sock, part.fileno(), part.position, part.size, progress=progress)
            if pending:
                await send_bytes(loop, sock, pending, progress=progress)
        finally:
            self._sending = False


def _error_response(request: Request) -> Any:
    """UNKNOWN_SERVER_ERROR in the API's own response, when it has a top-level error code."""
    cls = response_class(request.api_key, request.api_version)
    if cls is None:
        return None
    values = zero_values(cls)
    if "error_code" not in values:
        return None
    return make(cls, **{**values, "error_code": -1})
