"""The broker's listeners: one server socket per entry of ``listeners``, each with its security protocol.

A listener owns what its connections share: its TLS server context (rebuilt when its keystore changes
through IncrementalAlterConfigs: existing connections keep their session, new ones get the new
certificate), the mapping from client certificates to principals, and its SASL mechanisms. Accepted
sockets become :class:`~strata.broker.wire.connection.ClientConnection` tasks with a fresh
:class:`~strata.broker.wire.authentication.Session`.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import ssl
from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from strata.broker.wire.authentication import SaslMechanisms, ScramLookup, new_session
from strata.broker.wire.connection import ClientConnection
from strata.config.security_config import ListenerConfig, SslConfig
from strata.errors import InvalidConfigError
from strata.security.principal import SslPrincipalMapper
from strata.security.ssl_factory import SslContextHolder, connection_principal

if TYPE_CHECKING:
    from strata.broker.wire.connection import ConnectionServices

log = logging.getLogger(__name__)


class ListenerRuntime:
    def __init__(self, config: ListenerConfig, props: Mapping[str, Any], scram: ScramLookup) -> None:
        self.config = config
        self.name = config.name
        self.port = config.port
        self.sock: socket.socket | None = None
        self.tls: SslContextHolder | None = None
        self._mapper: SslPrincipalMapper | None = None
        if config.ssl is not None:
            self.tls = SslContextHolder(config.ssl, allow_dn_changes=config.ssl.allow_dn_changes,
                                        allow_san_changes=config.ssl.allow_san_changes)
            self._mapper = SslPrincipalMapper(config.ssl.principal_mapping_rules)
        self.mechanisms = SaslMechanisms(config, props, scram) if config.uses_sasl else None

    def validate_tls(self, ssl_config: SslConfig) -> None:
        """Raise InvalidConfigError if :meth:`reload_tls` would refuse ``ssl_config`` (Kafka's rules: only keystore
        and truststore keys change, the certificate keeps its DN and SANs unless allowed)."""
        if self.tls is None:
            raise InvalidConfigError(f"listener {self.name} does not use TLS")
        self.tls.validate(ssl_config)

    def reload_tls(self, ssl_config: SslConfig | None = None) -> bool:
        """A new keystore or truststore (or the same files changed on disk): new connections use it, those
        already open keep their session. False when nothing changed."""
        if self.tls is None:
            return False
        changed = self.tls.reload(ssl_config)
        if changed:
            self.config = replace(self.config, ssl=self.tls.config)
            log.info("listener %s: TLS keystore/truststore reloaded", self.name)
        return changed

    def bind(self, send_buffer_bytes: int = -1, receive_buffer_bytes: int = -1) -> int:
        """Buffer sizes (``socket.send.buffer.bytes``, ``socket.receive.buffer.bytes``; -1 leaves the OS's)
        are set on the listening socket before ``listen``, so every accepted connection inherits them and the
        receive window is scaled for them from the handshake on."""
        host = self.config.host
        sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if send_buffer_bytes != -1:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, send_buffer_bytes)
        if receive_buffer_bytes != -1:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, receive_buffer_bytes)
        sock.bind((host, self.config.port))
        sock.listen(256)
        sock.setblocking(False)
        self.sock = sock
        self.port = sock.getsockname()[1]
        return self.port

    def close(self) -> None:
        if self.sock is not None:
            self.sock.close()

    def _principal_of(self, conn: ssl.SSLSocket) -> str:
        """The client certificate's principal; NoMatchingRuleError (the connection is closed) when no rule maps it."""
        return str(connection_principal(conn, self._mapper))

    async def accept_loop(self, broker: ConnectionServices, track: Callable[[asyncio.Task[None]], None]) -> None:
        assert self.sock is not None
        loop = asyncio.get_running_loop()
        cfg = broker.config
        while True:
            try:
                client, addr = await loop.sock_accept(self.sock)
            except OSError as e:
                if broker.shutting_down:
                    return
                log.warning("accept on listener %s failed: %s", self.name, e)
                await asyncio.sleep(0.1)
                continue
            client.setblocking(False)
            client.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            peer = f"{addr[0]}:{addr[1]}"
            session = new_session(self.config, peer, self.mechanisms, cfg.connections_max_reauth_ms,
                                  cfg.connection_failed_authentication_delay_ms)
            principal_of = self._principal_of if self.config.security_protocol == "SSL" else None
            context = self.tls.context if self.tls is not None else None
            track(loop.create_task(ClientConnection(broker, client, peer, session, context, principal_of).run()))
